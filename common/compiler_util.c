/* compiler_util.c - field paths, JSON readers and the name index the
 * compiler's stages share (compiler_util.h).
 *
 * Invariants: a reader writes its output only when it succeeds; the name
 * index stays at most half full (nidx_init sizes it for the caller's key
 * count), so a probe always ends at a hole. */
#include "compiler_types.h"
#include "compiler_util.h"
#include "util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Names: 1..NAME_MAX_LEN-1 chars of [A-Za-z0-9_-]. */
int name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n >= NAME_MAX_LEN)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
        if (!ok)
            return 0;
    }
    return 1;
}

int json_name(const json_t *v)
{
    return json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v) &&
           name_valid(json_string_value(v));
}

int name_from_split(const char *from, char producer[NAME_MAX_LEN], char value[NAME_MAX_LEN])
{
    const char *dot = from ? strchr(from, '.') : NULL;
    if (!dot || (size_t)(dot - from) >= NAME_MAX_LEN || strlen(dot + 1) >= NAME_MAX_LEN)
        return -1;
    memcpy(producer, from, (size_t)(dot - from));
    producer[dot - from] = '\0';
    copy_str(value, NAME_MAX_LEN, dot + 1);
    return name_valid(producer) && name_valid(value) ? 0 : -1;
}

/* Integer in [lo, hi]; reals (even 1.0) and booleans are not integers. */
int read_int(const json_t *v, int64_t lo, int64_t hi, int64_t *out)
{
    if (!json_is_integer(v))
        return -1;
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return -1;
    *out = (int64_t)i;
    return 0;
}

/* A finite number that also stays finite as an f32: one that rounds to
 * FLT_MAX at most. Doubles below FLT_MAX + 2^103 (half its unit in the
 * last place) do, so 3.4028235e38, the float's usual spelling, is taken;
 * the halfway point itself rounds to even, which is infinity. */
int read_float(const json_t *v, float *out)
{
    if (!json_is_number(v))
        return -1;
    double d = json_number_value(v);
    if (!isfinite(d) || fabs(d) >= (double)FLT_MAX + ldexp(1.0, 103))
        return -1;
    *out = (float)d;
    return 0;
}

/* Array of min_rank..max_rank integers, each 1..max_dim, at most
 * TENSOR_MAX_ELEMS in product. */
int read_shape(const json_t *v, int min_rank, int max_rank, int64_t max_dim,
               shape_t *out)
{
    if (!json_is_array(v))
        return -1;
    size_t n = json_array_size(v);
    if (n < (size_t)min_rank || n > (size_t)max_rank)
        return -1;
    shape_t s;
    memset(&s, 0, sizeof s);
    s.rank = (int)n;
    int64_t numel = 1;
    for (size_t i = 0; i < n; i++) {
        if (read_int(json_array_get(v, i), 1, max_dim, &s.dim[i]))
            return -1;
        numel *= s.dim[i];
        if (numel > TENSOR_MAX_ELEMS)
            return -1;
    }
    *out = s;
    return 0;
}

void field_join(char *dst, size_t n, const char *prefix, const char *sub)
{
    if (!prefix[0])
        copy_str(dst, n, sub);
    else if (!sub[0])
        copy_str(dst, n, prefix);
    else
        fmt(dst, n, "%s.%s", prefix, sub);
}

/* 400 at field PREFIX.SUB for faults of the computation object itself. */
int comp_fail(const char *prefix, err_t *e, const char *sub, const char *f, ...)
{
    char field[ERR_FIELD_MAX], msg[ERR_DETAIL_MAX];
    field_join(field, sizeof field, prefix, sub);
    va_list ap;
    va_start(ap, f);
    vsnprintf(msg, sizeof msg, f, ap);
    va_end(ap);
    return err_set(e, 400, field, "%s", msg);
}

static size_t nidx_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;   /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (size_t)h;
}

/* Capacity for n keys at load <= 1/2, so probing always finds a hole. */
int nidx_init(nidx_t *x, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap <<= 1;
    x->mask = cap - 1;
    x->keys = util_zalloc(cap, sizeof *x->keys);
    x->vals = util_zalloc(cap, sizeof *x->vals);
    if (!x->keys || !x->vals) {
        free(x->keys);
        free(x->vals);
        x->keys = NULL;
        x->vals = NULL;
        return -1;
    }
    return 0;
}

void nidx_free(nidx_t *x)
{
    free(x->keys);
    free(x->vals);
    x->keys = NULL;
    x->vals = NULL;
}

int nidx_find(const nidx_t *x, const char *k)
{
    for (size_t i = nidx_hash(k) & x->mask; x->keys[i]; i = (i + 1) & x->mask) {
        if (strcmp(x->keys[i], k) == 0)
            return x->vals[i];
    }
    return -1;
}

/* Inserts k -> v and returns -1, or returns the existing value (kept). The
 * caller never inserts more keys than the capacity given to nidx_init. */
int nidx_put(nidx_t *x, const char *k, int v)
{
    size_t i = nidx_hash(k) & x->mask;
    for (; x->keys[i]; i = (i + 1) & x->mask) {
        if (strcmp(x->keys[i], k) == 0)
            return x->vals[i];
    }
    x->keys[i] = k;
    x->vals[i] = v;
    return -1;
}
