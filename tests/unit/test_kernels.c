/* test_kernels.c - every local op on small tensors with hand-computed
 * results, and the BLAS matmul path against the naive one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "support_proc.h"

static shape_t shp(int rank, int64_t d0, int64_t d1, int64_t d2)
{
    shape_t s = {rank, {d0, d1, d2, 0}};
    for (int i = rank; i < TENSOR_MAX_RANK; i++)
        s.dim[i] = 0;
    return s;
}

static tensor_t *tens(shape_t s, const float *vals)
{
    tensor_t *t = tensor_new(&s);
    assert_non_null(t);
    memcpy(t->data, vals, (size_t)shape_numel(&s) * sizeof(float));
    return t;
}

static op_t mkop(opcode_t code, shape_t out, int nargs)
{
    op_t op;
    memset(&op, 0, sizeof op);
    op.code = code;
    op.shape = out;
    op.nargs = nargs;
    op.arg[0] = op.arg[1] = -1;
    op.axis = -1;
    return op;
}

/* Runs op on args and compares the result with want[] exactly (the hand
 * values below are exact in f32) or within tol when tol > 0. */
static void check(const op_t *op, const tensor_t *a, const tensor_t *b, int shard,
                  const float *want, float tol)
{
    const tensor_t *args[2] = {a, b};
    tensor_t *out = NULL;
    assert_int_equal(kernel_run(op, args, shard, &out), 0);
    assert_true(shape_equal(&out->shape, &op->shape));
    for (int64_t i = 0; i < shape_numel(&op->shape); i++) {
        if (tol > 0 ? fabsf(out->data[i] - want[i]) > tol : out->data[i] != want[i])
            fail_msg("%s element %lld: got %g want %g", opcode_name(op->code), (long long)i,
                     out->data[i], want[i]);
    }
    tensor_free(out);
}

static void test_sources(void **state)
{
    (void)state;
    op_t op = mkop(OP_FILL, shp(2, 2, 2, 0), 0);
    op.value = -1.5f;
    check(&op, NULL, NULL, 0, (float[]){-1.5f, -1.5f, -1.5f, -1.5f}, 0);
    op = mkop(OP_IOTA, shp(2, 2, 3, 0), 0);
    check(&op, NULL, NULL, 0, (float[]){0, 1, 2, 3, 4, 5}, 0);
    op = mkop(OP_SHARD_INDEX, shp(0, 0, 0, 0), 0);
    check(&op, NULL, NULL, 7, (float[]){7}, 0);
    op = mkop(OP_FILL, shp(0, 0, 0, 0), 0);
    op.value = 3.0f;
    check(&op, NULL, NULL, 0, (float[]){3}, 0);
}

static void test_binary(void **state)
{
    (void)state;
    tensor_t *a = tens(shp(1, 4, 0, 0), (float[]){1, -2, 3, 8});
    tensor_t *b = tens(shp(1, 4, 0, 0), (float[]){2, 2, -3, 4});
    tensor_t *s = tens(shp(0, 0, 0, 0), (float[]){2});
    shape_t v4 = shp(1, 4, 0, 0);
    op_t op = mkop(OP_ADD, v4, 2);
    check(&op, a, b, 0, (float[]){3, 0, 0, 12}, 0);
    op.code = OP_SUB;
    check(&op, a, b, 0, (float[]){-1, -4, 6, 4}, 0);
    check(&op, a, s, 0, (float[]){-1, -4, 1, 6}, 0);     /* scalar on the right */
    check(&op, s, a, 0, (float[]){1, 4, -1, -6}, 0);     /* scalar on the left */
    op.code = OP_MUL;
    check(&op, a, b, 0, (float[]){2, -4, -9, 32}, 0);
    op.code = OP_DIV;
    check(&op, a, b, 0, (float[]){0.5f, -1, -1, 2}, 0);
    check(&op, s, b, 0, (float[]){1, 1, -2.0f / 3.0f, 0.5f}, 1e-7f);
    op.code = OP_MAX;
    check(&op, a, b, 0, (float[]){2, 2, 3, 8}, 0);
    op.code = OP_MIN;
    check(&op, a, s, 0, (float[]){1, -2, 2, 2}, 0);
    op = mkop(OP_MUL, shp(0, 0, 0, 0), 2);
    check(&op, s, s, 0, (float[]){4}, 0);
    /* Mismatched element counts are refused, never read out of bounds. */
    tensor_t *c = tens(shp(1, 3, 0, 0), (float[]){1, 2, 3});
    const tensor_t *args[2] = {a, c};
    tensor_t *out = NULL;
    op = mkop(OP_ADD, v4, 2);
    assert_int_equal(kernel_run(&op, args, 0, &out), -1);
    assert_null(out);
    tensor_free(a);
    tensor_free(b);
    tensor_free(s);
    tensor_free(c);
}

