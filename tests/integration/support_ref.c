/* support_ref.c - naive double-precision reference ops (see support_ref.h).
 * Index arithmetic uses the outer/axis/inner split: for a row-major tensor
 * and an axis, element (o, c, i) lives at (o * dim[axis] + c) * inner + i. */
#include "support_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void rt_check(int64_t n)
{
    if (n < 0 || n > RT_MAX) {
        fprintf(stderr, "support_ref: tensor of %lld elements exceeds RT_MAX\n", (long long)n);
        abort();
    }
}

int64_t rt_numel(const rt_t *a)
{
    int64_t n = 1;
    for (int i = 0; i < a->rank; i++)
        n *= a->dim[i];
    return n;
}

void rt_shape(rt_t *out, int rank, const int64_t *dims)
{
    memset(out->dim, 0, sizeof out->dim);
    out->rank = rank;
    for (int i = 0; i < rank; i++)
        out->dim[i] = dims[i];
    rt_check(rt_numel(out));
}

void rt_scalar(rt_t *out, double x)
{
    rt_shape(out, 0, NULL);
    out->v[0] = x;
}

void rt_fill(rt_t *out, int rank, const int64_t *dims, double value)
{
    rt_shape(out, rank, dims);
    for (int64_t i = 0; i < rt_numel(out); i++)
        out->v[i] = value;
}

void rt_iota(rt_t *out, int rank, const int64_t *dims)
{
    rt_shape(out, rank, dims);
    for (int64_t i = 0; i < rt_numel(out); i++)
        out->v[i] = (double)i;
}

static double rt_apply2(double x, double y, rt_binop_t op)
{
    switch (op) {
    case RT_ADD: return x + y;
    case RT_SUB: return x - y;
    case RT_MUL: return x * y;
    case RT_DIV: return x / y;
    case RT_MAX_OP: return x > y ? x : y;
    case RT_MIN_OP: return x < y ? x : y;
    }
    abort();
}

void rt_binary(rt_t *out, const rt_t *a, const rt_t *b, rt_binop_t op)
{
    /* The non-scalar operand (if any) gives the shape. */
    const rt_t *big = a->rank == 0 ? b : a;
    rt_shape(out, big->rank, big->dim);
    for (int64_t i = 0; i < rt_numel(out); i++) {
        double x = a->rank == 0 ? a->v[0] : a->v[i];
        double y = b->rank == 0 ? b->v[0] : b->v[i];
        out->v[i] = rt_apply2(x, y, op);
    }
}

void rt_unary(rt_t *out, const rt_t *a, rt_unop_t op)
{
    rt_shape(out, a->rank, a->dim);
    for (int64_t i = 0; i < rt_numel(a); i++) {
        double x = a->v[i];
        switch (op) {
        case RT_NEG: out->v[i] = -x; break;
        case RT_RELU: out->v[i] = x > 0 ? x : 0; break;
        case RT_EXP: out->v[i] = exp(x); break;
        case RT_TANH: out->v[i] = tanh(x); break;
        case RT_RSQRT: out->v[i] = 1.0 / sqrt(x); break;
        case RT_LOG: out->v[i] = log(x); break;
        }
    }
}

void rt_scale(rt_t *out, const rt_t *a, double factor)
{
    rt_shape(out, a->rank, a->dim);
    for (int64_t i = 0; i < rt_numel(a); i++)
        out->v[i] = a->v[i] * factor;
}

void rt_matmul(rt_t *out, const rt_t *a, const rt_t *b)
{
    int64_t m = a->dim[0], k = a->dim[1], n = b->dim[1];
    int64_t dims[2] = {m, n};
    rt_shape(out, 2, dims);
    for (int64_t r = 0; r < m; r++)
        for (int64_t c = 0; c < n; c++) {
            double s = 0;
            for (int64_t x = 0; x < k; x++)
                s += a->v[r * k + x] * b->v[x * n + c];
            out->v[r * n + c] = s;
        }
}

void rt_transpose(rt_t *out, const rt_t *a)
{
    int64_t dims[2] = {a->dim[1], a->dim[0]};
    rt_shape(out, 2, dims);
    for (int64_t r = 0; r < a->dim[0]; r++)
        for (int64_t c = 0; c < a->dim[1]; c++)
            out->v[c * a->dim[0] + r] = a->v[r * a->dim[1] + c];
}

void rt_reshape(rt_t *out, const rt_t *a, int rank, const int64_t *dims)
{
    rt_shape(out, rank, dims);
    if (rt_numel(out) != rt_numel(a))
        abort();
    memcpy(out->v, a->v, sizeof(double) * (size_t)rt_numel(a));
}

