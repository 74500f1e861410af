/* exec_run.c - see exec_run.h.
 *
 * A host task runs its computation's ops in order, each for every local
 * shard before the next op: local ops loop over the shards, a collective
 * takes every shard's argument at once (exec_coll.c), `compute` occupies
 * all the task's devices together for its time (they run in parallel), and
 * an `input` op takes one edge per shard, tagged (job, attempt, comp, op,
 * k, k). Each host task sends before it receives and the mailbox keeps
 * early messages, so no exchange order can deadlock as long as every device
 * runs host tasks in `seq` order (exec.c).
 *
 * Memory (invariant between ops): every value a later op, a send or the
 * report still needs is one store object per local shard in r->objs,
 * holding one reference per remaining consumer (r->refs); an op's results
 * are reserved in the store before they are made, and its arguments lose
 * a reference once it ran, so a value dies with its last reader.
 * Ownership: the run_t lives on the runner's stack (exec_run_task()); it
 * borrows the task's compiled plan, owns its arrays, and run_cleanup() drops
 * whatever the task still holds, so an ended task leaves no object. */
#include "exec_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec_coll.h"
#include "exec_gang.h"
#include "exec_io.h"
#include "f32b64.h"
#include "gspmd.h"
#include "jtext.h"
#include "kernels.h"
#include "util.h"

/* Stop predicate for back-pressure waits: the task's job was cancelled. */
static int run_stop(void *ctx)
{
    const run_t *r = ctx;
    return mbox_is_cancelled(r->env->mb, r->t->job, r->t->attempt);
}

/* Reserves store memory for `bytes` of new buffers made by op i, waiting
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

/* A cross-mesh input (gspmd.h): consumer shard c assembles its piece from
 * the producer shards the edge names, each message checked against the
 * box it must fill before a byte is copied. */
static int run_input_reshard(run_t *r, int i, const gspmd_edge_t *e, int c, tensor_t **out)
{
    gspmd_mesh_t cm = {.shape = e->to_mesh};
    int64_t co[TENSOR_MAX_RANK], lo[TENSOR_MAX_RANK], hi[TENSOR_MAX_RANK];
    int64_t zero[TENSOR_MAX_RANK] = {0}, at[TENSOR_MAX_RANK], ext[TENSOR_MAX_RANK];
    int np = (int)shape_numel(&e->from_mesh);
    gspmd_shard_offsets(&e->to, &cm, &e->global, c, co);
    if (!(*out = tensor_new(&r->comp->ops[i].shape))) {
        snprintf(r->err, sizeof r->err, "input op %d: out of memory", i);
        return -1;
    }
    for (int p = 0; p < np; p++) {
        if (!gspmd_edge_piece(e, p, c, lo, hi))
            continue;
        shape_t want = {.rank = e->global.rank};
        for (int d = 0; d < want.rank; d++) {
            want.dim[d] = ext[d] = hi[d] - lo[d];
            at[d] = lo[d] - co[d];
        }
        mbox_tag_t tag = {.job = r->t->job, .attempt = r->t->attempt, .comp = r->t->comp,
                          .op = i, .src = p, .dst = c};
        tensor_t *piece = NULL;
        if (exec_io_take(r, &tag, &piece) != 0)
            return -1;
        if (!shape_equal(&piece->shape, &want)) {
            snprintf(r->err, sizeof r->err, "input op %d of shard %d: piece from shard %d has "
                     "the wrong shape", i, c, p);
            tensor_free(piece);
            exec_io_count_bad(r);
            return -1;
        }
        gspmd_box_copy(piece->data, &piece->shape, zero, (*out)->data, &(*out)->shape, at, ext);
        if (piece->ready_us > (*out)->ready_us)
            (*out)->ready_us = piece->ready_us;
        tensor_free(piece);
    }
    return 0;
}

/* The `input` op i for every local shard: one edge each (or, across
 * meshes, one per overlapping producer piece). */
