/* exec_run.h - running one shard task to completion (no threads here).
 *
 * exec_run_task() compiles the task's computation, runs its ops in order
 * (local ops via kernel_run(), `input` and collectives through the mailbox
 * and data plane), forwards the `sends`, and returns the report body of
 * docs/worker-protocol.md: succeeded with timings and outputs, failed with
 * an error, or cancelled. It never aborts the process on a bad task. */
#ifndef ATOLL_EXEC_RUN_H
#define ATOLL_EXEC_RUN_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dplane.h"
#include "mbox.h"
#include "ostore.h"
#include "wtask.h"

/* Largest output reported element by element (DESIGN.md: values when <= 4096). */
#define EXEC_MAX_REPORTED_VALUES 4096

/* Collectives on at least this many bytes per shard use the ring
 * algorithms (all_reduce: reduce-scatter + all-gather; all_gather: ring of
 * blocks) when the group has 3 or more members; smaller ones exchange
 * directly (one message to every member: fewest round trips). */
#define EXEC_RING_MIN_BYTES_DEFAULT (64 * 1024)

/* How collectives ran (for tests and logs). */
typedef struct exec_counters {
    atomic_llong ring;          /* collectives that took a ring algorithm */
    atomic_llong direct;        /* collectives exchanged directly (incl. ppermute and
                                   two-level ones) */
    atomic_llong two_level;     /* of those, two-level (leaders per process) */
    atomic_llong bad_size;      /* received messages whose size disagreed with the
                                   plan (each failed its shard) */
} exec_counters_t;

typedef struct exec_env {
    mbox_t *mb;                 /* borrowed */
    dplane_t *dp;               /* borrowed */
    ostore_t *st;               /* borrowed: every buffer a task holds lives here */
    int64_t ring_min_bytes;     /* see EXEC_RING_MIN_BYTES_DEFAULT; INT64_MAX: never ring */
    exec_counters_t *counters;  /* borrowed; may be NULL */
    int64_t peer_timeout_us;    /* how long one wait for a peer may take */
    int sim;                    /* `sim` backend: real arithmetic, but `compute`
                                   sleeps instead of busy-waiting */
    int no_two_level;           /* 1: small collectives never go through process
                                   leaders (always the flat direct exchange) */
} exec_env_t;

/* Returns a new JSON object (caller owns the reference), or NULL only when
 * out of memory. */
json_t *exec_run_task(const exec_env_t *env, const wtask_t *t);

/* Report bodies for tasks that never ran. New references; NULL on OOM. */
json_t *exec_report_failed(const char *error);
json_t *exec_report_cancelled(void);

/* {"shape": [...], "sum": S, "values": [...] (when small)}; NULL on OOM. */
json_t *exec_tensor_json(const tensor_t *t);

#endif
