/* gspmd_reshard.c - the reshard planner and emitter (gspmd_reshard.h).
 *
 * Invariants:
 *  - every step keeps r->cur a valid sharding of the value and (unless
 *    dry) emits one lowered op whose result is laid out as the new r->cur,
 *    so the value named r->name always holds r->cur;
 *  - a dry run walks the same steps as the real one and emits nothing, so
 *    the cost it counts is what the real one would move;
 *  - a partial value is finished (reduce_scatter or all_reduce) before it
 *    is resharded: rs_run never sees partial sums;
 *  - a value resharded for two users is moved once (the cache in L). */
#include "gspmd.h"
#include "gspmd_layout.h"
#include "gspmd_reshard.h"
#include "gspmd_state.h"

#include <stdlib.h>
#include <string.h>

static int ascending(const uint8_t *ax, int n, unsigned *mask)
{
    *mask = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && ax[i] <= ax[i - 1])
            return 0;
        *mask |= 1u << ax[i];
    }
    return 1;
}

static int prefix_len(const shd_t *a, const shd_t *b, int d)
{
    int p = 0;
    while (p < a->n[d] && p < b->n[d] && a->ax[d][p] == b->ax[d][p])
        p++;
    return p;
}

static int64_t local_numel(const rs_t *r, const shd_t *s)
{
    shape_t ls;
    gspmd_local_shape(r->gs, s, r->L->m, &ls);
    return shape_numel(&ls);
}

static int rs_step(rs_t *r, json_t *op, const shd_t *next)
{
    r->cur = *next;
    if (r->dry) {
        json_decref(op);
        return 0;
    }
    char dst[NAME_MAX_LEN];
    if (lw_emit_coll(r->L, op, r->name, next, dst) != 0)
        return -1;
    lw_name_copy(r->name, dst);
    return 0;
}

/* all_to_all: the minor axis of dim i moves to the minor end of dim j
 * when that is where `to` wants it. 1 when a move was made. */
static int rs_a2a(rs_t *r, const shd_t *to, int *rc)
{
    const gspmd_mesh_t *m = r->L->m;
    for (int i = 0; i < r->cur.rank; i++) {
        if (r->cur.n[i] <= prefix_len(&r->cur, to, i))
            continue;
        int a = r->cur.ax[i][r->cur.n[i] - 1];
        for (int jd = 0; jd < r->cur.rank; jd++) {
            int p = r->cur.n[jd];
            if (jd == i || prefix_len(&r->cur, to, jd) != p || to->n[jd] <= p ||
                to->ax[jd][p] != a)
                continue;
            shape_t ls;
            gspmd_local_shape(r->gs, &r->cur, m, &ls);
            if (ls.dim[jd] % mesh_axis_size(m, a) != 0)
                continue;
            shd_t next = r->cur;
            next.n[i]--;
            shd_push(&next, jd, a);
            r->cost += local_numel(r, &next);
            *rc = rs_step(r, r->dry ? NULL : json_pack("{s:s, s:i, s:i, s:o}", "op", "all_to_all",
                                             "split_axis", jd, "concat_axis", i, "mesh_axes",
                                             mesh_mask_json(1u << a, m->shape.rank)), &next);
            return 1;
        }
    }
    return 0;
}

/* Row-major index of the piece shard k holds under s (every dim split
 * into factor(s, d) chunks). */
static int64_t piece_of(const rs_t *r, const shd_t *s, int k)
{
    const gspmd_mesh_t *m = r->L->m;
    shape_t ls;
    int64_t off[TENSOR_MAX_RANK], id = 0;
    gspmd_local_shape(r->gs, s, m, &ls);
    gspmd_shard_offsets(s, m, r->gs, k, off);
    for (int d = 0; d < r->gs->rank; d++)
        id = id * shd_factor(s, d, m) + (ls.dim[d] ? off[d] / ls.dim[d] : 0);
    return id;
}

