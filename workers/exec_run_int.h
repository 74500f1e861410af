/* exec_run_int.h - the state of one running host task, shared by
 * exec_run.c (ops, edges, sends, report) and exec_coll.c (collectives).
 * Internal to the executor; nothing else includes it. */
#ifndef ATOLL_EXEC_RUN_INT_H
#define ATOLL_EXEC_RUN_INT_H

#include "compiler.h"
#include "exec_run.h"

typedef struct run {
    const exec_env_t *env;
    const wtask_t *t;
    comp_t *comp;               /* owned; compiled once for every local shard */
    int nl;                     /* local shards (t->nlocal) */
    int nv;                     /* comp->nvalues */
    ostore_obj_t **objs;        /* nl * nv slots, objs[l * nv + v]: the store object
                                   of value v of local shard l, NULL before it exists
                                   and after its last consumer ran */
    int *refs;                  /* consumers of each value (same for every shard):
                                   ops reading it, sends of it, +1 for an output */
    int *send_slot;             /* value of each of t->sends */
    int64_t started_us;
    int64_t inputs_ready_us;    /* last `input` edge taken, else started_us */
    int cancelled;
    int gang_ran;               /* a run computation's processes ran (exec_gang.c) */
    tensor_t **gang_outs;       /* noutputs * nl tensors they wrote, owned until the
                                   run_output ops take them */
    char err[512];
    char unreachable[64];       /* data address of a peer that could not be reached */
} run_t;

/* Store key of value v (or a collective's received pack) of shard k. */
ostore_key_t exec_run_key(const run_t *r, int value, int shard);
/* Waits for one message (peer timeout). 0 and *out, or -1 with r->err or
 * r->cancelled set. */
int exec_run_take(run_t *r, const mbox_tag_t *tag, tensor_t **out);
/* Sends one message, retrying an unreachable peer up to the peer timeout.
 * 0, or -1 with r->err (and r->unreachable) or r->cancelled set. */
int exec_run_send(run_t *r, const char *to, const mbox_tag_t *tag, const tensor_t *v);
/* Counts a received message whose size disagrees with the plan. */
void exec_run_count_bad(const run_t *r);

/* A run computation's `run_output` op i (DESIGN Part F): the first call
 * runs the gang of local processes (inputs written as .npy, outputs read
 * back); each call hands over op i's tensors, one per local shard (NULL
 * for the placeholder op of a run without outputs). i = -1 only runs the
 * gang. Returns 0, or -1 with r->err or r->cancelled set. */
int exec_gang_output(run_t *r, int i, tensor_t **outs);
/* Frees what the gang left untaken. */
void exec_gang_cleanup(run_t *r);

/* Runs collective op i for every local shard: args[l] is shard l's
 * argument (borrowed), outs[l] receives its result (caller owns). Returns
 * 0, or -1 with r->err or r->cancelled set (outs all NULL then). */
int exec_coll_run(run_t *r, int i, const tensor_t *const *args, tensor_t **outs);

#endif
