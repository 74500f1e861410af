/* kernels.h - per-shard arithmetic of every local (non-collective) op.
 *
 * kernel_run() computes one op on one shard from already-materialised
 * arguments. It allocates *out (caller frees with tensor_free). Collectives
 * and `input` are not kernels: the worker moves their data (coll.h holds
 * their arithmetic). Returns 0, or -1 on out-of-memory or an op it cannot
 * run (never happens for a program that compiled).
 *
 * args[i] is the value of op->arg[i] (op->nargs entries, borrowed); their
 * shapes must be those the compiler inferred. *out gets op->shape.
 * Semantics: binary ops broadcast a rank-0 argument on either side;
 * reduce_sum accumulates in double; shard_index yields (float)shard_index;
 * compute spins op->us microseconds and yields a scalar 0. */
#ifndef ATOLL_KERNELS_H
#define ATOLL_KERNELS_H

#include "compiler.h"
#include "tensor.h"

int kernel_run(const op_t *op, const tensor_t *const *args, int shard_index,
               tensor_t **out);

/* Busy-waits `us` microseconds on the calling thread (the `compute` op). */
void kernel_compute_spin(int64_t us);

/* The two matmul paths, exposed so tests can check them against each
 * other: c[m,n] = a[m,k] * b[k,n], row-major, c overwritten (no aliasing).
 * kernel_matmul_blas() uses cblas_sgemm when built with OpenBLAS
 * (single-threaded: each device already has its own executor thread),
 * loading the library on first use; it returns -1, computing nothing, when
 * that load failed (the naive loop's bits would differ from its peers').
 * Built without OpenBLAS it is the naive loop. kernel_have_blas(): 1 when
 * cblas_sgemm is in use (loads it). */
void kernel_matmul_naive(const float *a, const float *b, float *c, int64_t m, int64_t k,
                         int64_t n);
int kernel_matmul_blas(const float *a, const float *b, float *c, int64_t m, int64_t k,
                       int64_t n);
int kernel_have_blas(void);

/* Makes the later BLAS load start no thread pool (OpenBLAS reads
 * OPENBLAS_NUM_THREADS when it loads: this sets it to 1 unless it is set)
 * and checks the library is there, so that a worker missing it says so at
 * start. It sets the environment: call it from main() before any thread
 * starts. Users' programs do not inherit it (exec_gang.c builds their
 * environment). 0, or -1 with err saying why. */
int kernel_blas_prepare(char *err, size_t errlen);

#endif
