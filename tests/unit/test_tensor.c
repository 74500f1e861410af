/* test_tensor.c - shapes and tensor ownership helpers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

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
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(tensor_new(&bad[i]));
    assert_null(tensor_new(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
