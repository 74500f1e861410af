/* gspmd_edge.c - cross-mesh edges (gspmd.h, gspmd_edge_t): their JSON
 * ("reshard" on a lowered input op), which producer shard sends which box
 * to which consumer shard, and copying such a box.
 *
 * Invariants: a parsed edge is valid on both meshes (ranks, distinct axes
 * in range, every split dividing its dim), so both ends compute the same
 * pieces from it alone; for each consumer shard and each distinct piece
 * overlapping it exactly one replica of that piece sends (ordinal c mod
 * the number of replicas). */
#include "gspmd.h"
#include "gspmd_layout.h"

#include <stdio.h>
#include <string.h>

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
        dims_parse(json_object_get(j, "from_mesh"), 1, MESH_MAX_RANK, SLICE_DIM_MAX,
                   &e->from_mesh) ||
        dims_parse(json_object_get(j, "to_mesh"), 1, MESH_MAX_RANK, SLICE_DIM_MAX, &e->to_mesh) ||
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
