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
    tensor_t **vals;            /* comp->nvalues slots, each owned or NULL */
    int64_t started_us;
    int64_t inputs_ready_us;    /* last `input` edge taken, else started_us */
    int cancelled;
    char err[512];
} run_t;

static mbox_tag_t run_tag(const run_t *r, int comp, int op, int src, int dst)
{
    mbox_tag_t tag = {.job = r->t->job, .attempt = r->t->attempt, .comp = comp,
                      .op = op, .src = src, .dst = dst};
    return tag;
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
                 (long long)(r->env->peer_timeout_us / 1000), (int)tag->src, (int)tag->op,
                 (int)tag->comp);
        return -1;
    case MBOX_STOPPED:
    default:
        snprintf(r->err, sizeof r->err, "worker shutting down");
        return -1;
    }
}

static int run_send(run_t *r, const char *to, const mbox_tag_t *tag, const tensor_t *v)
{
    if (dplane_send(r->env->dp, to, tag, v) == 0)
        return 0;
    snprintf(r->err, sizeof r->err, "cannot send to shard %d at %s", (int)tag->dst, to);
    return -1;
}

static int run_input(run_t *r, int i, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    mbox_tag_t tag = run_tag(r, r->t->comp, i, r->t->shard, r->t->shard);
    if (run_take(r, &tag, out) != 0)
        return -1;
    /* Only DAG edges count as inputs; collective pieces are part of the
     * computation itself. */
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
    tensor_t *piece = coll_piece(op, arg, n, pos, dst);
    tensor_t *got = NULL;
    int rc = -1;
    if (!piece || src < 0) {
        snprintf(r->err, sizeof r->err, "ppermute op %d: %s", i, piece ? "no source" : "out of memory");
        goto cleanup;
    }
    if (dst == pos) {                   /* shift 0 mod n: keep our own piece */
        got = piece;
        piece = NULL;
    } else {
        mbox_tag_t stag = run_tag(r, r->t->comp, i, r->t->shard, members[dst]);
        mbox_tag_t rtag = run_tag(r, r->t->comp, i, members[src], r->t->shard);
        if (run_send(r, r->t->peers[members[dst]], &stag, piece) != 0 || run_take(r, &rtag, &got) != 0)
            goto cleanup;
    }
    /* For ppermute `pieces` has one entry (the received tensor); n and pos
     * are still the group's. */
    const tensor_t *pieces[1] = {got};
    if (coll_combine(op, pieces, n, pos, out) != 0) {
        snprintf(r->err, sizeof r->err, "ppermute op %d: cannot combine", i);
        goto cleanup;
    }
    rc = 0;
cleanup:
    tensor_free(piece);
    tensor_free(got);
    return rc;
}

/* all_reduce, all_gather, reduce_scatter, all_to_all: every member sends
 * its piece for each other member, then collects one piece from each. */
static int run_exchange(run_t *r, int i, const tensor_t *arg, const int *members, int n,
                        int pos, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    int rc = -1;
    tensor_t **pieces = calloc((size_t)n, sizeof *pieces);
    if (!pieces) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    for (int m = 0; m < n; m++) {
        tensor_t *p = coll_piece(op, arg, n, pos, m);
        if (!p) {
            snprintf(r->err, sizeof r->err, "%s op %d: out of memory", opcode_name(op->code), i);
            goto cleanup;
        }
        if (m == pos) {
            pieces[pos] = p;            /* own contribution, kept */
            continue;
        }
        mbox_tag_t tag = run_tag(r, r->t->comp, i, r->t->shard, members[m]);
        int sent = run_send(r, r->t->peers[members[m]], &tag, p);
        tensor_free(p);
        if (sent != 0)
            goto cleanup;
    }
    for (int m = 0; m < n; m++) {
        mbox_tag_t tag = run_tag(r, r->t->comp, i, members[m], r->t->shard);
        if (m != pos && run_take(r, &tag, &pieces[m]) != 0)
            goto cleanup;
    }
    if (coll_combine(op, (const tensor_t *const *)pieces, n, pos, out) != 0) {
        snprintf(r->err, sizeof r->err, "%s op %d: cannot combine", opcode_name(op->code), i);
        goto cleanup;
    }
    rc = 0;
cleanup:
    for (int m = 0; m < n; m++)
        tensor_free(pieces[m]);
    free(pieces);
    return rc;
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
    if (op->code == OP_PPERMUTE)
        rc = run_ppermute(r, i, arg, members, n, pos, out);
    else
        rc = run_exchange(r, i, arg, members, n, pos, out);
cleanup:
    free(members);
    return rc;
}

/* The `compute` op, in slices so that a cancelled job stops within ~10 ms.
 * cpu busy-waits (the device is occupied); sim sleeps: modelled time that
 * leaves the host's cores to the other simulated devices. */
static int run_compute(run_t *r, int i, tensor_t **out)
{
    const op_t *op = &r->comp->ops[i];
    for (int64_t left = op->us; left > 0; left -= 10000) {
        int64_t chunk = left < 10000 ? left : 10000;
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

/* Runs op i into its value slot. Returns 0 or -1 (r->err / r->cancelled). */
static int run_op(run_t *r, int i)
{
    const op_t *op = &r->comp->ops[i];
    const tensor_t *args[2] = {NULL, NULL};
    for (int a = 0; a < op->nargs && a < 2; a++) {
        if (op->arg[a] < 0 || op->arg[a] >= r->comp->nvalues || !r->vals[op->arg[a]]) {
            snprintf(r->err, sizeof r->err, "op %d reads an undefined value", i);
            return -1;
        }
        args[a] = r->vals[op->arg[a]];
    }
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
    if (rc != 0)
        return -1;
    tensor_free(r->vals[op->out]);
    r->vals[op->out] = out;
    return 0;
}

/* Forwards the task's `sends` to the consumers' input ops. */
static int run_sends(run_t *r)
{
    for (int s = 0; s < r->t->nsends; s++) {
        const wtask_send_t *snd = &r->t->sends[s];
        int slot = -1;
        for (int v = 0; v < r->comp->nvalues && slot < 0; v++)
            if (strcmp(r->comp->vnames[v], snd->value) == 0 && r->vals[v])
                slot = v;
        if (slot < 0) {
            snprintf(r->err, sizeof r->err, "send of unknown value '%s'", snd->value);
            return -1;
        }
        mbox_tag_t tag = run_tag(r, snd->comp, snd->op, r->t->shard, r->t->shard);
        if (run_send(r, snd->to, &tag, r->vals[slot]) != 0)
            return -1;
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
        json_t *tj = r->vals[slot] ? exec_tensor_json(r->vals[slot]) : NULL;
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
    r->vals = calloc((size_t)r->comp->nvalues + 1, sizeof *r->vals);
    if (!r->vals) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
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
    if (!r.cancelled && r.err[0])
        log_warn("task %lld (job %lld comp %d shard %d) failed: %s", (long long)t->id,
                 (long long)t->job, (int)t->comp, (int)t->shard, r.err);
    if (r.vals)
        for (int v = 0; v < r.comp->nvalues; v++)
            tensor_free(r.vals[v]);
    free(r.vals);
    comp_free(r.comp);
    return report;
}
