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
/* Sum of all elements, accumulated in double. */
double tensor_sum(const tensor_t *t);

#endif
