#include "tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

int64_t shape_numel(const shape_t *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++)
        n *= s->dim[i];
    return n;
}

int shape_equal(const shape_t *a, const shape_t *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++) {
        if (a->dim[i] != b->dim[i])
            return 0;
    }
    return 1;
}

void shape_format(const shape_t *s, char *buf, size_t len)
{
    if (len == 0)
        return;
    size_t used = 0;
    buf[0] = '\0';
    /* Each snprintf may truncate; `used` is clamped so the buffer always
     * stays NUL-terminated and we never index past it. */
    used += (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < s->rank && used < len; i++) {
        used += (size_t)snprintf(buf + used, len - used, i ? ",%lld" : "%lld",
                                 (long long)s->dim[i]);
    }
    if (used < len)
        snprintf(buf + used, len - used, "]");
}

int shape_valid(const shape_t *s)
{
    if (s->rank < 0 || s->rank > TENSOR_MAX_RANK)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->dim[i] < 1 || s->dim[i] > TENSOR_MAX_ELEMS)
            return 0;
        n *= s->dim[i];
        if (n > TENSOR_MAX_ELEMS)
            return 0;
    }
    return 1;
}

/* The allocator of large tensors' data; all zero: none. Written by
 * tensor_allocator_set before threads share tensors of its size. */
static tensor_allocator_t tensor_big;

void tensor_allocator_set(const tensor_allocator_t *a)
{
    if (a)
        tensor_big = *a;
    else
        memset(&tensor_big, 0, sizeof tensor_big);
}

static float *data_alloc(size_t n, int zero)
{
    size_t bytes = n * sizeof(float);
    float *p = NULL;
    if (tensor_big.alloc && bytes >= tensor_big.min_bytes &&
        (p = tensor_big.alloc(tensor_big.ctx, bytes)) && zero)
        memset(p, 0, bytes);
    if (p)
        return p;
    return zero ? util_zalloc(n, sizeof(float)) : malloc(bytes);
}

/* Data of at most this many bytes lives in the tensor's own block, right
 * after the struct (at TENSOR_INLINE_OFF, 16-byte aligned as malloc's
 * blocks are): one allocation a tensor instead of two. A worker makes and
 * frees several small tensors a computation (scalars, a collective's
 * pieces). */
#define TENSOR_INLINE_MAX 64
#define TENSOR_INLINE_OFF ((sizeof(tensor_t) + 15) / 16 * 16)

/* Decided by the size alone, as tensor_free's pool check is: a tensor's
 * shape never changes once made. (Not by comparing data with the inline
 * address: a separate block may well start right there.) */
static int tensor_inline(size_t n)
{
    return n <= TENSOR_INLINE_MAX / sizeof(float);
}

/* zero: calloc the data (free of cost on fresh pages, a memset on reused
 * ones, which is what tensor_new_uninit spares). */
static tensor_t *tensor_make(const shape_t *s, int zero)
{
    if (!s || !shape_valid(s))
        return NULL;
    size_t n = (size_t)shape_numel(s);
    int inl = tensor_inline(n);
    tensor_t *t = malloc(inl ? TENSOR_INLINE_OFF + n * sizeof(float) : sizeof *t);
    if (!t)
        return NULL;
    /* Copy only the used dims so the "dims beyond rank are 0" invariant
     * holds even if the caller left garbage there. */
    memset(&t->shape, 0, sizeof t->shape);
    t->ready_us = 0;
    t->shape.rank = s->rank;
    for (int i = 0; i < s->rank; i++)
        t->shape.dim[i] = s->dim[i];
    if (inl) {
        t->data = (float *)(void *)((char *)t + TENSOR_INLINE_OFF);
        if (zero)
            memset(t->data, 0, n * sizeof(float));
        return t;
    }
    t->data = data_alloc(n, zero);
    if (!t->data) {
        free(t);
        return NULL;
    }
    return t;
}

tensor_t *tensor_new(const shape_t *s)
{
    return tensor_make(s, 1);
}

tensor_t *tensor_new_uninit(const shape_t *s)
{
    return tensor_make(s, 0);
}

tensor_t *tensor_clone(const tensor_t *t)
{
    if (!t)
        return NULL;
    tensor_t *c = tensor_new_uninit(&t->shape);
    if (!c)
        return NULL;
    memcpy(c->data, t->data, (size_t)shape_numel(&t->shape) * sizeof *t->data);
    c->ready_us = t->ready_us;
    return c;
}

void tensor_free(tensor_t *t)
{
    if (!t)
        return;
    if (tensor_inline((size_t)shape_numel(&t->shape))) {
        free(t);
        return;
    }
    if (!tensor_big.release ||
        (size_t)shape_numel(&t->shape) * sizeof(float) < tensor_big.min_bytes ||
        tensor_big.release(tensor_big.ctx, t->data) != 0)
        free(t->data);
    free(t);
}

double tensor_sum(const tensor_t *t)
{
    double s = 0.0;
    int64_t n = shape_numel(&t->shape);
    for (int64_t i = 0; i < n; i++)
        s += t->data[i];
    return s;
}