/* The pairs of a ppermute over the whole slice taking layout cur to `to`
 * (same chunk count per dim): target t gets its piece from the j-th holder
 * of that piece under cur, j being t's ordinal among the piece's holders
 * under `to`, so every shard sends once and receives once (replicas share
 * the sending). New reference, or NULL on OOM. */
static json_t *permute_pairs(const rs_t *r, const shd_t *to)
{
    int n = (int)shape_numel(&r->L->m->shape);
    int64_t npieces = 1;
    for (int d = 0; d < r->gs->rank; d++)
        npieces *= shd_factor(to, d, r->L->m);
    /* holders of each piece under cur, grouped by piece (counting sort) */
    int *start = calloc((size_t)npieces + 1, sizeof *start), *list = malloc(sizeof *list * (size_t)n);
    int *seen = calloc((size_t)npieces, sizeof *seen);
    json_t *pairs = start && list && seen ? json_array() : NULL;
    for (int k = 0; pairs && k < n; k++)
        start[piece_of(r, &r->cur, k) + 1]++;
    for (int64_t p = 0; pairs && p < npieces; p++)
        start[p + 1] += start[p];
    for (int k = 0; pairs && k < n; k++) {
        int64_t p = piece_of(r, &r->cur, k);
        list[start[p] + seen[p]++] = k;
    }
    memset(seen, 0, pairs ? sizeof *seen * (size_t)npieces : 0);
    for (int t = 0; pairs && t < n; t++) {
        int64_t p = piece_of(r, to, t);
        int src = list[start[p] + seen[p]++];
        if (json_array_append_new(pairs, json_pack("[i, i]", src, t)) != 0) {
            json_decref(pairs);
            pairs = NULL;
        }
    }
    free(start);
    free(list);
    free(seen);
    return pairs;
}

/* collective permute: when cur and `to` split every dim into as many
 * chunks but over other mesh axes (an axis moved to another dim, two
 * swapped, a split moved to an unused axis), each shard needs exactly one
 * other shard's piece: one ppermute, moving one piece per shard (a gather
 * and slice would move the whole dim). 1 when it applies. */
static int rs_permute(rs_t *r, const shd_t *to, int *rc)
{
    const gspmd_mesh_t *m = r->L->m;
    if (r->cur.partial || to->partial || shd_eq(&r->cur, to))
        return 0;
    for (int d = 0; d < r->cur.rank; d++)
        if (shd_factor(&r->cur, d, m) != shd_factor(to, d, m))
            return 0;
    r->cost += local_numel(r, to);
    json_t *op = NULL;
    if (!r->dry) {
        json_t *pairs = permute_pairs(r, to);
        op = pairs ? json_pack("{s:s, s:o, s:o}", "op", "ppermute", "pairs", pairs, "mesh_axes",
                               mesh_mask_json((1u << m->shape.rank) - 1, m->shape.rank))
                   : NULL;
    }
    *rc = rs_step(r, op, to);
    return 1;
}

static int rs_gather(rs_t *r, const shd_t *to, int d)
{
    const gspmd_mesh_t *m = r->L->m;
    int p = prefix_len(&r->cur, to, d);
    while (r->cur.n[d] > p) {
        unsigned mask;
        int k = r->cur.n[d] - p;
        if (!ascending(&r->cur.ax[d][p], k, &mask)) {
            k = 1;      /* one axis at a time, minor first */
            mask = 1u << r->cur.ax[d][r->cur.n[d] - 1];
        }
        shd_t next = r->cur;
        next.n[d] = (uint8_t)(next.n[d] - k);
        r->cost += local_numel(r, &next);
        if (rs_step(r, r->dry ? NULL : json_pack("{s:s, s:i, s:o}", "op", "all_gather", "axis", d,
                                        "mesh_axes", mesh_mask_json(mask, m->shape.rank)), &next))
            return -1;
    }
    return 0;
}