static void test_unary(void **state)
{
    (void)state;
    tensor_t *a = tens(shp(2, 2, 2, 0), (float[]){0, -1, 2, -0.5f});
    shape_t s = a->shape;
    op_t op = mkop(OP_NEG, s, 1);
    check(&op, a, NULL, 0, (float[]){-0.0f, 1, -2, 0.5f}, 0);
    op.code = OP_RELU;
    check(&op, a, NULL, 0, (float[]){0, 0, 2, 0}, 0);
    op.code = OP_EXP;
    check(&op, a, NULL, 0, (float[]){1, 0.36787944f, 7.3890561f, 0.60653066f}, 1e-6f);
    op.code = OP_TANH;
    check(&op, a, NULL, 0, (float[]){0, -0.76159416f, 0.96402758f, -0.46211716f}, 1e-6f);
    op.code = OP_SCALE;
    op.factor = -4;
    check(&op, a, NULL, 0, (float[]){0, 4, -8, 2}, 0);
    tensor_free(a);
}

static void test_matmul_transpose_reshape(void **state)
{
    (void)state;
    /* [[1,2,3],[4,5,6]] x [[1,0],[0,1],[2,-1]] = [[7,-1],[16,-1]] */
    tensor_t *a = tens(shp(2, 2, 3, 0), (float[]){1, 2, 3, 4, 5, 6});
    tensor_t *b = tens(shp(2, 3, 2, 0), (float[]){1, 0, 0, 1, 2, -1});
    op_t op = mkop(OP_MATMUL, shp(2, 2, 2, 0), 2);
    check(&op, a, b, 0, (float[]){7, -1, 16, -1}, 0);
    float c[4];
    kernel_matmul_naive(a->data, b->data, c, 2, 3, 2);
    assert_true(c[0] == 7 && c[1] == -1 && c[2] == 16 && c[3] == -1);
    op = mkop(OP_TRANSPOSE, shp(2, 3, 2, 0), 1);
    check(&op, a, NULL, 0, (float[]){1, 4, 2, 5, 3, 6}, 0);
    op = mkop(OP_RESHAPE, shp(3, 3, 1, 2), 1);
    check(&op, a, NULL, 0, (float[]){1, 2, 3, 4, 5, 6}, 0);
    /* Inner dims that disagree are refused. */
    const tensor_t *args[2] = {a, a};
    tensor_t *out = NULL;
    op = mkop(OP_MATMUL, shp(2, 2, 3, 0), 2);
    assert_int_equal(kernel_run(&op, args, 0, &out), -1);
    tensor_free(a);
    tensor_free(b);
}

/* Threads of this process; -1 if unreadable. */
static long long threads_of_self(void)
{
    return support_proc_value("/proc/self/status", "Threads: %lld");
}

/* After kernel_blas_prepare() (as atoll-worker's main() calls it), the
 * first matmul loads BLAS (when built with it) without a thread pool. First
 * in main(): nothing else has loaded BLAS in this process yet. A linked
 * OpenBLAS would have started its pool before main() (one thread fewer
 * than the CPUs). */
static void test_blas_prepare_no_pool(void **state)
{
    (void)state;
    char err[256] = "";
    unsetenv("OPENBLAS_NUM_THREADS");
    assert_int_equal(threads_of_self(), 1);
    if (kernel_blas_prepare(err, sizeof err) != 0)
        fail_msg("kernel_blas_prepare: %s", err);
#ifdef ATOLL_TEST_EXPECT_BLAS
    assert_string_equal(getenv("OPENBLAS_NUM_THREADS"), "1");
    assert_int_equal(kernel_have_blas(), 1);
#endif
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, c[4];
    assert_int_equal(kernel_matmul_blas(a, b, c, 2, 2, 2), 0);
    assert_true(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50);
    assert_int_equal(threads_of_self(), 1);
    /* A variable the operator set is the operator's: kept. */
    setenv("OPENBLAS_NUM_THREADS", "3", 1);
    assert_int_equal(kernel_blas_prepare(err, sizeof err), 0);
    assert_string_equal(getenv("OPENBLAS_NUM_THREADS"), "3");
}

