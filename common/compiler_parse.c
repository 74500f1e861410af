/* compiler_parse.c - the job document outside the ops (compiler_parse.h):
 * top-level fields, slices and meshes, island fit, computation headers and
 * the input graph in topological order.
 *
 * Invariants:
 *  - every 400 of the document is found before any 422 (job_fit runs
 *    last, in compiler_job), so a 422 means a valid job the cluster can
 *    never hold;
 *  - slice meshes have 1..MESH_MAX_RANK dims of 1..SLICE_DIM_MAX and one
 *    distinct axis name per dim;
 *  - j->edges stays grouped by consumer, in document order; an edge joins
 *    two distinct computations, both global or both per-shard, per-shard
 *    ones with equal shard counts;
 *  - plan->topo lists each computation once, producers before consumers,
 *    the lowest index first among those ready. */
#include "compiler.h"
#include "compiler_comp.h"
#include "compiler_parse.h"
#include "compiler_util.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLICES_MAX 64
#define RETRIES_MAX 10
#define RETRIES_DEFAULT 2

/* A job name: a string of at most JOB_NAME_MAX_CHARS characters, counted
 * as code points (jansson hands out valid UTF-8), none of them a control
 * character: C0, DEL or C1 (U+0080..U+009F, UTF-8 C2 80..C2 9F), nor NUL
 * (a string whose length says more than strlen holds one). */
static int job_name_ok(const json_t *v)
{
    const unsigned char *s = (const unsigned char *)json_string_value(v);
    if (!s || strlen((const char *)s) != json_string_length(v))
        return 0;
    int chars = 0;
    for (const unsigned char *p = s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f || (*p == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f))
            return 0;
        chars += (*p & 0xc0) != 0x80;       /* not a continuation byte */
    }
    return chars <= JOB_NAME_MAX_CHARS;
}

int job_top(const json_t *doc, job_plan_t *plan, err_t *e)
{
    static const char *const keys[] = {"name", "priority", "max_retries", "slices",
                                       "computations", "preemptible", "sharing"};
    const char *key;
    json_t *val;
    if (!json_is_object(doc))
        return err_set(e, 400, "", "the job document must be a JSON object");
    json_object_foreach((json_t *)doc, key, val) {
        int known = 0;
        for (int i = 0; i < 7; i++)
            known |= strcmp(key, keys[i]) == 0;
        if (!known)
            return err_set(e, 400, key, "unknown field '%s'", key);
    }
    const json_t *name = json_object_get(doc, "name");
    if (name) {
        if (!job_name_ok(name))
            return err_set(e, 400, "name", "name must be a string of at most %d printable "
                           "characters", JOB_NAME_MAX_CHARS);
        copy_str(plan->name, sizeof plan->name, json_string_value(name));
    }
    int64_t v = 0;
    if (json_object_get(doc, "priority") &&
        read_int(json_object_get(doc, "priority"), -JOB_PRIORITY_LIMIT, JOB_PRIORITY_LIMIT, &v))
        return err_set(e, 400, "priority", "priority must be an integer in %d..%d",
                       -JOB_PRIORITY_LIMIT, JOB_PRIORITY_LIMIT);
    plan->priority = json_object_get(doc, "priority") ? v : 0;
    plan->max_retries = RETRIES_DEFAULT;
    if (json_object_get(doc, "max_retries")) {
        if (read_int(json_object_get(doc, "max_retries"), 0, RETRIES_MAX, &v))
            return err_set(e, 400, "max_retries", "max_retries must be an integer in 0..%d",
                           RETRIES_MAX);
        plan->max_retries = (int)v;
    }
    const json_t *pre = json_object_get(doc, "preemptible");
    if (pre && !json_is_boolean(pre))
        return err_set(e, 400, "preemptible", "preemptible must be true or false");
    plan->preemptible = json_is_true(pre);
    const json_t *sh = json_object_get(doc, "sharing");
    const char *shs = json_string_value(sh);
    if (sh && (!shs || (strcmp(shs, "shared") != 0 && strcmp(shs, "exclusive") != 0)))
        return err_set(e, 400, "sharing", "sharing must be \"exclusive\" or \"shared\"");
    plan->shared = shs && strcmp(shs, "shared") == 0;
    if (!json_object_get(doc, "slices"))
        return err_set(e, 400, "slices", "missing field 'slices'");
    if (!json_object_get(doc, "computations"))
        return err_set(e, 400, "computations", "missing field 'computations'");
    return 0;
}