static int rs_slice(rs_t *r, const shd_t *to, int d)
{
    int p = r->cur.n[d];
    if (to->n[d] <= p)
        return 0;
    json_t *axes = json_array();
    for (int i = p; axes && i < to->n[d]; i++)
        json_array_append_new(axes, json_integer(to->ax[d][i]));
    shd_t next = r->cur;
    next.n[d] = to->n[d];
    memcpy(next.ax[d], to->ax[d], MESH_MAX_RANK);
    if (r->dry)
        json_decref(axes);
    return rs_step(r, r->dry ? NULL : json_pack("{s:s, s:i, s:o}", "op", "shard_slice", "axis", d,
                                       "mesh_axes", axes), &next);
}

int rs_run(rs_t *r, const shd_t *to)
{
    int rc = 0;
    if (rs_permute(r, to, &rc))
        return rc;
    while (!rc && rs_a2a(r, to, &rc))
        ;
    for (int d = 0; !rc && d < r->cur.rank; d++)
        rc = rs_gather(r, to, d);
    for (int d = 0; !rc && d < r->cur.rank; d++)
        rc = rs_slice(r, to, d);
    return rc;
}

int64_t rs_cost(lw_t *L, const shape_t *gs, const shd_t *from, const shd_t *to)
{
    rs_t r = {.L = L, .gs = gs, .cur = *from, .dry = 1};
    rs_run(&r, to);
    return r.cost;
}

/* Finishes a partial value: reduce_scatter when `want` splits a dim that
 * is unsplit now over exactly the partial axes (sum only), else
 * all_reduce. Updates r. */
int rs_finish_partial(rs_t *r, const shd_t *want, reduce_kind_t kind)
{
    static const char *const kinds[] = {"sum", "max", "min"};
    const gspmd_mesh_t *m = r->L->m;
    unsigned p = r->cur.partial, mask;
    if (!p)
        return 0;
    for (int d = 0; kind == REDUCE_SUM && d < r->cur.rank; d++) {
        shape_t ls;
        gspmd_local_shape(r->gs, &r->cur, m, &ls);
        int k = want->n[d] - r->cur.n[d];
        if (r->cur.n[d] != 0 || k <= 0 || !ascending(want->ax[d], k, &mask) || mask != p ||
            want->n[d] != k || ls.dim[d] % shd_factor(want, d, m) != 0)
            continue;
        shd_t next = r->cur;
        next.partial = 0;
        next.n[d] = want->n[d];
        memcpy(next.ax[d], want->ax[d], MESH_MAX_RANK);
        r->cost += local_numel(r, &next);
        return rs_step(r, json_pack("{s:s, s:i, s:s, s:o}", "op", "reduce_scatter", "axis", d,
                                    "reduce", "sum", "mesh_axes", mesh_mask_json(p, m->shape.rank)),
                       &next);
    }
    shd_t next = r->cur;
    next.partial = 0;
    r->cost += 2 * local_numel(r, &next);
    return rs_step(r, json_pack("{s:s, s:s, s:o}", "op", "all_reduce", "reduce", kinds[kind],
                                "mesh_axes", mesh_mask_json(p, m->shape.rank)), &next);
}

/* Writes to buf the name of value v laid out as `want` (emitting the
 * reshard the first time it is asked for). Returns buf, or NULL. */
const char *rs_operand(lw_t *L, int v, const shd_t *want, char *buf)
{
    const char *have = lw_cache_find(L, v, want);
    if (have) {
        lw_name_copy(buf, have);
        return buf;
    }
    rs_t r = {.L = L, .gs = &L->g->vshapes[v], .cur = L->S[v]};
    lw_name_copy(r.name, L->g->vnames[v]);
    if (rs_run(&r, want) != 0 || lw_cache_put(L, v, want, r.name) != 0) {
        L->oom = 1;
        return NULL;
    }
    lw_name_copy(buf, r.name);
    return buf;
}
