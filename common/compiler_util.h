/* compiler_util.h - small helpers every compiler stage uses: field paths
 * and error records, bounded readers of untrusted JSON, and a name index.
 *
 * Takes borrowed JSON and strings and gives plain values: nothing is kept
 * but the name index, whose keys are borrowed (they must outlive it) and
 * whose arrays the caller releases with nidx_free(). Errors are reported
 * as return values (-1 from a reader; the status from comp_fail()), never
 * by writing anything but the err_t given. */
#ifndef ATOLL_COMPILER_UTIL_H
#define ATOLL_COMPILER_UTIL_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "tensor.h"

/* snprintf through a va_list: truncation of field paths is acceptable
 * (they are diagnostics), and this keeps -Wformat-truncation quiet. */
static inline void fmt(char *dst, size_t n, const char *f, ...)
    __attribute__((format(printf, 3, 4)));
static inline void fmt(char *dst, size_t n, const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    vsnprintf(dst, n, f, ap);
    va_end(ap);
}

/* Copies src into dst (n bytes), cut to fit and always terminated: what
 * fmt(dst, n, "%s", src) does without the printf machinery (a compile
 * copies every op's names; through vsnprintf that was ~6 % of a worker's
 * intake of a computation). */
static inline void copy_str(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    if (n == 0)
        return;
    if (len >= n)
        len = n - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* Names: 1..NAME_MAX_LEN-1 chars of [A-Za-z0-9_-]. */
int name_valid(const char *s);
/* A JSON string with no NUL inside that is a valid name. */
int json_name(const json_t *v);
/* An input's "from", "computation.value": 0 with both names written
 * (NUL-terminated, valid names), or -1 (then the buffers hold anything). */
int name_from_split(const char *from, char producer[NAME_MAX_LEN], char value[NAME_MAX_LEN]);
/* Integer in [lo, hi]; reals (even 1.0) and booleans are not integers.
 * 0 and *out, or -1. */
int read_int(const json_t *v, int64_t lo, int64_t hi, int64_t *out);
/* A finite number that also stays finite as an f32. 0 and *out, or -1. */
int read_float(const json_t *v, float *out);
/* Array of min_rank..max_rank integers, each 1..max_dim, at most
 * TENSOR_MAX_ELEMS in product. 0 and *out, or -1. */
int read_shape(const json_t *v, int min_rank, int max_rank, int64_t max_dim, shape_t *out);

/* "PREFIX.SUB", or whichever of the two is not empty. */
void field_join(char *dst, size_t n, const char *prefix, const char *sub);
/* 400 at field PREFIX.SUB for faults of the computation object itself;
 * returns 400. */
int comp_fail(const char *prefix, err_t *e, const char *sub, const char *f, ...)
    __attribute__((format(printf, 4, 5)));

/* Name index: open addressing, keys borrowed (they must outlive it). */
typedef struct nidx {
    size_t mask;
    const char **keys;
    int *vals;
} nidx_t;
/* Room for n keys; 0, or -1 (out of memory: x left empty). */
int nidx_init(nidx_t *x, size_t n);
/* Releases the arrays (not the keys); x may be zeroed or freed before. */
void nidx_free(nidx_t *x);
/* The value of key k, or -1. */
int nidx_find(const nidx_t *x, const char *k);
/* Inserts k -> v and returns -1, or returns the existing value (kept). The
 * caller never inserts more keys than the capacity given to nidx_init. */
int nidx_put(nidx_t *x, const char *k, int v);

#endif