/* ------------------------------------------------------------------ */
/* Slices, islands, mesh shapes. */

static int fits_from(const shape_t *s, int i, const shape_t *isl, int k)
{
    if (i >= s->rank)
        return 1;
    if (i >= TENSOR_MAX_RANK)
        return 0;
    /* Slice axis i goes to island axis k' >= k, leaving room for the rest. */
    for (int kk = k; kk < TENSOR_MAX_RANK && isl->rank - kk >= s->rank - i; kk++) {
        if (s->dim[i] <= isl->dim[kk] && fits_from(s, i + 1, isl, kk + 1))
            return 1;
    }
    return 0;
}

int compiler_slice_fits(const shape_t *slice, const shape_t *island)
{
    if (!slice || !island || slice->rank < 1 || slice->rank > island->rank)
        return 0;
    return fits_from(slice, 0, island, 0);
}

void mesh_shape_format(const shape_t *s, char *buf, size_t len)
{
    size_t off = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; i < s->rank && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%ld", i ? "x" : "", (long)s->dim[i]);
}

int mesh_shape_parse(const char *text, shape_t *out)
{
    shape_t s;
    memset(&s, 0, sizeof s);
    const char *p = text;
    if (!p)
        return -1;
    for (;;) {
        int64_t d = 0;
        const char *start = p;
        while (*p >= '0' && *p <= '9') {
            d = d * 10 + (*p - '0');
            if (d > SLICE_DIM_MAX)
                return -1;
            p++;
        }
        if (p == start || d < 1 || s.rank == MESH_MAX_RANK)
            return -1;
        s.dim[s.rank++] = d;
        if (*p == '\0')
            break;
        if (*p != 'x')
            return -1;
        p++;
    }
    *out = s;
    return 0;
}

static int island_find(const island_desc_t *islands, int n, const char *name)
{
    for (int i = 0; i < n; i++) {
        if (islands[i].name && strcmp(islands[i].name, name) == 0)
            return i;
    }
    return -1;
}

/* "axes": one distinct name per dim of the shape; default x, y, z. */
static int slice_axes(const char *name, const json_t *axes, job_slice_t *out, err_t *e)
{
    static const char *const dflt[MESH_MAX_RANK] = {"x", "y", "z"};
    char field[ERR_FIELD_MAX];
    fmt(field, sizeof field, "slices.%s.axes", name);
    if (axes && (!json_is_array(axes) || json_array_size(axes) != (size_t)out->shape.rank))
        return err_set(e, 400, field, "slice '%s': axes must name each of its %d dims", name,
                       out->shape.rank);
    for (int i = 0; i < out->shape.rank; i++) {
        const json_t *a = axes ? json_array_get(axes, (size_t)i) : NULL;
        if (a && !json_name(a))
            return err_set(e, 400, field, "slice '%s': axis names must be 1 to %d characters "
                           "[A-Za-z0-9_-]", name, NAME_MAX_LEN - 1);
        copy_str(out->axes[i], sizeof out->axes[i], a ? json_string_value(a) : dflt[i]);
        for (int k = 0; k < i; k++)
            if (strcmp(out->axes[k], out->axes[i]) == 0)
                return err_set(e, 400, field, "slice '%s': axis name '%s' is used twice", name,
                               out->axes[i]);
    }
    return 0;
}

