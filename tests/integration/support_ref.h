/* support_ref.h - a tiny, deliberately naive reference implementation of
 * the DESIGN.md ops on small dense tensors, written independently of
 * common/kernels.c and common/coll.c so that tests compare the cluster's
 * results with a second opinion (double precision, no BLAS).
 *
 * rt_t is a value type (fixed capacity, no heap): functions write their
 * result into *out, which may not alias an input. Shapes beyond RT_MAX
 * elements are a test bug: rt_* functions abort() on them. */
#ifndef ATOLL_SUPPORT_REF_H
#define ATOLL_SUPPORT_REF_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define RT_MAX 512
#define RT_MAX_RANK 4

typedef struct rt {
    int rank;
    int64_t dim[RT_MAX_RANK];
    double v[RT_MAX];
} rt_t;

typedef enum rt_binop { RT_ADD, RT_SUB, RT_MUL, RT_DIV, RT_MAX_OP, RT_MIN_OP } rt_binop_t;
typedef enum rt_unop { RT_NEG, RT_RELU, RT_EXP, RT_TANH, RT_RSQRT, RT_LOG } rt_unop_t;

int64_t rt_numel(const rt_t *a);
/* Shape from a list of dims (rank 0 = scalar). */
void rt_shape(rt_t *out, int rank, const int64_t *dims);
void rt_scalar(rt_t *out, double x);
void rt_fill(rt_t *out, int rank, const int64_t *dims, double value);
void rt_iota(rt_t *out, int rank, const int64_t *dims);
/* Elementwise; a rank-0 operand broadcasts. */
void rt_binary(rt_t *out, const rt_t *a, const rt_t *b, rt_binop_t op);
void rt_unary(rt_t *out, const rt_t *a, rt_unop_t op);
void rt_scale(rt_t *out, const rt_t *a, double factor);
void rt_matmul(rt_t *out, const rt_t *a, const rt_t *b);
void rt_transpose(rt_t *out, const rt_t *a);
void rt_reshape(rt_t *out, const rt_t *a, int rank, const int64_t *dims);
/* axis < 0: all axes -> scalar; else that axis is removed. */
void rt_reduce_sum(rt_t *out, const rt_t *a, int axis);
/* axis < 0: max of all -> scalar; else that axis is removed. */
void rt_reduce_max(rt_t *out, const rt_t *a, int axis);
/* exp(a - max) / sum(exp(a - max)) along axis. */
void rt_softmax(rt_t *out, const rt_t *a, int axis);
/* einsum with spec "ab,bc->ac" (or one operand: "ab->ba"; b NULL). */
void rt_einsum(rt_t *out, const char *spec, const rt_t *a, const rt_t *b);
/* Concatenation of n tensors along axis (other dims equal). */
void rt_concat(rt_t *out, const rt_t *parts, int n, int axis);
/* Chunk j of n equal chunks of a along axis. */
void rt_chunk(rt_t *out, const rt_t *a, int axis, int j, int n);

/* Compares one result shard object ({"shard","shape","sum","values"}) with
 * exp: relative tolerance 1e-4 (absolute 1e-4 near zero). Returns 0, or -1
 * with a one-line reason in why. */
int rt_compare(const json_t *shard_obj, int shard, const rt_t *exp, char *why, size_t cap);

#endif
