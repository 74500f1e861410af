/* compiler_parse.h - the job document around its computations: top-level
 * fields, slices (shape, axes, island), the island fit, and the graph of
 * input edges between computations with its topological order.
 *
 * Takes the borrowed document and a job_plan_t the caller allocated
 * (zeroed); fills the plan's fields, slices, comps' headers and slices,
 * and topo. Everything it allocates hangs off the plan (freed with
 * job_plan_free) or off the job_ctx_t (whose arrays the caller frees:
 * edges, comp_names, outputs). compiler_plan.c runs these in order, then
 * compiles each computation's body. compiler_slice_fits() and
 * mesh_shape_parse/format() (compiler.h) are this stage's too. */
#ifndef ATOLL_COMPILER_PARSE_H
#define ATOLL_COMPILER_PARSE_H

#include <jansson.h>
#include <stddef.h>

#include "compiler_types.h"
#include "compiler_util.h"
#include "err.h"

typedef struct edge {
    int consumer, producer, op;  /* op: index of the input op in the consumer */
} edge_t;

typedef struct job_ctx {
    job_plan_t *plan;
    const json_t *comps_json;
    nidx_t comp_names;           /* comp name -> index; keys in plan->comps[].name */
    nidx_t *outputs;             /* per comp: output value name -> slot, once compiled */
    edge_t *edges;               /* grouped by consumer, in document order */
    size_t nedges, cap_edges;
    err_t *e;
} job_ctx_t;

/* The top-level fields (name, priority, max_retries, preemptible,
 * sharing) into plan; slices and computations must be present. 0 or 400. */
int job_top(const json_t *doc, job_plan_t *plan, err_t *e);
/* plan->slices from the "slices" object; unknown islands are 400 unless
 * islands is NULL. 0 or the status. */
int job_slices(const json_t *sj, const island_desc_t *islands, int nislands,
               job_plan_t *plan, err_t *e);
/* 422 when a slice fits no island it may use. Skipped when islands is NULL. */
int job_fit(const job_plan_t *plan, const island_desc_t *islands, int nislands, err_t *e);
/* First pass over j->comps_json into j->plan->comps (sized ncomps, zeroed):
 * headers, unique names (j->comp_names), slices, run lowering, input
 * edges (j->edges). 0 or the status. */
int job_scan(job_ctx_t *j);
/* j->plan->topo from j->edges (Kahn; ties by document order); a cycle is
 * 400 at an input op on it. 0 or the status. */
int job_topo(job_ctx_t *j);

#endif
