/* wtask.h - a job group of the poll answer: its placement and host tasks.
 *
 * The controller hands a worker, per job attempt, one PLACEMENT (which
 * worker process holds which island devices, and where each slice of the
 * job lies) and the HOST TASKs of that attempt the worker runs: one per
 * computation, covering every shard of it whose device this worker holds
 * (docs/worker-protocol.md). wtask_walk() reads an answer's groups from
 * their text and hands over each TASK parsed (or refused, with the reason),
 * its `computation` compiled (compiler_comp() validates it; one program
 * is compiled once and its plan shared: plancache.h), so the
 * executor never touches JSON. Compiling at intake, on the polling thread, keeps the
 * compiler and the JSON's frees off the runner's path between a chain's
 * computations. A computation that does not compile is still a parsed
 * task: it fails when its turn comes to run (plan_err), in queue order,
 * like any other failure of a task.
 *
 * Proc ids: a proc's index in the placement's `procs`; the data plane tags
 * collective packs with them. Shard k of a slice lives on proc
 * wplace_proc_of(); every worker derives the same answer from the same
 * placement, which is what lets both ends of a pack agree on its layout.
 *
 * Ownership: a wplace_t is shared by the tasks of its group (refcounted,
 * atomic); a wtask_t owns its arrays, one reference to its plan (or its
 * plan_err) and one reference to its placement, and keeps no JSON; free
 * with wtask_free(). */
#ifndef ATOLL_WTASK_H
#define ATOLL_WTASK_H

#include <jansson.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "dplane.h"
#include "jscan.h"
#include "tensor.h"

#define WPLACE_MAX_PROCS 4096          /* procs in one placement */
#define WPLACE_MAX_SLICES 64           /* slices of one job */
#define WPLACE_MAX_DEVICES 4096        /* devices of one island (alloc.h's cap) */

typedef struct wplace_proc {
    char addr[DPLANE_ADDR_MAX];
    char island[NAME_MAX_LEN];
    int64_t first, count;              /* island device indexes [first, first+count) */
} wplace_proc_t;

typedef struct wplace_slice {
    char name[NAME_MAX_LEN];
    char island[NAME_MAX_LEN];
    shape_t mesh;                      /* the island's mesh shape */
    shape_t box;                       /* the slice as a box, padded to the mesh's rank */
    int64_t origin[MESH_MAX_RANK];     /* island coordinates of the box's corner */
    int *proc_of;                      /* numel(box) entries: shard -> proc id */
    int nshards;
} wplace_slice_t;

typedef struct wplace {
    atomic_int refs;
    int nprocs;
    wplace_proc_t *procs;
    int nslices;
    wplace_slice_t *slices;
    int self;                          /* this worker's proc id, or -1 */
    mbox_key_t key;                    /* the attempt's data-plane key (the group's "key") */
    int hold_reports;                  /* "hold_reports": succeeded reports may wait while
                                          more of the attempt runs here (wreport.h) */
} wplace_t;

/* Parses a PLACEMENT; self_addr is this worker's data address (its proc is
 * the one with that address). Checks every count and range: procs of one
 * island do not overlap, every box lies inside its mesh, every shard of
 * every slice is held by exactly one proc. Returns 0 and a placement with
 * one reference, or -1 with a reason in err. */
int wplace_parse(const json_t *j, const char *self_addr, wplace_t **out, char *err,
                 size_t errlen);
/* Sets p->key from the group's "key": 32 hex digits (NULL: none). 0, or
 * -1 with a reason in err. */
int wplace_set_key(wplace_t *p, const char *hex, char *err, size_t errlen);
wplace_t *wplace_ref(wplace_t *p);
void wplace_unref(wplace_t *p);
/* Index of the slice named `name`, or -1. */
int wplace_slice_index(const wplace_t *p, const char *name);

