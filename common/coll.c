/* coll.c - group structure and combine arithmetic of the collectives.
 *
 * Tensors are viewed along one axis as [outer, len, inner] (outer = product
 * of the dims before the axis, inner = product after it); chunking and
 * concatenation along an axis are then block copies. */
#include "coll.h"

#include <stdlib.h>
#include <string.h>

/* Row-major coordinates of shard `s` in a mesh of shape `m`. */
static void coords_of(const shape_t *m, int64_t s, int64_t *c)
{
    for (int i = m->rank - 1; i >= 0; i--) {
        c[i] = s % m->dim[i];
        s /= m->dim[i];
    }
}

int coll_group(const shape_t *slice_shape, unsigned mesh_axes, int shard, int *members,
               int *n, int *pos)
{
    if (!slice_shape || !members || !n || !pos || slice_shape->rank < 1 ||
        slice_shape->rank > TENSOR_MAX_RANK || (mesh_axes >> slice_shape->rank) != 0)
        return -1;
    int64_t total = shape_numel(slice_shape);
    if (shard < 0 || shard >= total)
        return -1;
    unsigned mask = mesh_axes ? mesh_axes : (1u << slice_shape->rank) - 1;
    int64_t me[TENSOR_MAX_RANK], other[TENSOR_MAX_RANK];
    coords_of(slice_shape, shard, me);
    *n = 0;
    *pos = -1;
    /* Members: shards agreeing with `shard` on every axis outside the mask,
     * found in increasing shard index, so positions are deterministic. */
    for (int64_t s = 0; s < total; s++) {
        coords_of(slice_shape, s, other);
        int same = 1;
        for (int i = 0; i < slice_shape->rank && same; i++)
            same = (mask & (1u << i)) || other[i] == me[i];
        if (!same)
            continue;
        if (s == shard)
            *pos = *n;
        members[(*n)++] = (int)s;
    }
    return 0;
}

typedef struct axis_view {
    int64_t outer, len, inner;
} axis_view_t;

static axis_view_t view_of(const shape_t *s, int axis)
{
    axis_view_t v = {1, s->dim[axis], 1};
    for (int i = 0; i < axis; i++)
        v.outer *= s->dim[i];
    for (int i = axis + 1; i < s->rank; i++)
        v.inner *= s->dim[i];
    return v;
}

/* Chunk j of n along `axis` (dim must be divisible by n); NULL on error. */
static tensor_t *chunk_of(const tensor_t *t, int axis, int n, int j)
{
    if (axis < 0 || axis >= t->shape.rank || n < 1 || j < 0 || j >= n ||
        t->shape.dim[axis] % n != 0)
        return NULL;
    shape_t cs = t->shape;
    cs.dim[axis] /= n;
    tensor_t *c = tensor_new_uninit(&cs);
    if (!c)
        return NULL;
    axis_view_t v = view_of(&t->shape, axis);
    int64_t block = cs.dim[axis] * v.inner;
    for (int64_t o = 0; o < v.outer; o++)
        memcpy(c->data + o * block, t->data + o * v.len * v.inner + j * block,
               (size_t)block * sizeof *c->data);
    return c;
}

/* Concatenation of n equally shaped pieces along `axis`, in index order. */
static int concat_of(const tensor_t *const *pieces, int n, int axis, tensor_t **out)
{
    const shape_t *ps = &pieces[0]->shape;
    if (axis < 0 || axis >= ps->rank)
        return -1;
    shape_t rs = *ps;
    rs.dim[axis] *= n;
    tensor_t *r = tensor_new_uninit(&rs);
    if (!r)
        return -1;
    axis_view_t v = view_of(ps, axis);
    int64_t block = v.len * v.inner;
    for (int64_t o = 0; o < v.outer; o++) {
        for (int p = 0; p < n; p++)
            memcpy(r->data + (o * n + p) * block, pieces[p]->data + o * block,
                   (size_t)block * sizeof *r->data);
    }
    *out = r;
    return 0;
}

tensor_t *coll_piece(const op_t *op, const tensor_t *arg, int n, int pos, int dst)
{
    if (!op || !arg || n < 1 || pos < 0 || pos >= n || dst < 0 || dst >= n)
        return NULL;
    if (op->code == OP_ALL_TO_ALL)
        return chunk_of(arg, op->split_axis, n, dst);
    return tensor_clone(arg);
}

int coll_piece_shape(const op_t *op, const shape_t *arg_shape, int n, shape_t *out)
{
    if (!op || !arg_shape || !out || n < 1)
        return -1;
    *out = *arg_shape;
    if (op->code != OP_ALL_TO_ALL)
        return 0;
    int sa = op->split_axis;
    if (sa < 0 || sa >= arg_shape->rank || arg_shape->dim[sa] % n != 0)
        return -1;
    out->dim[sa] /= n;
    return 0;
}