/* The BLAS path and the naive loop agree on a non-square product. */
static void test_matmul_blas_vs_naive(void **state)
{
    (void)state;
    const int64_t m = 37, k = 53, n = 29;
    float *a = malloc(sizeof(float) * m * k), *b = malloc(sizeof(float) * k * n);
    float *c1 = malloc(sizeof(float) * m * n), *c2 = malloc(sizeof(float) * m * n);
    assert_true(a && b && c1 && c2);
    unsigned seed = 12345;
    for (int64_t i = 0; i < m * k; i++)
        a[i] = (float)((seed = seed * 1103515245u + 12345u) >> 16 & 0xff) / 64.0f - 2.0f;
    for (int64_t i = 0; i < k * n; i++)
        b[i] = (float)((seed = seed * 1103515245u + 12345u) >> 16 & 0xff) / 64.0f - 2.0f;
    kernel_matmul_naive(a, b, c1, m, k, n);
    assert_int_equal(kernel_matmul_blas(a, b, c2, m, k, n), 0);
    /* Spot-check the naive result against a direct dot product too. */
    double dot = 0;
    for (int64_t p = 0; p < k; p++)
        dot += (double)a[5 * k + p] * b[p * n + 7];
    assert_true(fabs(c1[5 * n + 7] - dot) < 1e-3);
    for (int64_t i = 0; i < m * n; i++) {
        if (fabsf(c1[i] - c2[i]) > 1e-3f)
            fail_msg("element %lld: naive %g blas %g", (long long)i, c1[i], c2[i]);
    }
    free(a);
    free(b);
    free(c1);
    free(c2);
}

static void test_reduce_sum(void **state)
{
    (void)state;
    /* [[1,2,3],[4,5,6]] */
    tensor_t *a = tens(shp(2, 2, 3, 0), (float[]){1, 2, 3, 4, 5, 6});
    op_t op = mkop(OP_REDUCE_SUM, shp(1, 3, 0, 0), 1);
    op.axis = 0;
    check(&op, a, NULL, 0, (float[]){5, 7, 9}, 0);
    op = mkop(OP_REDUCE_SUM, shp(1, 2, 0, 0), 1);
    op.axis = 1;
    check(&op, a, NULL, 0, (float[]){6, 15}, 0);
    op = mkop(OP_REDUCE_SUM, shp(0, 0, 0, 0), 1);
    check(&op, a, NULL, 0, (float[]){21}, 0);
    /* Middle axis of [2,2,2] = 0..7: out[i][k] = x[i][0][k] + x[i][1][k]. */
    tensor_t *c = tens(shp(3, 2, 2, 2), (float[]){0, 1, 2, 3, 4, 5, 6, 7});
    op = mkop(OP_REDUCE_SUM, shp(2, 2, 2, 0), 1);
    op.axis = 1;
    check(&op, c, NULL, 0, (float[]){2, 4, 10, 12}, 0);
    /* Double accumulation: 2^24 + 1 + 1 ... would be lost in f32. */
    tensor_t *d = tens(shp(1, 3, 0, 0), (float[]){16777216.0f, 1, 1});
    op = mkop(OP_REDUCE_SUM, shp(0, 0, 0, 0), 1);
    check(&op, d, NULL, 0, (float[]){16777218.0f}, 0);
    tensor_free(a);
    tensor_free(c);
    tensor_free(d);
}

static void test_compute_and_non_kernels(void **state)
{
    (void)state;
    op_t op = mkop(OP_COMPUTE, shp(0, 0, 0, 0), 0);
    op.us = 20000;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    check(&op, NULL, NULL, 0, (float[]){0}, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = (t1.tv_sec - t0.tv_sec) * 1e6 + (t1.tv_nsec - t0.tv_nsec) / 1e3;
    if (us < 20000.0)
        fail_msg("compute spun %.1f us, want 20000", us);
    tensor_t *a = tens(shp(1, 2, 0, 0), (float[]){1, 2});
    const tensor_t *args[1] = {a};
    tensor_t *out = NULL;
    opcode_t not_kernels[] = {OP_INPUT, OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER,
                              OP_PPERMUTE, OP_ALL_TO_ALL};
    for (size_t i = 0; i < sizeof not_kernels / sizeof not_kernels[0]; i++) {
        op = mkop(not_kernels[i], a->shape, 1);
        assert_int_equal(kernel_run(&op, args, 0, &out), -1);
    }
    assert_null(out);
    tensor_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blas_prepare_no_pool),
        cmocka_unit_test(test_sources),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_unary),
        cmocka_unit_test(test_matmul_transpose_reshape),
        cmocka_unit_test(test_matmul_blas_vs_naive),
        cmocka_unit_test(test_reduce_sum),
        cmocka_unit_test(test_compute_and_non_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
