/* gspmd_lower.c - stage 3, lowering each op of the global program to
 * its per-shard ops, and gspmd_partition() (gspmd.h), which runs the three
 * stages: annotations and propagation (gspmd_propagate.c), then lowering.
 *
 * Invariants while lowering:
 *  - every value of the global program is materialised once in its chosen
 *    sharding S[v] under its own name; other shardings of it (what an op
 *    needs of an operand) are made on demand from that one and cached, so a
 *    value resharded for two users is moved once;
 *  - a partial value (shards hold partial sums) never outlives the op that
 *    made it: the op's lowering finishes it with all_reduce/reduce_scatter;
 *  - lowered ops are JSON objects of Part A (plus shard_slice), compiled by
 *    the same compiler as hand-written ones, so the runtime has one path. */
#include "gspmd.h"
#include "gspmd_layout.h"
#include "gspmd_propagate.h"
#include "gspmd_reshard.h"
#include "gspmd_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Lowering of one op. The op is emitted into a temp laid out as
 * `natural`; finish() then reaches S[j] and names the value. */

static int finish(lw_t *L, int j, const char *tmp, const shd_t *natural, reduce_kind_t kind)
{
    rs_t r = {.L = L, .gs = &L->g->vshapes[j], .cur = *natural};
    lw_name_copy(r.name, tmp);
    if (rs_finish_partial(&r, &L->S[j], kind) || rs_run(&r, &L->S[j]))
        return -1;
    /* The last op emitted computes the value: give it the user's name. */
    json_t *last = json_array_get(L->ops, (size_t)(L->n - 1));
    if (!last || json_object_set_new(last, "out", json_string(L->g->vnames[j])) != 0)
        return -1;
    return lw_cache_put(L, j, &L->S[j], L->g->vnames[j]);
}

/* The op as written, minus what lowering rewrites (out, args, sharding,
 * global shapes). New reference. */
static json_t *op_copy(const lw_t *L, int j)
{
    json_t *op = json_deep_copy(json_array_get(L->gops, (size_t)j));
    if (op) {
        json_object_del(op, "sharding");
        json_object_del(op, "args");
        json_object_del(op, "out");
    }
    return op;
}

/* einsum/matmul: letters from the operands (natural) or from the wanted
 * result first; whichever moves fewer elements. */
static void ein_choose(lw_t *L, int j, const einsum_t *e, lett_t *best)
{
    const op_t *op = &L->g->ops[j];
    lett_t cand[2] = {{0}, {0}};
    int64_t cost[2];
    for (int k = 0; k < op->nargs; k++)
        lett_from(&cand[0], e->l[k], e->n[k], &L->S[op->arg[k]]);
    lett_from(&cand[1], e->l[2], e->n[2], &L->S[j]);
    for (int k = 0; k < op->nargs; k++)
        lett_from(&cand[1], e->l[k], e->n[k], &L->S[op->arg[k]]);
    for (int c = 0; c < 2; c++) {
        shd_t want, out;
        cost[c] = 0;
        for (int k = 0; k < op->nargs; k++) {
            int v = op->arg[k];
            lett_shd(&cand[c], e->l[k], e->n[k], &want);
            cost[c] += rs_cost(L, &L->g->vshapes[v], &L->S[v], &want);
        }
        lett_shd(&cand[c], e->l[2], e->n[2], &out);
        out.partial = lett_partial(&cand[c], e, op->nargs);
        shd_t plain = out;
        plain.partial = 0;
        if (out.partial)
            cost[c] += 2 * shape_numel(&op->shape);
        cost[c] += rs_cost(L, &op->shape, &plain, &L->S[j]);
    }
    *best = cand[cost[1] < cost[0] ? 1 : 0];
}

static int lower_einsum(lw_t *L, int j)
{
    const op_t *op = &L->g->ops[j];
    einsum_t e;
    lett_t lt;
    const char *names[2];
    char tmp[NAME_MAX_LEN], bufs[2][NAME_MAX_LEN];
    ein_of_op(op, &e);
    ein_choose(L, j, &e, &lt);
    for (int k = 0; k < op->nargs; k++) {
        shd_t want;
        lett_shd(&lt, e.l[k], e.n[k], &want);
        if (!(names[k] = rs_operand(L, op->arg[k], &want, bufs[k])))
            return -1;
    }
    shd_t natural;
    lett_shd(&lt, e.l[2], e.n[2], &natural);
    natural.partial = lett_partial(&lt, &e, op->nargs);
    if (lw_emit_local(L, op_copy(L, j), names, op->nargs, &natural, tmp))
        return -1;
    return finish(L, j, tmp, &natural, REDUCE_SUM);
}

