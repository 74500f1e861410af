/* exec_run.c - see exec_run.h.
 *
 * Tags (docs/worker-protocol.md): a collective op i of computation c sends
 * (job, attempt, c, i, my shard, their shard); an edge into `input` op i of
 * consumer c is (job, attempt, c, i, k, k). Each shard sends before it
 * receives, and the mailbox keeps early messages, so no exchange order can
 * deadlock as long as every device runs computations in `seq` order. */
#include "exec_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"
#include "kernels.h"
#include "util.h"

typedef struct run {
    const exec_env_t *env;
    const wtask_t *t;
    comp_t *comp;               /* owned */
    ostore_obj_t **objs;        /* comp->nvalues slots: the store object of each
                                   live value, NULL before it exists and after
                                   its last consumer ran */
    int *refs;                  /* consumers of each slot: ops reading it, sends
                                   of it, +1 when it is an output */
    int *send_slot;             /* slot of each of t->sends */
    int64_t started_us;
    int64_t inputs_ready_us;    /* last `input` edge taken, else started_us */
    int cancelled;
    char err[512];
    char unreachable[64];       /* data address of a peer that could not be reached */
} run_t;

/* Ring steps of collective op i travel under op numbers beyond every real
 * op index: i + (1 + step) * JOB_MAX_OPS (step 0..2n-3), so the steps of
 * one op between the same two shards never share a tag. */
static int32_t ring_op_tag(int i, int step)
{
    return (int32_t)(i + (int64_t)(1 + step) * JOB_MAX_OPS);
}

static mbox_tag_t run_tag(const run_t *r, int comp, int op, int src, int dst)
{
    mbox_tag_t tag = {.job = r->t->job, .attempt = r->t->attempt, .comp = comp,
                      .op = op, .src = src, .dst = dst};
    return tag;
}

static ostore_key_t run_key(const run_t *r, int value)
{
    ostore_key_t k = {.job = r->t->job, .attempt = r->t->attempt, .comp = r->t->comp,
                      .value = value, .shard = r->t->shard};
    return k;
}

/* Stop predicate for back-pressure waits: the task's job was cancelled. */
static int run_stop(void *ctx)
{
    const run_t *r = ctx;
    return mbox_is_cancelled(r->env->mb, r->t->job, r->t->attempt);
}

/* Reserves store memory for a new buffer of `bytes` made by op i, waiting
 * (back-pressure) while the store is full, at most the peer timeout.
 * Returns 0, or -1 with r->err or r->cancelled set. */
static int run_reserve(run_t *r, int i, int64_t bytes)
{
    ostore_stats_t stats;
    int64_t t0 = util_mono_us();
    ostore_status_t st = ostore_reserve(r->env->st, bytes, t0 + r->env->peer_timeout_us,
                                        run_stop, r);
    if (st == OSTORE_OK)
        return 0;
    ostore_stats(r->env->st, &stats);
    if (st == OSTORE_STOPPED)
        r->cancelled = 1;
    else if (st == OSTORE_TOO_BIG)
        snprintf(r->err, sizeof r->err,
                 "op %d needs %lld bytes, more than the whole object store cap of %lld bytes "
                 "(--store-cap-mb)", i, (long long)bytes, (long long)stats.cap_bytes);
    else
        snprintf(r->err, sizeof r->err,
                 "object store full: op %d waited %lld ms for %lld bytes (%lld of %lld bytes "
                 "in use; raise --store-cap-mb)", i, (long long)((util_mono_us() - t0) / 1000),
                 (long long)bytes, (long long)stats.bytes, (long long)stats.cap_bytes);
    return -1;
}

/* Waits for one message. Returns 0 and sets *out, or -1 with r->err or
 * r->cancelled set. */
static int run_take(run_t *r, const mbox_tag_t *tag, tensor_t **out)
{
    int64_t deadline = util_mono_us() + r->env->peer_timeout_us;
    mbox_status_t st = mbox_take(r->env->mb, tag, deadline, out);
    switch (st) {
    case MBOX_OK:
        return 0;
    case MBOX_CANCELLED:
        r->cancelled = 1;
        return -1;
    case MBOX_TIMEOUT:
        snprintf(r->err, sizeof r->err,
                 "timed out after %lld ms waiting for shard %d (op %d of computation %d)",
                 (long long)(r->env->peer_timeout_us / 1000), (int)tag->src,
                 (int)(tag->op % JOB_MAX_OPS), (int)tag->comp);
        return -1;
    case MBOX_STOPPED:
    default:
        snprintf(r->err, sizeof r->err, "worker shutting down");
        return -1;
    }
}