static int run_input(run_t *r, int i, tensor_t **outs)
{
    const op_t *op = &r->comp->ops[i];
    const gspmd_edge_t *edge = r->comp->inputs[op->input].edge;
    for (int l = 0; edge && l < r->nl; l++)
        if (run_input_reshard(r, i, edge, r->t->shards[l], &outs[l]) != 0)
            return -1;
    for (int l = 0; !edge && l < r->nl; l++) {
        int k = r->t->shards[l];
        mbox_tag_t tag = {.job = r->t->job, .attempt = r->t->attempt, .comp = r->t->comp,
                          .op = i, .src = k, .dst = k};
        if (exec_io_take(r, &tag, &outs[l]) != 0)
            return -1;
        if (op->shape.rank >= 0 && !shape_equal(&outs[l]->shape, &op->shape)) {
            char got[64], want[64];
            shape_format(&outs[l]->shape, got, sizeof got);
            shape_format(&op->shape, want, sizeof want);
            snprintf(r->err, sizeof r->err, "input op %d of shard %d received shape %s, "
                     "expected %s", i, k, got, want);
            exec_io_count_bad(r);
            return -1;
        }
    }
    /* Only DAG edges count as inputs; ops run in order, so the last
     * `input` op taken sets the final value: when its inputs exist (their
     * ready time, or now for ones that exist already), no earlier than
     * the task's device start. */
    int64_t at = util_mono_us();
    for (int l = 0; l < r->nl; l++)
        if (outs[l]->ready_us > at)
            at = outs[l]->ready_us;
    int64_t wall = util_mono_to_wall_us(at);
    r->inputs_ready_us = wall > r->started_us ? wall : r->started_us;
    return 0;
}

/* When op i's arguments exist on the devices: their latest ready_us over
 * the local shards, and no earlier than the task's device start (nothing
 * of a task runs before its devices start it). */
static int64_t run_args_ready_at(const run_t *r, int i)
{
    const op_t *op = &r->comp->ops[i];
    int64_t at = r->dev_start;
    for (int a = 0; a < op->nargs && a < 2; a++)
        for (int l = 0; l < r->nl; l++) {
            const tensor_t *v = ostore_tensor(r->objs[l * r->nv + op->arg[a]]);
            if (v->ready_us > at)
                at = v->ready_us;
        }
    return at;
}

/* The `compute` op: the task's devices compute side by side, so the task
 * is busy for `us` once, not once per shard.
 * cpu busy-waits: the devices are the host's cores, occupied for real.
 * sim models an accelerator's in-order stream: the op occupies the devices
 * from when they are free (r->dev_at, carried from the task before on
 * them: exec_run_task's clock) or its arguments exist, whichever is later,
 * for `us`, and the host goes on without waiting, as a host enqueues work
 * on a device and continues. What is made from the result carries its
 * ready_us on (to other processes too: exec_coll.c, the frame's `ready`),
 * and only what can be observed waits for it (a users' program, the
 * report), so the host's own delays (a late wake-up, a peer's collective)
 * overlap device time rather than add to it. The host stays at most
 * env->sim_ahead_us (EXEC_SIM_AHEAD_US by default) ahead of its devices,
 * which bounds how much queued device time a cancel leaves behind. */
static int run_compute(run_t *r, int i, tensor_t **outs)
{
    const op_t *op = &r->comp->ops[i];
    int64_t ready = 0;
    if (r->env->sim) {
        int64_t start = run_args_ready_at(r, i);
        if (start < r->dev_at)
            start = r->dev_at;
        ready = r->dev_at = start + op->us;
        if (exec_io_wait_until(r, r->dev_at - r->env->sim_ahead_us) != 0)
            return -1;
    } else {
        int64_t end = util_mono_us() + op->us;
        for (int64_t left = op->us; left > 0; left -= 1000) {
            int64_t chunk = left < 1000 ? left : 1000;
            kernel_compute_spin(end - left + chunk - util_mono_us());
            if (mbox_is_cancelled(r->env->mb, r->t->job, r->t->attempt)) {
                r->cancelled = 1;
                return -1;
            }
        }
    }
    for (int l = 0; l < r->nl; l++) {
        if (!(outs[l] = tensor_new(&op->shape))) {
            snprintf(r->err, sizeof r->err, "compute op %d: out of memory", i);
            return -1;
        }
        outs[l]->ready_us = ready;
    }
    return 0;
}

