/* gspmd.h - the GSPMD partitioner (DESIGN.md Part C): a computation written
 * once at global shapes, with a few sharding annotations, becomes the
 * per-shard program of Part A, so workers run it like any other.
 *
 * Stages, each in its own file (behind this header; the files' headers say
 * what each takes and gives):
 *   1. annotations (gspmd_propagate.c): every op's "sharding" parsed
 *      against the slice's named axes and the op's global shape (unknown
 *      axis, axis twice, rank, divisibility are 400s naming
 *      ops[j].sharding);
 *   2. propagation (gspmd_propagate.c): annotated values (and inputs,
 *      whose sharding is the producer's) keep their sharding; forward then
 *      backward sweeps give every other value the sharding its operands
 *      (or its users) imply, until nothing changes; what is left unsharded
 *      is replicated;
 *   3. lowering (gspmd_lower.c, moves in gspmd_reshard.c, emission in
 *      gspmd_state.c): each op becomes its local op on local shapes, with
 *      the operands first resharded to what the op needs (all_to_all to
 *      move an axis between dims, all_gather to drop one, shard_slice to
 *      add one: slicing is local), partial sums (a split contracting or
 *      reduced dim) finished by one all_reduce, or a reduce_scatter when
 *      the value is wanted split there.
 * Beside them: gspmd_layout.c (sharding arithmetic) and gspmd_edge.c
 * (cross-mesh edges), which the compiler's stages use too. The types
 * (shd_t, gspmd_mesh_t, gspmd_edge_t, gspmd_t) are in compiler_types.h.
 * What uses what is a DAG (A <- B: B includes and calls A):
 *   compiler_types <- gspmd_layout <- gspmd_edge
 *   compiler_ops, gspmd_layout <- gspmd_state <- gspmd_propagate, gspmd_reshard
 *   gspmd_propagate, gspmd_reshard, gspmd_edge <- gspmd_lower
 * and compiler_plan.c calls gspmd_partition(); nothing here uses the
 * compiler's later stages (compiler_shapes, _comp, _parse, _plan).
 *
 * Ownership: gspmd_partition() returns a gspmd_t the caller frees with
 * gspmd_free(); it owns the global comp_t it was given. */
#ifndef ATOLL_GSPMD_H
#define ATOLL_GSPMD_H

#include <jansson.h>
#include "compiler.h"
#include "err.h"

/* gspmd_lower.c */
/* Partitions `global` (compiled from comp_json in global mode: shapes are
 * global) for `mesh`. in_edge[i] describes global->inputs[i]: the
 * producer's global shape, mesh and output sharding (`to`, to_mesh
 * unused); NULL when there are no inputs. An input from a mesh of this
 * shape keeps the producer's sharding (shard k feeds shard k); from any
 * other mesh its sharding is chosen like any unannotated value and the
 * lowered `input` carries the edge ("reshard"). prefix is the error-field
 * prefix ("computations[2]"). Takes ownership of `global` in every case.
 * Returns 0 and *out, or a 4xx/500 with e filled. */
int gspmd_partition(comp_t *global, const json_t *comp_json, const gspmd_mesh_t *mesh,
                    const gspmd_edge_t *in_edge, const char *prefix, gspmd_t **out, err_t *e);

/* gspmd_edge.c (gspmd_free: compiler_types.h) */
/* The edge as JSON ({"global", "from_mesh", "from", "to_mesh", "to"}, axes
 * as integers) and back; parse checks everything a hostile task could get
 * wrong (ranks, axes, divisibility) and returns 0 or -1 with why. */
json_t *gspmd_edge_json(const gspmd_edge_t *e);
int gspmd_edge_parse(const json_t *j, gspmd_edge_t *e, char *why, size_t whylen);
/* Does producer shard p send to consumer shard c? Then 1, with the box
 * [lo, hi) of the global value it sends. */
int gspmd_edge_piece(const gspmd_edge_t *e, int p, int c, int64_t lo[TENSOR_MAX_RANK],
                     int64_t hi[TENSOR_MAX_RANK]);
/* Copies the box of extent ext from src (shape ss, box at soff) into dst
 * (shape ds, box at doff). Callers have checked every bound. */
void gspmd_box_copy(const float *src, const shape_t *ss, const int64_t *soff, float *dst,
                    const shape_t *ds, const int64_t *doff, const int64_t *ext);

/* gspmd_layout.c */
/* Local shape of a value of global shape `gs` laid out as s. */
void gspmd_local_shape(const shape_t *gs, const shd_t *s, const gspmd_mesh_t *mesh,
                       shape_t *out);
/* The sharding as the document writes it: [null, "data", ["x","y"]], plus
 * "partial": [...] for partial values. New reference or NULL. */
json_t *gspmd_shd_json(const shd_t *s, const gspmd_mesh_t *mesh);
/* Shard `shard`'s chunk offset along each dim of the global value:
 * off[d] = chunk index * local dim. */
void gspmd_shard_offsets(const shd_t *s, const gspmd_mesh_t *mesh, const shape_t *gs,
                         int shard, int64_t off[TENSOR_MAX_RANK]);
/* Is the shard's coordinate 0 on every mesh axis in `axes` (bit i = axis
 * i; bits beyond the mesh's rank are ignored)? */
int gspmd_mesh_origin(const gspmd_mesh_t *mesh, int shard, unsigned axes);
/* Does this shard hold a distinct piece: coordinate 0 on every mesh axis
 * the sharding does not use (the replicas of a piece agree)? */
int gspmd_shard_primary(const shd_t *s, const gspmd_mesh_t *mesh, int shard);

/* Largest global value GET .../result?view=global gives element by element
 * (DESIGN Part C), and the most values one piece of it is reported with. */
#define GSPMD_GLOBAL_VALUES_MAX 65536
/* Per-shard outputs are reported with values up to this many elements
 * (DESIGN Part A). */
#define GSPMD_SHARD_VALUES_MAX 4096

/* The host task's "full_values" for global computation c (docs/worker-
 * protocol.md): {output: [replica mesh axes]} for each output whose global
 * value has at most GSPMD_GLOBAL_VALUES_MAX elements but whose pieces have
 * more than GSPMD_SHARD_VALUES_MAX: the shards with coordinate 0 on every
 * listed axis (one copy of each piece) report its values anyway, so the
 * global view can show them. New reference ({} when none), or NULL on OOM. */
json_t *gspmd_full_values_json(const gspmd_t *g, const comp_t *c, const gspmd_mesh_t *mesh);

#endif
