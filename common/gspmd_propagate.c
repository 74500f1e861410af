/* gspmd_propagate.c - stages 1 and 2 (gspmd_propagate.h): annotations,
 * then propagation.
 *
 * Invariants:
 *  - an annotated value, and an input from a mesh of the same shape,
 *    keeps the sharding it has from the start (it is `known`); only the
 *    others are ever set, each once;
 *  - every sharding set is valid for its value's global shape (shd_fix)
 *    and not partial: partial sums exist only inside lowering;
 *  - propagation is deterministic: forward sweeps in program order, then
 *    backward, ties to the first operand, then the first user; it stops
 *    when a round changes nothing (at most 2 * nops + 3 rounds);
 *  - a value nothing constrains is replicated. */
#include "gspmd.h"
#include "gspmd_layout.h"
#include "gspmd_propagate.h"
#include "gspmd_state.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* Stage 1: annotations. */

static int mesh_axis(const gspmd_mesh_t *m, const char *name)
{
    for (int a = 0; name && a < m->shape.rank; a++)
        if (strcmp(m->axes[a], name) == 0)
            return a;
    return -1;
}

static int ann_axis(lw_t *L, int j, const json_t *v, shd_t *s, int d, unsigned *seen)
{
    int a = mesh_axis(L->m, json_string_value(v));
    if (!json_is_string(v))
        return lw_fail(L, j, "sharding", "each sharding entry is null, a mesh axis name or a "
                       "list of them");
    if (a < 0)
        return lw_fail(L, j, "sharding", "unknown mesh axis '%s'", json_string_value(v));
    if (*seen & (1u << a))
        return lw_fail(L, j, "sharding", "mesh axis '%s' is used twice", L->m->axes[a]);
    *seen |= 1u << a;
    shd_push(s, d, a);
    return 0;
}

