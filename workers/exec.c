/* exec.c - see exec.h.
 *
 * Ordering (Pathways gang order): every device has a queue of the host
 * tasks that cover it, sorted by island sequence number. A host task runs
 * only when it is first in the queue of every one of its devices, and
 * leaves those queues only when it ended. The island's lowest unended seq
 * is therefore runnable on every worker that holds part of it, so
 * collectives cannot deadlock, however the tasks of different jobs overlap
 * on devices.
 *
 * Threads: one runner thread runs a whole host task, all its shards (no
 * thread per device: shards of one process combine in memory and never
 * context-switch to talk). There are as many runners as devices, because
 * that is how many host tasks can be runnable at once (runnable tasks hold
 * disjoint devices) and every runnable task needs a thread: with fewer, a
 * runner blocked on a peer's collective could hold the only thread that a
 * lower-seq task, which that peer waits for, needs: a deadlock. Idle
 * runners sleep on one condition variable and cost nothing.
 *
 * Locking: one mutex guards every queue and hnode; `work_cv` wakes runners
 * (one at a time, see wake_one; all of them at stop), `idle_cv` tells
 * exec_drain() that a task ended. Invariant: an hnode is in the queue of
 * each of its devices from submission until its runner (or a cancel or
 * stop, for one not running) takes it out, and is freed by whoever did. */
#include "exec.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec_run.h"
#include "jscan.h"
#include "util.h"
#include "wtask.h"

typedef struct hnode {
    wtask_t *t;                 /* owned */
    int running;                /* claimed by a runner */
    int removed;                /* taken out by cancel/stop (collect once) */
    struct hnode *next_removed;
} hnode_t;

typedef struct qent {
    hnode_t *h;                 /* borrowed from the queues' shared ownership */
    struct qent *next;
} qent_t;

typedef struct device {
    int64_t free_us;            /* monotonic: when the tasks it ran end on it
                                   (a `sim` host runs ahead: exec_clock_t) */
    qent_t *queue;              /* sorted by increasing seq */
    qent_t *tail;               /* its last entry (NULL when empty): a job's
                                 * tasks arrive in seq order, so enqueueing
                                 * one is O(1), not a walk past all of them */
} device_t;

struct exec {
    exec_env_t env;
    exec_counters_t counters;
    ostore_t *own_store;        /* made here when the config gave none */
    exec_report_fn report_fn;
    void *report_ctx;
    char self_addr[DPLANE_ADDR_MAX];
    pthread_mutex_t mu;
    pthread_cond_t work_cv;
    pthread_cond_t idle_cv;     /* CLOCK_MONOTONIC */
    int stopping;
    int ndev;
    device_t *dev;
    int nhosts;                 /* hnodes queued or running */
    int nthreads;
    pthread_t *threads;
};

static void report(exec_t *ex, int64_t id, int32_t comp, char *body, int hold, int64_t due_us)
{
    if (!body)
        log_error("task %lld: out of memory building its report", (long long)id);
    ex->report_fn(ex->report_ctx, id, comp, body, hold, due_us);
}

/* Whether h's report may wait (exec_report_fn): it succeeded, its attempt
 * allows holding, and the next task in line on one of its devices is of
 * the same attempt, so another report of the attempt will follow from
 * here. Its job cannot end before that one is sent. Holds mu; h is
 * running, so it heads each of its devices' queues. */
static int report_may_hold(const exec_t *ex, const hnode_t *h, int succeeded)
{
    const wtask_t *t = h->t;
    if (!t->place->hold_reports || !succeeded)
        return 0;
    for (int l = 0; l < t->nlocal; l++) {
        const qent_t *q = ex->dev[t->devices[l]].queue;
        const qent_t *next = q && q->h == h ? q->next : NULL;
        if (next && next->h->t->job == t->job && next->h->t->attempt == t->attempt)
            return 1;
    }
    return 0;
}

