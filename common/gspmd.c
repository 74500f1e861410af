/* gspmd.c - sharding annotations, propagation and lowering (see gspmd.h).
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

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LETTERS 26

/* ------------------------------------------------------------------ */
/* Shardings. */

static int64_t axis_size(const gspmd_mesh_t *m, int a)
{
    return m->shape.dim[a];
}

static int64_t shd_factor(const shd_t *s, int d, const gspmd_mesh_t *m)
{
    int64_t f = 1;
    for (int i = 0; i < s->n[d]; i++)
        f *= axis_size(m, s->ax[d][i]);
    return f;
}

/* Number of distinct pieces: the product of every split's factor. */
static int64_t shd_total(const shd_t *s, const gspmd_mesh_t *m)
{
    int64_t f = 1;
    for (int d = 0; d < s->rank; d++)
        f *= shd_factor(s, d, m);
    return f;
}

static unsigned shd_used(const shd_t *s)
{
    unsigned u = 0;
    for (int d = 0; d < s->rank; d++)
        for (int i = 0; i < s->n[d]; i++)
            u |= 1u << s->ax[d][i];
    return u;
}

static void shd_repl(shd_t *s, int rank)
{
    memset(s, 0, sizeof *s);
    s->rank = rank;
}

static int shd_eq(const shd_t *a, const shd_t *b)
{
    if (a->rank != b->rank || a->partial != b->partial)
        return 0;
    for (int d = 0; d < a->rank; d++) {
        if (a->n[d] != b->n[d] || memcmp(a->ax[d], b->ax[d], a->n[d]) != 0)
            return 0;
    }
    return 1;
}

static void shd_push(shd_t *s, int d, int a)
{
    s->ax[d][s->n[d]++] = (uint8_t)a;
}

/* Makes s valid for global shape gs: an axis used twice keeps its first
 * use, and a dim drops its minor axes until their product divides it. */
static void shd_fix(shd_t *s, const shape_t *gs, const gspmd_mesh_t *m)
{
    unsigned seen = 0;
    for (int d = 0; d < s->rank; d++) {
        int w = 0;
        for (int i = 0; i < s->n[d]; i++) {
            int a = s->ax[d][i];
            if (a < m->shape.rank && !(seen & (1u << a)))
                s->ax[d][w++] = (uint8_t)a;
        }
        s->n[d] = (uint8_t)w;
        while (s->n[d] > 0 && gs->dim[d] % shd_factor(s, d, m) != 0)
            s->n[d]--;
        for (int i = 0; i < s->n[d]; i++)
            seen |= 1u << s->ax[d][i];
    }
}

void gspmd_local_shape(const shape_t *gs, const shd_t *s, const gspmd_mesh_t *mesh,
                       shape_t *out)
{
    *out = *gs;
    for (int d = 0; d < gs->rank && d < s->rank; d++)
        out->dim[d] = gs->dim[d] / shd_factor(s, d, mesh);
}

/* Coordinate of `shard` (row-major in the mesh) along mesh axis a. */
static int64_t mesh_coord(const gspmd_mesh_t *m, int shard, int a)
{
    int64_t stride = 1;
    for (int i = m->shape.rank - 1; i > a; i--)
        stride *= m->shape.dim[i];
    return (shard / stride) % m->shape.dim[a];
}

void gspmd_shard_offsets(const shd_t *s, const gspmd_mesh_t *mesh, const shape_t *gs,
                         int shard, int64_t off[TENSOR_MAX_RANK])
{
    for (int d = 0; d < TENSOR_MAX_RANK; d++) {
        off[d] = 0;
        if (d >= gs->rank || d >= s->rank)
            continue;
        int64_t chunk = 0;
        for (int i = 0; i < s->n[d]; i++)
            chunk = chunk * axis_size(mesh, s->ax[d][i]) + mesh_coord(mesh, shard, s->ax[d][i]);
        off[d] = chunk * (gs->dim[d] / shd_factor(s, d, mesh));
    }
}

