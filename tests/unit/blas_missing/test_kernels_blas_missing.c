/* test_kernels_blas_missing.c - kernels.c built for a BLAS library that is
 * not there (tests/CMakeLists.txt compiles it again with ATOLL_BLAS_LIB
 * pointing nowhere): a worker says so at start, and a matmul fails rather
 * than fall back to the naive loop, whose bits would differ from peers'. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "kernels.h"

static void test_prepare_names_the_library(void **state)
{
    (void)state;
    char err[256] = "";
    assert_int_equal(kernel_blas_prepare(err, sizeof err), -1);
    assert_non_null(strstr(err, ATOLL_BLAS_LIB));
}

static void test_matmul_fails(void **state)
{
    (void)state;
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4] = {0};
    assert_int_equal(kernel_have_blas(), 0);
    assert_int_equal(kernel_matmul_blas(a, b, c, 2, 2, 2), -1);

    shape_t s = {2, {2, 2, 0, 0}};
    tensor_t *x = tensor_new(&s), *y = tensor_new(&s), *out = NULL;
    assert_true(x && y);
    memcpy(x->data, a, sizeof a);
    memcpy(y->data, b, sizeof b);
    op_t op;
    memset(&op, 0, sizeof op);
    op.code = OP_MATMUL;
    op.shape = s;
    op.nargs = 2;
    op.axis = -1;
    const tensor_t *args[2] = {x, y};
    assert_int_equal(kernel_run(&op, args, 0, &out), -1);
    assert_null(out);
    tensor_free(x);
    tensor_free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_names_the_library),
        cmocka_unit_test(test_matmul_fails),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
