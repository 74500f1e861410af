/* compiler_types.h - the data the compiler's stages and the GSPMD
 * partitioner hand each other: limits, ops, computations, shardings,
 * cross-mesh edges, partitionings and job plans, and how each is freed.
 *
 * Every stage includes this header; it includes no stage, so the stages
 * form a DAG above it (compiler.h and gspmd.h draw it). Nothing here
 * reads JSON or decides anything.
 *
 * Ownership (what each free below releases):
 *  - a comp_t owns its arrays (ops and their perm, vnames, vshapes,
 *    outputs, inputs and each input's edge), its run spec, run_json and
 *    its partitioning (gspmd);
 *  - a gspmd_t owns the global comp_t it was built from, its shardings and
 *    the lowered JSON;
 *  - a job_plan_t owns its slices, comps (released in place) and topo.
 * comp_free() and gspmd_free() therefore call each other, which is why both
 * live in compiler_types.c and not in the stage that builds the value. */
#ifndef ATOLL_COMPILER_TYPES_H
#define ATOLL_COMPILER_TYPES_H

#include <jansson.h>
#include <stdint.h>
#include "tensor.h"

/* ------------------------------------------------------------------ */
/* Limits. */

#define NAME_MAX_LEN 64             /* names of slices, computations, values, islands */
#define MESH_MAX_RANK 3             /* slices and islands have 1..3 dims */
#define JOB_MAX_COMPS 1024
#define JOB_MAX_OPS 4096            /* per computation */
#define SLICE_DIM_MAX 4096          /* each dim of a slice or island mesh: 1..SLICE_DIM_MAX */
#define JOB_PRIORITY_LIMIT 1000     /* a job's priority (and a tenant's max_priority): +-this */

/* ------------------------------------------------------------------ */
/* Ops and computations. */

typedef enum opcode {
    OP_FILL, OP_IOTA, OP_SHARD_INDEX, OP_INPUT,
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_MAX, OP_MIN,
    OP_NEG, OP_RELU, OP_EXP, OP_TANH,
    OP_SCALE, OP_MATMUL, OP_TRANSPOSE, OP_RESHAPE, OP_REDUCE_SUM,
    OP_REDUCE_MAX, OP_SOFTMAX, OP_RSQRT, OP_LOG, OP_EINSUM,
    OP_ALL_REDUCE, OP_ALL_GATHER, OP_REDUCE_SCATTER, OP_PPERMUTE, OP_ALL_TO_ALL,
    OP_COMPUTE, OP_SHARD_SLICE, OP_RUN_OUTPUT,
    OP__COUNT
} opcode_t;

typedef enum reduce_kind { REDUCE_SUM, REDUCE_MAX, REDUCE_MIN } reduce_kind_t;

/* A compiled einsum spec: the letters of each operand (0, 1) and of the
 * output (2), as indexes 0..25 ('a'..'z'), n[i] of them (the rank). */
typedef struct einsum {
    uint8_t n[3];
    uint8_t l[3][TENSOR_MAX_RANK];
} einsum_t;

typedef struct op {
    opcode_t code;
    int out;                    /* value slot written (index into comp->vnames) */
    int nargs;
    int arg[2];                 /* value slots read; -1 when unused */
    shape_t shape;              /* inferred output shape */
    float value;                /* fill */
    float factor;               /* scale */
    int axis;                   /* reduce_sum (-1 = all axes), all_gather, reduce_scatter */
    reduce_kind_t reduce;       /* all_reduce, reduce_scatter */
    unsigned mesh_axes;         /* collectives: bit i = slice axis i; 0 = every axis */
    int64_t shift;              /* ppermute with "shift" */
    int32_t *perm;              /* ppermute with "pairs": nperm sources by target, then
                                   nperm targets by source (-1: none); owned, freed with
                                   the comp; NULL for "shift" */
    int nperm;                  /* the group size the pairs were checked against */
    int split_axis, concat_axis;/* all_to_all */
    int64_t us;                 /* compute */
    int input;                  /* OP_INPUT: index into comp->inputs */
    einsum_t ein;               /* einsum */
    /* shard_slice: chunk = row-major index of the shard's coordinates along
     * the listed mesh axes (major to minor): coordinate i is
     * (shard / slice_stride[i]) % slice_dim[i]. */
    int nslice;
    int64_t slice_stride[MESH_MAX_RANK], slice_dim[MESH_MAX_RANK];
} op_t;

/* One `input` op: an edge producer.value -> this computation. */
typedef struct comp_input {
    char from[2 * NAME_MAX_LEN + 2];  /* "produce.z" as written */
    char producer_name[NAME_MAX_LEN];
    char value[NAME_MAX_LEN];
    int producer;               /* producer comp index in the job; -1 in compiler_comp() */
    int op_index;               /* index of the input op in this comp's ops */
    shape_t shape;              /* the producer's value, as each of its shards holds it */
    struct gspmd_edge *edge;    /* "reshard" (cross-mesh edge below): owned; NULL when
                                   shard k of the producer feeds shard k */
} comp_input_t;

