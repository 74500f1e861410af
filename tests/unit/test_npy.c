/* test_npy.c - the .npy codec users' programs write through (common/npy.c):
 * round trip, float64 narrowing, and every refusal of a hostile file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "npy.h"

/* A version 1.0 file with this header dict and data. */
static size_t make(unsigned char *buf, const char *dict, const void *data, size_t dlen)
{
    size_t hl = strlen(dict) + 1;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)(hl & 0xff);
    buf[9] = (unsigned char)(hl >> 8);
    memcpy(buf + 10, dict, hl - 1);
    buf[10 + hl - 1] = '\n';
    memcpy(buf + 10 + hl, data, dlen);
    return 10 + hl + dlen;
}

static void test_round_trip(void **state)
{
    (void)state;
    shape_t s = {.rank = 2, .dim = {2, 3}};
    tensor_t *t = tensor_new(&s), *back = NULL;
    assert_non_null(t);
    for (int i = 0; i < 6; i++)
        t->data[i] = (float)i * 1.5f - 2;
    void *buf;
    size_t len;
    char err[128];
    assert_int_equal(npy_encode(t, &buf, &len), 0);
    assert_int_equal(len % 64, 6 * 4 % 64);          /* header padded to 64 */
    assert_int_equal(npy_decode(buf, len, &back, err, sizeof err), 0);
    assert_true(shape_equal(&back->shape, &s));
    assert_memory_equal(back->data, t->data, 6 * sizeof(float));
    free(buf);
    tensor_free(t);
    tensor_free(back);
}

static void test_f8_and_scalar(void **state)
{
    (void)state;
    unsigned char buf[256];
    double d[2] = {0.5, -3.25};
    tensor_t *t = NULL;
    char err[128];
    size_t n = make(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", d, 16);
    assert_int_equal(npy_decode(buf, n, &t, err, sizeof err), 0);
    assert_int_equal(t->shape.rank, 1);
    assert_true(t->data[0] == 0.5f && t->data[1] == -3.25f);
    tensor_free(t);
    float f = 7;
    n = make(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &f, 4);
    assert_int_equal(npy_decode(buf, n, &t, err, sizeof err), 0);
    assert_int_equal(t->shape.rank, 0);
    assert_true(t->data[0] == 7);
    tensor_free(t);
}

static void test_refusals(void **state)
{
    (void)state;
    static const char *const dicts[] = {
        "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }",        /* dtype */
        "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }",        /* big-endian */
        "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",         /* Fortran */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,2), }", /* rank 5 */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0,), }",        /* empty dim */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",        /* short data */
        "{'descr': '<f4', 'fortran_order': False}",                         /* no shape */
    };
    unsigned char buf[512];
    float d[2] = {1, 2};
    char err[128];
    for (size_t i = 0; i < sizeof dicts / sizeof dicts[0]; i++) {
        tensor_t *t = NULL;
        size_t n = make(buf, dicts[i], d, 8);
        assert_int_equal(npy_decode(buf, n, &t, err, sizeof err), -1);
        assert_null(t);
        assert_true(err[0] != '\0');
    }
    tensor_t *t = NULL;
    size_t n = make(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", d, 8);
    buf[8] = 0xff;                                    /* header longer than the file */
    assert_int_equal(npy_decode(buf, n, &t, err, sizeof err), -1);
    assert_int_equal(npy_decode("\x93NUMPX", 6, &t, err, sizeof err), -1);
    for (size_t cut = 0; cut < n; cut++) {           /* every truncation */
        buf[8] = (unsigned char)(strlen("{'descr': '<f4', 'fortran_order': False, "
                                        "'shape': (2,), }") + 1);
        assert_int_equal(npy_decode(buf, cut, &t, err, sizeof err), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_f8_and_scalar),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