int ann_parse(lw_t *L, int j, const json_t *sj, shd_t *s)
{
    const shape_t *gs = &L->g->vshapes[j];
    unsigned seen = 0;
    int rc;
    shd_repl(s, gs->rank);
    if (!json_is_array(sj) || json_array_size(sj) != (size_t)gs->rank)
        return lw_fail(L, j, "sharding", "sharding must have one entry per dim of the result "
                       "(rank %d)", gs->rank);
    for (int d = 0; d < gs->rank; d++) {
        const json_t *e = json_array_get(sj, (size_t)d);
        if (json_is_array(e)) {
            if (json_array_size(e) < 1 || json_array_size(e) > MESH_MAX_RANK)
                return lw_fail(L, j, "sharding", "a list of axes has 1 to %d names",
                               MESH_MAX_RANK);
            for (size_t i = 0; i < json_array_size(e); i++)
                if ((rc = ann_axis(L, j, json_array_get(e, i), s, d, &seen)))
                    return rc;
        } else if (!json_is_null(e) && (rc = ann_axis(L, j, e, s, d, &seen))) {
            return rc;
        }
        int64_t f = shd_factor(s, d, L->m);
        if (gs->dim[d] % f != 0)
            return lw_fail(L, j, "sharding", "dim %d (%lld) is not divisible by %lld, the "
                           "size of its mesh axes", d, (long long)gs->dim[d], (long long)f);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Op views shared by propagation and lowering. */

/* matmul as the einsum "ik,kj->ij" (letters i=0, k=1, j=2). */
void ein_of_op(const op_t *op, einsum_t *e)
{
    if (op->code == OP_EINSUM) {
        *e = op->ein;
        return;
    }
    memset(e, 0, sizeof *e);
    e->n[0] = e->n[1] = e->n[2] = 2;
    e->l[0][0] = 0, e->l[0][1] = 1;
    e->l[1][0] = 1, e->l[1][1] = 2;
    e->l[2][0] = 0, e->l[2][1] = 2;
}

static int is_elementwise(opcode_t c)
{
    switch (c) {
    case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_MAX: case OP_MIN:
    case OP_NEG: case OP_RELU: case OP_EXP: case OP_TANH: case OP_SCALE: case OP_RSQRT:
    case OP_LOG:
        return 1;
    default:
        return 0;
    }
}

/* Assigns the letters of one term from a sharding: only split dims, only
 * letters not yet assigned, only axes no letter holds. */
void lett_from(lett_t *t, const uint8_t *letters, int rank, const shd_t *s)
{
    for (int d = 0; d < rank && d < s->rank; d++) {
        int l = letters[d];
        if ((t->set & (1u << l)) || s->n[d] == 0)
            continue;
        t->set |= 1u << l;
        for (int i = 0; i < s->n[d]; i++) {
            int a = s->ax[d][i];
            if (t->taken & (1u << a))
                break;      /* keep a major-to-minor prefix */
            t->ax[l][t->n[l]++] = (uint8_t)a;
            t->taken |= 1u << a;
        }
    }
}

void lett_shd(const lett_t *t, const uint8_t *letters, int rank, shd_t *s)
{
    shd_repl(s, rank);
    for (int d = 0; d < rank; d++) {
        s->n[d] = t->n[letters[d]];
        memcpy(s->ax[d], t->ax[letters[d]], s->n[d]);
    }
}

/* Axes of the letters summed away (in an operand, not in the output). */
unsigned lett_partial(const lett_t *t, const einsum_t *e, int nargs)
{
    uint32_t out = 0;
    unsigned p = 0;
    for (int i = 0; i < e->n[2]; i++)
        out |= 1u << e->l[2][i];
    for (int k = 0; k < nargs; k++)
        for (int i = 0; i < e->n[k]; i++) {
            int l = e->l[k][i];
            for (int q = 0; !(out & (1u << l)) && q < t->n[l]; q++)
                p |= 1u << t->ax[l][q];
        }
    return p;
}

/* ------------------------------------------------------------------ */
/* Stage 2: propagation. */

/* The sharding op j's operands imply for its result; 0 when they say
 * nothing yet. known[v] marks values with a sharding. */
static int prop_fwd(const lw_t *L, const uint8_t *known, int j, shd_t *out)
{
    const op_t *op = &L->g->ops[j];
    const shape_t *gs = &op->shape;
    int a = op->arg[0], b = op->arg[1];
    shd_t t;
    if (is_elementwise(op->code)) {
        int pick = -1;
        if (op->nargs == 2 && L->g->vshapes[a].rank == 0)
            pick = known[b] ? b : -1;
        else if (op->nargs == 2 && L->g->vshapes[b].rank == 0)
            pick = known[a] ? a : -1;
        else
            pick = known[a] ? a : (op->nargs == 2 && known[b] ? b : -1);
        if (pick < 0)
            return 0;
        *out = L->S[pick];
        return 1;
    }
    switch (op->code) {
    case OP_TRANSPOSE:
        if (!known[a])
            return 0;
        shd_swap2(&L->S[a], out);
        return 1;
    case OP_RESHAPE:
        if (!known[a])
            return 0;
        shd_reshape_map(&L->S[a], &L->g->vshapes[a], gs, L->m, out);
        return 1;
    case OP_REDUCE_SUM:
    case OP_REDUCE_MAX:
        if (!known[a])
            return 0;
        if (op->axis < 0)
            shd_repl(out, 0);
        else
            shd_drop_dim(&L->S[a], op->axis, out);
        return 1;
    case OP_SOFTMAX:           /* a split axis stays split (lower_softmax) */
        if (!known[a])
            return 0;
        *out = L->S[a];
        return 1;
    case OP_EINSUM:
    case OP_MATMUL: {
        einsum_t e;
        lett_t lt = {0};
        ein_of_op(op, &e);
        if (!known[a] && !(op->nargs == 2 && known[b]))
            return 0;
        for (int k = 0; k < op->nargs; k++)
            if (known[op->arg[k]])
                lett_from(&lt, e.l[k], e.n[k], &L->S[op->arg[k]]);
        lett_shd(&lt, e.l[2], e.n[2], &t);
        *out = t;
        return 1;
    }
    default:
        return 0;
    }
}

/* The sharding op j's result implies for its operand k; 0 when none. */
static int prop_bwd(const lw_t *L, int j, int k, shd_t *out)
{
    const op_t *op = &L->g->ops[j];
    const shd_t *s = &L->S[j];
    const shape_t *as = &L->g->vshapes[op->arg[k]];
    if (is_elementwise(op->code)) {
        if (as->rank == 0)
            shd_repl(out, 0);
        else
            *out = *s;
        return 1;
    }
    switch (op->code) {
    case OP_TRANSPOSE:
        shd_swap2(s, out);
        return 1;
    case OP_RESHAPE:
        shd_reshape_map(s, &op->shape, as, L->m, out);
        return 1;
    case OP_REDUCE_SUM:
    case OP_REDUCE_MAX:
        if (op->axis < 0)
            return 0;
        shd_insert_dim(s, op->axis, out);
        return 1;
    case OP_SOFTMAX:
        *out = *s;
        return 1;
    case OP_EINSUM:
    case OP_MATMUL: {
        einsum_t e;
        lett_t lt = {0};
        ein_of_op(op, &e);
        lett_from(&lt, e.l[2], e.n[2], s);
        lett_shd(&lt, e.l[k], e.n[k], out);
        return 1;
    }
    default:
        return 0;
    }
}

static int prop_set(lw_t *L, uint8_t *known, int v, shd_t *s)
{
    if (known[v])
        return 0;
    shd_fix(s, &L->g->vshapes[v], L->m);
    s->partial = 0;
    L->S[v] = *s;
    known[v] = 1;
    return 1;
}

/* Sweeps forward then backward until no value changes. `fixed` values
 * (annotated, inputs) are known from the start. Ties go to the first
 * operand, then the first user in program order (deterministic). */
void prop_run(lw_t *L, uint8_t *known)
{
    const comp_t *g = L->g;
    for (int round = 0, changed = 1; changed && round <= 2 * g->nops + 2; round++) {
        changed = 0;
        for (int j = 0; j < g->nops; j++) {
            shd_t s;
            if (!known[j] && prop_fwd(L, known, j, &s))
                changed |= prop_set(L, known, j, &s);
        }
        for (int j = g->nops - 1; j >= 0; j--) {
            for (int k = 0; known[j] && k < g->ops[j].nargs; k++) {
                shd_t s;
                int v = g->ops[j].arg[k];
                if (!known[v] && prop_bwd(L, j, k, &s))
                    changed |= prop_set(L, known, v, &s);
            }
        }
    }
    for (int v = 0; v < g->nvalues; v++)
        if (!known[v])
            shd_repl(&L->S[v], g->vshapes[v].rank);
}