/* A local op (elementwise, matmul, fill, shard_index, ...) for each shard. */
static int run_local(run_t *r, int i, tensor_t **outs)
{
    const op_t *op = &r->comp->ops[i];
    int64_t ready = run_args_ready_at(r, i);   /* a sim device computes it then */
    for (int l = 0; l < r->nl; l++) {
        const tensor_t *args[2] = {NULL, NULL};
        for (int a = 0; a < op->nargs && a < 2; a++)
            args[a] = ostore_tensor(r->objs[l * r->nv + op->arg[a]]);
        if (kernel_run(op, args, r->t->shards[l], &outs[l]) != 0) {
            snprintf(r->err, sizeof r->err, "%s op %d failed (out of memory?)",
                     opcode_name(op->code), i);
            return -1;
        }
        outs[l]->ready_us = ready;
    }
    return 0;
}

/* Drops one reference of value v of local shard l (a consumer ran). */
static void run_release(run_t *r, int l, int v)
{
    ostore_obj_t **o = &r->objs[l * r->nv + v];
    if (*o && ostore_release(r->env->st, *o, 1) == 0)
        *o = NULL;
}

/* Checks that op i's arguments exist for every shard. 0 or -1. */
static int run_args_ready(run_t *r, int i)
{
    const op_t *op = &r->comp->ops[i];
    for (int a = 0; a < op->nargs && a < 2; a++) {
        int v = op->arg[a];
        for (int l = 0; l < r->nl; l++)
            if (v < 0 || v >= r->nv || !r->objs[l * r->nv + v]) {
                snprintf(r->err, sizeof r->err, "op %d reads an undefined value", i);
                return -1;
            }
    }
    return 0;
}

/* When every value the task holds exists on its devices (the latest
 * ready_us of its objects; 0 when it holds none). */
static int64_t run_held_ready(const run_t *r)
{
    int64_t at = 0;
    for (int k = 0; k < r->nl * r->nv; k++)
        if (r->objs[k] && ostore_tensor(r->objs[k])->ready_us > at)
            at = ostore_tensor(r->objs[k])->ready_us;
    return at;
}

/* Waits until every value the task holds exists on its devices (sim; at
 * once otherwise): before a run computation's processes read them. 0 or -1
 * (cancelled). */
static int run_values_ready(run_t *r)
{
    return exec_io_wait_until(r, run_held_ready(r));
}

static int run_dispatch(run_t *r, int i, tensor_t **outs)
{
    const op_t *op = &r->comp->ops[i];
    if (op->code == OP_INPUT)
        return run_input(r, i, outs);
    if (op->code == OP_COMPUTE)
        return run_compute(r, i, outs);
    if (op->code == OP_RUN_OUTPUT)
        return run_values_ready(r) == 0 ? exec_gang_output(r, i, outs) : -1;
    if (!opcode_is_collective(op->code))
        return run_local(r, i, outs);
    const tensor_t **args = util_zalloc((size_t)r->nl, sizeof *args);
    if (!args) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    for (int l = 0; l < r->nl; l++)
        args[l] = ostore_tensor(r->objs[l * r->nv + op->arg[0]]);
    int rc = exec_coll_run(r, i, run_args_ready_at(r, i), args, outs);
    free(args);
    return rc;
}

/* Stores op i's results (one per shard) in their value slot, or frees them
 * when nobody reads the value. `reserved` bytes were reserved per shard. */
static int run_keep(run_t *r, int i, tensor_t **outs, int64_t reserved)
{
    const op_t *op = &r->comp->ops[i];
    for (int l = 0; l < r->nl; l++) {
        if (r->refs[op->out] == 0) {        /* nobody reads it: gone at once */
            tensor_free(outs[l]);
            ostore_unreserve(r->env->st, reserved);
            outs[l] = NULL;
            continue;
        }
        ostore_key_t k = exec_io_key(r, op->out, r->t->shards[l]);
        ostore_obj_t *o = ostore_put(r->env->st, &k, outs[l], r->refs[op->out], reserved);
        outs[l] = NULL;
        if (!o) {
            for (int m = l + 1; m < r->nl; m++) {
                tensor_free(outs[m]);
                outs[m] = NULL;
            }
            ostore_unreserve(r->env->st, reserved * (r->nl - l - 1));
            snprintf(r->err, sizeof r->err, "op %d: out of memory", i);
            return -1;
        }
        r->objs[l * r->nv + op->out] = o;
    }
    return 0;
}

/* Runs op i for every local shard into its value slots. Memory: results are
 * reserved in the store first (back-pressure), `input` edges are adopted
 * (they exist already); arguments lose one reference each once the op ran,
 * so a value dies with its last reader. Returns 0 or -1. */