int gspmd_mesh_origin(const gspmd_mesh_t *mesh, int shard, unsigned axes)
{
    for (int a = 0; a < mesh->shape.rank; a++)
        if ((axes & (1u << a)) && mesh_coord(mesh, shard, a) != 0)
            return 0;
    return 1;
}

int gspmd_shard_primary(const shd_t *s, const gspmd_mesh_t *mesh, int shard)
{
    return gspmd_mesh_origin(mesh, shard, ~shd_used(s));
}

json_t *gspmd_full_values_json(const gspmd_t *g, const comp_t *c, const gspmd_mesh_t *mesh)
{
    json_t *o = json_object();
    for (int k = 0; o && k < c->noutputs; k++) {
        const char *name = c->vnames[c->outputs[k]];
        int gv = comp_value_find(g->global, name);
        if (gv < 0)
            continue;
        const shape_t *gs = &g->global->vshapes[gv];
        shape_t ls;
        gspmd_local_shape(gs, &g->vshd[gv], mesh, &ls);
        if (shape_numel(gs) > GSPMD_GLOBAL_VALUES_MAX || shape_numel(&ls) <= GSPMD_SHARD_VALUES_MAX)
            continue;
        unsigned used = shd_used(&g->vshd[gv]);
        json_t *axes = json_array();
        for (int a = 0; axes && a < mesh->shape.rank; a++)
            if (!(used & (1u << a)))
                json_array_append_new(axes, json_integer(a));
        if (!axes || json_object_set_new(o, name, axes) != 0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* Copies a value name (always < NAME_MAX_LEN, NUL-terminated). */
static void name_copy(char *dst, const char *src)
{
    size_t n = strnlen(src, NAME_MAX_LEN - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static json_t *axes_json(unsigned mask, const gspmd_mesh_t *m)
{
    json_t *l = json_array();
    for (int a = 0; l && a < m->shape.rank; a++)
        if (mask & (1u << a))
            json_array_append_new(l, json_string(m->axes[a]));
    return l;
}

json_t *gspmd_shd_json(const shd_t *s, const gspmd_mesh_t *mesh)
{
    json_t *dims = json_array();
    for (int d = 0; dims && d < s->rank; d++) {
        json_t *e;
        if (s->n[d] == 0) {
            e = json_null();
        } else if (s->n[d] == 1) {
            e = json_string(mesh->axes[s->ax[d][0]]);
        } else {
            e = json_array();
            for (int i = 0; e && i < s->n[d]; i++)
                json_array_append_new(e, json_string(mesh->axes[s->ax[d][i]]));
        }
        json_array_append_new(dims, e);
    }
    if (!dims || !s->partial)
        return dims;
    return json_pack("{s:o, s:o}", "dims", dims, "partial", axes_json(s->partial, mesh));
}

/* ------------------------------------------------------------------ */
/* Lowering state. */

typedef struct cache_ent {
    int v;
    shd_t s;
    char name[NAME_MAX_LEN];
} cache_ent_t;

typedef struct lw {
    const comp_t *g;
    const json_t *gops;         /* the document's ops (for "spec", "from") */
    const gspmd_mesh_t *m;
    const gspmd_edge_t *in_edge;/* per input of g */
    const char *prefix;
    err_t *e;
    shd_t *S;                   /* per global value */
    json_t *ops;                /* lowered ops */
    shd_t *lshd;
    uint8_t *ins;
    int n, cap;
    int ncoll;
    char tmp[NAME_MAX_LEN - 12];/* temp-name prefix no user name starts with; leaves
                                   room for any int after it */
    int ntmp;
    cache_ent_t *cache;
    int ncache, capcache;
    int oom;
} lw_t;

/* Does input k come from a mesh of another shape (a cross-mesh edge)? */
static int input_cross(const lw_t *L, int k)
{
    return !shape_equal(&L->in_edge[k].from_mesh, &L->m->shape);
}

static int lw_fail(lw_t *L, int j, const char *sub, const char *f, ...)
    __attribute__((format(printf, 4, 5)));
static int lw_fail(lw_t *L, int j, const char *sub, const char *f, ...)
{
    char field[ERR_FIELD_MAX], msg[ERR_DETAIL_MAX];
    snprintf(field, sizeof field, "%s%sops[%d]%s%s", L->prefix, L->prefix[0] ? "." : "", j,
             sub[0] ? "." : "", sub);
    va_list ap;
    va_start(ap, f);
    vsnprintf(msg, sizeof msg, f, ap);
    va_end(ap);
    return err_set(L->e, 400, field, "computation '%s' op %d (%s): %s", L->g->name, j,
                   opcode_name(L->g->ops[j].code), msg);
}

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

static int ann_parse(lw_t *L, int j, const json_t *sj, shd_t *s)
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
static void op_ein(const op_t *op, einsum_t *e)
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

/* Letter -> mesh axes for an einsum. `set` marks letters assigned. */
typedef struct lett {
    uint32_t set;
    unsigned taken;
    uint8_t n[LETTERS];
    uint8_t ax[LETTERS][MESH_MAX_RANK];
} lett_t;

/* Assigns the letters of one term from a sharding: only split dims, only
 * letters not yet assigned, only axes no letter holds. */
static void lett_from(lett_t *t, const uint8_t *letters, int rank, const shd_t *s)
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

static void lett_shd(const lett_t *t, const uint8_t *letters, int rank, shd_t *s)
{
    shd_repl(s, rank);
    for (int d = 0; d < rank; d++) {
        s->n[d] = t->n[letters[d]];
        memcpy(s->ax[d], t->ax[letters[d]], s->n[d]);
    }
}

/* Axes of the letters summed away (in an operand, not in the output). */
static unsigned lett_partial(const lett_t *t, const einsum_t *e, int nargs)
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

/* Reshape keeps a split of input dim d on output dim e when as many
 * elements precede both (the chunks are then the same runs of the flat
 * buffer) and the split divides e. Maps `in` (on shape gi) to `out` (on
 * go); dims that cannot be kept are left unsplit. */
static void reshape_map(const shd_t *in, const shape_t *gi, const shape_t *go,
                        const gspmd_mesh_t *m, shd_t *out)
{
    shd_repl(out, go->rank);
    int64_t pin = 1;
    for (int d = 0; d < gi->rank; pin *= gi->dim[d], d++) {
        if (in->n[d] == 0)
            continue;
        int64_t f = shd_factor(in, d, m), pout = 1;
        for (int e = 0; e < go->rank; pout *= go->dim[e], e++) {
            if (pout == pin && go->dim[e] > 1 && go->dim[e] % f == 0 && out->n[e] == 0) {
                out->n[e] = in->n[d];
                memcpy(out->ax[e], in->ax[d], in->n[d]);
                break;
            }
        }
    }
}

static void shd_swap2(const shd_t *in, shd_t *out)
{
    *out = *in;
    out->n[0] = in->n[1], out->n[1] = in->n[0];
    memcpy(out->ax[0], in->ax[1], MESH_MAX_RANK);
    memcpy(out->ax[1], in->ax[0], MESH_MAX_RANK);
}

static void shd_drop_dim(const shd_t *in, int d, shd_t *out)
{
    shd_repl(out, in->rank - 1);
    for (int i = 0, o = 0; i < in->rank; i++) {
        if (i == d)
            continue;
        out->n[o] = in->n[i];
        memcpy(out->ax[o], in->ax[i], MESH_MAX_RANK);
        o++;
    }
}

/* in with an unsplit dim inserted at d. */
static void shd_insert_dim(const shd_t *in, int d, shd_t *out)
{
    shd_repl(out, in->rank + 1);
    for (int o = 0, i = 0; o < out->rank; o++) {
        if (o == d)
            continue;
        out->n[o] = in->n[i];
        memcpy(out->ax[o], in->ax[i], MESH_MAX_RANK);
        i++;
    }
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
        reshape_map(&L->S[a], &L->g->vshapes[a], gs, L->m, out);
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
        op_ein(op, &e);
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
        reshape_map(s, &op->shape, as, L->m, out);
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
        op_ein(op, &e);
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
static void propagate(lw_t *L, uint8_t *known)
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

/* ------------------------------------------------------------------ */
/* Stage 3: lowering. Emission of lowered ops. */

static void temp_name(lw_t *L, char *buf)
{
    snprintf(buf, NAME_MAX_LEN, "%s%d", L->tmp, L->ntmp++);
}

/* Appends op (stolen) with its value's sharding; out name set from
 * `name`. Returns the op (borrowed) or NULL (L->oom set). */
static json_t *emit(lw_t *L, json_t *op, const char *name, const shd_t *s, int inserted)
{
    if (!op || L->oom) {
        json_decref(op);
        L->oom = 1;
        return NULL;
    }
    if (L->n == L->cap) {
        int cap = L->cap ? 2 * L->cap : 64;
        shd_t *ls = realloc(L->lshd, sizeof *ls * (size_t)cap);
        if (ls)
            L->lshd = ls;
        uint8_t *in = realloc(L->ins, (size_t)cap);
        if (in)
            L->ins = in;
        if (!ls || !in) {
            json_decref(op);
            L->oom = 1;
            return NULL;
        }
        L->cap = cap;
    }
    if (json_object_set_new(op, "out", json_string(name)) != 0 ||
        json_array_append_new(L->ops, op) != 0) {
        L->oom = 1;
        return NULL;
    }
    L->lshd[L->n] = *s;
    L->ins[L->n] = (uint8_t)inserted;
    L->n++;
    if (inserted && opcode_is_collective(opcode_from_name(
                        json_string_value(json_object_get(op, "op")))))
        L->ncoll++;
    return op;
}

static json_t *mask_json(unsigned mask, int rank)
{
    json_t *l = json_array();
    for (int a = 0; l && a < rank; a++)
        if (mask & (1u << a))
            json_array_append_new(l, json_integer(a));
    return l;
}

/* One inserted op on `src` (name) into a fresh temp; returns 0 or -1 and
 * writes the temp's name to dst. */
static int emit_coll(lw_t *L, json_t *op, const char *src, const shd_t *s, char *dst)
{
    temp_name(L, dst);
    if (op && json_object_set_new(op, "args", json_pack("[s]", src)) != 0) {
        json_decref(op);
        op = NULL;
    }
    return emit(L, op, dst, s, 1) ? 0 : -1;
}

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

/* Reshard planner and emitter in one: moves `name` (global shape gs,
 * laid out as *cur, not partial) to layout *to, updating cur and name.
 * With `dry`, counts the elements moved instead of emitting. */
typedef struct rs {
    lw_t *L;
    const shape_t *gs;
    shd_t cur;
    char name[NAME_MAX_LEN];
    int dry;
    int64_t cost;
} rs_t;

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
    if (emit_coll(r->L, op, r->name, next, dst) != 0)
        return -1;
    name_copy(r->name, dst);
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
            if (ls.dim[jd] % axis_size(m, a) != 0)
                continue;
            shd_t next = r->cur;
            next.n[i]--;
            shd_push(&next, jd, a);
            r->cost += local_numel(r, &next);
            *rc = rs_step(r, r->dry ? NULL : json_pack("{s:s, s:i, s:i, s:o}", "op", "all_to_all",
                                             "split_axis", jd, "concat_axis", i, "mesh_axes",
                                             mask_json(1u << a, m->shape.rank)), &next);
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
                               mask_json((1u << m->shape.rank) - 1, m->shape.rank))
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
                                        "mesh_axes", mask_json(mask, m->shape.rank)), &next))
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

static int rs_run(rs_t *r, const shd_t *to)
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

static int64_t reshard_cost(lw_t *L, const shape_t *gs, const shd_t *from, const shd_t *to)
{
    rs_t r = {.L = L, .gs = gs, .cur = *from, .dry = 1};
    rs_run(&r, to);
    return r.cost;
}

/* Finishes a partial value: reduce_scatter when `want` splits a dim that
 * is unsplit now over exactly the partial axes (sum only), else
 * all_reduce. Updates r. */
static int finish_partial(rs_t *r, const shd_t *want, reduce_kind_t kind)
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
                                    "reduce", "sum", "mesh_axes", mask_json(p, m->shape.rank)),
                       &next);
    }
    shd_t next = r->cur;
    next.partial = 0;
    r->cost += 2 * local_numel(r, &next);
    return rs_step(r, json_pack("{s:s, s:s, s:o}", "op", "all_reduce", "reduce", kinds[kind],
                                "mesh_axes", mask_json(p, m->shape.rank)), &next);
}

