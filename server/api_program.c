/* api_program.c - what the partitioner made of a job (DESIGN.md Part C):
 * GET /v1/jobs/{id}/program and the `view=global` form of the result.
 *
 * Both recompile the stored document (compiler_job() is deterministic, so
 * this is the program the workers ran) rather than storing a second copy:
 * the store keeps one truth per job. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gspmd.h"
#include "store.h"

static json_t *shape_json(const shape_t *s)
{
    if (s->rank < 0)            /* a run computation's undeclared output */
        return json_null();
    json_t *a = json_array();
    for (int d = 0; a && d < s->rank; d++)
        json_array_append_new(a, json_integer(s->dim[d]));
    return a;
}

static void plan_mesh(const job_plan_t *plan, const comp_t *c, gspmd_mesh_t *m)
{
    const job_slice_t *sl = &plan->slices[c->slice];
    m->shape = sl->shape;
    memcpy(m->axes, sl->axes, sizeof m->axes);
}

/* The job's plan, recompiled from its stored document; NULL if unreadable. */
static job_plan_t *job_plan(store_t *st, int64_t id)
{
    json_t *doc = store_sched_job_doc(st, id);
    job_plan_t *plan = NULL;
    err_t e = {0};
    if (doc && compiler_job(doc, NULL, 0, &plan, &e) != 0)
        plan = NULL;
    json_decref(doc);
    return plan;
}

/* ------------------------------------------------------------------ */
/* GET /v1/jobs/{id}/program */

/* One computation: its per-shard ops, each with its local result shape and
 * (global computations) the sharding of its value and whether the
 * partitioner inserted it. */
static json_t *program_comp(const job_plan_t *plan, int i, const json_t *doc_comp)
{
    const comp_t *c = &plan->comps[i];
    const gspmd_t *g = c->gspmd;
    gspmd_mesh_t mesh;
    plan_mesh(plan, c, &mesh);
    const json_t *src = g ? json_object_get(g->lowered, "ops")
                      : json_object_get(c->run_json ? c->run_json : doc_comp, "ops");
    json_t *ops = json_array(), *axes = json_array();
    for (int r = 0; axes && r < mesh.shape.rank; r++)
        json_array_append_new(axes, json_string(mesh.axes[r]));
    for (int j = 0; ops && j < c->nops; j++) {
        json_t *op = json_deep_copy(json_array_get(src, (size_t)j));
        if (!op)
            continue;
        json_object_del(op, "sharding");
        json_object_set_new(op, "shape", shape_json(&c->ops[j].shape));
        json_object_set_new(op, "sharding", g ? gspmd_shd_json(&g->lshd[j], &mesh) : json_null());
        if (g && g->inserted[j])
            json_object_set_new(op, "inserted", json_true());
        json_array_append_new(ops, op);
    }
    json_t *outs = json_array();
    for (int k = 0; outs && k < c->noutputs; k++)
        json_array_append_new(outs, json_string(c->vnames[c->outputs[k]]));
    return json_pack("{s:s, s:s, s:b, s:{s:o, s:o}, s:i, s:o, s:o}", "name", c->name, "slice",
                     plan->slices[c->slice].name, "global", g != NULL, "mesh", "shape",
                     shape_json(&mesh.shape), "axes", axes, "collectives_inserted",
                     g ? g->ncoll : 0, "ops", ops, "outputs", outs);
}

void api_jobs_program(http_req_t *req, http_resp_t *resp)
{
    store_t *st = NULL;
    int64_t id = api_visible_job(req, resp, &st);
    if (id < 1)
        return;
    json_t *doc = store_sched_job_doc(st, id);
    job_plan_t *plan = job_plan(st, id);
    json_t *comps = json_array();
    if (!doc || !plan || !comps) {
        http_problem(resp, 500, NULL, "could not compile job %ld's document", (long)id);
        goto cleanup;
    }
    for (int i = 0; i < plan->ncomps; i++) {
        const json_t *dc = json_array_get(json_object_get(doc, "computations"), (size_t)i);
        json_t *pc = program_comp(plan, i, dc);
        if (!pc || json_array_append_new(comps, pc) != 0) {
            http_problem(resp, 500, NULL, "out of memory");
            goto cleanup;
        }
    }
    http_json(resp, 200, json_pack("{s:I, s:O}", "id", (json_int_t)id, "computations", comps));
cleanup:
    json_decref(comps);
    json_decref(doc);
    job_plan_free(plan);
}