/* npeers bound of the mailbox gate for a task: shard ids (edges) and proc
 * ids (packs) of its job. */
static int32_t gate_peers(const wtask_t *t)
{
    /* Any slice's shard count: a cross-mesh edge's source is a shard of
     * the producer's slice, which may be larger than this one. */
    int32_t n = t->place->nprocs;
    for (int s = 0; s < t->place->nslices; s++)
        if (t->place->slices[s].nshards > n)
            n = t->place->slices[s].nshards;
    return n;
}

/* From now on the data plane takes frames for this task: edges to each of
 * its shards, packs to its proc. Returns 0 or -1 (OOM; nothing declared). */
static int task_expect(exec_t *ex, const wtask_t *t)
{
    int32_t np = gate_peers(t);
    for (int l = 0; l < t->nlocal; l++) {
        if (mbox_expect(ex->env.mb, t->job, t->attempt, t->comp, t->shards[l], np,
                        &t->place->key) != 0) {
            while (l-- > 0)
                mbox_task_done(ex->env.mb, t->job, t->attempt, t->comp, t->shards[l]);
            return -1;
        }
    }
    if (mbox_expect(ex->env.mb, t->job, t->attempt, t->comp, t->place->self, np,
                    &t->place->key) != 0) {
        for (int l = 0; l < t->nlocal; l++)
            mbox_task_done(ex->env.mb, t->job, t->attempt, t->comp, t->shards[l]);
        return -1;
    }
    return 0;
}

/* The task has ended here: the mailbox's gate stops taking its frames. */
static void task_done(exec_t *ex, const wtask_t *t)
{
    for (int l = 0; l < t->nlocal; l++)
        mbox_task_done(ex->env.mb, t->job, t->attempt, t->comp, t->shards[l]);
    mbox_task_done(ex->env.mb, t->job, t->attempt, t->comp, t->place->self);
}

/* Is h first in line on every one of its devices? Holds mu. */
static int is_head_everywhere(const exec_t *ex, const hnode_t *h)
{
    for (int l = 0; l < h->t->nlocal; l++) {
        const qent_t *q = ex->dev[h->t->devices[l]].queue;
        if (!q || q->h != h)
            return 0;
    }
    return 1;
}

/* A runnable task no runner has claimed, or NULL. Holds mu. */
static hnode_t *find_runnable(const exec_t *ex)
{
    for (int d = 0; d < ex->ndev; d++) {
        const qent_t *q = ex->dev[d].queue;
        if (q && !q->h->running && is_head_everywhere(ex, q->h))
            return q->h;
    }
    return NULL;
}

/* Wakes one idle runner when a task is runnable and unclaimed. Holds mu.
 *
 * Why not a broadcast: a chain of computations ends one task and makes the
 * next runnable every few tens of microseconds, and the runner that ended
 * it takes it itself (runner_main looks before it sleeps). Waking every
 * idle runner each time (as many as devices) had them all contend for mu
 * and sleep again: measured on 2 cores, most of the gap between chained
 * computations. Invariant: while a runnable task is unclaimed, one runner
 * is awake or signalled; each runner that claims a task passes the wake on
 * (runner_main), so k tasks made runnable at once wake k runners, one after
 * the other. A group's tasks queued at once (enqueue_group) signal once,
 * after mu is released. */
static void wake_one(exec_t *ex)
{
    if (find_runnable(ex))
        pthread_cond_signal(&ex->work_cv);
}

/* Takes h out of its devices' queues. Holds mu. */
static void unqueue(exec_t *ex, hnode_t *h)
{
    for (int l = 0; l < h->t->nlocal; l++) {
        device_t *dv = &ex->dev[h->t->devices[l]];
        qent_t **p = &dv->queue, *prev = NULL;
        while (*p && (*p)->h != h) {
            prev = *p;
            p = &(*p)->next;
        }
        if (*p) {
            qent_t *q = *p;
            *p = q->next;
            if (dv->tail == q)
                dv->tail = prev;
            free(q);
        }
    }
    ex->nhosts--;
}