/* ------------------------------------------------------------------ */
/* Operands in the layout an op needs. */

static const char *cache_find(const lw_t *L, int v, const shd_t *s)
{
    for (int i = L->ncache - 1; i >= 0; i--)
        if (L->cache[i].v == v && shd_eq(&L->cache[i].s, s))
            return L->cache[i].name;
    return NULL;
}

static int cache_put(lw_t *L, int v, const shd_t *s, const char *name)
{
    if (L->ncache == L->capcache) {
        int cap = L->capcache ? 2 * L->capcache : 64;
        cache_ent_t *c = realloc(L->cache, sizeof *c * (size_t)cap);
        if (!c)
            return -1;
        L->cache = c;
        L->capcache = cap;
    }
    cache_ent_t *c = &L->cache[L->ncache++];
    c->v = v;
    c->s = *s;
    name_copy(c->name, name);
    return 0;
}

/* Writes to buf the name of value v laid out as `want` (emitting the
 * reshard the first time it is asked for). Returns buf, or NULL. */
static const char *operand(lw_t *L, int v, const shd_t *want, char *buf)
{
    const char *have = cache_find(L, v, want);
    if (have) {
        name_copy(buf, have);
        return buf;
    }
    rs_t r = {.L = L, .gs = &L->g->vshapes[v], .cur = L->S[v]};
    name_copy(r.name, L->g->vnames[v]);
    if (rs_run(&r, want) != 0 || cache_put(L, v, want, r.name) != 0) {
        L->oom = 1;
        return NULL;
    }
    name_copy(buf, r.name);
    return buf;
}

