/* compiler_plan.c - compiler_job() (compiler.h): a job document to a
 * job_plan_t, the stages in order. compiler_parse.c reads the fields,
 * slices and computation headers and orders the computations; then each
 * computation, producers first, is compiled here: a per-shard one
 * directly (compiler_comp.c), a global one at its global shapes, through
 * the partitioner (gspmd_partition, gspmd_lower.c), and its lowered
 * per-shard program compiled like any other.
 *
 * Invariants:
 *  - a computation is compiled only after every producer it takes input
 *    from (plan->topo), so an input's shape is always known: the
 *    producer's output as each of its shards holds it, or for a global
 *    consumer the producer's global shape;
 *  - a global computation's comp_t holds the lowered per-shard program and
 *    owns the partitioning (c->gspmd) with the global program in it;
 *  - a lowered program that does not compile is the partitioner's bug:
 *    500, never a 400 blamed on the user;
 *  - on any error the plan built so far is freed here and *out is not
 *    written. */
#include "compiler.h"
#include "compiler_comp.h"
#include "compiler_parse.h"
#include "compiler_shapes.h"
#include "compiler_util.h"
#include "gspmd.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>

/* compiler_job(): the producer is compiled already (topological order). */
static int job_resolve(void *rctx, cc_t *x, comp_input_t *in)
{
    job_ctx_t *j = rctx;
    int p = nidx_find(&j->comp_names, in->producer_name);
    if (p < 0 || !j->outputs[p].keys)
        return op_fail(x, "from", "no computation named '%s'", in->producer_name);
    int slot = nidx_find(&j->outputs[p], in->value);
    if (slot < 0)
        return op_fail(x, "from", "computation '%s' has no output '%s'", in->producer_name,
                       in->value);
    in->producer = p;
    in->shape = j->plan->comps[p].vshapes[slot];
    if (in->shape.rank < 0 && !x->c->run)
        return op_fail(x, "from", "output '%s' of run computation '%s' has no declared shape: "
                       "give it in that computation's run.shapes", in->value,
                       in->producer_name);
    if (x->global) {            /* the producer's global shape, same value name */
        const comp_t *g = j->plan->comps[p].gspmd->global;
        int v = comp_value_find(g, in->value);
        if (v >= 0)
            in->shape = g->vshapes[v];
    }
    return 0;
}

/* The sharding of a global computation's value named `value`. */
static const shd_t *global_shd(const comp_t *c, const char *value)
{
    int v = comp_value_find(c->gspmd->global, value);
    return v >= 0 ? &c->gspmd->vshd[v] : NULL;
}

/* Compiles global computation i: the program at global shapes, then the
 * partitioner, then its per-shard program into plan->comps[i], which
 * then owns the partitioning (c->gspmd). A lowered program that does not
 * compile is the partitioner's bug: 500. */
static int job_compile_global(job_ctx_t *j, int i, const char *prefix)
{
    comp_t *c = &j->plan->comps[i];
    const job_slice_t *sl = &j->plan->slices[c->slice];
    const json_t *cj = json_array_get(j->comps_json, (size_t)i);
    comp_t *g = util_zalloc(1, sizeof *g);
    gspmd_edge_t *in_edge = NULL;
    gspmd_t *gs = NULL;
    gspmd_mesh_t mesh = {.shape = sl->shape};
    if (!g)
        return err_set(j->e, 500, "", "out of memory");
    memcpy(mesh.axes, sl->axes, sizeof mesh.axes);
    *g = (comp_t){.slice = c->slice, .global = 1};
    memcpy(g->name, c->name, sizeof g->name);
    comp_set_slice(g, c->slice, &c->slice_shape);
    int rc = comp_body(cj, prefix, g, 1, 0, job_resolve, j, j->e);
    if (!rc && !(in_edge = util_zalloc((size_t)g->ninputs + 1, sizeof *in_edge)))
        rc = err_set(j->e, 500, "", "out of memory");
    for (int k = 0; !rc && k < g->ninputs; k++) {
        const comp_t *pc = &j->plan->comps[g->inputs[k].producer];
        in_edge[k].global = g->inputs[k].shape;
        in_edge[k].from_mesh = pc->slice_shape;
        in_edge[k].from = *global_shd(pc, g->inputs[k].value);
    }
    if (rc) {
        comp_free(g);
        free(in_edge);
        return rc;
    }
    rc = gspmd_partition(g, cj, &mesh, in_edge, prefix, &gs, j->e);
    free(in_edge);
    if (rc)
        return rc;
    c->gspmd = gs;
    rc = comp_body(gs->lowered, prefix, c, 0, 1, job_resolve, j, j->e);
    if (rc && rc != 500) {
        char why[ERR_DETAIL_MAX];
        copy_str(why, sizeof why, j->e->detail);
        rc = err_set(j->e, 500, "", "partitioner produced an invalid program: %s", why);
    }
    return rc;
}