/* Product of dims [from, to). */
static int64_t rt_span(const rt_t *a, int from, int to)
{
    int64_t n = 1;
    for (int i = from; i < to; i++)
        n *= a->dim[i];
    return n;
}

/* out's shape: a's without `axis`; sets the (outer, len, inner) split. */
static void rt_drop_axis(rt_t *out, const rt_t *a, int axis, int64_t *outer, int64_t *len,
                         int64_t *inner)
{
    *outer = rt_span(a, 0, axis);
    *len = a->dim[axis];
    *inner = rt_span(a, axis + 1, a->rank);
    int64_t dims[RT_MAX_RANK];
    int r = 0;
    for (int i = 0; i < a->rank; i++)
        if (i != axis)
            dims[r++] = a->dim[i];
    rt_shape(out, r, dims);
}

void rt_reduce_sum(rt_t *out, const rt_t *a, int axis)
{
    if (axis < 0) {
        double s = 0;
        for (int64_t i = 0; i < rt_numel(a); i++)
            s += a->v[i];
        rt_scalar(out, s);
        return;
    }
    int64_t outer, len, inner;
    rt_drop_axis(out, a, axis, &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t c = 0; c < len; c++)
                s += a->v[(o * len + c) * inner + i];
            out->v[o * inner + i] = s;
        }
}

void rt_reduce_max(rt_t *out, const rt_t *a, int axis)
{
    if (axis < 0) {
        double m = a->v[0];
        for (int64_t i = 1; i < rt_numel(a); i++)
            m = fmax(m, a->v[i]);
        rt_scalar(out, m);
        return;
    }
    int64_t outer, len, inner;
    rt_drop_axis(out, a, axis, &outer, &len, &inner);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double m = -INFINITY;
            for (int64_t c = 0; c < len; c++)
                m = fmax(m, a->v[(o * len + c) * inner + i]);
            out->v[o * inner + i] = m;
        }
}

void rt_softmax(rt_t *out, const rt_t *a, int axis)
{
    rt_t m;
    rt_reduce_max(&m, a, axis);
    int64_t outer = rt_span(a, 0, axis), len = a->dim[axis];
    int64_t inner = rt_span(a, axis + 1, a->rank);
    rt_shape(out, a->rank, a->dim);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            double s = 0;
            for (int64_t c = 0; c < len; c++)
                s += exp(a->v[(o * len + c) * inner + i] - m.v[o * inner + i]);
            for (int64_t c = 0; c < len; c++) {
                int64_t at = (o * len + c) * inner + i;
                out->v[at] = exp(a->v[at] - m.v[o * inner + i]) / s;
            }
        }
}

/* Row-major offset of the coordinates coord[letter] in a tensor whose
 * axes are the letters of `term`. */
static int64_t rt_offset(const rt_t *t, const char *term, int len, const int64_t *coord)
{
    int64_t off = 0;
    for (int i = 0; i < len; i++)
        off = off * t->dim[i] + coord[term[i] - 'a'];
    return off;
}

/* Scatter form (the kernel gathers per output element): walk every
 * combination of every letter's coordinate and add the product into the
 * output element it belongs to. */
void rt_einsum(rt_t *out, const char *spec, const rt_t *a, const rt_t *b)
{
    const char *arrow = strstr(spec, "->"), *comma = strchr(spec, ',');
    const char *ta = spec, *tb = comma ? comma + 1 : NULL, *to = arrow + 2;
    int la = (int)((comma ? comma : arrow) - spec), lb = tb ? (int)(arrow - tb) : 0;
    int lo = (int)strlen(to);
    int64_t size[26] = {0}, coord[26] = {0}, dims[RT_MAX_RANK];
    for (int i = 0; i < la; i++)
        size[ta[i] - 'a'] = a->dim[i];
    for (int i = 0; i < lb; i++)
        size[tb[i] - 'a'] = b->dim[i];
    for (int i = 0; i < lo; i++)
        dims[i] = size[to[i] - 'a'];
    rt_shape(out, lo, dims);
    memset(out->v, 0, sizeof(double) * (size_t)rt_numel(out));
    char used[26];
    int nu = 0;
    for (int l = 0; l < 26; l++)
        if (size[l])
            used[nu++] = (char)l;
    while (1) {
        double p = a->v[rt_offset(a, ta, la, coord)];
        if (b)
            p *= b->v[rt_offset(b, tb, lb, coord)];
        out->v[rt_offset(out, to, lo, coord)] += p;
        int j = nu - 1;
        while (j >= 0 && ++coord[(int)used[j]] == size[(int)used[j]])
            coord[(int)used[j--]] = 0;
        if (j < 0)
            break;
    }
}