/* pos + sign * shift mod n (true modulo), or the pairs' table. */
static int ppermute_map(const op_t *op, int n, int pos, int sign)
{
    if (!op || n < 1 || pos < 0 || pos >= n || (op->perm && op->nperm != n))
        return -1;
    if (op->perm)
        return op->perm[(sign < 0 ? 0 : n) + pos];
    int64_t s = ((int64_t)pos + sign * (op->shift % n)) % n;     /* in (-n, n) */
    return (int)(s < 0 ? s + n : s);
}

int coll_ppermute_source(const op_t *op, int n, int pos)
{
    return ppermute_map(op, n, pos, -1);
}

int coll_ppermute_target(const op_t *op, int n, int pos)
{
    return ppermute_map(op, n, pos, 1);
}

static float reduce2(reduce_kind_t k, float a, float b)
{
    if (k == REDUCE_MAX)
        return a > b ? a : b;
    if (k == REDUCE_MIN)
        return a < b ? a : b;
    return a + b;
}

/* all_reduce and reduce_scatter: element i of the result reduces element
 * `off + i` of every piece, in position order 0..n-1 (deterministic). The
 * result covers chunk `pos` along op->axis for reduce_scatter, all of it for
 * all_reduce. */
static int combine_reduce(const op_t *op, const tensor_t *const *pieces, int n, int pos,
                          tensor_t **out)
{
    const shape_t *ps = &pieces[0]->shape;
    int scatter = op->code == OP_REDUCE_SCATTER;
    if (scatter && (op->axis < 0 || op->axis >= ps->rank || ps->dim[op->axis] % n != 0))
        return -1;
    shape_t rs = *ps;
    axis_view_t v = {1, 1, shape_numel(ps)};
    if (scatter) {
        v = view_of(ps, op->axis);
        rs.dim[op->axis] /= n;
    }
    tensor_t *r = tensor_new_uninit(&rs);
    if (!r)
        return -1;
    int64_t block = (v.len / (scatter ? n : 1)) * v.inner;
    for (int64_t o = 0; o < v.outer; o++) {
        int64_t src = o * v.len * v.inner + (scatter ? pos * block : 0);
        float *dst = r->data + o * block;
        memcpy(dst, pieces[0]->data + src, (size_t)block * sizeof *dst);
        for (int p = 1; p < n; p++) {
            const float *d = pieces[p]->data + src;
            for (int64_t i = 0; i < block; i++)
                dst[i] = reduce2(op->reduce, dst[i], d[i]);
        }
    }
    *out = r;
    return 0;
}

/* all_to_all: pieces[src] is the chunk src sent here. pieces[pos] may also
 * be this shard's whole argument (then our own chunk is cut from it), so a
 * caller need not call coll_piece() for itself. */
static int combine_all_to_all(const op_t *op, const tensor_t *const *pieces, int n, int pos,
                              tensor_t **out)
{
    const tensor_t *own = pieces[pos];
    tensor_t *cut = NULL;
    int rc = -1;
    int ref = pos == 0 ? (n > 1 ? 1 : 0) : 0;
    const tensor_t **local = NULL;     /* borrowed pointers; array owned here */
    int sa = op->split_axis;
    if (sa < 0 || sa >= own->shape.rank)
        return -1;
    if (n > 1 && !shape_equal(&own->shape, &pieces[ref]->shape)) {
        shape_t want = pieces[ref]->shape;
        want.dim[sa] *= n;
        if (!shape_equal(&own->shape, &want))
            return -1;
        cut = chunk_of(own, sa, n, pos);
        if (!cut)
            return -1;
        own = cut;
    }
    local = malloc((size_t)n * sizeof *local);
    if (!local)
        goto cleanup;
    for (int p = 0; p < n; p++)
        local[p] = p == pos ? own : pieces[p];
    for (int p = 1; p < n; p++) {
        if (!shape_equal(&local[p]->shape, &local[0]->shape))
            goto cleanup;
    }
    rc = concat_of(local, n, op->concat_axis, out);
cleanup:
    free(local);
    tensor_free(cut);
    return rc;
}

static int pieces_ok(const tensor_t *const *pieces, int n, int same_shape)
{
    for (int p = 0; p < n; p++) {
        if (!pieces[p])
            return 0;
        if (same_shape && !shape_equal(&pieces[p]->shape, &pieces[0]->shape))
            return 0;
    }
    return 1;
}

int coll_combine(const op_t *op, const tensor_t *const *pieces, int n, int pos,
                 tensor_t **out)
{
    if (!op || !pieces || !out || n < 1 || pos < 0 || pos >= n)
        return -1;
    switch (op->code) {
    case OP_ALL_REDUCE:
    case OP_REDUCE_SCATTER:
        return pieces_ok(pieces, n, 1) ? combine_reduce(op, pieces, n, pos, out) : -1;
    case OP_ALL_GATHER:
        return pieces_ok(pieces, n, 1) ? concat_of(pieces, n, op->axis, out) : -1;
    case OP_PPERMUTE:
        if (!pieces[0] && coll_ppermute_source(op, n, pos) >= 0)
            return -1;                  /* a sender's piece is missing */
        *out = pieces[0] ? tensor_clone(pieces[0]) : tensor_new(&op->shape);
        return *out ? 0 : -1;
    case OP_ALL_TO_ALL:
        return pieces_ok(pieces, n, 0) ? combine_all_to_all(op, pieces, n, pos, out) : -1;
    default:
        return -1;
    }
}