static int lower_reduce(lw_t *L, int j)
{
    const op_t *op = &L->g->ops[j];
    const shd_t *src = &L->S[op->arg[0]];
    shd_t want, natural;
    char tmp[NAME_MAX_LEN];
    if (op->axis < 0) {
        want = *src;
        shd_repl(&natural, 0);
        natural.partial = shd_used(src);
    } else {
        unsigned used = shd_used(&L->S[j]);
        shd_insert_dim(&L->S[j], op->axis, &want);
        for (int i = 0; i < src->n[op->axis] && !(used & (1u << src->ax[op->axis][i])); i++)
            shd_push(&want, op->axis, src->ax[op->axis][i]);
        natural = L->S[j];
        for (int i = 0; i < want.n[op->axis]; i++)
            natural.partial |= 1u << want.ax[op->axis][i];
    }
    char buf[NAME_MAX_LEN];
    const char *name = rs_operand(L, op->arg[0], &want, buf);
    if (!name || lw_emit_local(L, op_copy(L, j), &name, 1, &natural, tmp))
        return -1;
    return finish(L, j, tmp, &natural, op->code == OP_REDUCE_MAX ? REDUCE_MAX : REDUCE_SUM);
}

/* Ops whose operands need a layout derived from the result's, with no
 * partial sums: elementwise, transpose, reshape, softmax. */
static int lower_simple(lw_t *L, int j)
{
    const op_t *op = &L->g->ops[j];
    shd_t want[2], natural = L->S[j];
    const char *names[2];
    char tmp[NAME_MAX_LEN], bufs[2][NAME_MAX_LEN];
    json_t *opj = op_copy(L, j);
    for (int k = 0; k < op->nargs; k++) {
        const shape_t *as = &L->g->vshapes[op->arg[k]];
        if (op->code == OP_TRANSPOSE) {
            shd_swap2(&L->S[j], &want[k]);
        } else if (op->code == OP_RESHAPE) {
            shd_reshape_map(&L->S[j], &op->shape, as, L->m, &want[k]);
            shd_reshape_map(&want[k], as, &op->shape, L->m, &natural);
            if (shd_total(&want[k], L->m) != shd_total(&natural, L->m)) {
                shd_repl(&want[k], as->rank);       /* no split survives: gather */
                shd_repl(&natural, op->shape.rank);
            }
        } else if (op->code == OP_SOFTMAX) {
            want[k] = L->S[j];
            want[k].n[op->axis] = 0;
            natural = want[k];
        } else if (as->rank == 0) {
            shd_repl(&want[k], 0);
        } else {
            want[k] = L->S[j];
        }
        if (!(names[k] = rs_operand(L, op->arg[k], &want[k], bufs[k]))) {
            json_decref(opj);
            return -1;
        }
    }
    if (op->code == OP_RESHAPE) {
        shape_t ls;
        gspmd_local_shape(&op->shape, &natural, L->m, &ls);
        json_t *sh = json_array();
        for (int d = 0; sh && d < ls.rank; d++)
            json_array_append_new(sh, json_integer(ls.dim[d]));
        json_object_set_new(opj, "shape", sh);
    }
    if (lw_emit_local(L, opj, names, op->nargs, &natural, tmp))
        return -1;
    return finish(L, j, tmp, &natural, REDUCE_SUM);
}

/* Ops with no operands. fill makes its local piece; iota numbers the
 * global tensor, so it is made whole and sliced (slicing is local). */
static int lower_source(lw_t *L, int j)
{
    const op_t *op = &L->g->ops[j];
    json_t *opj = op_copy(L, j);
    shd_t natural;
    char tmp[NAME_MAX_LEN];
    shd_repl(&natural, op->shape.rank);
    if (op->code == OP_FILL) {
        shape_t ls;
        natural = L->S[j];
        gspmd_local_shape(&op->shape, &natural, L->m, &ls);
        json_t *sh = json_array();
        for (int d = 0; sh && d < ls.rank; d++)
            json_array_append_new(sh, json_integer(ls.dim[d]));
        json_object_set_new(opj, "shape", sh);
    } else if (op->code == OP_INPUT) {
        natural = L->S[j];
        if (lw_input_cross(L, op->input)) {
            gspmd_edge_t edge = L->in_edge[op->input];
            edge.to_mesh = L->m->shape;
            edge.to = L->S[j];
            json_object_set_new(opj, "reshard", gspmd_edge_json(&edge));
        }
    }
    if (lw_emit_local(L, opj, NULL, 0, &natural, tmp))
        return -1;
    return finish(L, j, tmp, &natural, REDUCE_SUM);
}