void rt_concat(rt_t *out, const rt_t *parts, int n, int axis)
{
    int64_t dims[RT_MAX_RANK];
    for (int i = 0; i < parts[0].rank; i++)
        dims[i] = parts[0].dim[i];
    dims[axis] = 0;
    for (int p = 0; p < n; p++)
        dims[axis] += parts[p].dim[axis];
    rt_shape(out, parts[0].rank, dims);
    int64_t outer = rt_span(out, 0, axis), inner = rt_span(out, axis + 1, out->rank);
    int64_t at = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int p = 0; p < n; p++) {
            int64_t run = parts[p].dim[axis] * inner;
            memcpy(&out->v[at], &parts[p].v[o * run], sizeof(double) * (size_t)run);
            at += run;
        }
}

void rt_chunk(rt_t *out, const rt_t *a, int axis, int j, int n)
{
    int64_t dims[RT_MAX_RANK];
    for (int i = 0; i < a->rank; i++)
        dims[i] = a->dim[i];
    int64_t cs = a->dim[axis] / n;
    dims[axis] = cs;
    rt_shape(out, a->rank, dims);
    int64_t outer = rt_span(a, 0, axis), inner = rt_span(a, axis + 1, a->rank);
    int64_t at = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t c = 0; c < cs; c++)
            for (int64_t i = 0; i < inner; i++)
                out->v[at++] = a->v[(o * a->dim[axis] + j * cs + c) * inner + i];
}

static int rt_close(double got, double exp)
{
    double tol = 1e-4 * fmax(1.0, fabs(exp));
    return fabs(got - exp) <= tol;
}

static int rt_compare_shape(const json_t *shape, const rt_t *exp, char *why, size_t cap)
{
    if (!json_is_array(shape) || (int)json_array_size(shape) != exp->rank) {
        snprintf(why, cap, "shape has %d dims, expected rank %d",
                 json_is_array(shape) ? (int)json_array_size(shape) : -1, exp->rank);
        return -1;
    }
    for (int i = 0; i < exp->rank; i++) {
        json_int_t d = json_integer_value(json_array_get(shape, (size_t)i));
        if (d != exp->dim[i]) {
            snprintf(why, cap, "shape dim %d is %lld, expected %lld", i, (long long)d,
                     (long long)exp->dim[i]);
            return -1;
        }
    }
    return 0;
}

int rt_compare(const json_t *obj, int shard, const rt_t *exp, char *why, size_t cap)
{
    if (!json_is_object(obj)) {
        snprintf(why, cap, "shard %d missing from the result", shard);
        return -1;
    }
    json_t *sh = json_object_get(obj, "shard");
    if (!json_is_integer(sh) || json_integer_value(sh) != shard) {
        snprintf(why, cap, "entry %d has shard=%lld (shards must be in index order)", shard,
                 (long long)json_integer_value(sh));
        return -1;
    }
    if (rt_compare_shape(json_object_get(obj, "shape"), exp, why, cap) != 0)
        return -1;
    json_t *vals = json_object_get(obj, "values");
    int64_t n = rt_numel(exp);
    if (!json_is_array(vals) || (int64_t)json_array_size(vals) != n) {
        snprintf(why, cap, "values missing or not %lld long", (long long)n);
        return -1;
    }
    double sum = 0, abs_sum = 0;
    for (int64_t i = 0; i < n; i++) {
        double got = json_number_value(json_array_get(vals, (size_t)i));
        sum += exp->v[i];
        abs_sum += fabs(exp->v[i]);
        if (!json_is_number(json_array_get(vals, (size_t)i)) || !rt_close(got, exp->v[i])) {
            snprintf(why, cap, "values[%lld] = %.6g, expected %.6g", (long long)i, got,
                     exp->v[i]);
            return -1;
        }
    }
    json_t *js = json_object_get(obj, "sum");
    /* f32 accumulation error grows with the magnitudes summed, not the sum. */
    if (!json_is_number(js) || fabs(json_number_value(js) - sum) > 1e-4 * fmax(1.0, abs_sum)) {
        snprintf(why, cap, "sum = %.6g, expected %.6g", json_number_value(js), sum);
        return -1;
    }
    return 0;
}
