/* bench_kernels.c - does OpenBLAS pay for `matmul`? Times the naive i-k-j
 * loop against cblas_sgemm (single-threaded, as a device executor runs it)
 * on square f32 matrices in the same run, and prints GFLOP/s and the ratio. */
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"
#include "util.h"

typedef int matmul_fn(const float *, const float *, float *, int64_t, int64_t, int64_t);

/* The naive loop, in matmul_fn's shape. */
static int naive(const float *a, const float *b, float *c, int64_t m, int64_t k, int64_t n)
{
    kernel_matmul_naive(a, b, c, m, k, n);
    return 0;
}

/* Runs fn until at least 0.3 s passed; returns GFLOP/s, or -1 if it failed. */
static double bench_gflops(matmul_fn *fn, const float *a, const float *b, float *c, int64_t n)
{
    int64_t t0 = util_mono_us(), reps = 0;
    do {
        if (fn(a, b, c, n, n, n) != 0)
            return -1;
        reps++;
    } while (util_mono_us() - t0 < 300000);
    double secs = (double)(util_mono_us() - t0) / 1e6;
    return 2.0 * (double)n * (double)n * (double)n * (double)reps / secs / 1e9;
}

int main(void)
{
    static const int64_t sizes[] = {16, 64, 256, 512};
    char err[256];
    if (kernel_blas_prepare(err, sizeof err) != 0)      /* as atoll-worker does */
        fprintf(stderr, "bench_kernels: %s\n", err);
    printf("kernels.blas_available %d\n", kernel_have_blas());
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        int64_t n = sizes[i];
        float *a = malloc(sizeof(float) * (size_t)(n * n));
        float *b = malloc(sizeof(float) * (size_t)(n * n));
        float *c = malloc(sizeof(float) * (size_t)(n * n));
        if (!a || !b || !c) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (int64_t j = 0; j < n * n; j++) {
            a[j] = (float)(j % 7) * 0.25f;
            b[j] = (float)(j % 5) * 0.5f;
        }
        double loop = bench_gflops(naive, a, b, c, n);
        double blas = bench_gflops(kernel_matmul_blas, a, b, c, n);
        printf("kernels.matmul.n%ld.naive_gflops %.2f\n", (long)n, loop);
        printf("kernels.matmul.n%ld.blas_gflops %.2f\n", (long)n, blas);
        printf("kernels.matmul.n%ld.blas_over_naive %.2f\n", (long)n, blas / loop);
        free(a);
        free(b);
        free(c);
    }
    return 0;
}