static void log_start(const wtask_t *t)
{
    for (int l = 0; l < t->nlocal; l++)
        log_debug("task %lld (job %lld comp %d seq %lld shard %d device %d)", (long long)t->id,
                  (long long)t->job, (int)t->comp, (long long)t->seq, (int)t->shards[l],
                  (int)t->devices[l]);
}

/* When t's devices finish the tasks that ran on them before it. Holds mu. */
static int64_t devices_free(const exec_t *ex, const wtask_t *t)
{
    int64_t at = 0;
    for (int l = 0; l < t->nlocal; l++)
        if (ex->dev[t->devices[l]].free_us > at)
            at = ex->dev[t->devices[l]].free_us;
    return at;
}

static void *runner_main(void *arg)
{
    exec_t *ex = arg;
    pthread_setname_np(pthread_self(), "atoll-runner");
    pthread_mutex_lock(&ex->mu);
    for (;;) {
        hnode_t *h = NULL;
        while (!ex->stopping && !(h = find_runnable(ex)))
            pthread_cond_wait(&ex->work_cv, &ex->mu);
        if (!h)
            break;
        h->running = 1;
        exec_clock_t clk = {.free_us = devices_free(ex, h->t)};
        wake_one(ex);
        pthread_mutex_unlock(&ex->mu);

        if (log_enabled(LOG_DEBUG))
            log_start(h->t);
        int succeeded = 0;
        char *body = exec_run_task(&ex->env, h->t, &clk, &succeeded);
        log_debug("task %lld ended: %s", (long long)h->t->id, succeeded ? "succeeded" : "not");
        task_done(ex, h->t);
        pthread_mutex_lock(&ex->mu);
        int hold = report_may_hold(ex, h, succeeded);
        pthread_mutex_unlock(&ex->mu);
        report(ex, h->t->id, h->t->comp, body, hold, clk.end_us);

        pthread_mutex_lock(&ex->mu);
        /* The next task on these devices starts where this one ends. */
        for (int l = 0; l < h->t->nlocal; l++)
            ex->dev[h->t->devices[l]].free_us = clk.end_us;
        unqueue(ex, h);
        wtask_free(h->t);
        free(h);
        /* This runner looks for the next task itself (top of the loop). */
        pthread_cond_broadcast(&ex->idle_cv);
    }
    pthread_mutex_unlock(&ex->mu);
    return NULL;
}

static int exec_init_locks(exec_t *ex)
{
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&ex->idle_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return -1;
    if (pthread_cond_init(&ex->work_cv, NULL) != 0) {
        pthread_cond_destroy(&ex->idle_cv);
        return -1;
    }
    if (pthread_mutex_init(&ex->mu, NULL) != 0) {
        pthread_cond_destroy(&ex->work_cv);
        pthread_cond_destroy(&ex->idle_cv);
        return -1;
    }
    return 0;
}

