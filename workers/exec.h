/* exec.h - the executor: host tasks in `seq` order on every device.
 *
 * Job groups from the poll loop (a placement and host tasks) are parsed;
 * each host task is queued on every local device it covers (sorted by seq)
 * and run by exec_run_task() on one runner thread, all its shards at once,
 * when it is first in line on every one of its devices. Every task handed
 * to exec_submit() produces exactly one report through report_fn:
 * succeeded, failed (bad task, compile error, peer timeout, shutdown) or
 * cancelled.
 *
 * Thread safety: all functions except exec_start/exec_stop may be called
 * from any thread. report_fn runs on a runner thread (or the caller's) and
 * must not block for long; it receives ownership of body, the report as
 * compact JSON text (malloc'd: it frees it), which is NULL only when the
 * report could not be built (out of memory). */
#ifndef ATOLL_EXEC_H
#define ATOLL_EXEC_H

#include <jansson.h>
#include <stdint.h>

#include "dplane.h"
#include "exec_run.h"
#include "jscan.h"
#include "mbox.h"
#include "ostore.h"

/* comp: the task's computation (the report names it: a host task may
 * cover a run of computations, each reported apart), or -1 when the task
 * could not be read that far. hold: 1 when the report may wait (the task
 * succeeded, its placement says "hold_reports", and a later task of the
 * same job attempt is queued here on one of its devices), so that a
 * chain's reports leave in batches; 0 when it should go at once.
 * due_us: the report may not leave before this monotonic time, when the
 * task ends on its devices (a `sim` host runs ahead of them; exec_clock_t). */
typedef void (*exec_report_fn)(void *ctx, int64_t task_id, int32_t comp, char *body, int hold,
                               int64_t due_us);

typedef struct exec_cfg {
    int ndevices;
    int64_t peer_timeout_us;
    int sim;
    ostore_t *store;            /* borrowed; NULL: the executor makes its own
                                   with EXEC_DEFAULT_STORE_CAP bytes */
    int64_t ring_min_bytes;     /* 0: EXEC_RING_MIN_BYTES_DEFAULT; INT64_MAX:
                                   collectives always exchange directly */
    int relay_min_procs;        /* 0: EXEC_RELAY_MIN_PROCS_DEFAULT */
    int64_t sim_ahead_us;       /* 0: EXEC_SIM_AHEAD_US (exec_env.h) */
    const char *self_addr;      /* this worker's data address (borrowed, copied):
                                   names its proc in every placement */
    const exec_run_opts_t *run; /* users' programs (borrowed, must outlive the
                                   executor); NULL: run computations fail */
} exec_cfg_t;

#define EXEC_DEFAULT_STORE_CAP ((int64_t)1024 * 1024 * 1024)

typedef struct exec exec_t;

/* mb and dp are borrowed and must outlive the executor. NULL on failure. */
exec_t *exec_start(const exec_cfg_t *cfg, mbox_t *mb, dplane_t *dp, exec_report_fn report_fn,
                   void *report_ctx);
/* A poll answer's tasks, read but not yet queued (exec_batch_read). */
typedef struct exec_batch exec_batch_t;

/* Reads the job groups next in s, {"job", "attempt", "key", "placement",
 * "tasks": [TASK...]}: one group (one) or a poll answer's `jobs` array of
 * them (wtask_walk), into *out: each task compiled and prepared to run,
 * each malformed one (or every task of a group whose placement is
 * malformed) noted refused. Nothing is queued or reported yet, so a caller
 * that finds the rest of the answer broken drops the batch and the
 * answer comes again. 0, or -1 when the value is not JSON (or out of
 * memory): nothing kept, *out NULL. */
int exec_batch_read(exec_t *ex, jscan_t *s, int one, exec_batch_t **out);
/* Queues a batch's tasks as one: no task of it is queued before all of
 * them are prepared, so none can start ahead of a lower-seq task of
 * another group on its devices (a group lists its tasks in seq order, but
 * with devices shared between jobs the groups interleave); reports its
 * refused tasks failed (those whose id could be read); frees the batch.
 * Returns the number of tasks it held (NULL: 0). */
int exec_batch_queue(exec_t *ex, exec_batch_t *b);
/* Frees a batch without queueing anything (NULL: nothing). */
void exec_batch_drop(exec_t *ex, exec_batch_t *b);
/* A group's text (exec_submit) or an answer's `jobs` array's text
 * (exec_submit_answer), borrowed, read and queued as above. Returns the
 * number of tasks, or -1 (nothing queued) when it is not one JSON value. */
int exec_submit(exec_t *ex, const char *group, size_t len);
int exec_submit_answer(exec_t *ex, const char *jobs, size_t len);
/* Aborts attempt `attempt` of a job, and its older attempts (attempts only
 * grow, so they are over too): their queued tasks are reported cancelled,
 * their running tasks wake from their waits and report cancelled, their
 * messages are dropped. Tasks of a newer attempt of the same job, queued or
 * running here, are not disturbed. A job < 1 or attempt < 0 is ignored.
 * Returns how many tasks this call newly aborted (0 when the controller
 * repeats a cancel we already applied). */
int exec_cancel_attempt(exec_t *ex, int64_t job, int32_t attempt);
/* Collective algorithm counts so far (borrowed). */
exec_counters_t *exec_counters(exec_t *ex);
/* Tasks queued or running. */
int exec_pending(exec_t *ex);
/* Waits until nothing is queued or running, at most timeout_ms. Returns 0
 * when drained, -1 on timeout. */
int exec_drain(exec_t *ex, int64_t timeout_ms);
/* Reports every still-queued task failed ("worker shutting down"), waits
 * for the running ones (call mbox_shutdown() first so they cannot wait
 * for peers), joins the threads and frees. */
void exec_stop(exec_t *ex);

#endif