static int slice_parse(const char *name, const json_t *sj, const island_desc_t *islands,
                       int nislands, job_slice_t *out, err_t *e)
{
    char field[ERR_FIELD_MAX];
    const char *key;
    json_t *val;
    fmt(field, sizeof field, "slices.%s", name);
    if (!name_valid(name))
        return err_set(e, 400, field, "slice names must be 1 to %d characters [A-Za-z0-9_-]",
                       NAME_MAX_LEN - 1);
    if (!json_is_object(sj))
        return err_set(e, 400, field, "slice '%s' must be an object", name);
    json_object_foreach((json_t *)sj, key, val) {
        if (strcmp(key, "shape") != 0 && strcmp(key, "island") != 0 &&
            strcmp(key, "axes") != 0) {
            fmt(field, sizeof field, "slices.%s.%s", name, key);
            return err_set(e, 400, field, "unknown field '%s' in slice '%s'", key, name);
        }
    }
    copy_str(out->name, sizeof out->name, name);
    fmt(field, sizeof field, "slices.%s.shape", name);
    if (read_shape(json_object_get(sj, "shape"), 1, MESH_MAX_RANK, SLICE_DIM_MAX, &out->shape))
        return err_set(e, 400, field, "slice '%s': shape must be 1 to %d integers in 1..%d",
                       name, MESH_MAX_RANK, SLICE_DIM_MAX);
    int rc = slice_axes(name, json_object_get(sj, "axes"), out, e);
    if (rc)
        return rc;
    const json_t *isl = json_object_get(sj, "island");
    if (!isl)
        return 0;
    fmt(field, sizeof field, "slices.%s.island", name);
    if (!json_name(isl))
        return err_set(e, 400, field, "slice '%s': island must be an island name", name);
    copy_str(out->island, sizeof out->island, json_string_value(isl));
    if (islands && island_find(islands, nislands, out->island) < 0)
        return err_set(e, 400, field, "slice '%s': unknown island '%s'", name, out->island);
    return 0;
}

int job_slices(const json_t *sj, const island_desc_t *islands, int nislands,
               job_plan_t *plan, err_t *e)
{
    const char *key;
    json_t *val;
    size_t n = json_object_size(sj);
    if (!json_is_object(sj) || n < 1 || n > SLICES_MAX)
        return err_set(e, 400, "slices", "slices must be an object of 1 to %d slices", SLICES_MAX);
    plan->slices = util_zalloc(n, sizeof *plan->slices);
    if (!plan->slices)
        return err_set(e, 500, "", "out of memory");
    json_object_foreach((json_t *)sj, key, val) {
        int rc = slice_parse(key, val, islands, nislands, &plan->slices[plan->nslices], e);
        if (rc)
            return rc;
        plan->nslices++;
    }
    return 0;
}