exec_t *exec_start(const exec_cfg_t *cfg, mbox_t *mb, dplane_t *dp, exec_report_fn report_fn,
                   void *report_ctx)
{
    exec_t *ex = calloc(1, sizeof *ex);
    if (!ex)
        return NULL;
    ostore_t *st = cfg->store;
    if (!st && !(st = ex->own_store = ostore_new(EXEC_DEFAULT_STORE_CAP))) {
        free(ex);
        return NULL;
    }
    ex->env = (exec_env_t){.mb = mb, .dp = dp, .st = st,
                           .peer_timeout_us = cfg->peer_timeout_us, .sim = cfg->sim, .run = cfg->run,
                           .ring_min_bytes = cfg->ring_min_bytes ? cfg->ring_min_bytes
                                                                 : EXEC_RING_MIN_BYTES_DEFAULT,
                           .relay_min_procs = cfg->relay_min_procs > 0
                                                  ? cfg->relay_min_procs
                                                  : EXEC_RELAY_MIN_PROCS_DEFAULT,
                           .sim_ahead_us = cfg->sim_ahead_us > 0 ? cfg->sim_ahead_us
                                                                 : EXEC_SIM_AHEAD_US,
                           .counters = &ex->counters};
    snprintf(ex->self_addr, sizeof ex->self_addr, "%s", cfg->self_addr ? cfg->self_addr : "");
    ex->report_fn = report_fn;
    ex->report_ctx = report_ctx;
    ex->ndev = cfg->ndevices;
    ex->dev = calloc((size_t)cfg->ndevices, sizeof *ex->dev);
    ex->threads = calloc((size_t)cfg->ndevices, sizeof *ex->threads);
    if (!ex->dev || !ex->threads || exec_init_locks(ex) != 0) {
        free(ex->dev);
        free(ex->threads);
        ostore_free(ex->own_store);
        free(ex);
        return NULL;
    }
    for (int i = 0; i < cfg->ndevices; i++) {
        if (pthread_create(&ex->threads[i], NULL, runner_main, ex) != 0) {
            log_error("exec: cannot start runner threads");
            exec_stop(ex);
            return NULL;
        }
        ex->nthreads = i + 1;
    }
    return ex;
}

/* Queues h on each of its devices, after every task of lower or equal seq
 * (stable). Returns 0 or -1 (OOM: nothing queued). Holds mu. */
static int enqueue_locked(exec_t *ex, hnode_t *h)
{
    const wtask_t *t = h->t;
    qent_t **ents = util_zalloc((size_t)t->nlocal, sizeof *ents);
    int ok = ents != NULL;
    for (int l = 0; ok && l < t->nlocal; l++)
        ok = (ents[l] = malloc(sizeof *ents[l])) != NULL;
    if (!ok) {
        for (int l = 0; ents && l < t->nlocal; l++)
            free(ents[l]);
        free(ents);
        return -1;
    }
    for (int l = 0; l < t->nlocal; l++) {
        device_t *dv = &ex->dev[t->devices[l]];
        qent_t **p = &dv->queue;
        if (dv->tail && dv->tail->h->t->seq <= t->seq)
            p = &dv->tail->next;
        while (*p && (*p)->h->t->seq <= t->seq)
            p = &(*p)->next;
        ents[l]->h = h;
        ents[l]->next = *p;
        *p = ents[l];
        if (!ents[l]->next)
            dv->tail = ents[l];
    }
    free(ents);
    ex->nhosts++;
    return 0;
}

/* Reports task `id` (computation comp, -1 when unknown) failed when its
 * id is known, and frees what was made of it. */
static void reject_task(exec_t *ex, int64_t id, int32_t comp, hnode_t *h, wtask_t *t,
                        const char *err)
{
    log_warn("rejecting task %lld: %s", (long long)id, err);
    free(h);
    wtask_free(t);
    if (id >= 0)
        report(ex, id, comp, exec_report_failed(err), 0, 0);
}

/* A parsed task as a node ready to queue (its mailbox gates open), or
 * NULL after reporting it failed (out of memory). Takes t. */
static hnode_t *task_node(exec_t *ex, wtask_t *t)
{
    hnode_t *h = util_zalloc(1, sizeof *h);
    if (!h || task_expect(ex, t) != 0) {
        reject_task(ex, t->id, t->comp, h, t, "out of memory");
        return NULL;
    }
    /* Leftover messages of this job's earlier (failed) attempts are stale. */
    if (t->attempt > 0)
        mbox_drop_job(ex->env.mb, t->job, t->attempt - 1);
    h->t = t;
    return h;
}

/* Queues an answer's prepared tasks (n, NULL entries skipped) under one
 * hold of mu, so that no runner sees part of it (submit: the order across
 * groups), nor part of a group: a task's report may wait
 * while the next task of its attempt is queued behind it
 * (report_may_hold), and a chain's first task could otherwise end before
 * its second was queued. A task that cannot be queued is reported failed. */