static int job_compile_comps(job_ctx_t *j)
{
    job_plan_t *plan = j->plan;
    for (int t = 0; t < plan->ncomps; t++) {
        int i = plan->topo[t];
        comp_t *c = &plan->comps[i];
        char prefix[32];
        fmt(prefix, sizeof prefix, "computations[%d]", i);
        int rc = 0;
        if (c->global)
            rc = job_compile_global(j, i, prefix);
        else if (c->run_json && (rc = comp_body(c->run_json, prefix, c, 0, 1, job_resolve, j,
                                                j->e)))
            run_fix_field(c->run_json, prefix, j->e);
        else if (!c->run_json)
            rc = comp_body(json_array_get(j->comps_json, (size_t)i), prefix, c, 0, 0,
                           job_resolve, j, j->e);
        if (rc)
            return rc;
        if (nidx_init(&j->outputs[i], (size_t)c->noutputs))
            return err_set(j->e, 500, "", "out of memory");
        for (int k = 0; k < c->noutputs; k++)
            nidx_put(&j->outputs[i], c->vnames[c->outputs[k]], c->outputs[k]);
    }
    return 0;
}

static int job_comps(const json_t *cj, job_plan_t *plan, err_t *e)
{
    size_t n = json_array_size(cj);
    job_ctx_t j = {.plan = plan, .comps_json = cj, .e = e};
    int rc = 0;
    if (!json_is_array(cj) || n < 1 || n > JOB_MAX_COMPS)
        return err_set(e, 400, "computations", "computations must be an array of 1 to %d "
                       "computations", JOB_MAX_COMPS);
    plan->comps = util_zalloc(n, sizeof *plan->comps);
    j.outputs = util_zalloc(n, sizeof *j.outputs);
    if (!plan->comps || !j.outputs || nidx_init(&j.comp_names, n)) {
        rc = err_set(e, 500, "", "out of memory");
        goto cleanup;
    }
    plan->ncomps = (int)n;
    if (!(rc = job_scan(&j)) && !(rc = job_topo(&j)))
        rc = job_compile_comps(&j);
cleanup:
    for (size_t i = 0; j.outputs && i < n; i++)
        nidx_free(&j.outputs[i]);
    free(j.outputs);
    nidx_free(&j.comp_names);
    free(j.edges);
    return rc;
}

int compiler_job(const json_t *doc, const island_desc_t *islands, int nislands,
                 job_plan_t **out, err_t *e)
{
    job_plan_t *plan = util_zalloc(1, sizeof *plan);
    int rc;
    if (!plan)
        return err_set(e, 500, "", "out of memory");
    if ((rc = job_top(doc, plan, e)) ||
        (rc = job_slices(json_object_get(doc, "slices"), islands, nislands, plan, e)) ||
        (rc = job_comps(json_object_get(doc, "computations"), plan, e)) ||
        (rc = job_fit(plan, islands, nislands, e))) {
        job_plan_free(plan);
        return rc;
    }
    *out = plan;
    return 0;
}
