/* test_tensor.c - shapes and tensor ownership helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "f32b64.h"

#include <nettle/base64.h>
#include "tensor.h"

static void test_shapes(void **state)
{
    (void)state;
    shape_t s = {3, {2, 3, 4, 0}}, t = {3, {2, 3, 4, 0}}, scalar = {0, {0, 0, 0, 0}};
    assert_int_equal(shape_numel(&s), 24);
    assert_int_equal(shape_numel(&scalar), 1);
    assert_true(shape_equal(&s, &t));
    t.dim[2] = 5;
    assert_false(shape_equal(&s, &t));
    t.rank = 2;                      /* dims beyond rank are ignored */
    s.rank = 2;
    assert_true(shape_equal(&s, &t));
    assert_false(shape_equal(&s, &scalar));

    char buf[32];
    shape_t f = {2, {2, 4, 0, 0}};
    shape_format(&f, buf, sizeof buf);
    assert_string_equal(buf, "[2,4]");
    shape_format(&scalar, buf, sizeof buf);
    assert_string_equal(buf, "[]");
    shape_t big = {4, {1000000, 2, 3, 4}};
    char tiny[6];
    shape_format(&big, tiny, sizeof tiny);   /* truncated, still terminated */
    assert_int_equal(strlen(tiny), 5);
    assert_memory_equal(tiny, "[1000", 5);
}

static void test_tensors(void **state)
{
    (void)state;
    shape_t s = {2, {2, 3, 0, 0}};
    tensor_t *t = tensor_new(&s);
    assert_non_null(t);
    for (int i = 0; i < 6; i++)
        assert_true(t->data[i] == 0.0f);           /* zero-filled */
    for (int i = 0; i < 6; i++)
        t->data[i] = (float)i + 0.5f;
    assert_true(tensor_sum(t) == 18.0);
    tensor_t *c = tensor_clone(t);
    assert_non_null(c);
    assert_ptr_not_equal(c->data, t->data);
    assert_true(shape_equal(&c->shape, &s));
    t->data[0] = 100;                               /* the clone is independent */
    assert_true(c->data[0] == 0.5f);
    tensor_free(t);
    tensor_free(c);
    tensor_free(NULL);

    shape_t scalar = {0, {0, 0, 0, 0}};
    t = tensor_new(&scalar);
    assert_non_null(t);
    t->data[0] = 3;
    assert_true(tensor_sum(t) == 3.0);
    tensor_free(t);

    shape_t bad[] = {{2, {2, 0, 0, 0}}, {5, {1, 1, 1, 1}}, {-1, {0, 0, 0, 0}},
                     {2, {1 << 13, 1 << 12, 0, 0}}};   /* 2^25 elements: over the cap */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(tensor_new(&bad[i]));
        assert_null(tensor_new_uninit(&bad[i]));   /* the same checks, no zeroing */
    }
    assert_null(tensor_new(NULL));
    assert_null(tensor_new_uninit(NULL));
    shape_t garbage = {1, {4, 7, 7, 7}};            /* dims past rank ignored, stored 0 */
    t = tensor_new_uninit(&garbage);
    assert_non_null(t);
    assert_int_equal(t->shape.dim[1], 0);
    t->data[3] = 1;                                 /* all 4 elements are ours */
    tensor_free(t);
}

/* Reports' values as base64 f32 (f32b64.h): exact bits both ways, NaN and
 * infinities included, little-endian whatever the host; anything but
 * exactly the encoding of n values is refused. */
static void test_f32b64(void **state)
{
    (void)state;
    float v[5] = {6.0f, -0.1f, NAN, INFINITY, -0.0f}, back[5];
    char *text = f32b64_encode(v, 5);
    assert_non_null(text);
    assert_int_equal(strlen(text), 28);                   /* 20 bytes -> 28 chars */
    assert_int_equal(f32b64_decode(text, strlen(text), back, 5), 0);
    assert_memory_equal(v, back, sizeof v);
    assert_int_equal(f32b64_decode(text, strlen(text), back, 4), -1);   /* other count */
    free(text);
    text = f32b64_encode(v, 1);
    assert_string_equal(text, "AADAQA==");                /* 6.0f = 0x40c00000, LE */
    free(text);
    assert_int_equal(f32b64_decode("AADAQA=", 7, back, 1), -1);        /* short */
    assert_int_equal(f32b64_decode("AAD!QA==", 8, back, 1), -1);       /* not base64 */
    assert_int_equal(f32b64_decode("AADAQAAA", 8, back, 1), -1);       /* 6 bytes, not 4 */
    assert_int_equal(f32b64_decode(NULL, 0, back, 1), -1);
    text = f32b64_encode(v, 0);
    assert_string_equal(text, "");
    assert_int_equal(f32b64_decode("", 0, back, 0), 0);
    free(text);
}

