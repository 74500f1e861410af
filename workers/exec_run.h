/* exec_run.h - running one host task to completion (no threads here).
 *
 * exec_run_task() compiles the task's computation once, runs its ops in
 * order for every local shard (local ops via kernel_run(), `input` edges
 * through the mailbox, collectives in exec_coll.c: in memory between local
 * shards, one packed message per process pair), forwards the `sends`, and
 * returns the report body of docs/worker-protocol.md, as text: succeeded with
 * timings and one output tensor per local shard, failed with an error, or
 * cancelled. It never aborts the process on a bad task.
 *
 * The executor's modules, each above the ones it uses: exec.c (queues,
 * runner threads) -> exec_run.c (one host task: ops, edges, sends,
 * report) -> exec_coll.c (collectives) and exec_gang.c (users' programs)
 * -> exec_io.c (the task's state, run_t, and its data movement) ->
 * exec_env.h (what a task borrows from its worker; included here). */
#ifndef ATOLL_EXEC_RUN_H
#define ATOLL_EXEC_RUN_H

#include "exec_env.h"
#include "tensor.h"
#include "wtask.h"

/* A task's place on its devices' clock (monotonic, util_mono_us). */
typedef struct exec_clock {
    int64_t free_us;            /* in: when its devices finish the tasks before it
                                   (sim; at most now otherwise) */
    int64_t end_us;             /* out: when it ends on them; its report may not
                                   leave before, the next task starts there */
} exec_clock_t;

/* Runs t (borrowed, as env is) on the calling runner thread, which it
 * blocks until the task's host work is done (with `sim`, at most
 * EXEC_SIM_AHEAD_US before clk->end_us; at end_us otherwise): waits for
 * peers and for store room are bounded by env->peer_timeout_us, a run
 * computation's by its timeout_s, and the job's cancel ends them early.
 * Returns the report as compact JSON text, malloc'd (the caller frees),
 * or NULL only when out of memory; *succeeded says whether its state is
 * "succeeded". */
char *exec_run_task(const exec_env_t *env, const wtask_t *t, exec_clock_t *clk, int *succeeded);

/* Report bodies for tasks that never ran, as text (the caller frees);
 * NULL on OOM. */
char *exec_report_failed(const char *error);
char *exec_report_cancelled(void);

#endif