/* Broadcasts `red` (x's shape without dim d, laid out as rs) back to x's
 * local shape along d (nd local elements) through an outer product with
 * ones: einsum "ac,b->abc". A scalar needs none (it broadcasts). */
static int softmax_bcast(lw_t *L, const char *red, int rank, int d, int64_t nd,
                         const shd_t *full, char *out)
{
    if (rank == 1) {
        lw_name_copy(out, red);
        return 0;
    }
    char ones[NAME_MAX_LEN], spec[2 * TENSOR_MAX_RANK + 8];
    shd_t os = {.rank = 1};
    os.n[0] = full->n[d];
    memcpy(os.ax[0], full->ax[d], MESH_MAX_RANK);
    if (lw_emit_local(L, json_pack("{s:s, s:[I], s:f}", "op", "fill", "shape", (json_int_t)nd,
                                   "value", 1.0), NULL, 0, &os, ones))
        return -1;
    int w = 0;
    for (int i = 0; i < rank; i++)
        if (i != d)
            spec[w++] = (char)('a' + i);
    w += snprintf(spec + w, sizeof spec - (size_t)w, ",%c->", 'a' + d);
    for (int i = 0; i < rank; i++)
        spec[w++] = (char)('a' + i);
    spec[w] = '\0';
    const char *args[2] = {red, ones};
    return lw_emit_local(L, json_pack("{s:s, s:s}", "op", "einsum", "spec", spec), args, 2, full,
                         out);
}

/* One reduction of x along d to all of it: the local reduce_max/sum, then
 * an all_reduce over the axes that split d; the result in out. */
static int softmax_reduce(lw_t *L, const char *x, const shd_t *full, int d, const char *op,
                          const char *how, shd_t *rs, char *out)
{
    char part[NAME_MAX_LEN];
    unsigned mask = 0;
    for (int i = 0; i < full->n[d]; i++)
        mask |= 1u << full->ax[d][i];
    shd_drop_dim(full, d, rs);
    rs->partial = mask;
    if (lw_emit_local(L, json_pack("{s:s, s:i}", "op", op, "axis", d), &x, 1, rs, part))
        return -1;
    rs->partial = 0;
    return lw_emit_coll(L, json_pack("{s:s, s:s, s:o}", "op", "all_reduce", "reduce", how,
                                     "mesh_axes", mesh_mask_json(mask, L->m->shape.rank)),
                        part, rs, out);
}

/* softmax along a split axis d (GSPMD's partial reduction): each shard
 * takes the max of its part, an all_reduce(max) makes it global, the same
 * for the sum of exp(x - max); then exp(x - max) / sum locally. Two
 * all_reduces of x's size / its dim d, instead of gathering d. */
static int lower_softmax(lw_t *L, int j)
{
    const op_t *op = &L->g->ops[j];
    const shd_t *want = &L->S[j];
    int d = op->axis, rank = op->shape.rank;
    if (want->n[d] == 0)
        return lower_simple(L, j);
    shape_t ls;
    gspmd_local_shape(&op->shape, want, L->m, &ls);
    char xb[NAME_MAX_LEN], m[NAME_MAX_LEN], mb[NAME_MAX_LEN], sh[NAME_MAX_LEN];
    char ex[NAME_MAX_LEN], sm[NAME_MAX_LEN], sb[NAME_MAX_LEN], y[NAME_MAX_LEN];
    shd_t rs;
    const char *x = rs_operand(L, op->arg[0], want, xb);
    if (!x || softmax_reduce(L, x, want, d, "reduce_max", "max", &rs, m) ||
        softmax_bcast(L, m, rank, d, ls.dim[d], want, mb) ||
        lw_emit_local(L, json_pack("{s:s}", "op", "sub"), (const char *[]){x, mb}, 2, want, sh) ||
        lw_emit_local(L, json_pack("{s:s}", "op", "exp"), (const char *[]){sh}, 1, want, ex) ||
        softmax_reduce(L, ex, want, d, "reduce_sum", "sum", &rs, sm) ||
        softmax_bcast(L, sm, rank, d, ls.dim[d], want, sb) ||
        lw_emit_local(L, json_pack("{s:s}", "op", "div"), (const char *[]){ex, sb}, 2, want, y))
        return -1;
    return finish(L, j, y, want, REDUCE_SUM);
}