/* 422 when a slice fits no island it may use. Skipped when islands is NULL. */
int job_fit(const job_plan_t *plan, const island_desc_t *islands, int nislands, err_t *e)
{
    for (int s = 0; islands && s < plan->nslices; s++) {
        const job_slice_t *sl = &plan->slices[s];
        int ok = 0;
        for (int i = 0; i < nislands && !ok; i++) {
            if (!sl->island[0] || (islands[i].name && strcmp(islands[i].name, sl->island) == 0))
                ok = compiler_slice_fits(&sl->shape, &islands[i].shape);
        }
        if (!ok) {
            char field[ERR_FIELD_MAX], buf[64];
            fmt(field, sizeof field, "slices.%s.shape", sl->name);
            shape_format(&sl->shape, buf, sizeof buf);
            return err_set(e, 422, field, "slice '%s' of shape %s fits %s", sl->name, buf,
                           sl->island[0] ? "not its island" : "no island of the cluster");
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The job: computations, the input graph, topological order. */

static int slice_find(const job_plan_t *plan, const char *name)
{
    for (int s = 0; s < plan->nslices; s++) {
        if (strcmp(plan->slices[s].name, name) == 0)
            return s;
    }
    return -1;
}

static int edge_add(job_ctx_t *j, int consumer, int producer, int op)
{
    if (j->nedges == j->cap_edges) {
        size_t cap = j->cap_edges ? 2 * j->cap_edges : 16;
        edge_t *ne = realloc(j->edges, cap * sizeof *ne);
        if (!ne)
            return err_set(j->e, 500, "", "out of memory");
        j->edges = ne;
        j->cap_edges = cap;
    }
    j->edges[j->nedges++] = (edge_t){consumer, producer, op};
    return 0;
}

/* Records computation i's input edges. Malformed input ops are skipped here
 * (the full compile reports them); unknown producers, self-inputs and
 * shard-count mismatches are reported now because ordering needs them. */
static int job_scan_edges(job_ctx_t *j, int i, const json_t *ops)
{
    const comp_t *c = &j->plan->comps[i];
    for (size_t k = 0; k < json_array_size(ops); k++) {
        const json_t *opj = json_array_get(ops, k);
        const char *code = json_string_value(json_object_get(opj, "op"));
        const char *from = json_string_value(json_object_get(opj, "from"));
        const char *dot = from ? strchr(from, '.') : NULL;
        char pname[NAME_MAX_LEN], field[ERR_FIELD_MAX];
        if (!code || strcmp(code, "input") != 0 || !dot || dot - from >= NAME_MAX_LEN)
            continue;
        memcpy(pname, from, (size_t)(dot - from));
        pname[dot - from] = '\0';
        int p = nidx_find(&j->comp_names, pname);
        fmt(field, sizeof field, "computations[%d].ops[%zu].from", i, k);
        if (p < 0)
            return err_set(j->e, 400, field, "computation '%s' op %zu (input): no computation "
                           "named '%s'", c->name, k, pname);
        if (p == i)
            return err_set(j->e, 400, field, "computation '%s' op %zu (input): a computation "
                           "cannot take input from itself", c->name, k);
        const comp_t *pc = &j->plan->comps[p];
        if (pc->global != c->global)
            return err_set(j->e, 400, field, "computation '%s' op %zu (input): producer '%s' is "
                           "%s, this computation %s: a per-shard producer and a global consumer "
                           "(or the reverse) cannot be joined", c->name, k, pname,
                           pc->global ? "global" : "per-shard", c->global ? "global" : "per-shard");
        if (!c->global && j->plan->comps[p].nshards != c->nshards)
            return err_set(j->e, 400, field, "computation '%s' op %zu (input): producer '%s' "
                           "has %d shards, this computation %d (they must match)", c->name, k,
                           pname, j->plan->comps[p].nshards, c->nshards);
        int rc = edge_add(j, i, p, (int)k);
        if (rc)
            return rc;
    }
    return 0;
}

/* First pass over computations: headers, names, slices, edges. */
int job_scan(job_ctx_t *j)
{
    job_plan_t *plan = j->plan;
    for (int i = 0; i < plan->ncomps; i++) {
        char prefix[32];
        comp_t *c = &plan->comps[i];
        const json_t *cj = json_array_get(j->comps_json, (size_t)i);
        fmt(prefix, sizeof prefix, "computations[%d]", i);
        int rc = comp_head(cj, prefix, 0, c, j->e);
        if (!rc && json_object_get(cj, "run"))
            rc = run_lower(cj, prefix, c->name, &c->run_json, j->e);
        if (rc)
            return rc;
        int prev = nidx_put(&j->comp_names, c->name, i);
        if (prev >= 0)
            return comp_fail(prefix, j->e, "name", "duplicate computation name '%s' (also "
                             "computations[%d])", c->name, prev);
        const char *sname = json_string_value(json_object_get(cj, "slice"));
        int s = slice_find(plan, sname);
        if (s < 0)
            return comp_fail(prefix, j->e, "slice", "computation '%s': no slice named '%s'",
                             c->name, sname);
        comp_set_slice(c, s, &plan->slices[s].shape);
    }
    for (int i = 0; i < plan->ncomps; i++) {
        const comp_t *c = &plan->comps[i];
        const json_t *cj = c->run_json ? c->run_json : json_array_get(j->comps_json, (size_t)i);
        int rc = job_scan_edges(j, i, json_object_get(cj, "ops"));
        if (rc && c->run_json) {
            char prefix[32];
            fmt(prefix, sizeof prefix, "computations[%d]", i);
            run_fix_field(c->run_json, prefix, j->e);
        }
        if (rc)
            return rc;
    }
    return 0;
}

/* Reports a cycle among the computations Kahn could not order (done[] == 0):
 * walking producers from any of them for ncomps steps lands on the cycle. */
static int job_cycle(job_ctx_t *j, const size_t *in_off, const char *done)
{
    int n = j->plan->ncomps, v = 0, via = -1;
    while (done[v])
        v++;
    for (int step = 0; step <= n; step++) {
        via = -1;
        for (size_t k = in_off[v]; k < in_off[v + 1]; k++) {
            if (!done[j->edges[k].producer]) {
                via = (int)k;
                break;
            }
        }
        if (via < 0)
            return err_set(j->e, 500, "", "internal: cycle walk lost its way");
        v = j->edges[via].producer;
    }
    /* v is on the cycle; name it and the edge that leaves it backwards. */
    const edge_t *ed = &j->edges[via];
    char field[ERR_FIELD_MAX];
    fmt(field, sizeof field, "computations[%d].ops[%d].from", ed->consumer, ed->op);
    return err_set(j->e, 400, field, "computations '%s' and '%s' are on a cycle of inputs",
                   j->plan->comps[ed->consumer].name, j->plan->comps[ed->producer].name);
}

/* Offsets of the edges into (in_off) and out of (out_off, out_adj) each
 * computation, and in-degrees. Edges are already grouped by consumer. */
static int edges_index(job_ctx_t *j, size_t *in_off, size_t *out_off, int *out_adj,
                       int *indeg)
{
    int n = j->plan->ncomps;
    size_t *fill = util_zalloc((size_t)n, sizeof *fill);
    if (!fill)
        return err_set(j->e, 500, "", "out of memory");
    for (size_t k = 0; k < j->nedges; k++) {
        in_off[j->edges[k].consumer + 1]++;
        out_off[j->edges[k].producer + 1]++;
        indeg[j->edges[k].consumer]++;
    }
    for (int i = 0; i < n; i++) {
        in_off[i + 1] += in_off[i];
        out_off[i + 1] += out_off[i];
    }
    for (size_t k = 0; k < j->nedges; k++) {
        int p = j->edges[k].producer;
        out_adj[out_off[p] + fill[p]++] = j->edges[k].consumer;
    }
    free(fill);
    return 0;
}

/* Kahn's algorithm; among ready computations the lowest index goes first
 * (O(n^2) scan, n <= JOB_MAX_COMPS). */
int job_topo(job_ctx_t *j)
{
    int n = j->plan->ncomps, rc = 0;
    size_t *in_off = util_zalloc((size_t)n + 1, sizeof *in_off);
    size_t *out_off = util_zalloc((size_t)n + 1, sizeof *out_off);
    int *out_adj = util_zalloc(j->nedges ? j->nedges : 1, sizeof *out_adj);
    int *indeg = util_zalloc((size_t)n, sizeof *indeg);
    char *done = util_zalloc((size_t)n, 1);
    j->plan->topo = util_zalloc((size_t)n, sizeof *j->plan->topo);
    if (!in_off || !out_off || !out_adj || !indeg || !done || !j->plan->topo) {
        rc = err_set(j->e, 500, "", "out of memory");
        goto cleanup;
    }
    if ((rc = edges_index(j, in_off, out_off, out_adj, indeg)))
        goto cleanup;
    for (int t = 0; t < n; t++) {
        int v = 0;
        while (v < n && (done[v] || indeg[v] > 0))
            v++;
        if (v == n) {
            rc = job_cycle(j, in_off, done);
            goto cleanup;
        }
        done[v] = 1;
        j->plan->topo[t] = v;
        for (size_t k = out_off[v]; k < out_off[v + 1]; k++)
            indeg[out_adj[k]]--;
    }
cleanup:
    free(in_off);
    free(out_off);
    free(out_adj);
    free(indeg);
    free(done);
    return rc;
}