typedef struct comp {
    char name[NAME_MAX_LEN];
    int slice;                  /* index into plan->slices; -1 in compiler_comp() */
    shape_t slice_shape;        /* mesh shape of the slice the comp runs on */
    int nshards;                /* shape_numel(&slice_shape) */
    int nops;
    op_t *ops;
    int nvalues;                /* value slots: one per op (each op defines one value) */
    char (*vnames)[NAME_MAX_LEN];
    shape_t *vshapes;
    int noutputs;
    int *outputs;               /* value slots listed in "outputs" */
    int ninputs;
    comp_input_t *inputs;
    int global;                 /* written at global shapes ("global": true, Part C) */
    struct gspmd *gspmd;        /* compiler_job(): for a global comp, its partitioning;
                                   ops above are then the lowered per-shard program.
                                   Owned; NULL otherwise */
    /* A user-program computation ("run", DESIGN Part F): its ops are one
     * `input` op per entry of "inputs", then one `run_output` op per
     * output (shape rank -1 when not declared in run.shapes: known only
     * when the processes wrote it). Owned; NULL for ops computations. */
    struct runspec *run;
    json_t *run_json;           /* compiler_job(): that program as a computation object
                                   (what workers get); owned reference, or NULL */
} comp_t;

/* ------------------------------------------------------------------ */
/* Shardings, meshes, cross-mesh edges, partitionings (gspmd.h). */

/* How a value is laid out over the mesh: dim d is split over the mesh axes
 * ax[d][0..n[d]-1], major to minor (chunk index = row-major index of the
 * shard's coordinates along them). A mesh axis appears at most once. Axes
 * not named replicate the value. `partial` (bit per mesh axis) marks a
 * value whose shards hold partial sums over those axes (internal to
 * lowering; never the sharding of a user's value). */
typedef struct shd {
    int rank;
    uint8_t n[TENSOR_MAX_RANK];
    uint8_t ax[TENSOR_MAX_RANK][MESH_MAX_RANK];
    unsigned partial;
} shd_t;

/* A slice's mesh as the partitioner sees it. */
typedef struct gspmd_mesh {
    shape_t shape;
    char axes[MESH_MAX_RANK][NAME_MAX_LEN];
} gspmd_mesh_t;

/* A cross-mesh edge (DESIGN Part C): a value of shape `global`, laid out
 * as `from` on the producer's mesh, delivered laid out as `to` on the
 * consumer's. Consumer shard c gets, from each distinct piece overlapping
 * its box, one replica's intersection (the replica whose ordinal among the
 * piece's holders is c mod their number, so replicas share the sending),
 * worker to worker, tagged (src = producer shard, dst = c). Both ends
 * derive the same pieces from this description alone. */
typedef struct gspmd_edge {
    shape_t global;
    shape_t from_mesh, to_mesh;
    shd_t from, to;
} gspmd_edge_t;

/* A global computation partitioned (gspmd_partition(), gspmd.h). */
typedef struct gspmd {
    comp_t *global;             /* the program as written: global shapes (owned) */
    shd_t *vshd;                /* per value of `global`: its sharding */
    json_t *lowered;            /* per-shard computation object (Part A ops) */
    int nlowered;               /* ops in lowered */
    shd_t *lshd;                /* per lowered op: its value's sharding (global view) */
    uint8_t *inserted;          /* per lowered op: 1 when the partitioner added it */
    int ncoll;                  /* collectives inserted */
} gspmd_t;

/* ------------------------------------------------------------------ */
/* Jobs. */

typedef struct job_slice {
    char name[NAME_MAX_LEN];
    shape_t shape;              /* 1..3 dims */
    char island[NAME_MAX_LEN];  /* "" = any island */
    char axes[MESH_MAX_RANK][NAME_MAX_LEN];   /* "axes", default x, y, z */
} job_slice_t;

typedef struct island_desc {
    const char *name;
    shape_t shape;
} island_desc_t;

/* A job's name: up to JOB_NAME_MAX_CHARS printable characters (Unicode
 * code points, UTF-8: up to 4 bytes each). */
#define JOB_NAME_MAX_CHARS 63

typedef struct job_plan {
    char name[4 * JOB_NAME_MAX_CHARS + 1];
    int64_t priority;
    int max_retries;            /* optional field, default 2 */
    int preemptible;            /* "preemptible": true (DESIGN Part D) */
    int shared;                 /* "sharing": "shared" (DESIGN Part D) */
    int nslices;
    job_slice_t *slices;
    int ncomps;
    comp_t *comps;
    int *topo;                  /* ncomps comp indexes, producers before consumers,
                                   ties broken by document order */
} job_plan_t;

/* ------------------------------------------------------------------ */
/* Freeing (compiler_types.c). */

/* Frees c and all it owns (see above); NULL is ignored. */
void comp_free(comp_t *c);
/* The slot of the value named `name` in c (names are unique per
 * computation), or -1. */
int comp_value_find(const comp_t *c, const char *name);
/* Frees g, the global comp_t it owns and its shardings; NULL is ignored. */
void gspmd_free(gspmd_t *g);
/* Frees the plan and every computation in it; NULL is ignored. */
void job_plan_free(job_plan_t *plan);

#endif