static int lower_op(lw_t *L, int j)
{
    switch (L->g->ops[j].code) {
    case OP_FILL: case OP_IOTA: case OP_INPUT: case OP_COMPUTE:
        return lower_source(L, j);
    case OP_EINSUM: case OP_MATMUL:
        return lower_einsum(L, j);
    case OP_REDUCE_SUM: case OP_REDUCE_MAX:
        return lower_reduce(L, j);
    case OP_SOFTMAX:
        return lower_softmax(L, j);
    default:
        return lower_simple(L, j);
    }
}

/* ------------------------------------------------------------------ */
/* Entry point. */

/* A temp prefix no user value name starts with: one more leading '_'
 * than any user name has, then 'p'. */
static int temp_prefix(lw_t *L)
{
    int most = 0;
    for (int v = 0; v < L->g->nvalues; v++) {
        int k = 0;
        while (L->g->vnames[v][k] == '_')
            k++;
        if (k > most)
            most = k;
    }
    if ((size_t)most + 3 > sizeof L->tmp)
        return err_set(L->e, 400, L->prefix, "computation '%s': value names with %d leading "
                       "underscores leave the partitioner no names", L->g->name, most);
    memset(L->tmp, '_', (size_t)most + 1);
    L->tmp[most + 1] = 'p';
    L->tmp[most + 2] = '\0';
    return 0;
}

static int gspmd_run(lw_t *L)
{
    const comp_t *g = L->g;
    uint8_t *known = calloc((size_t)g->nvalues, 1);
    int rc = 0;
    if (!known || !L->S)
        return err_set(L->e, 500, "", "out of memory");
    for (int j = 0; j < g->nops && !rc; j++) {
        const json_t *sj = json_object_get(json_array_get(L->gops, (size_t)j), "sharding");
        const op_t *op = &g->ops[j];
        if (sj && op->code == OP_INPUT)
            rc = lw_fail(L, j, "sharding", "an input has its producer's sharding");
        else if (sj)
            rc = ann_parse(L, j, sj, &L->S[j]);
        else if (op->code == OP_INPUT)
            L->S[j] = L->in_edge[op->input].from;
        else if (op->code == OP_COMPUTE)
            shd_repl(&L->S[j], 0);
        known[j] = sj || op->code == OP_COMPUTE ||
                   (op->code == OP_INPUT && !lw_input_cross(L, op->input));
    }
    if (!rc && !(rc = temp_prefix(L))) {
        prop_run(L, known);
        for (int j = 0; j < g->nops && !rc; j++)
            if (lower_op(L, j) != 0 || L->oom)
                rc = err_set(L->e, 500, "", "out of memory while partitioning");
    }
    free(known);
    return rc;
}

static json_t *lowered_comp(const lw_t *L, const json_t *comp_json)
{
    json_t *c = json_pack("{s:O, s:O, s:O}", "name", json_object_get(comp_json, "name"),
                          "slice", json_object_get(comp_json, "slice"), "ops", L->ops);
    const json_t *outs = json_object_get(comp_json, "outputs");
    if (c && outs && json_object_set(c, "outputs", (json_t *)outs) != 0) {
        json_decref(c);
        return NULL;
    }
    return c;
}

int gspmd_partition(comp_t *global, const json_t *comp_json, const gspmd_mesh_t *mesh,
                    const gspmd_edge_t *in_edge, const char *prefix, gspmd_t **out, err_t *e)
{
    gspmd_t *g = calloc(1, sizeof *g);
    lw_t L = {.g = global, .gops = json_object_get(comp_json, "ops"), .m = mesh,
              .in_edge = in_edge, .prefix = prefix, .e = e};
    int rc;
    if (!g) {
        comp_free(global);
        return err_set(e, 500, "", "out of memory");
    }
    g->global = global;
    L.S = calloc((size_t)global->nvalues, sizeof *L.S);
    L.ops = json_array();
    rc = L.ops ? gspmd_run(&L) : err_set(e, 500, "", "out of memory");
    if (!rc && !(g->lowered = lowered_comp(&L, comp_json)))
        rc = err_set(e, 500, "", "out of memory");
    g->vshd = L.S;
    g->lshd = L.lshd;
    g->inserted = L.ins;
    g->nlowered = L.n;
    g->ncoll = L.ncoll;
    json_decref(L.ops);
    free(L.cache);
    if (rc) {
        gspmd_free(g);
        return rc;
    }
    *out = g;
    return 0;
}