static void enqueue_group(exec_t *ex, hnode_t **hs, size_t n)
{
    size_t nfailed = 0;
    pthread_mutex_lock(&ex->mu);
    int stopping = ex->stopping;
    for (size_t i = 0; i < n; i++) {
        if (hs[i] && (stopping || enqueue_locked(ex, hs[i]) != 0))
            hs[nfailed++] = hs[i];      /* compacted: the failed ones first */
        else if (hs[i] && log_enabled(LOG_DEBUG))
            log_debug("task %lld queued (job %lld attempt %d seq %lld, %d device(s))",
                      (long long)hs[i]->t->id, (long long)hs[i]->t->job, (int)hs[i]->t->attempt,
                      (long long)hs[i]->t->seq, hs[i]->t->nlocal);
    }
    /* One wake for the whole group, signalled once mu is released: a
     * signal per task, under mu, woke a runner per task that only blocked
     * on mu again (the task still unclaimed, so each next signal woke
     * another): a switch pair of ~5 us per task queued (perf sched, stop
     * 73: ~150 in one worker's first answer of a 128-computation chain).
     * A runner that looks after the unlock finds the task itself; one
     * already waiting takes this signal. */
    int wake = !stopping && find_runnable(ex) != NULL;
    pthread_mutex_unlock(&ex->mu);
    if (wake)
        pthread_cond_signal(&ex->work_cv);
    for (size_t i = 0; i < nfailed; i++) {
        task_done(ex, hs[i]->t);
        reject_task(ex, hs[i]->t->id, hs[i]->t->comp, hs[i], hs[i]->t,
                    stopping ? "worker shutting down" : "out of memory");
    }
}

/* A task refused at intake, reported failed when its batch is queued. */
typedef struct refused {
    int64_t id;
    int32_t comp;
    char *err;                         /* owned */
} refused_t;

/* An answer's tasks read, not yet queued: the nodes in the answer's order
 * and the refused tasks; ntasks counts both. */
typedef struct batch {
    hnode_t **hs;                      /* owned array and nodes (until queued) */
    size_t n, cap;
    refused_t *refused;                /* owned */
    size_t nrefused, cap_refused;
    int ntasks;
    exec_t *ex;
} batch_t;

/* wtask_fn: a task of the answer becomes a node, or is noted refused (at
 * once reported failed when even that fails). */
static void batch_task(void *ctx, wtask_item_t *it)
{
    batch_t *b = ctx;
    b->ntasks++;
    if (!it->t) {
        char *err = strdup(it->err);
        if (!err || util_grow((void **)&b->refused, &b->cap_refused, b->nrefused,
                              sizeof *b->refused, 16) != 0) {
            free(err);
            reject_task(b->ex, it->id, it->comp, NULL, NULL, it->err);
            return;
        }
        b->refused[b->nrefused++] = (refused_t){it->id, it->comp, err};
        return;
    }
    hnode_t *h = task_node(b->ex, it->t);
    if (h && util_grow((void **)&b->hs, &b->cap, b->n, sizeof *b->hs, 16) != 0) {
        task_done(b->ex, h->t);
        reject_task(b->ex, h->t->id, h->t->comp, h, h->t, "out of memory");
    } else if (h) {
        b->hs[b->n++] = h;
    }
}

/* Frees what b holds without queueing or reporting any of it. */
static void batch_drop(exec_t *ex, batch_t *b)
{
    for (size_t i = 0; i < b->n; i++) {
        task_done(ex, b->hs[i]->t);
        wtask_free(b->hs[i]->t);
        free(b->hs[i]);
    }
    for (size_t i = 0; i < b->nrefused; i++)
        free(b->refused[i].err);
    free(b->refused);
    free(b->hs);
    *b = (batch_t){.ex = ex};
}

