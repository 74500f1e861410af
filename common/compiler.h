/* compiler.h - job documents to compiled sharded programs.
 *
 * compiler_job() validates a whole job document (DESIGN.md Part A: fields,
 * ops, shapes, broadcasting, axes, shard-count rules, acyclic DAG) and
 * returns a job_plan_t. compiler_comp() compiles one computation on its own;
 * the worker uses it to rebuild a shard's program from the task JSON the
 * controller sends, so both sides share one definition of every op.
 *
 * Ownership: every plan/comp returned is freed with job_plan_free() /
 * comp_free(). Input JSON is borrowed, never stolen or kept.
 *
 * This header and gspmd.h are what code outside common/ includes. Behind
 * them the compiler is split by stage; each stage's header says what it
 * takes and gives, and each .c states at its top the invariants it keeps:
 *   compiler_types.h/.c  the types every stage shares (ops, computations,
 *                        shardings, edges, plans, limits) and their frees
 *   compiler_ops.c       the ops table: names, arguments, fields of each op
 *   compiler_util.c      field paths, JSON readers, the name index
 *   compiler_shapes.c    one op: fields checked, arguments, shape inferred
 *   compiler_comp.c      one computation: header, run lowering, ops and
 *                        outputs; compiler_comp()
 *   compiler_parse.c     the job document: fields, slices and meshes,
 *                        island fit, the input graph in topological order
 *   compiler_plan.c      compiler_job(): the stages in order, each global
 *                        computation through the partitioner (gspmd.h)
 * What uses what is a DAG (A <- B: B includes and calls A; no stage uses a
 * later one; this header includes only compiler_types.h, gspmd.h only
 * this one):
 *   compiler_types <- compiler_ops, compiler_util, gspmd_layout
 *   gspmd_layout <- gspmd_edge
 *   compiler_ops, compiler_util, gspmd_layout, gspmd_edge <- compiler_shapes
 *   compiler_shapes <- compiler_comp <- compiler_parse <- compiler_plan
 *   the partitioner (gspmd.h: gspmd_state <- gspmd_propagate,
 *     gspmd_reshard <- gspmd_lower) <- compiler_plan */
#ifndef ATOLL_COMPILER_H
#define ATOLL_COMPILER_H

#include <jansson.h>
#include "err.h"
#include "tensor.h"

#include "compiler_types.h"

/* compiler_ops.c */
/* "all_reduce" -> OP_ALL_REDUCE; -1 when unknown. */
int opcode_from_name(const char *name);
const char *opcode_name(opcode_t code);
/* Non-zero for ops that exchange data among a computation's shards. */
int opcode_is_collective(opcode_t code);

/* compiler_plan.c (job_plan_free: compiler_types.h) */
/* Validates and compiles a job document. Returns 0 and sets *out, or returns
 * the HTTP status (400 bad document, 422 a slice fits no island / unknown
 * island) with e filled and *out untouched. `islands` lists the cluster's
 * islands: slices naming an unknown island are 400 (field
 * "slices.NAME.island"), and a slice whose shape fits no permitted island
 * is 422. (The gang check of all slices together is the allocator's.)
 * islands == NULL skips both island checks (for tools that only validate).
 *
 * Rules beyond DESIGN.md that callers may rely on:
 *  - `outputs` is optional (absent = none); listing a value twice is 400;
 *  - `mesh_axes` must list 1..rank distinct slice axes (an empty list is
 *    400; absent means the whole slice, stored as mesh_axes == 0);
 *  - every 400 is detected before any 422, so a 422 means the document is
 *    valid but asks for a slice the cluster can never hold;
 *  - error fields are JSON paths ("computations[1].ops[2].args[0]",
 *    "slices.a.shape", "computations[0].outputs[1]"); the detail names the
 *    computation and op ("computation 'p' op 3 (all_reduce): ...");
 *  - a cycle of inputs is reported at the `from` field of an input op on
 *    the cycle;
 *  - status 500 (field "") only on out-of-memory. */
int compiler_job(const json_t *doc, const island_desc_t *islands, int nislands,
                 job_plan_t **out, err_t *e);

/* compiler_comp.c (comp_free, comp_value_find: compiler_types.h) */
/* Looks up the shape of an `input` edge ("produce.z") for compiler_comp();
 * returns 0 and fills *shape, or -1 when unknown. */
typedef int (*compiler_input_fn)(void *ctx, const char *from, shape_t *shape);

/* Compiles one computation object ({"name","slice","ops","outputs"}) for a
 * slice of the given mesh shape. Returns 0 or a 4xx status with e filled.
 * Same rules as compiler_job(), except that `slice` need only be a string
 * and each `input` op's shape comes from input_shape (NULL or -1 from it:
 * 400 at "ops[j].from"). Error fields have no "computations[i]." prefix.
 * In the result c->slice and every inputs[].producer are -1. */
int compiler_comp(const json_t *comp_json, const shape_t *slice_shape,
                  compiler_input_fn input_shape, void *ctx,
                  comp_t **out, err_t *e);

/* compiler_parse.c */
/* Does a slice of this mesh shape fit inside an island of that shape?
 * A lower-rank slice is padded with size-1 axes in any position (so [4]
 * fits [4,4] as [1,4] or [4,1]); axes keep their order. */
int compiler_slice_fits(const shape_t *slice, const shape_t *island);

/* Parses "4x4", "2x2x2", "8" into a mesh shape of 1..3 positive dims.
 * Returns 0 or -1. */
int mesh_shape_parse(const char *text, shape_t *out);
/* The inverse: "4x4" into buf (always NUL-terminated). */
void mesh_shape_format(const shape_t *s, char *buf, size_t len);

#endif
