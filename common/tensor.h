/* tensor.h - f32 tensors and shapes shared by the compiler, kernels and workers.
 *
 * A tensor owns its data: tensor_free() releases both the struct and the
 * buffer. Data is row-major; a rank-0 tensor (scalar) holds one element. */
#ifndef ATOLL_TENSOR_H
#define ATOLL_TENSOR_H

#include <stdint.h>
#include <stddef.h>

#define TENSOR_MAX_RANK 4
/* Largest tensor a job may declare (elements). Keeps a hostile job document
 * from asking a worker for gigabytes; 16 Mi elements = 64 MiB of f32. */
#define TENSOR_MAX_ELEMS ((int64_t)1 << 24)

typedef struct shape {
    int rank;                         /* 0..TENSOR_MAX_RANK */
    int64_t dim[TENSOR_MAX_RANK];     /* dims beyond rank are 0 */
} shape_t;

typedef struct tensor {
    shape_t shape;
    float *data;                      /* owned; shape_numel(&shape) floats */
    int64_t ready_us;                 /* a `sim` worker's device clock (util_mono_us)
                                       * when the value exists on its devices; 0 or
                                       * past: it exists now. Set by the executor
                                       * and the data plane only (workers/), kept
                                       * by tensor_clone */
} tensor_t;

int64_t shape_numel(const shape_t *s);
/* A valid tensor shape: rank 0..TENSOR_MAX_RANK, every dim >= 1 and at most
 * TENSOR_MAX_ELEMS elements in all (checked as it goes, so no overflow). */
int shape_valid(const shape_t *s);
int shape_equal(const shape_t *a, const shape_t *b);
/* Writes "[2,4]" into buf (always NUL-terminated). */
void shape_format(const shape_t *s, char *buf, size_t len);

/* New zero-filled tensor; NULL when out of memory or the shape is invalid
 * (rank outside 0..TENSOR_MAX_RANK, a dim < 1, or more than
 * TENSOR_MAX_ELEMS elements). Dims beyond rank are stored as 0.
 * tensor_clone() copies shape and data (NULL in, NULL out); tensor_free()
 * accepts NULL. shape_format() writes "[]" for a scalar. */
tensor_t *tensor_new(const shape_t *s);
/* The same with its data left unset: for callers that write every element
 * before anything reads one (a received frame, a concatenation). */
tensor_t *tensor_new_uninit(const shape_t *s);
tensor_t *tensor_clone(const tensor_t *t);
void tensor_free(tensor_t *t);

/* Where large tensors' data comes from (the worker's shared-memory pool,
 * workers/shmpool.h, which peers on the same host read in one copy).
 * alloc(ctx, bytes) may return NULL (then malloc serves); release(ctx, p)
 * returns 0 when p was its own (and takes it back), -1 otherwise (then
 * free() does). Only data of at least min_bytes goes through it. Set once,
 * before any tensor of that size exists, and cleared (NULL) only after
 * the last such tensor is freed. */
typedef struct tensor_allocator {
    size_t min_bytes;
    void *(*alloc)(void *ctx, size_t bytes);
    int (*release)(void *ctx, void *p);
    void *ctx;
} tensor_allocator_t;
void tensor_allocator_set(const tensor_allocator_t *a);
/* Sum of all elements, accumulated in double. */
double tensor_sum(const tensor_t *t);

#endif