/* Queues the batch's tasks, all prepared first and then queued under one
 * hold of mu (enqueue_group): a group lists its tasks in seq order, but
 * with devices shared between jobs one group's later task may follow
 * another group's earlier one on a device, and queued before it, it could
 * start first (its devices free, the other group still compiling): the
 * earlier one, queued ahead of it later, would then run beside it, and
 * the devices would not run the island's computations in seq order. Then
 * reports the refused tasks failed, and empties b. */
static void batch_queue(exec_t *ex, batch_t *b)
{
    if (b->n > 0)
        enqueue_group(ex, b->hs, b->n);
    for (size_t i = 0; i < b->nrefused; i++)
        reject_task(ex, b->refused[i].id, b->refused[i].comp, NULL, NULL, b->refused[i].err);
    b->n = 0;                          /* queued: the executor's now */
    batch_drop(ex, b);
}

/* One member of a poll answer (its key read, the value next in s): its
 * "jobs" read into b (a repeated key: the last counts), its "lease" and
 * where its "cancel" lies into a. 0, or -1 (not JSON, or out of memory). */
static int answer_member(exec_t *ex, jscan_t *s, const jscan_str_t *key, batch_t *b,
                         exec_answer_t *a)
{
    jscan_num_t num;
    if (jscan_str_eq(key, "jobs")) {
        batch_drop(ex, b);
        return wtask_walk(s, 0, ex->self_addr, ex->ndev, batch_task, b);
    }
    if (jscan_str_eq(key, "lease") && jscan_peek(s) == JSCAN_NUMBER) {
        int rc = jscan_number(s, &num);
        a->lease = rc == 0 && num.is_int ? num.i : 0;
        return rc;
    }
    if (!jscan_str_eq(key, "cancel"))
        return jscan_skip(s);
    a->cancel = (const char *)s->p;
    int rc = jscan_skip(s);
    a->cancel_len = (size_t)((const char *)s->p - a->cancel);
    return rc;
}

int exec_take_answer(exec_t *ex, const char *text, size_t len, exec_answer_t *a)
{
    jscan_t s;
    jscan_str_t key;
    batch_t b = {.ex = ex};
    int n = 0, more = -1;
    *a = (exec_answer_t){0};
    jscan_init(&s, text, len);
    if (jscan_object(&s) == 0)
        while ((more = jscan_member(&s, &n, &key)) == 1)
            if (answer_member(ex, &s, &key, &b, a) != 0) {
                more = -1;
                break;
            }
    if (more != 0 || jscan_finish(&s) != 0) {
        batch_drop(ex, &b);
        *a = (exec_answer_t){0};
        return -1;
    }
    a->ntasks = b.ntasks;
    batch_queue(ex, &b);
    return 0;
}

/* Takes queued (not running) tasks of job with attempt <= attempt out of
 * the queues into *removed; returns the largest attempt of that job queued
 * or running with attempt <= `attempt`, or -1. A newer attempt's tasks stay
 * where they are. Holds mu. */
static int32_t cancel_locked(exec_t *ex, int64_t job, int32_t attempt, hnode_t **removed)
{
    int32_t max_attempt = -1;
    for (int d = 0; d < ex->ndev; d++) {
        for (qent_t *q = ex->dev[d].queue; q; q = q->next) {
            hnode_t *h = q->h;
            if (h->t->job != job || h->t->attempt > attempt)
                continue;
            if (h->t->attempt > max_attempt)
                max_attempt = h->t->attempt;
            if (!h->running && !h->removed) {
                h->removed = 1;
                h->next_removed = *removed;
                *removed = h;
            }
        }
    }
    for (hnode_t *h = *removed; h; h = h->next_removed)
        unqueue(ex, h);
    return max_attempt;
}