/* ------------------------------------------------------------------ */
/* GET /v1/jobs/{id}/result?view=global */

/* Copies one shard's piece into the global buffer at its offsets. */
static int place_piece(const json_t *vals, const shape_t *gs, const shape_t *ls,
                       const int64_t *off, float *dst)
{
    int64_t n = shape_numel(ls);
    if (!json_is_array(vals) || (int64_t)json_array_size(vals) != n)
        return -1;
    for (int64_t e = 0; e < n; e++) {
        int64_t r = e, flat = 0, idx[TENSOR_MAX_RANK] = {0};
        for (int d = ls->rank - 1; d >= 0; d--) {
            idx[d] = off[d] + r % ls->dim[d];
            r /= ls->dim[d];
        }
        for (int d = 0; d < gs->rank; d++)
            flat = flat * gs->dim[d] + idx[d];
        dst[flat] = (float)json_number_value(json_array_get(vals, (size_t)e));
    }
    return 0;
}

/* The global value of one output from its shards' entries (shard order):
 * sum over the distinct pieces; values when every piece carries them and
 * the value is small enough. New reference, or NULL. */
static json_t *assemble(const json_t *shards, const shape_t *gs, const shd_t *s,
                        const gspmd_mesh_t *mesh)
{
    shape_t ls;
    gspmd_local_shape(gs, s, mesh, &ls);
    int64_t n = shape_numel(gs);
    float *buf = n <= GSPMD_GLOBAL_VALUES_MAX ? calloc((size_t)n, sizeof *buf) : NULL;
    int have_values = buf != NULL;
    double sum = 0.0;
    size_t k;
    json_t *sh;
    json_array_foreach(shards, k, sh) {
        int shard = (int)json_integer_value(json_object_get(sh, "shard"));
        if (!gspmd_shard_primary(s, mesh, shard))
            continue;
        int64_t off[TENSOR_MAX_RANK];
        gspmd_shard_offsets(s, mesh, gs, shard, off);
        sum += json_number_value(json_object_get(sh, "sum"));
        if (have_values && place_piece(json_object_get(sh, "values"), gs, &ls, off, buf) != 0)
            have_values = 0;
    }
    json_t *out = json_pack("{s:o, s:o, s:f}", "shape", shape_json(gs), "sharding",
                            gspmd_shd_json(s, mesh), "sum", sum);
    if (out && have_values) {
        json_t *vals = json_array();
        for (int64_t e = 0; vals && e < n; e++)
            json_array_append_new(vals, json_real(buf[e]));
        json_object_set_new(out, "values", vals);
    }
    free(buf);
    return out;
}

int api_result_global(store_t *st, int64_t id, json_t *res)
{
    job_plan_t *plan = job_plan(st, id);
    json_t *outputs = json_object_get(res, "outputs");
    int rc = plan && outputs ? 0 : -1;
    for (int i = 0; !rc && i < plan->ncomps; i++) {
        const comp_t *c = &plan->comps[i];
        if (!c->gspmd)
            continue;
        gspmd_mesh_t mesh;
        plan_mesh(plan, c, &mesh);
        const comp_t *g = c->gspmd->global;
        for (int o = 0; !rc && o < c->noutputs; o++) {
            const char *name = c->vnames[c->outputs[o]];
            char key[2 * NAME_MAX_LEN + 2];
            snprintf(key, sizeof key, "%s.%s", c->name, name);
            int gv = comp_value_find(g, name);
            const json_t *shards = json_object_get(outputs, key);
            if (gv < 0 || !shards)
                continue;
            json_t *val = assemble(shards, &g->vshapes[gv], &c->gspmd->vshd[gv], &mesh);
            rc = val ? json_object_set_new(outputs, key, val) : -1;
        }
    }
    job_plan_free(plan);
    return rc;
}
