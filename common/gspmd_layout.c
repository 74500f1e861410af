/* gspmd_layout.c - shardings on a mesh (gspmd_layout.h, gspmd.h): factors,
 * local shapes, each shard's offsets, replicas, the JSON views, and the
 * maps of a sharding through shape-changing ops.
 *
 * Invariants: shards are numbered row-major over the mesh; the chunk a
 * shard holds along dim d is the row-major index of its coordinates along
 * the axes splitting d, major to minor; a valid sharding uses each mesh
 * axis at most once and splits each dim into a number of chunks that
 * divides it, so every shard's piece has the same local shape. */
#include "gspmd.h"
#include "gspmd_layout.h"

#include <string.h>

/* ------------------------------------------------------------------ */
/* Shardings. */

int64_t mesh_axis_size(const gspmd_mesh_t *m, int a)
{
    return m->shape.dim[a];
}

int64_t shd_factor(const shd_t *s, int d, const gspmd_mesh_t *m)
{
    int64_t f = 1;
    for (int i = 0; i < s->n[d]; i++)
        f *= mesh_axis_size(m, s->ax[d][i]);
    return f;
}

/* Number of distinct pieces: the product of every split's factor. */
int64_t shd_total(const shd_t *s, const gspmd_mesh_t *m)
{
    int64_t f = 1;
    for (int d = 0; d < s->rank; d++)
        f *= shd_factor(s, d, m);
    return f;
}

unsigned shd_used(const shd_t *s)
{
    unsigned u = 0;
    for (int d = 0; d < s->rank; d++)
        for (int i = 0; i < s->n[d]; i++)
            u |= 1u << s->ax[d][i];
    return u;
}

void shd_repl(shd_t *s, int rank)
{
    memset(s, 0, sizeof *s);
    s->rank = rank;
}

int shd_eq(const shd_t *a, const shd_t *b)
{
    if (a->rank != b->rank || a->partial != b->partial)
        return 0;
    for (int d = 0; d < a->rank; d++) {
        if (a->n[d] != b->n[d] || memcmp(a->ax[d], b->ax[d], a->n[d]) != 0)
            return 0;
    }
    return 1;
}

void shd_push(shd_t *s, int d, int a)
{
    s->ax[d][s->n[d]++] = (uint8_t)a;
}

/* Makes s valid for global shape gs: an axis used twice keeps its first
 * use, and a dim drops its minor axes until their product divides it. */
void shd_fix(shd_t *s, const shape_t *gs, const gspmd_mesh_t *m)
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
            chunk = chunk * mesh_axis_size(mesh, s->ax[d][i]) +
                    mesh_coord(mesh, shard, s->ax[d][i]);
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

json_t *mesh_mask_json(unsigned mask, int rank)
{
    json_t *l = json_array();
    for (int a = 0; l && a < rank; a++)
        if (mask & (1u << a))
            json_array_append_new(l, json_integer(a));
    return l;
}

/* ------------------------------------------------------------------ */
/* Shardings through ops that move dims: reshape, transpose, reductions. */

/* Reshape keeps a split of input dim d on output dim e when as many
 * elements precede both (the chunks are then the same runs of the flat
 * buffer) and the split divides e. Maps `in` (on shape gi) to `out` (on
 * go); dims that cannot be kept are left unsplit. */
void shd_reshape_map(const shd_t *in, const shape_t *gi, const shape_t *go,
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

void shd_swap2(const shd_t *in, shd_t *out)
{
    *out = *in;
    out->n[0] = in->n[1], out->n[1] = in->n[0];
    memcpy(out->ax[0], in->ax[1], MESH_MAX_RANK);
    memcpy(out->ax[1], in->ax[0], MESH_MAX_RANK);
}

void shd_drop_dim(const shd_t *in, int d, shd_t *out)
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
void shd_insert_dim(const shd_t *in, int d, shd_t *out)
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