/* Counts a received message whose size disagrees with the plan. */
static void run_count_bad(const run_t *r)
{
    if (r->env->counters)
        atomic_fetch_add(&r->env->counters->bad_size, 1);
}

/* Non-zero (with r->err set and the mismatch counted) when a received
 * tensor is not what the plan expects: exactly `want` when given, else
 * exactly want_numel elements. Every received message goes through here
 * before a byte of it is read: a short or long piece fails the shard, it
 * is never read past its end. */
static int run_bad_size(run_t *r, int i, const mbox_tag_t *tag, const tensor_t *got,
                        const shape_t *want, int64_t want_numel)
{
    int64_t n = shape_numel(&got->shape);
    if (want ? shape_equal(&got->shape, want) : n == want_numel)
        return 0;
    char gs[64], ws[64];
    shape_format(&got->shape, gs, sizeof gs);
    if (want)
        shape_format(want, ws, sizeof ws);
    else
        snprintf(ws, sizeof ws, "%lld elements", (long long)want_numel);
    snprintf(r->err, sizeof r->err,
             "op %d: message from shard %d has shape %s (%lld elements), expected %s",
             i, (int)tag->src, gs, (long long)n, ws);
    run_count_bad(r);
    return 1;
}

/* Takes one collective piece into the store (it was counted while it
 * waited in the mailbox; now the task holds it), after checking its size
 * against the plan (want: exact shape, or NULL and want_numel elements).
 * Returns 0 or -1. */
static int run_take_piece(run_t *r, int i, const mbox_tag_t *tag, const shape_t *want,
                          int64_t want_numel, ostore_obj_t **obj)
{
    tensor_t *t = NULL;
    if (run_take(r, tag, &t) != 0)
        return -1;
    if (run_bad_size(r, i, tag, t, want, want_numel)) {
        tensor_free(t);
        return -1;
    }
    ostore_key_t k = run_key(r, OSTORE_PIECE_BASE - i);
    if (!(*obj = ostore_put(r->env->st, &k, t, 1, 0))) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    return 0;
}

/* Sends one message. A peer that cannot be reached is retried with backoff
 * for up to the peer timeout: a peer worker that died is the controller's
 * to handle (its lease expires, the job is requeued or failed naming that
 * worker, and the cancel that follows ends this loop), so a shard must not
 * fail the job first with a vaguer reason. Returns 0, or -1 with r->err or
 * r->cancelled set. */