/* ------------------------------------------------------------------ */
/* Lowering of one op. The op is emitted into a temp laid out as
 * `natural`; finish() then reaches S[j] and names the value. */

static int finish(lw_t *L, int j, const char *tmp, const shd_t *natural, reduce_kind_t kind)
{
    rs_t r = {.L = L, .gs = &L->g->vshapes[j], .cur = *natural};
    name_copy(r.name, tmp);
    if (finish_partial(&r, &L->S[j], kind) || rs_run(&r, &L->S[j]))
        return -1;
    /* The last op emitted computes the value: give it the user's name. */
    json_t *last = json_array_get(L->ops, (size_t)(L->n - 1));
    if (!last || json_object_set_new(last, "out", json_string(L->g->vnames[j])) != 0)
        return -1;
    return cache_put(L, j, &L->S[j], L->g->vnames[j]);
}

/* Emits the local op `op` (stolen; gets "args" from names) as a temp. */
static int emit_local(lw_t *L, json_t *op, const char *const *names, int nargs,
                      const shd_t *natural, char *tmp)
{
    json_t *args = json_array();
    for (int k = 0; args && k < nargs; k++)
        json_array_append_new(args, json_string(names[k]));
    if (!op || !args || (nargs && json_object_set_new(op, "args", args) != 0)) {
        json_decref(op);
        if (!nargs)
            json_decref(args);
        return -1;
    }
    if (!nargs)
        json_decref(args);
    temp_name(L, tmp);
    return emit(L, op, tmp, natural, 0) ? 0 : -1;
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
            cost[c] += reshard_cost(L, &L->g->vshapes[v], &L->S[v], &want);
        }
        lett_shd(&cand[c], e->l[2], e->n[2], &out);
        out.partial = lett_partial(&cand[c], e, op->nargs);
        shd_t plain = out;
        plain.partial = 0;
        if (out.partial)
            cost[c] += 2 * shape_numel(&op->shape);
        cost[c] += reshard_cost(L, &op->shape, &plain, &L->S[j]);
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
    op_ein(op, &e);
    ein_choose(L, j, &e, &lt);
    for (int k = 0; k < op->nargs; k++) {
        shd_t want;
        lett_shd(&lt, e.l[k], e.n[k], &want);
        if (!(names[k] = operand(L, op->arg[k], &want, bufs[k])))
            return -1;
    }
    shd_t natural;
    lett_shd(&lt, e.l[2], e.n[2], &natural);
    natural.partial = lett_partial(&lt, &e, op->nargs);
    if (emit_local(L, op_copy(L, j), names, op->nargs, &natural, tmp))
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
    const char *name = operand(L, op->arg[0], &want, buf);
    if (!name || emit_local(L, op_copy(L, j), &name, 1, &natural, tmp))
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
            reshape_map(&L->S[j], &op->shape, as, L->m, &want[k]);
            reshape_map(&want[k], as, &op->shape, L->m, &natural);
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
        if (!(names[k] = operand(L, op->arg[k], &want[k], bufs[k]))) {
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
    if (emit_local(L, opj, names, op->nargs, &natural, tmp))
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
        if (input_cross(L, op->input)) {
            gspmd_edge_t edge = L->in_edge[op->input];
            edge.to_mesh = L->m->shape;
            edge.to = L->S[j];
            json_object_set_new(opj, "reshard", gspmd_edge_json(&edge));
        }
    }
    if (emit_local(L, opj, NULL, 0, &natural, tmp))
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
        name_copy(out, red);
        return 0;
    }
    char ones[NAME_MAX_LEN], spec[2 * TENSOR_MAX_RANK + 8];
    shd_t os = {.rank = 1};
    os.n[0] = full->n[d];
    memcpy(os.ax[0], full->ax[d], MESH_MAX_RANK);
    if (emit_local(L, json_pack("{s:s, s:[I], s:f}", "op", "fill", "shape", (json_int_t)nd, "value",
                           1.0), NULL, 0, &os, ones))
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
    return emit_local(L, json_pack("{s:s, s:s}", "op", "einsum", "spec", spec), args, 2, full, out);
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
    if (emit_local(L, json_pack("{s:s, s:i}", "op", op, "axis", d), &x, 1, rs, part))
        return -1;
    rs->partial = 0;
    return emit_coll(L, json_pack("{s:s, s:s, s:o}", "op", "all_reduce", "reduce", how,
                                  "mesh_axes", mask_json(mask, L->m->shape.rank)),
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
    const char *x = operand(L, op->arg[0], want, xb);
    if (!x || softmax_reduce(L, x, want, d, "reduce_max", "max", &rs, m) ||
        softmax_bcast(L, m, rank, d, ls.dim[d], want, mb) ||
        emit_local(L, json_pack("{s:s}", "op", "sub"), (const char *[]){x, mb}, 2, want, sh) ||
        emit_local(L, json_pack("{s:s}", "op", "exp"), (const char *[]){sh}, 1, want, ex) ||
        softmax_reduce(L, ex, want, d, "reduce_sum", "sum", &rs, sm) ||
        softmax_bcast(L, sm, rank, d, ls.dim[d], want, sb) ||
        emit_local(L, json_pack("{s:s}", "op", "div"), (const char *[]){ex, sb}, 2, want, y))
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
                   (op->code == OP_INPUT && !input_cross(L, op->input));
    }
    if (!rc && !(rc = temp_prefix(L))) {
        propagate(L, known);
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

void gspmd_free(gspmd_t *g)
{
    if (!g)
        return;
    comp_free(g->global);
    free(g->vshd);
    json_decref(g->lowered);
    free(g->lshd);
    free(g->inserted);
    free(g);
}

/* ------------------------------------------------------------------ */
/* Cross-mesh edges. */

static json_t *shd_ints_json(const shd_t *s)
{
    json_t *dims = json_array();
    for (int d = 0; dims && d < s->rank; d++) {
        json_t *l = json_array();
        for (int i = 0; l && i < s->n[d]; i++)
            json_array_append_new(l, json_integer(s->ax[d][i]));
        json_array_append_new(dims, l);
    }
    return dims;
}

static json_t *dims_json(const shape_t *s)
{
    json_t *a = json_array();
    for (int d = 0; a && d < s->rank; d++)
        json_array_append_new(a, json_integer(s->dim[d]));
    return a;
}

json_t *gspmd_edge_json(const gspmd_edge_t *e)
{
    return json_pack("{s:o, s:o, s:o, s:o, s:o}", "global", dims_json(&e->global), "from_mesh",
                     dims_json(&e->from_mesh), "from", shd_ints_json(&e->from), "to_mesh",
                     dims_json(&e->to_mesh), "to", shd_ints_json(&e->to));
}

static int dims_parse(const json_t *a, int min_rank, int max_rank, int64_t max_dim, shape_t *s)
{
    memset(s, 0, sizeof *s);
    if (!json_is_array(a) || json_array_size(a) < (size_t)min_rank ||
        json_array_size(a) > (size_t)max_rank)
        return -1;
    s->rank = (int)json_array_size(a);
    for (int d = 0; d < s->rank; d++) {
        const json_t *v = json_array_get(a, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > max_dim)
            return -1;
        s->dim[d] = json_integer_value(v);
    }
    return 0;
}

/* A sharding of `gs` on `mesh`, axes as integers; -1 unless valid. */
static int shd_parse(const json_t *a, const shape_t *gs, const shape_t *mesh, shd_t *s)
{
    gspmd_mesh_t m = {.shape = *mesh};
    unsigned seen = 0;
    shd_repl(s, gs->rank);
    if (!json_is_array(a) || json_array_size(a) != (size_t)gs->rank)
        return -1;
    for (int d = 0; d < gs->rank; d++) {
        const json_t *l = json_array_get(a, (size_t)d);
        if (!json_is_array(l) || json_array_size(l) > (size_t)mesh->rank)
            return -1;
        for (size_t i = 0; i < json_array_size(l); i++) {
            const json_t *v = json_array_get(l, i);
            json_int_t ax = json_is_integer(v) ? json_integer_value(v) : -1;
            if (ax < 0 || ax >= mesh->rank || (seen & (1u << ax)))
                return -1;
            seen |= 1u << ax;
            shd_push(s, d, (int)ax);
        }
        if (gs->dim[d] % shd_factor(s, d, &m) != 0)
            return -1;
    }
    return 0;
}

int gspmd_edge_parse(const json_t *j, gspmd_edge_t *e, char *why, size_t whylen)
{
    memset(e, 0, sizeof *e);
    if (!json_is_object(j) || json_object_size(j) != 5 ||
        dims_parse(json_object_get(j, "global"), 0, TENSOR_MAX_RANK, TENSOR_MAX_ELEMS,
                   &e->global) || !shape_valid(&e->global) ||
        dims_parse(json_object_get(j, "from_mesh"), 1, MESH_MAX_RANK, 4096, &e->from_mesh) ||
        dims_parse(json_object_get(j, "to_mesh"), 1, MESH_MAX_RANK, 4096, &e->to_mesh) ||
        shd_parse(json_object_get(j, "from"), &e->global, &e->from_mesh, &e->from) ||
        shd_parse(json_object_get(j, "to"), &e->global, &e->to_mesh, &e->to)) {
        snprintf(why, whylen, "reshard must be {global, from_mesh, from, to_mesh, to}: a shape, "
                 "two meshes of 1 to %d dims and a valid sharding on each", MESH_MAX_RANK);
        return -1;
    }
    return 0;
}

/* Replica ordinal of shard p among the holders of its piece (row-major
 * over the mesh axes s does not use) and their number. */
static int64_t replica_ordinal(const shd_t *s, const shape_t *mesh, int p, int64_t *nrep)
{
    unsigned used = shd_used(s);
    int64_t coord[MESH_MAX_RANK] = {0}, rest = p, ord = 0;
    int rank = mesh->rank < MESH_MAX_RANK ? mesh->rank : MESH_MAX_RANK;
    for (int a = rank - 1; a >= 0; a--) {
        coord[a] = rest % mesh->dim[a];
        rest /= mesh->dim[a];
    }
    *nrep = 1;
    for (int a = 0; a < rank; a++) {
        if (used & (1u << a))
            continue;
        ord = ord * mesh->dim[a] + coord[a];
        *nrep *= mesh->dim[a];
    }
    return ord;
}

int gspmd_edge_piece(const gspmd_edge_t *e, int p, int c, int64_t lo[TENSOR_MAX_RANK],
                     int64_t hi[TENSOR_MAX_RANK])
{
    gspmd_mesh_t pm = {.shape = e->from_mesh}, cm = {.shape = e->to_mesh};
    int64_t nrep = 1, po[TENSOR_MAX_RANK], co[TENSOR_MAX_RANK];
    /* Two statements: the operands of != are unsequenced, and nrep is an
     * output of the call. */
    int64_t ord = replica_ordinal(&e->from, &e->from_mesh, p, &nrep);
    if (ord != c % nrep)
        return 0;
    shape_t pl, cl;
    gspmd_local_shape(&e->global, &e->from, &pm, &pl);
    gspmd_local_shape(&e->global, &e->to, &cm, &cl);
    gspmd_shard_offsets(&e->from, &pm, &e->global, p, po);
    gspmd_shard_offsets(&e->to, &cm, &e->global, c, co);
    for (int d = 0; d < e->global.rank; d++) {
        lo[d] = po[d] > co[d] ? po[d] : co[d];
        hi[d] = po[d] + pl.dim[d] < co[d] + cl.dim[d] ? po[d] + pl.dim[d] : co[d] + cl.dim[d];
        if (lo[d] >= hi[d])
            return 0;
    }
    return 1;
}

void gspmd_box_copy(const float *src, const shape_t *ss, const int64_t *soff, float *dst,
                    const shape_t *ds, const int64_t *doff, const int64_t *ext)
{
    int rank = ss->rank;
    if (rank == 0) {
        dst[0] = src[0];
        return;
    }
    int64_t sstr[TENSOR_MAX_RANK], dstr[TENSOR_MAX_RANK], idx[TENSOR_MAX_RANK] = {0};
    sstr[rank - 1] = dstr[rank - 1] = 1;
    for (int d = rank - 2; d >= 0; d--) {
        sstr[d] = sstr[d + 1] * ss->dim[d + 1];
        dstr[d] = dstr[d + 1] * ds->dim[d + 1];
    }
    int64_t rows = 1;
    for (int d = 0; d < rank - 1; d++)
        rows *= ext[d];
    for (int64_t r = 0; r < rows; r++) {
        int64_t so = soff[rank - 1], dof = doff[rank - 1], q = r;
        for (int d = rank - 2; d >= 0; d--) {
            idx[d] = q % ext[d];
            q /= ext[d];
            so += (soff[d] + idx[d]) * sstr[d];
            dof += (doff[d] + idx[d]) * dstr[d];
        }
        memcpy(dst + dof, src + so, (size_t)ext[rank - 1] * sizeof *dst);
    }
}
