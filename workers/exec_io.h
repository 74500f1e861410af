/* exec_io.h - the state of one running host task (run_t) and the data
 * movement every part of it uses: store keys, mailbox takes, sends to
 * peers with retry, and the count of messages of the wrong size.
 * exec_run.c (ops, edges, sends, report), exec_coll.c (collectives) and
 * exec_gang.c (users' programs) all stand on it; it stands on none of
 * them. Internal to the executor: nothing outside workers/exec*.c
 * includes it.
 *
 * Threads and ownership: a run_t lives on the stack of the runner thread
 * that runs the task (exec_run_task()), and only that thread touches it;
 * what it owns is marked below, everything else is borrowed from the
 * task (t) or the executor (env). A failing call writes r->err (or sets
 * r->cancelled) and returns -1; its callers pass the -1 up unchanged, so
 * the task's report names the first failure. */
#ifndef ATOLL_EXEC_IO_H
#define ATOLL_EXEC_IO_H

#include "compiler.h"
#include "exec_env.h"
#include "wtask.h"

typedef struct run {
    const exec_env_t *env;
    const wtask_t *t;
    const comp_t *comp;         /* the task's plan (borrowed), for every local shard */
    int nl;                     /* local shards (t->nlocal) */
    int nv;                     /* comp->nvalues */
    ostore_obj_t **objs;        /* nl * nv slots, objs[l * nv + v]: the store object
                                   of value v of local shard l, NULL before it exists
                                   and after its last consumer ran */
    int *refs;                  /* consumers of each value (same for every shard):
                                   ops reading it, sends of it, +1 for an output */
    int *send_slot;             /* value of each of t->sends */
    int64_t started_us;         /* wall clock: when its devices start it */
    int64_t inputs_ready_us;    /* last `input` edge taken, else started_us */
    int64_t dev_start;          /* monotonic: when its devices start it */
    int64_t dev_at;             /* monotonic: when its devices finish the work
                                   queued on them so far (sim: run_compute) */
    int64_t end_us;             /* monotonic: when it ends on its devices, set
                                   once its ops ran (run_stamp_end) */
    int cancelled;
    int gang_ran;               /* a run computation's processes ran (exec_gang.c) */
    tensor_t **gang_outs;       /* noutputs * nl tensors they wrote, owned until the
                                   run_output ops take them */
    char err[512];
    char unreachable[64];       /* data address of a peer that could not be reached */
} run_t;

/* Store key of value v (or a collective's received pack) of shard k. */
ostore_key_t exec_io_key(const run_t *r, int value, int shard);
/* Waits for one message (peer timeout): blocks the runner until it
 * arrives, the deadline passes, or the job is cancelled. 0 and *out
 * (caller owns it), or -1 with r->err or r->cancelled set. */
int exec_io_take(run_t *r, const mbox_tag_t *tag, tensor_t **out);
/* Sends one message (v borrowed), retrying an unreachable peer with
 * backoff up to the peer timeout; blocks until the payload was sent.
 * 0, or -1 with r->err (and r->unreachable) or r->cancelled set. */
int exec_io_send(run_t *r, const char *to, const mbox_tag_t *tag, const tensor_t *v);
/* Counts a received message whose size disagrees with the plan. */
void exec_io_count_bad(const run_t *r);
/* Blocks the host until monotonic time at_us (util_mono_us), in slices of
 * at most 1 ms so that the job's cancel stops it within about a
 * millisecond. Returns 0, or -1 with r->cancelled set. */
int exec_io_wait_until(run_t *r, int64_t at_us);

#endif