static int run_op(run_t *r, int i)
{
    const op_t *op = &r->comp->ops[i];
    if (run_args_ready(r, i) != 0)
        return -1;
    /* Inputs exist already; a run's outputs were written by its processes. */
    int64_t per = op->code == OP_INPUT || op->code == OP_RUN_OUTPUT
                      ? 0 : ostore_tensor_bytes(&op->shape);
    if (per > 0 && run_reserve(r, i, per * r->nl) != 0)
        return -1;
    tensor_t **outs = util_zalloc((size_t)r->nl, sizeof *outs);
    if (!outs || run_dispatch(r, i, outs) != 0) {
        if (!outs)
            snprintf(r->err, sizeof r->err, "out of memory");
        for (int l = 0; outs && l < r->nl; l++)
            tensor_free(outs[l]);
        free(outs);
        ostore_unreserve(r->env->st, per * r->nl);
        return -1;
    }
    for (int l = 0; l < r->nl; l++)
        for (int a = 0; a < op->nargs && a < 2; a++)
            run_release(r, l, op->arg[a]);
    int rc = run_keep(r, i, outs, per);
    free(outs);
    return rc;
}

/* A cross-mesh send from producer shard k: the intersection of its piece
 * with each consumer shard's box that the edge assigns to it. */
static int run_send_reshard(run_t *r, const wtask_send_t *snd, int k, const tensor_t *v)
{
    const gspmd_edge_t *e = snd->edge;
    const wplace_slice_t *sl = &r->t->place->slices[snd->slice];
    gspmd_mesh_t pm = {.shape = e->from_mesh};
    int64_t po[TENSOR_MAX_RANK], lo[TENSOR_MAX_RANK], hi[TENSOR_MAX_RANK];
    int64_t zero[TENSOR_MAX_RANK] = {0}, at[TENSOR_MAX_RANK];
    shape_t pl;
    gspmd_local_shape(&e->global, &e->from, &pm, &pl);
    if (!shape_equal(&pl, &v->shape)) {
        snprintf(r->err, sizeof r->err, "send of '%s': its shape does not match the edge",
                 snd->value);
        return -1;
    }
    gspmd_shard_offsets(&e->from, &pm, &e->global, k, po);
    for (int c = 0; c < sl->nshards; c++) {
        if (!gspmd_edge_piece(e, k, c, lo, hi))
            continue;
        shape_t ps = {.rank = e->global.rank};
        for (int d = 0; d < ps.rank; d++) {
            ps.dim[d] = hi[d] - lo[d];
            at[d] = lo[d] - po[d];
        }
        tensor_t *piece = tensor_new_uninit(&ps);
        if (!piece) {
            snprintf(r->err, sizeof r->err, "send of '%s': out of memory", snd->value);
            return -1;
        }
        gspmd_box_copy(v->data, &v->shape, at, piece->data, &ps, zero, ps.dim);
        mbox_tag_t tag = {.job = r->t->job, .attempt = r->t->attempt, .comp = snd->comp,
                          .op = snd->op, .src = k, .dst = c};
        int rc = exec_io_send(r, r->t->place->procs[sl->proc_of[c]].addr, &tag, piece);
        tensor_free(piece);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Forwards the task's `sends`: value of shard k to shard k of the
 * consumer, on the proc the placement names for it (or its pieces, for a
 * cross-mesh edge). */
static int run_sends(run_t *r)
{
    const wplace_t *p = r->t->place;
    for (int s = 0; s < r->t->nsends; s++) {
        const wtask_send_t *snd = &r->t->sends[s];
        int v = r->send_slot[s];
        for (int l = 0; l < r->nl; l++) {
            int k = r->t->shards[l];
            if (v < 0 || !r->objs[l * r->nv + v]) {
                snprintf(r->err, sizeof r->err, "send of unknown value '%s'", snd->value);
                return -1;
            }
            if (snd->edge) {
                if (run_send_reshard(r, snd, k, ostore_tensor(r->objs[l * r->nv + v])) != 0)
                    return -1;
                run_release(r, l, v);
                continue;
            }
            const char *to = p->procs[p->slices[snd->slice].proc_of[k]].addr;
            mbox_tag_t tag = {.job = r->t->job, .attempt = r->t->attempt, .comp = snd->comp,
                              .op = snd->op, .src = k, .dst = k};
            if (exec_io_send(r, to, &tag, ostore_tensor(r->objs[l * r->nv + v])) != 0)
                return -1;
            run_release(r, l, v);
        }
    }
    return 0;
}

/* Counts each value's consumers (ops, sends, output hold) and resolves the
 * sends' value names. Returns 0 or -1. */
static int run_plan_refs(run_t *r)
{
    int nv = r->nv;
    r->objs = util_zalloc((size_t)nv * (size_t)r->nl + 1, sizeof *r->objs);
    r->refs = util_zalloc((size_t)nv + 1, sizeof *r->refs);
    r->send_slot = util_zalloc((size_t)r->t->nsends + 1, sizeof *r->send_slot);
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
    /* A run computation's processes read every input (exec_gang.c). */
    for (int i = 0; r->comp->run && i < r->comp->nops; i++)
        if (r->comp->ops[i].code == OP_INPUT)
            r->refs[r->comp->ops[i].out]++;
    for (int s = 0; s < r->t->nsends; s++) {
        r->send_slot[s] = comp_value_find(r->comp, r->t->sends[s].value);
        if (r->send_slot[s] >= 0)
            r->refs[r->send_slot[s]]++;
    }
    return 0;
}

/* {"shape":[...],"sum":S,"values_f32":"base64"}: the values (f32b64.h)
 * only when the tensor has at most max_values elements; a sum that is NaN
 * or infinite, which JSON lacks, as null. */
static void tensor_text(jtext_w_t *w, const tensor_t *t, int64_t max_values)
{
    JTEXT_LIT(w, "{\"shape\":[");
    for (int d = 0; d < t->shape.rank; d++) {
        if (d)
            JTEXT_LIT(w, ",");
        jtext_int(w, t->shape.dim[d]);
    }
    JTEXT_LIT(w, "],\"sum\":");
    jtext_real(w, tensor_sum(t));
    int64_t n = shape_numel(&t->shape);
    if (n <= max_values) {
        char *text = f32b64_encode(t->data, n);   /* f32b64.h: why not a JSON array */
        if (!text) {
            w->failed = 1;
            return;
        }
        /* base64 needs no escapes: the text goes in as it is */
        JTEXT_LIT(w, ",\"values_f32\":\"");
        jtext_raw(w, text, strlen(text));
        JTEXT_LIT(w, "\"");
        free(text);
    }
    JTEXT_LIT(w, "}");
}

/* The opening of a failed report, {"state":"failed","error":"..." (no
 * closing brace: the caller may add members). */
static void failed_text(jtext_w_t *w, const char *error)
{
    JTEXT_LIT(w, "{\"state\":\"failed\",\"error\":");
    jtext_str(w, error);
}

char *exec_report_failed(const char *error)
{
    jtext_w_t w = {0};
    failed_text(&w, error);
    JTEXT_LIT(&w, "}");
    return jtext_take(&w, NULL);
}

char *exec_report_cancelled(void)
{
    return strdup("{\"state\":\"cancelled\"}");
}

/* "outputs":{"z":[one tensor per local shard, in task order],...} */
static void run_outputs_text(jtext_w_t *w, run_t *r)
{
    JTEXT_LIT(w, "\"outputs\":{");
    for (int k = 0; k < r->comp->noutputs; k++) {
        int v = r->comp->outputs[k];
        if (k)
            JTEXT_LIT(w, ",");
        jtext_str(w, r->comp->vnames[v]);
        JTEXT_LIT(w, ":[");
        for (int l = 0; l < r->nl; l++) {
            ostore_obj_t *o = r->objs[l * r->nv + v];
            /* One replica of each piece of a small global value reports
             * it whole, for the global view (wtask_full_values). */
            int64_t max = wtask_full_values(r->t, r->comp->vnames[v], r->t->shards[l])
                              ? GSPMD_GLOBAL_VALUES_MAX : GSPMD_SHARD_VALUES_MAX;
            if (!o) {
                w->failed = 1;
                return;
            }
            if (l)
                JTEXT_LIT(w, ",");
            tensor_text(w, ostore_tensor(o), max);
        }
        JTEXT_LIT(w, "]");
    }
    JTEXT_LIT(w, "}");
}

/* The opening of a succeeded report: its state, timings and outputs (no
 * closing brace). Written as text, member by member: a jansson tree built
 * only to be printed cost each report its allocations, frees and a walk. */
static void success_text(jtext_w_t *w, run_t *r)
{
    JTEXT_LIT(w, "{\"state\":\"succeeded\",\"started_us\":");
    jtext_int(w, r->started_us);
    JTEXT_LIT(w, ",\"inputs_ready_us\":");
    jtext_int(w, r->inputs_ready_us);
    JTEXT_LIT(w, ",\"finished_us\":");
    jtext_int(w, util_mono_to_wall_us(r->end_us));
    JTEXT_LIT(w, ",");
    run_outputs_text(w, r);
}

/* The task's ops have all run on the host: it ends on its devices at
 * r->end_us, the later of its device clock (sim) and now. A computation's
 * results exist when it has ended, as a device runtime's output buffers
 * become ready when the whole program completes, not when one of its ops
 * wrote them: every value the task still holds (outputs, sends) is
 * stamped so, and its consumers inherit that. */
static void run_stamp_end(run_t *r)
{
    int64_t now = util_mono_us(), held = run_held_ready(r);
    r->end_us = r->dev_at > now ? r->dev_at : now;
    if (held > r->end_us)
        r->end_us = held;
    for (int k = 0; k < r->nl * r->nv; k++)
        if (r->objs[k])
            ostore_ready_after(r->objs[k], r->end_us);
}

/* Runs every op and send of the task's plan (compiled once, at intake:
 * wtask.h). Returns 0 or -1. */
static int run_body(run_t *r)
{
    if (!(r->comp = r->t->plan)) {
        snprintf(r->err, sizeof r->err, "%s", r->t->plan_err ? r->t->plan_err : "not compiled");
        return -1;
    }
    r->nl = r->t->nlocal;
    r->nv = r->comp->nvalues;
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
    if (r->comp->run && !r->gang_ran &&
        (run_values_ready(r) != 0 || exec_gang_output(r, -1, NULL) != 0))
        return -1;
    run_stamp_end(r);
    if (run_sends(r) != 0)
        return -1;
    int64_t now = util_mono_us();
    if (r->end_us < now)
        r->end_us = now;
    return 0;
}

/* Outputs are dropped once reported (the controller keeps the result
 * values); after a failure or cancel everything the task still holds goes
 * too, so an ended task leaves no object behind. */
static void run_cleanup(run_t *r)
{
    if (r->objs) {
        for (int l = 0; l < r->nl; l++) {
            for (int k = 0; k < r->comp->noutputs; k++)
                run_release(r, l, r->comp->outputs[k]);
            int left = ostore_drop_task(r->env->st, r->t->job, r->t->attempt, r->t->comp,
                                        r->t->shards[l]);
            if (left && !r->err[0] && !r->cancelled)
                log_warn("task %lld: %d object(s) of shard %d left after success",
                         (long long)r->t->id, left, (int)r->t->shards[l]);
        }
    }
    exec_gang_cleanup(r);
    free(r->objs);
    free(r->refs);
    free(r->send_slot);
}

char *exec_run_task(const exec_env_t *env, const wtask_t *t, exec_clock_t *clk, int *succeeded)
{
    run_t r = {.env = env, .t = t};
    jtext_w_t w = {0};
    int64_t now = util_mono_us();
    /* The devices start it when the work queued before it ends (sim), or now. */
    r.dev_start = r.dev_at = clk->free_us > now ? clk->free_us : now;
    r.started_us = util_mono_to_wall_us(r.dev_at);
    r.inputs_ready_us = r.started_us;
    *succeeded = run_body(&r) == 0;
    /* A task that failed or was cancelled holds its devices no longer. */
    clk->end_us = *succeeded ? r.end_us : util_mono_us();
    if (*succeeded)
        success_text(&w, &r);
    else if (r.cancelled)
        JTEXT_LIT(&w, "{\"state\":\"cancelled\"");
    else
        failed_text(&w, r.err);
    /* Tell the controller which peer was unreachable: the job then goes back
     * to the queue like one that lost a worker, instead of failing. */
    if (r.unreachable[0] && !r.cancelled) {
        JTEXT_LIT(&w, ",\"unreachable_peer\":");
        jtext_str(&w, r.unreachable);
    }
    JTEXT_LIT(&w, "}");
    if (!r.cancelled && r.err[0])
        log_warn("task %lld (job %lld comp %d, %d shard(s)) failed: %s", (long long)t->id,
                 (long long)t->job, (int)t->comp, t->nlocal, r.err);
    run_cleanup(&r);
    return jtext_take(&w, NULL);
}
