/* exec_run.h - running one host task to completion (no threads here).
 *
 * exec_run_task() compiles the task's computation once, runs its ops in
 * order for every local shard (local ops via kernel_run(), `input` edges
 * through the mailbox, collectives in exec_coll.c: in memory between local
 * shards, one packed message per process pair), forwards the `sends`, and
 * returns the report body of docs/worker-protocol.md: succeeded with
 * timings and one output tensor per local shard, failed with an error, or
 * cancelled. It never aborts the process on a bad task. */
#ifndef ATOLL_EXEC_RUN_H
#define ATOLL_EXEC_RUN_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dplane.h"
#include "mbox.h"
#include "ostore.h"
#include "wtask.h"


/* An all_reduce of at least this many bytes per shard, in a group of 3 or
 * more, sums in the ring's order (coll_fold_ring: chunk c from position c
 * on), smaller ones in position order (coll_combine): the orders the
 * per-shard runtime's ring and direct algorithms used, so results keep
 * their bits whatever moves them. */
#define EXEC_RING_MIN_BYTES_DEFAULT (64 * 1024)

/* A whole-argument collective over a slice on at least this many worker
 * processes goes through the slice's root process (exec_coll.c, "Relay"):
 * 2 (P - 1) messages and connections instead of P (P - 1). Below it every
 * pair exchanges directly, one step fewer. */
#define EXEC_RELAY_MIN_PROCS_DEFAULT 16

/* How collectives ran (for tests and logs). */
typedef struct exec_counters {
    atomic_llong ring;          /* all_reduces summed in ring order (per host task) */
    atomic_llong direct;        /* other collectives (per host task) */
    atomic_llong packs;         /* collective messages sent to other processes */
    atomic_llong relayed;       /* collectives (per host task) that went through the root */
    atomic_llong bad_size;      /* received messages whose size disagreed with the
                                   plan (each failed its host task) */
} exec_counters_t;

/* How this worker runs users' programs (DESIGN Part F; atoll-worker
 * --run-as, --run-dir). */
struct runlog;
typedef struct exec_run_opts {
    const char *dir;            /* parent of the processes' working directories */
    int run_as;                 /* switch the programs to uid/gid */
    unsigned uid, gid;
    int refuse;                 /* root without --run-as: run computations fail */
    char host[64];              /* this worker's host, for process states */
    struct runlog *log;         /* output and state shipping; may be NULL */
} exec_run_opts_t;

typedef struct exec_env {
    mbox_t *mb;                 /* borrowed */
    dplane_t *dp;               /* borrowed */
    ostore_t *st;               /* borrowed: every buffer a task holds lives here */
    int64_t ring_min_bytes;     /* see EXEC_RING_MIN_BYTES_DEFAULT; INT64_MAX: never ring */
    exec_counters_t *counters;  /* borrowed; may be NULL */
    int64_t peer_timeout_us;    /* how long one wait for a peer may take */
    int relay_min_procs;        /* see EXEC_RELAY_MIN_PROCS_DEFAULT */
    int sim;                    /* `sim` backend: real arithmetic, but `compute`
                                   sleeps instead of busy-waiting */
    const exec_run_opts_t *run; /* borrowed; NULL: run computations fail */
} exec_env_t;

/* Returns a new JSON object (caller owns the reference), or NULL only when
 * out of memory. */
json_t *exec_run_task(const exec_env_t *env, const wtask_t *t);

/* Report bodies for tasks that never ran. New references; NULL on OOM. */
json_t *exec_report_failed(const char *error);
json_t *exec_report_cancelled(void);

/* {"shape": [...], "sum": S, "values_f32": "base64" (f32b64.h; when at
 * most max_values elements)}; NULL on OOM. */
json_t *exec_tensor_json(const tensor_t *t, int64_t max_values);

#endif