static int run_send(run_t *r, const char *to, const mbox_tag_t *tag, const tensor_t *v)
{
    int64_t t0 = util_mono_us(), deadline = t0 + r->env->peer_timeout_us;
    long backoff_ms = 50;
    for (;;) {
        if (dplane_send(r->env->dp, to, tag, v) == 0)
            return 0;
        if (mbox_is_cancelled(r->env->mb, r->t->job, r->t->attempt)) {
            r->cancelled = 1;
            return -1;
        }
        if (mbox_is_stopped(r->env->mb) || util_mono_us() >= deadline)
            break;
        struct timespec ts = {backoff_ms / 1000, (backoff_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff_ms = backoff_ms * 2 > 1000 ? 1000 : backoff_ms * 2;
    }
    snprintf(r->err, sizeof r->err, "cannot send to shard %d at %s (peer unreachable for %lld ms)",
             (int)tag->dst, to, (long long)((util_mono_us() - t0) / 1000));
    snprintf(r->unreachable, sizeof r->unreachable, "%s", to);
    return -1;
}

static int run_input(run_t *r, int i, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    mbox_tag_t tag = run_tag(r, r->t->comp, i, r->t->shard, r->t->shard);
    if (run_take(r, &tag, out) != 0)
        return -1;
    /* Only DAG edges count as inputs; collective pieces are part of the
     * computation itself. Ops run in order, so the last `input` op taken
     * sets the final value. */
    r->inputs_ready_us = util_wall_us();
    if (!shape_equal(&(*out)->shape, &op->shape)) {
        char got[64], want[64];
        shape_format(&(*out)->shape, got, sizeof got);
        shape_format(&op->shape, want, sizeof want);
        snprintf(r->err, sizeof r->err, "input op %d received shape %s, expected %s", i, got,
                 want);
        tensor_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int run_ppermute(run_t *r, int i, const tensor_t *arg, const int *members, int n,
                        int pos, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    int64_t shift = op->shift % n;
    int dst = (int)((pos + shift + n) % n);
    int src = coll_ppermute_source(op, n, pos);
    ostore_obj_t *got = NULL;
    int rc = -1;
    if (src < 0) {
        snprintf(r->err, sizeof r->err, "ppermute op %d: no source", i);
        return -1;
    }
    if (dst == pos) {                   /* shift 0 mod n: keep our own value */
        if (!(*out = tensor_clone(arg))) {
            snprintf(r->err, sizeof r->err, "ppermute op %d: out of memory", i);
            return -1;
        }
        return 0;
    }
    /* The argument goes out as it is: ppermute's piece is the whole value. */
    mbox_tag_t stag = run_tag(r, r->t->comp, i, r->t->shard, members[dst]);
    mbox_tag_t rtag = run_tag(r, r->t->comp, i, members[src], r->t->shard);
    if (run_send(r, r->t->peers[members[dst]], &stag, arg) != 0 ||
        run_take_piece(r, i, &rtag, &arg->shape, 0, &got) != 0)
        goto cleanup;
    const tensor_t *pieces[1] = {ostore_tensor(got)};
    if (coll_combine(op, pieces, n, pos, out) != 0) {
        snprintf(r->err, sizeof r->err, "ppermute op %d: cannot combine", i);
        goto cleanup;
    }
    rc = 0;
cleanup:
    if (got)
        ostore_release(r->env->st, got, 1);
    return rc;
}

/* Direct exchange (all_reduce, all_gather, reduce_scatter, all_to_all):
 * every member sends its piece for each other member, then collects one
 * piece from each. Fewest round trips: the choice for small tensors. */
static int run_exchange(run_t *r, int i, const tensor_t *arg, const int *members, int n,
                        int pos, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    int rc = -1;
    ostore_obj_t **objs = calloc((size_t)n, sizeof *objs);
    const tensor_t **pieces = calloc((size_t)n, sizeof *pieces);
    if (!objs || !pieces) {
        snprintf(r->err, sizeof r->err, "out of memory");
        goto cleanup;
    }
    for (int m = 0; m < n; m++) {
        if (m == pos)
            continue;
        /* Only all_to_all sends a part; the others send the argument itself
         * (no copy: the transport reads it in place). */
        tensor_t *chunk = op->code == OP_ALL_TO_ALL ? coll_piece(op, arg, n, pos, m) : NULL;
        if (op->code == OP_ALL_TO_ALL && !chunk) {
            snprintf(r->err, sizeof r->err, "%s op %d: out of memory", opcode_name(op->code), i);
            goto cleanup;
        }
        mbox_tag_t tag = run_tag(r, r->t->comp, i, r->t->shard, members[m]);
        int sent = run_send(r, r->t->peers[members[m]], &tag, chunk ? chunk : arg);
        tensor_free(chunk);
        if (sent != 0)
            goto cleanup;
    }
    /* What each other member must send: its whole argument (same shape as
     * ours), or for all_to_all one chunk of it. */
    shape_t want;
    if (coll_piece_shape(op, &arg->shape, n, &want) != 0) {
        snprintf(r->err, sizeof r->err, "%s op %d: argument cannot be split %d ways",
                 opcode_name(op->code), i, n);
        goto cleanup;
    }
    for (int m = 0; m < n; m++) {
        mbox_tag_t tag = run_tag(r, r->t->comp, i, members[m], r->t->shard);
        if (m == pos)
            pieces[m] = arg;            /* own contribution; coll_combine cuts
                                           all_to_all's own chunk from it */
        else if (run_take_piece(r, i, &tag, &want, 0, &objs[m]) != 0)
            goto cleanup;
        else
            pieces[m] = ostore_tensor(objs[m]);
    }
    if (coll_combine(op, pieces, n, pos, out) != 0) {
        snprintf(r->err, sizeof r->err, "%s op %d: cannot combine", opcode_name(op->code), i);
        goto cleanup;
    }
    rc = 0;
cleanup:
    for (int m = 0; objs && m < n; m++)
        if (objs[m])
            ostore_release(r->env->st, objs[m], 1);
    free(objs);
    free(pieces);
    return rc;
}

/* Hierarchical exchange: the phases of collective op i travel under
 * negative op numbers, apart from direct (i) and ring (> JOB_MAX_OPS) tags. */
enum { HIER_TO_LEADER = 0, HIER_LEADERS = 1, HIER_FROM_LEADER = 2 };
static int32_t hier_op_tag(int i, int phase)
{
    return (int32_t)(-(1 + i + (int64_t)phase * JOB_MAX_OPS));
}

/* Does member a run in the same worker process as member b? */
static int same_proc(const run_t *r, const int *members, int a, int b)
{
    return strcmp(r->t->peers[members[a]], r->t->peers[members[b]]) == 0;
}

/* How many group members run in member l's process. */
static int proc_members(const run_t *r, const int *members, int n, int l)
{
    int k = 0;
    for (int m = 0; m < n; m++)
        k += same_proc(r, members, m, l);
    return k;
}

/* Leader (lowest group position) of member m's process. */
static int proc_leader(const run_t *r, const int *members, int m)
{
    int l = 0;
    while (!same_proc(r, members, l, m))
        l++;
    return l;
}

/* Two-level exchange for all_reduce, all_gather and reduce_scatter when
 * several group members share a worker process: members hand their
 * argument to their process's leader; leaders swap their processes'
 * arguments packed in one message each; every leader then holds all n
 * contributions and combines them, in group-position order exactly like
 * the direct exchange (same bits), for each of its members. Messages per
 * process: 2(L-1) local + (P-1) out instead of L(n-1). Used only for small
 * tensors (large ones take the ring). */
static int run_exchange_hier(run_t *r, int i, const tensor_t *arg, const int *members, int n,
                             int pos, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    int leader = proc_leader(r, members, pos), rc = -1;
    int64_t numel = shape_numel(&arg->shape);
    ostore_obj_t **objs = calloc((size_t)n, sizeof *objs);
    tensor_t *views = calloc((size_t)n, sizeof *views), *pack = NULL;
    const tensor_t **pieces = calloc((size_t)n, sizeof *pieces);
    if (!objs || !views || !pieces) {
        snprintf(r->err, sizeof r->err, "out of memory");
        goto cleanup;
    }
    if (leader != pos) {   /* a member: give the argument, get the result */
        mbox_tag_t st = run_tag(r, r->t->comp, hier_op_tag(i, HIER_TO_LEADER), r->t->shard,
                                members[leader]);
        mbox_tag_t rt = run_tag(r, r->t->comp, hier_op_tag(i, HIER_FROM_LEADER),
                                members[leader], r->t->shard);
        if (run_send(r, r->t->peers[members[leader]], &st, arg) != 0 ||
            run_take_piece(r, i, &rt, &op->shape, 0, &objs[0]) != 0)
            goto cleanup;
        if (!(*out = tensor_clone(ostore_tensor(objs[0])))) {
            snprintf(r->err, sizeof r->err, "out of memory");
            goto cleanup;
        }
        rc = 0;
        goto cleanup;
    }
    /* Leader: collect this process's arguments, in group-position order. */
    int nlocal = 0;
    for (int m = 0; m < n; m++) {
        if (!same_proc(r, members, m, pos))
            continue;
        nlocal++;
        if (m == pos) {
            pieces[m] = arg;
            continue;
        }
        mbox_tag_t t = run_tag(r, r->t->comp, hier_op_tag(i, HIER_TO_LEADER), members[m],
                               r->t->shard);
        if (run_take_piece(r, i, &t, &arg->shape, 0, &objs[m]) != 0)
            goto cleanup;
        pieces[m] = ostore_tensor(objs[m]);
    }
    /* Pack them (in that order) and swap packs with the other leaders. */
    shape_t ps = {.rank = 1, .dim = {numel * nlocal}};
    if (!(pack = tensor_new(&ps))) {
        snprintf(r->err, sizeof r->err, "out of memory");
        goto cleanup;
    }
    for (int m = 0, k = 0; m < n; m++)
        if (same_proc(r, members, m, pos))
            memcpy(pack->data + numel * k++, pieces[m]->data, sizeof(float) * (size_t)numel);
    for (int l = 0; l < n; l++) {
        if (l == pos || proc_leader(r, members, l) != l)
            continue;
        mbox_tag_t t = run_tag(r, r->t->comp, hier_op_tag(i, HIER_LEADERS), r->t->shard,
                               members[l]);
        if (run_send(r, r->t->peers[members[l]], &t, pack) != 0)
            goto cleanup;
    }
    for (int l = 0; l < n; l++) {
        if (l == pos || proc_leader(r, members, l) != l)
            continue;
        mbox_tag_t t = run_tag(r, r->t->comp, hier_op_tag(i, HIER_LEADERS), members[l],
                               r->t->shard);
        /* Leader l's pack holds one argument per member of its process:
         * exactly that many elements, or the unpacking below would read
         * past its end. */
        if (run_take_piece(r, i, &t, NULL, numel * proc_members(r, members, n, l),
                           &objs[l]) != 0)
            goto cleanup;
        const float *data = ostore_tensor(objs[l])->data;
        for (int m = l, k = 0; m < n; m++) {   /* unpack views, no copy */
            if (!same_proc(r, members, m, l))
                continue;
            views[m].shape = arg->shape;
            views[m].data = (float *)data + numel * k++;
            pieces[m] = &views[m];
        }
    }
    /* Every contribution is here: combine for each local member. */
    for (int m = 0; m < n; m++) {
        if (!same_proc(r, members, m, pos))
            continue;
        tensor_t *res = NULL;
        if (coll_combine(op, pieces, n, m, &res) != 0) {
            snprintf(r->err, sizeof r->err, "%s op %d: cannot combine", opcode_name(op->code), i);
            goto cleanup;
        }
        if (m == pos) {
            *out = res;
            continue;
        }
        mbox_tag_t t = run_tag(r, r->t->comp, hier_op_tag(i, HIER_FROM_LEADER), r->t->shard,
                               members[m]);
        int sent = run_send(r, r->t->peers[members[m]], &t, res);
        tensor_free(res);
        if (sent != 0)
            goto cleanup;
    }
    rc = 0;
cleanup:
    if (rc != 0 && *out) {
        tensor_free(*out);
        *out = NULL;
    }
    for (int m = 0; objs && m < n; m++)
        if (objs[m])
            ostore_release(r->env->st, objs[m], 1);
    tensor_free(pack);
    free(objs);
    free(views);
    free(pieces);
    return rc;
}

/* Is the two-level exchange worth it: some process holds two or more of
 * the group's members (else it is the direct exchange with extra hops). */
static int use_hier(const run_t *r, const op_t *op, const int *members, int n)
{
    if (n < 3 || r->env->no_two_level ||
        (op->code != OP_ALL_REDUCE && op->code != OP_ALL_GATHER && op->code != OP_REDUCE_SCATTER))
        return 0;
    for (int m = 1; m < n; m++)
        if (proc_leader(r, members, m) != m)
            return 1;
    return 0;
}

/* One ring step: sends count floats at send_data to the next member and
 * takes the previous member's message for the same step. The received
 * piece must hold want floats. Returns 0 and *got (caller releases), or -1. */
static int ring_step(run_t *r, int i, int step, const int *members, int n, int pos,
                     float *send_data, int64_t count, int64_t want, ostore_obj_t **got)
{
    int next = members[(pos + 1) % n], prev = members[(pos + n - 1) % n];
    /* A view of part of a buffer: borrowed data, never freed. */
    tensor_t view = {.shape = {.rank = 1, .dim = {count}}, .data = send_data};
    mbox_tag_t stag = run_tag(r, r->t->comp, ring_op_tag(i, step), r->t->shard, next);
    mbox_tag_t rtag = run_tag(r, r->t->comp, ring_op_tag(i, step), prev, r->t->shard);
    if (run_send(r, r->t->peers[next], &stag, &view) != 0 ||
        run_take_piece(r, i, &rtag, NULL, want, got) != 0)
        return -1;
    return 0;
}

/* Ring all_reduce: reduce-scatter then all-gather over n chunks of the
 * flattened tensor. Each link carries 2 (n-1)/n of the tensor instead of
 * n-1 copies, and a shard holds the result plus one chunk at a time.
 * Chunk c is reduced in ring order starting at position c; every shard
 * receives the same reduced bytes for it. */
static int run_ring_all_reduce(run_t *r, int i, const tensor_t *arg, const int *members, int n,
                               int pos, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    int64_t numel = shape_numel(&arg->shape);
    tensor_t *acc = tensor_clone(arg);
    if (!acc) {
        snprintf(r->err, sizeof r->err, "all_reduce op %d: out of memory", i);
        return -1;
    }
    for (int phase = 0; phase < 2; phase++) {
        for (int s = 0; s < n - 1; s++) {
            /* Phase 1 (all-gather) runs the same schedule shifted by one
             * position: it starts from the chunk this shard owns. */
            int sc = coll_ring_send_chunk(n, pos + phase, s);
            int rcv = coll_ring_recv_chunk(n, pos + phase, s);
            int64_t soff, slen, roff, rlen;
            coll_ring_chunk(numel, n, sc, &soff, &slen);
            coll_ring_chunk(numel, n, rcv, &roff, &rlen);
            ostore_obj_t *got = NULL;
            if (ring_step(r, i, phase * (n - 1) + s, members, n, pos, acc->data + soff, slen,
                          rlen, &got) != 0) {
                tensor_free(acc);
                return -1;
            }
            const float *src = ostore_tensor(got)->data;
            if (phase == 0)
                coll_reduce_into(op->reduce, acc->data + roff, src, rlen);
            else
                memcpy(acc->data + roff, src, (size_t)rlen * sizeof *src);
            ostore_release(r->env->st, got, 1);
        }
    }
    *out = acc;
    return 0;
}

/* Ring all_gather: blocks travel round the ring, each forwarded n-1 times;
 * then concatenated in position order like the direct algorithm. */
static int run_ring_all_gather(run_t *r, int i, const tensor_t *arg, const int *members, int n,
                               int pos, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    int64_t numel = shape_numel(&arg->shape);
    int rc = -1;
    ostore_obj_t **objs = calloc((size_t)n, sizeof *objs);
    const tensor_t **pieces = calloc((size_t)n, sizeof *pieces);
    if (!objs || !pieces) {
        snprintf(r->err, sizeof r->err, "out of memory");
        goto cleanup;
    }
    pieces[pos] = arg;
    for (int s = 0; s < n - 1; s++) {
        int sb = coll_ring_send_chunk(n, pos, s), rb = coll_ring_recv_chunk(n, pos, s);
        if (ring_step(r, i, s, members, n, pos, pieces[sb]->data, numel, numel, &objs[rb]) != 0)
            goto cleanup;
        pieces[rb] = ostore_tensor(objs[rb]);
    }
    /* Blocks travel flat; restore the argument's shape for the concat. */
    tensor_t *views = calloc((size_t)n, sizeof *views);
    const tensor_t **vp = calloc((size_t)n, sizeof *vp);
    if (!views || !vp) {
        free(views);
        free(vp);
        snprintf(r->err, sizeof r->err, "out of memory");
        goto cleanup;
    }
    for (int m = 0; m < n; m++) {
        views[m] = (tensor_t){.shape = arg->shape, .data = pieces[m]->data};
        vp[m] = &views[m];
    }
    rc = coll_combine(op, vp, n, pos, out);
    free(views);
    free(vp);
    if (rc != 0)
        snprintf(r->err, sizeof r->err, "all_gather op %d: cannot combine", i);
cleanup:
    for (int m = 0; objs && m < n; m++)
        if (objs[m])
            ostore_release(r->env->st, objs[m], 1);
    free(objs);
    free(pieces);
    return rc;
}

/* Ring or direct: the ring pays n-1 (or 2(n-1)) latencies but moves each
 * byte over each link about once, so it wins once tensors are large. */
static int use_ring(const run_t *r, const op_t *op, const tensor_t *arg, int n)
{
    int64_t numel = shape_numel(&arg->shape);
    if (n < 3 || numel < n || (op->code != OP_ALL_REDUCE && op->code != OP_ALL_GATHER))
        return 0;
    return numel * (int64_t)sizeof(float) >= r->env->ring_min_bytes;
}

static int run_collective(run_t *r, int i, const tensor_t *arg, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    int rc = -1;
    int n = 0, pos = 0;
    int *members = calloc((size_t)r->comp->nshards, sizeof *members);
    if (!members) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    if (coll_group(&r->comp->slice_shape, op->mesh_axes, r->t->shard, members, &n, &pos) != 0 ||
        n < 1) {
        snprintf(r->err, sizeof r->err, "op %d: shard %d has no collective group", i,
                 (int)r->t->shard);
        goto cleanup;
    }
    int ring = op->code != OP_PPERMUTE && use_ring(r, op, arg, n);
    if (r->env->counters)
        atomic_fetch_add(ring ? &r->env->counters->ring : &r->env->counters->direct, 1);
    if (op->code == OP_PPERMUTE)
        rc = run_ppermute(r, i, arg, members, n, pos, out);
    else if (ring && op->code == OP_ALL_REDUCE)
        rc = run_ring_all_reduce(r, i, arg, members, n, pos, out);
    else if (ring)
        rc = run_ring_all_gather(r, i, arg, members, n, pos, out);
    else if (use_hier(r, op, members, n)) {
        if (r->env->counters)
            atomic_fetch_add(&r->env->counters->two_level, 1);
        rc = run_exchange_hier(r, i, arg, members, n, pos, out);
    }
    else
        rc = run_exchange(r, i, arg, members, n, pos, out);
cleanup:
    free(members);
    return rc;
}

/* The `compute` op, in 1 ms slices so that a cancelled job stops within
 * about a millisecond. cpu busy-waits (the device is occupied); sim sleeps:
 * modelled time that leaves the host's cores to the other simulated
 * devices. */
static int run_compute(run_t *r, int i, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    for (int64_t left = op->us; left > 0; left -= 1000) {
        int64_t chunk = left < 1000 ? left : 1000;
        if (r->env->sim) {
            struct timespec ts = {0, (long)chunk * 1000};
            nanosleep(&ts, NULL);
        } else {
            kernel_compute_spin(chunk);
        }
        if (mbox_is_cancelled(r->env->mb, r->t->job, r->t->attempt)) {
            r->cancelled = 1;
            return -1;
        }
    }
    if (!(*out = tensor_new(&op->shape))) {
        snprintf(r->err, sizeof r->err, "compute op %d: out of memory", i);
        return -1;
    }
    return 0;
}

/* Drops one reference of slot v (a consumer ran). */
static void run_release(run_t *r, int v)
{
    if (r->objs[v] && ostore_release(r->env->st, r->objs[v], 1) == 0)
        r->objs[v] = NULL;
}

/* Runs op i into its value slot. Returns 0 or -1 (r->err / r->cancelled).
 * Memory: the result is reserved in the store first (back-pressure), an
 * `input` edge is adopted (it exists already); the arguments lose one
 * reference each once the op ran, so a value dies with its last reader. */
static int run_op(run_t *r, int i)
{
    const op_t *op = &r->comp->ops[i];
    const tensor_t *args[2] = {NULL, NULL};
    for (int a = 0; a < op->nargs && a < 2; a++) {
        if (op->arg[a] < 0 || op->arg[a] >= r->comp->nvalues || !r->objs[op->arg[a]]) {
            snprintf(r->err, sizeof r->err, "op %d reads an undefined value", i);
            return -1;
        }
        args[a] = ostore_tensor(r->objs[op->arg[a]]);
    }
    int64_t reserved = op->code == OP_INPUT ? 0 : ostore_tensor_bytes(&op->shape);
    if (reserved > 0 && run_reserve(r, i, reserved) != 0)
        return -1;
    tensor_t *out = NULL;
    int rc;
    if (op->code == OP_INPUT)
        rc = run_input(r, i, &out);
    else if (opcode_is_collective(op->code))
        rc = run_collective(r, i, args[0], &out);
    else if (op->code == OP_COMPUTE)
        rc = run_compute(r, i, &out);
    else if ((rc = kernel_run(op, args, r->t->shard, &out)) != 0)
        snprintf(r->err, sizeof r->err, "%s op %d failed (out of memory?)", opcode_name(op->code), i);
    if (rc != 0) {
        ostore_unreserve(r->env->st, reserved);
        return -1;
    }
    for (int a = 0; a < op->nargs && a < 2; a++)
        run_release(r, op->arg[a]);
    if (r->refs[op->out] == 0) {        /* nobody reads it: gone at once */
        tensor_free(out);
        ostore_unreserve(r->env->st, reserved);
        return 0;
    }
    ostore_key_t k = run_key(r, op->out);
    if (!(r->objs[op->out] = ostore_put(r->env->st, &k, out, r->refs[op->out], reserved))) {
        snprintf(r->err, sizeof r->err, "op %d: out of memory", i);
        return -1;
    }
    return 0;
}

/* Forwards the task's `sends` to the consumers' input ops. */
static int run_sends(run_t *r)
{
    for (int s = 0; s < r->t->nsends; s++) {
        const wtask_send_t *snd = &r->t->sends[s];
        int slot = r->send_slot[s];
        if (slot < 0 || !r->objs[slot]) {
            snprintf(r->err, sizeof r->err, "send of unknown value '%s'", snd->value);
            return -1;
        }
        mbox_tag_t tag = run_tag(r, snd->comp, snd->op, r->t->shard, r->t->shard);
        if (run_send(r, snd->to, &tag, ostore_tensor(r->objs[slot])) != 0)
            return -1;
        run_release(r, slot);
    }
    return 0;
}

/* Counts each slot's consumers (ops, sends, output hold) and resolves the
 * sends' value names. Returns 0 or -1. */
static int run_plan_refs(run_t *r)
{
    int nv = r->comp->nvalues;
    r->objs = calloc((size_t)nv + 1, sizeof *r->objs);
    r->refs = calloc((size_t)nv + 1, sizeof *r->refs);
    r->send_slot = calloc((size_t)r->t->nsends + 1, sizeof *r->send_slot);
    if (!r->objs || !r->refs || !r->send_slot) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    for (int i = 0; i < r->comp->nops; i++)
        for (int a = 0; a < r->comp->ops[i].nargs && a < 2; a++)
            if (r->comp->ops[i].arg[a] >= 0 && r->comp->ops[i].arg[a] < nv)
                r->refs[r->comp->ops[i].arg[a]]++;
    for (int k = 0; k < r->comp->noutputs; k++)
        r->refs[r->comp->outputs[k]]++;
    for (int s = 0; s < r->t->nsends; s++) {
        r->send_slot[s] = -1;
        for (int v = 0; v < nv && r->send_slot[s] < 0; v++)
            if (strcmp(r->comp->vnames[v], r->t->sends[s].value) == 0)
                r->send_slot[s] = v;
        if (r->send_slot[s] >= 0)
            r->refs[r->send_slot[s]]++;
    }
    return 0;
}

/* JSON numbers cannot be NaN or infinite: those are reported as null. */
static json_t *json_num(double v)
{
    return isfinite(v) ? json_real(v) : json_null();
}

json_t *exec_tensor_json(const tensor_t *t)
{
    json_t *o = json_object();
    json_t *shape = json_array();
    if (!o || !shape)
        goto fail;
    for (int d = 0; d < t->shape.rank; d++)
        if (json_array_append_new(shape, json_integer(t->shape.dim[d])) != 0)
            goto fail;
    if (json_object_set_new(o, "shape", shape) != 0) {
        shape = NULL;                    /* set_new consumed it even on failure */
        goto fail;
    }
    shape = NULL;
    if (json_object_set_new(o, "sum", json_num(tensor_sum(t))) != 0)
        goto fail;
    int64_t n = shape_numel(&t->shape);
    if (n <= EXEC_MAX_REPORTED_VALUES) {
        json_t *vals = json_array();
        if (json_object_set_new(o, "values", vals) != 0)
            goto fail;
        for (int64_t k = 0; k < n; k++)
            if (json_array_append_new(vals, json_num(t->data[k])) != 0)
                goto fail;
    }
    return o;
fail:
    json_decref(shape);
    json_decref(o);
    return NULL;
}

json_t *exec_report_failed(const char *error)
{
    return json_pack("{s:s, s:s}", "state", "failed", "error", error);
}

json_t *exec_report_cancelled(void)
{
    return json_pack("{s:s}", "state", "cancelled");
}

static json_t *run_success_report(run_t *r)
{
    json_t *outs = json_object();
    if (!outs)
        return NULL;
    for (int k = 0; k < r->comp->noutputs; k++) {
        int slot = r->comp->outputs[k];
        json_t *tj = r->objs[slot] ? exec_tensor_json(ostore_tensor(r->objs[slot])) : NULL;
        if (!tj || json_object_set_new(outs, r->comp->vnames[slot], tj) != 0) {
            json_decref(outs);
            return NULL;
        }
    }
    /* "o" steals outs, also when json_pack fails. */
    return json_pack("{s:s, s:I, s:I, s:I, s:o}", "state", "succeeded",
                     "started_us", (json_int_t)r->started_us,
                     "inputs_ready_us", (json_int_t)r->inputs_ready_us,
                     "finished_us", (json_int_t)util_wall_us(), "outputs", outs);
}

/* Compiles and runs every op and send. Returns 0 or -1. */
static int run_body(run_t *r)
{
    err_t e = {0};
    if (compiler_comp(r->t->computation, &r->t->slice_shape, wtask_input_shape,
                      (void *)r->t, &r->comp, &e) != 0) {
        snprintf(r->err, sizeof r->err, "compile: %s%s%s", e.field, e.field[0] ? ": " : "",
                 e.detail);
        return -1;
    }
    if (r->comp->nshards != r->t->npeers) {
        snprintf(r->err, sizeof r->err, "slice has %d shards but %d peers", r->comp->nshards,
                 r->t->npeers);
        return -1;
    }
    if (run_plan_refs(r) != 0)
        return -1;
    for (int i = 0; i < r->comp->nops; i++) {
        if (mbox_is_cancelled(r->env->mb, r->t->job, r->t->attempt)) {
            r->cancelled = 1;
            return -1;
        }
        if (run_op(r, i) != 0)
            return -1;
    }
    return run_sends(r);
}

json_t *exec_run_task(const exec_env_t *env, const wtask_t *t)
{
    run_t r = {.env = env, .t = t};
    r.started_us = util_wall_us();
    r.inputs_ready_us = r.started_us;
    json_t *report;
    if (run_body(&r) == 0)
        report = run_success_report(&r);
    else if (r.cancelled)
        report = exec_report_cancelled();
    else
        report = exec_report_failed(r.err);
    /* Tell the controller which peer was unreachable: the job then goes back
     * to the queue like one that lost a worker, instead of failing. */
    if (report && r.unreachable[0] && !r.cancelled)
        json_object_set_new(report, "unreachable_peer", json_string(r.unreachable));
    if (!r.cancelled && r.err[0])
        log_warn("task %lld (job %lld comp %d shard %d) failed: %s", (long long)t->id,
                 (long long)t->job, (int)t->comp, (int)t->shard, r.err);
    /* Outputs are dropped once reported (the controller keeps the result
     * values); after a failure or cancel everything the task still holds
     * goes too, so an ended task leaves no object behind. */
    if (r.objs) {
        for (int k = 0; k < r.comp->noutputs; k++)
            run_release(&r, r.comp->outputs[k]);
        int left = ostore_drop_task(env->st, t->job, t->attempt, t->comp, t->shard);
        if (left && !r.err[0] && !r.cancelled)
            log_warn("task %lld: %d object(s) left after success", (long long)t->id, left);
    }
    free(r.objs);
    free(r.refs);
    free(r.send_slot);
    comp_free(r.comp);
    return report;
}