/* The hand-written codec (f32b64.c) against nettle's, the reference, on
 * random bytes of every length 0..64: the same text, and each decodes
 * the other's back to the bytes; then every single character of a good
 * text replaced by one outside the alphabet, or by '=' before the
 * padding, is refused. */
static void test_b64_matches_nettle(void **state)
{
    (void)state;
    unsigned seed = 75;
    for (size_t n = 0; n <= 64; n++) {
        uint8_t bytes[64];
        for (size_t i = 0; i < n; i++)
            bytes[i] = (uint8_t)(rand_r(&seed) >> 7);
        char ref[BASE64_ENCODE_RAW_LENGTH(64) + 1];
        base64_encode_raw(ref, n, bytes);
        ref[BASE64_ENCODE_RAW_LENGTH(n)] = '\0';
        char *mine = f32b64_bytes_encode(bytes, n);
        assert_non_null(mine);
        assert_string_equal(mine, ref);
        free(mine);
        if (n == 0)
            continue;
        size_t got = 0, len = strlen(ref);
        uint8_t *back = f32b64_bytes_decode(ref, len, n, &got);
        assert_non_null(back);
        assert_int_equal(got, n);
        assert_memory_equal(back, bytes, n);
        free(back);
        assert_null(f32b64_bytes_decode(ref, len, n - 1, &got));    /* over max */
        for (size_t k = 0; k < len; k++) {
            char bad[sizeof ref];
            memcpy(bad, ref, len + 1);
            bad[k] = k % 2 ? '!' : ' ';
            assert_null(f32b64_bytes_decode(bad, len, n, &got));
            if (ref[k] == '=')
                continue;
            bad[k] = '=';
            back = f32b64_bytes_decode(bad, len, n, &got);
            if (back)       /* only a last character may become padding... */
                assert_true(k == len - 1 || (k == len - 2 && ref[len - 1] == '='));
            if (back)       /* ...and then it says fewer bytes */
                assert_true(got < n);
            free(back);
        }
    }
    float v[3] = {1.5f, -2.0f, 3.25f}, out[3];
    uint8_t le[12];
    for (int i = 0; i < 3; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; b++)
            le[4 * i + b] = (uint8_t)(u >> (8 * b));
    }
    char ref[17];
    base64_encode_raw(ref, 12, le);
    ref[16] = '\0';
    assert_int_equal(f32b64_decode(ref, 16, out, 3), 0);
    assert_memory_equal(out, v, sizeof v);
}

/* ---- the allocator of large tensors (tensor_allocator_t) ---- */

typedef struct fake_pool {
    float buf[1024];
    int allocs, releases, in_use;
} fake_pool_t;

static void *fake_alloc(void *ctx, size_t bytes)
{
    fake_pool_t *f = ctx;
    if (f->in_use || bytes > sizeof f->buf)
        return NULL;               /* busy or too big: malloc serves */
    memset(f->buf, 0x7f, sizeof f->buf);   /* garbage, as a reused block holds */
    f->allocs++;
    f->in_use = 1;
    return f->buf;
}

static int fake_release(void *ctx, void *p)
{
    fake_pool_t *f = ctx;
    if (p != f->buf)
        return -1;
    f->releases++;
    f->in_use = 0;
    return 0;
}

/* Data of min_bytes and more comes from the allocator (zeroed for
 * tensor_new), smaller data never; a release the allocator refuses (not
 * its pointer) falls to free(), which LeakSanitizer checks; NULL resets. */
static void test_allocator(void **state)
{
    (void)state;
    fake_pool_t f = {0};
    tensor_allocator_t a = {.min_bytes = 256 * sizeof(float), .alloc = fake_alloc,
                            .release = fake_release, .ctx = &f};
    tensor_allocator_set(&a);
    shape_t big = {1, {512}}, small = {1, {255}};
    tensor_t *t = tensor_new(&big), *u = tensor_new(&big), *v = tensor_new(&small);
    assert_non_null(t);
    assert_non_null(u);
    assert_non_null(v);
    assert_ptr_equal(t->data, f.buf);
    assert_true(u->data != f.buf && v->data != f.buf);     /* busy; too small */
    for (int i = 0; i < 512; i++)
        assert_true(t->data[i] == 0.0f);
    assert_int_equal(f.allocs, 1);
    tensor_free(u);
    tensor_free(v);
    assert_int_equal(f.releases, 0);
    tensor_free(t);
    assert_int_equal(f.releases, 1);
    tensor_t *w = tensor_new_uninit(&big);
    assert_ptr_equal(w->data, f.buf);
    tensor_free(w);
    tensor_allocator_set(NULL);
    tensor_t *x = tensor_new(&big);
    assert_true(x->data != f.buf);
    tensor_free(x);
    assert_int_equal(f.allocs, 2);
    assert_int_equal(f.releases, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_tensors),
        cmocka_unit_test(test_f32b64),
        cmocka_unit_test(test_b64_matches_nettle),
        cmocka_unit_test(test_allocator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
