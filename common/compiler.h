/* compiler.h - job documents to compiled sharded programs.
 *
 * compiler_job() validates a whole job document (DESIGN.md Part A: fields,
 * ops, shapes, broadcasting, axes, shard-count rules, acyclic DAG) and
 * returns a job_plan_t. compiler_comp() compiles one computation on its own;
 * the worker uses it to rebuild a shard's program from the task JSON the
 * controller sends, so both sides share one definition of every op.
 *
 * Ownership: every plan/comp returned is freed with job_plan_free() /
 * comp_free(). Input JSON is borrowed, never stolen or kept. */
#ifndef ATOLL_COMPILER_H
#define ATOLL_COMPILER_H

#include <jansson.h>
#include "err.h"
#include "tensor.h"

#define NAME_MAX_LEN 64             /* names of slices, computations, values, islands */
#define MESH_MAX_RANK 3             /* slices and islands have 1..3 dims */
#define JOB_MAX_COMPS 1024
#define JOB_MAX_OPS 4096            /* per computation */

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

/* "all_reduce" -> OP_ALL_REDUCE; -1 when unknown. */
int opcode_from_name(const char *name);
const char *opcode_name(opcode_t code);
/* Non-zero for ops that exchange data among a computation's shards. */
int opcode_is_collective(opcode_t code);

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
    struct gspmd_edge *edge;    /* "reshard" (cross-mesh edge, gspmd.h): owned; NULL when
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

typedef struct job_plan {
    char name[NAME_MAX_LEN];
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
void job_plan_free(job_plan_t *plan);

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
void comp_free(comp_t *c);
/* The slot of the value named `name` in c (names are unique per
 * computation), or -1. */
int comp_value_find(const comp_t *c, const char *name);

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
