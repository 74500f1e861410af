/* exec.h - the executor: host tasks in `seq` order on every device.
 *
 * The poll loop's answers (job groups: a placement and host tasks) are
 * read and compiled (exec_take_answer); each host task is queued on every
 * local device it covers (sorted by seq) and run by exec_run_task() on one
 * runner thread, all its shards at once, when it is first in line on every
 * one of its devices. Every task of an answer taken in produces exactly
 * one report through report_fn:
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
/* A poll answer as taken in (exec_take_answer). */
typedef struct exec_answer {
    int ntasks;                 /* the tasks it held, refused ones too */
    int64_t lease;              /* its "lease" (0: none) */
    const char *cancel;         /* its "cancel" value, in the answer's text; NULL: none */
    size_t cancel_len;
} exec_answer_t;

/* Takes in a poll answer, the JSON text [text, text + len) {"jobs":
 * [GROUP...], "cancel": [...], "lease": L}, each GROUP {"job", "attempt",
 * "key", "placement", "tasks": [TASK...]}, in one pass: each task is read
 * and compiled where it stands (wtask_walk), and only once the whole text
 * proved JSON are the tasks queued, as one (no task of it before all are
 * prepared, so none can start ahead of a lower-seq task of another group
 * on its devices: with devices shared between jobs the groups interleave),
 * and the malformed ones (or every task of a group whose placement is
 * malformed) reported failed. Returns 0 with *a filled (the cancels are
 * the caller's to apply, after), or -1 when the text is not JSON (or out
 * of memory): nothing queued or reported, and the answer is not to be
 * acknowledged, so it comes again. */
int exec_take_answer(exec_t *ex, const char *text, size_t len, exec_answer_t *a);
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