int exec_cancel_attempt(exec_t *ex, int64_t job, int32_t attempt)
{
    hnode_t *removed = NULL;
    if (job < 1 || attempt < 0)
        return 0;
    pthread_mutex_lock(&ex->mu);
    int32_t held = cancel_locked(ex, job, attempt, &removed);
    wake_one(ex);                  /* tasks behind the removed ones may run now */
    pthread_cond_broadcast(&ex->idle_cv);
    pthread_mutex_unlock(&ex->mu);
    int fresh = held >= 0 && !mbox_is_cancelled(ex->env.mb, job, attempt);
    /* Attempts only grow, so attempts 0..attempt are all over: their
     * waiters wake, their kept messages go and later ones are dropped. A
     * newer attempt of the job (maybe queued here already) is untouched:
     * its tags, gate entries and store keys all carry its own attempt. */
    mbox_cancel_job(ex->env.mb, job, attempt);
    /* A run's computations share their host task's id and come together
     * here: one cancelled report ends the whole run at the controller
     * (docs/worker-protocol.md, Host tasks), so each further one would
     * only be answered 409. */
    int64_t last_id = -1;
    while (removed) {
        hnode_t *h = removed;
        removed = h->next_removed;
        task_done(ex, h->t);
        if (h->t->id != last_id)
            report(ex, h->t->id, h->t->comp, exec_report_cancelled(), 0, 0);
        last_id = h->t->id;
        wtask_free(h->t);
        free(h);
        fresh++;
    }
    if (fresh)
        log_info("job %lld attempt %d aborted", (long long)job, (int)attempt);
    return fresh;
}

int exec_pending(exec_t *ex)
{
    pthread_mutex_lock(&ex->mu);
    int n = ex->nhosts;
    pthread_mutex_unlock(&ex->mu);
    return n;
}

int exec_drain(exec_t *ex, int64_t timeout_ms)
{
    int64_t deadline = util_mono_us() + timeout_ms * 1000;
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000),
                          .tv_nsec = (long)(deadline % 1000000) * 1000};
    pthread_mutex_lock(&ex->mu);
    int rc = 0;
    while (ex->nhosts > 0) {
        if (util_mono_us() >= deadline) {
            rc = -1;
            break;
        }
        int w = pthread_cond_timedwait(&ex->idle_cv, &ex->mu, &ts);
        if (w != 0 && w != ETIMEDOUT && w != EINTR) {
            rc = -1;
            break;
        }
    }
    pthread_mutex_unlock(&ex->mu);
    return rc;
}

/* Takes every task no runner claimed out of the queues. Holds mu. */
static hnode_t *take_unclaimed_locked(exec_t *ex)
{
    hnode_t *left = NULL;
    for (int d = 0; d < ex->ndev; d++)
        for (qent_t *q = ex->dev[d].queue; q; q = q->next)
            if (!q->h->running && !q->h->removed) {
                q->h->removed = 1;
                q->h->next_removed = left;
                left = q->h;
            }
    for (hnode_t *h = left; h; h = h->next_removed)
        unqueue(ex, h);
    return left;
}

void exec_stop(exec_t *ex)
{
    if (!ex)
        return;
    pthread_mutex_lock(&ex->mu);
    ex->stopping = 1;
    hnode_t *left = take_unclaimed_locked(ex);
    pthread_cond_broadcast(&ex->work_cv);
    pthread_mutex_unlock(&ex->mu);
    while (left) {
        hnode_t *h = left;
        left = h->next_removed;
        task_done(ex, h->t);
        report(ex, h->t->id, h->t->comp, exec_report_failed("worker shutting down"), 0, 0);
        wtask_free(h->t);
        free(h);
    }
    /* Runners finish the task they hold (exec.h: mbox_shutdown() first),
     * then see `stopping`. */
    for (int i = 0; i < ex->nthreads; i++)
        pthread_join(ex->threads[i], NULL);
    pthread_mutex_destroy(&ex->mu);
    pthread_cond_destroy(&ex->work_cv);
    pthread_cond_destroy(&ex->idle_cv);
    free(ex->threads);
    free(ex->dev);
    ostore_free(ex->own_store);
    free(ex);
}

exec_counters_t *exec_counters(exec_t *ex)
{
    return &ex->counters;
}