typedef struct wtask_send {
    char value[NAME_MAX_LEN];          /* value name in this computation */
    int32_t comp;                      /* consumer computation index */
    int32_t op;                        /* the consumer's `input` op index */
    int slice;                         /* consumer's slice (index in the placement) */
    struct gspmd_edge *edge;           /* cross-mesh edge ("reshard"): pieces for each
                                          consumer shard; owned; NULL: shard k to shard k */
} wtask_send_t;

/* An output of a global computation whose pieces are reported with up to
 * GSPMD_GLOBAL_VALUES_MAX values by one replica each (the task's
 * "full_values", gspmd.h). */
typedef struct wtask_full {
    char value[NAME_MAX_LEN];
    unsigned replica_axes;             /* bit per slice axis */
} wtask_full_t;

typedef struct wtask {
    int64_t id;
    int64_t job;
    int32_t attempt;
    int32_t comp;
    int64_t seq;
    int slice;                         /* index in place->slices */
    shape_t slice_shape;
    const comp_t *plan;                /* `computation` compiled at parse against
                                          slice_shape and `input_shapes`, maybe shared
                                          with other tasks (plancache.h): read-only,
                                          valid while plan_ref is held; NULL when it
                                          does not compile (plan_err) */
    struct plan_ref *plan_ref;         /* owned reference to plan; NULL with it */
    char *plan_err;                    /* owned: "compile: FIELD: DETAIL" when plan is
                                          NULL, else NULL */
    int nlocal;                        /* shards of this computation run here */
    int32_t *shards;                   /* nlocal shard indexes, increasing */
    int32_t *devices;                  /* nlocal worker-local devices */
    int nsends;
    wtask_send_t *sends;
    int nfull;
    wtask_full_t *full;                /* "full_values"; NULL when none */
    wplace_t *place;                   /* one reference */
} wtask_t;

/* Parses one TASK, the JSON text [text, text + len), of a group whose
 * placement is `place` (borrowed; the task takes its own reference) for a
 * worker of ndevices devices. Returns 0 and sets *out, or -1 with a reason
 * in err. *task_id is set whenever an id could be read (else -1), so that
 * a malformed task can still be reported failed. A member given twice
 * refuses the task. */
int wtask_parse(const char *text, size_t len, wplace_t *place, int ndevices, wtask_t **out,
                int64_t *task_id, char *err, size_t errlen);

/* A TASK of a walked answer: parsed (t, whose ownership passes to the
 * callee), or refused (t NULL, err why; id and comp name it when they
 * could be read, else -1). */
typedef struct wtask_item {
    wtask_t *t;
    int64_t id;
    int32_t comp;
    const char *err;                   /* borrowed for the call */
} wtask_item_t;
typedef void (*wtask_fn)(void *ctx, wtask_item_t *item);

/* Reads the groups {"job", "attempt", "key", "placement", "tasks":
 * [TASK...]} of a poll answer, the JSON value next in s: one group (one)
 * or the answer's "jobs" array of them, and hands each TASK to fn in the
 * text's order. A group whose placement or key is malformed has every
 * task refused with that reason; a task of another job or attempt than
 * its group's is refused. Returns 0 with the value consumed, or -1 when
 * it is not JSON (or a tree could not be built; s is then failed): the
 * walk stops there, and the items handed over so far are the callee's to
 * keep or drop. self_addr names this worker's proc in each placement. */
int wtask_walk(jscan_t *s, int one, const char *self_addr, int ndevices, wtask_fn fn,
               void *ctx);
void wtask_free(wtask_t *t);

/* Non-zero when shard `shard`'s output `value` is reported with up to
 * GSPMD_GLOBAL_VALUES_MAX values: the value is listed in "full_values" and
 * the shard's coordinate is 0 on each of its replica axes. */
int wtask_full_values(const wtask_t *t, const char *value, int shard);

/* Parses a JSON array of 0..max_rank non-negative integers into a shape;
 * min_dim is the smallest dim allowed. Returns 0 or -1. */
int wtask_shape_from_json(const json_t *a, int max_rank, int64_t min_dim, shape_t *out);

#endif