/* ---- ring schedules ---- */

static int mod_n(int64_t v, int n)
{
    int64_t m = v % n;
    return (int)(m < 0 ? m + n : m);
}

void coll_ring_chunk(int64_t numel, int n, int c, int64_t *off, int64_t *len)
{
    if (n < 1 || c < 0 || c >= n || numel < 0) {
        *off = 0;
        *len = 0;
        return;
    }
    int64_t base = numel / n, extra = numel % n;
    *len = base + (c < extra ? 1 : 0);
    *off = c * base + (c < extra ? c : extra);
}

int coll_ring_send_chunk(int n, int pos, int step)
{
    return n < 1 ? -1 : mod_n((int64_t)pos - step, n);
}

int coll_ring_recv_chunk(int n, int pos, int step)
{
    return n < 1 ? -1 : mod_n((int64_t)pos - step - 1, n);
}

int coll_ring_owned(int n, int pos)
{
    return n < 1 ? -1 : mod_n((int64_t)pos + 1, n);
}

void coll_reduce_into(reduce_kind_t k, float *dst, const float *src, int64_t count)
{
    /* One loop per kind so the compiler can vectorise the sum. */
    if (k == REDUCE_SUM) {
        for (int64_t i = 0; i < count; i++)
            dst[i] += src[i];
    } else {
        for (int64_t i = 0; i < count; i++)
            dst[i] = reduce2(k, dst[i], src[i]);
    }
}

/* Axes that vary inside a group (mesh_axes 0: all of them). */
static unsigned group_mask(const shape_t *m, unsigned mesh_axes)
{
    return mesh_axes ? mesh_axes : (1u << m->rank) - 1;
}

int coll_group_of(const shape_t *slice_shape, unsigned mesh_axes, int shard, int *leader,
                  int *n, int *pos)
{
    if (!slice_shape || slice_shape->rank < 1 || slice_shape->rank > TENSOR_MAX_RANK ||
        (mesh_axes >> slice_shape->rank) != 0 || shard < 0 ||
        shard >= shape_numel(slice_shape))
        return -1;
    unsigned mask = group_mask(slice_shape, mesh_axes);
    int64_t c[TENSOR_MAX_RANK], lead = 0, stride = 1, p = 0, size = 1;
    coords_of(slice_shape, shard, c);
    /* Members differ from the shard only on masked axes, so increasing
     * shard order is row-major order over those axes' coordinates. */
    for (int i = slice_shape->rank - 1; i >= 0; i--) {
        if (mask & (1u << i)) {
            p += c[i] * size;
            size *= slice_shape->dim[i];
        } else {
            lead += c[i] * stride;
        }
        stride *= slice_shape->dim[i];
    }
    *leader = (int)lead;
    *n = (int)size;
    *pos = (int)p;
    return 0;
}

int coll_group_member(const shape_t *slice_shape, unsigned mesh_axes, int leader, int pos)
{
    if (!slice_shape || slice_shape->rank < 1 || slice_shape->rank > TENSOR_MAX_RANK ||
        (mesh_axes >> slice_shape->rank) != 0 || leader < 0 || pos < 0)
        return -1;
    unsigned mask = group_mask(slice_shape, mesh_axes);
    int64_t s = leader, stride = 1, rest = pos;
    for (int i = slice_shape->rank - 1; i >= 0; i--) {
        if (mask & (1u << i)) {
            s += (rest % slice_shape->dim[i]) * stride;
            rest /= slice_shape->dim[i];
        }
        stride *= slice_shape->dim[i];
    }
    return rest == 0 && s < shape_numel(slice_shape) ? (int)s : -1;
}

int coll_fold_ring(reduce_kind_t k, const tensor_t *const *pieces, int n, tensor_t **out)
{
    *out = NULL;
    if (n < 1 || !pieces)
        return -1;
    for (int m = 0; m < n; m++)
        if (!pieces[m] || !shape_equal(&pieces[m]->shape, &pieces[0]->shape))
            return -1;
    tensor_t *t = tensor_new_uninit(&pieces[0]->shape);
    if (!t)
        return -1;
    int64_t numel = shape_numel(&t->shape);
    for (int c = 0; c < n; c++) {
        int64_t off, len;
        coll_ring_chunk(numel, n, c, &off, &len);
        if (len == 0)
            continue;
        memcpy(t->data + off, pieces[c]->data + off, (size_t)len * sizeof *t->data);
        for (int s = 1; s < n; s++)
            coll_reduce_into(k, t->data + off, pieces[(c + s) % n]->data + off, len);
    }
    *out = t;
    return 0;
}
