/* compiler_comp.h - one computation object: its header, a run
 * computation's lowered form, and its body (ops then outputs).
 *
 * compiler_comp() (compiler.h) is this stage on its own, for workers;
 * compiler_parse.c and compiler_plan.c call the pieces below for each
 * computation of a job. Takes borrowed JSON and a comp_t the caller
 * allocated (zeroed, or with name, slice, slice_shape and nshards set as
 * each function says); gives that comp_t filled in. On failure the comp_t
 * may hold partial arrays: the caller still owns it and frees it
 * (comp_free, or job_plan_free for a plan's comps). */
#ifndef ATOLL_COMPILER_COMP_H
#define ATOLL_COMPILER_COMP_H

#include <jansson.h>

#include "compiler_shapes.h"
#include "compiler_types.h"
#include "err.h"

/* Header checks shared by both entry points: an object with only the known
 * keys, a valid name and a string `slice`; `ops` or `run` (a program Atoll
 * wrote, `internal`, has both). Fills c->name and c->global. 0 or 400. */
int comp_head(const json_t *cj, const char *prefix, int internal, comp_t *c, err_t *e);
/* A run computation's lowered form (input and run_output ops): new
 * reference in *out (the caller owns it), or a 4xx/500 with e filled. */
int run_lower(const json_t *cj, const char *prefix, const char *cname, json_t **out,
              err_t *e);
/* Rewrites e->field from an op of the lowered form `low` to what the user
 * wrote ("PREFIX.inputs.NAME", "PREFIX.outputs[i]"); other fields stay. */
void run_fix_field(const json_t *low, const char *prefix, err_t *e);
/* Compiles ops and outputs into c (name, slice, slice_shape, nshards set
 * by the caller); `input` ops are resolved through resolve(rctx, ...).
 * global: written at global shapes; internal: Atoll wrote it ("reshard"
 * allowed). 0 or the status. */
int comp_body(const json_t *cj, const char *prefix, comp_t *c, int global, int internal,
              resolve_fn resolve, void *rctx, err_t *e);
/* Places c on a slice: index `slice` (-1 for none) of mesh shape
 * slice_shape; sets nshards. */
void comp_set_slice(comp_t *c, int slice, const shape_t *slice_shape);

#endif
