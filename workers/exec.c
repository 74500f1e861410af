/* exec.c - see exec.h.
 *
 * One mutex guards every device queue and `running` slot; each device has
 * its own condition variable (work arrived / stop) and `idle_cv` tells
 * exec_drain() that a task finished. Invariant: a wtask_t is either in
 * exactly one queue, or a device's `running`, or owned by the code that
 * just removed it (which reports and frees it). */
#include "exec.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "exec_run.h"
#include "util.h"
#include "wtask.h"

typedef struct qnode {
    wtask_t *t;                 /* owned */
    struct qnode *next;
} qnode_t;

typedef struct device {
    struct exec *ex;
    int index;
    pthread_t thread;
    pthread_cond_t cv;
    qnode_t *queue;             /* sorted by increasing seq */
    int queued;
    const wtask_t *running;     /* owned by the device thread while set */
} device_t;

struct exec {
    exec_env_t env;
    exec_counters_t counters;
    ostore_t *own_store;        /* made here when the config gave none */
    exec_report_fn report_fn;
    void *report_ctx;
    pthread_mutex_t mu;
    pthread_cond_t idle_cv;     /* CLOCK_MONOTONIC */
    int stopping;
    int ndev;
    device_t *dev;
};

static void report(exec_t *ex, int64_t id, json_t *body)
{
    if (!body)
        log_error("task %lld: out of memory building its report", (long long)id);
    ex->report_fn(ex->report_ctx, id, body);
}

/* The task has ended here: the mailbox's gate stops taking frames for it
 * (see mbox_expect). */
static void task_done(exec_t *ex, const wtask_t *t)
{
    mbox_task_done(ex->env.mb, t->job, t->attempt, t->comp, t->shard);
}

static void *device_main(void *arg)
{
    device_t *d = arg;
    exec_t *ex = d->ex;
    pthread_mutex_lock(&ex->mu);
    for (;;) {
        while (!ex->stopping && !d->queue)
            pthread_cond_wait(&d->cv, &ex->mu);
        if (ex->stopping)
            break;
        qnode_t *q = d->queue;
        d->queue = q->next;
        d->queued--;
        d->running = q->t;
        pthread_mutex_unlock(&ex->mu);

        log_debug("device %d: task %lld (job %lld comp %d seq %lld shard %d)", d->index,
                  (long long)q->t->id, (long long)q->t->job, (int)q->t->comp,
                  (long long)q->t->seq, (int)q->t->shard);
        json_t *body = exec_run_task(&ex->env, q->t);
        task_done(ex, q->t);
        report(ex, q->t->id, body);

        pthread_mutex_lock(&ex->mu);
        d->running = NULL;
        wtask_free(q->t);
        free(q);
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
    if (pthread_mutex_init(&ex->mu, NULL) != 0) {
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
                           .peer_timeout_us = cfg->peer_timeout_us, .sim = cfg->sim,
                           .ring_min_bytes = cfg->ring_min_bytes ? cfg->ring_min_bytes
                                                                 : EXEC_RING_MIN_BYTES_DEFAULT,
                           .counters = &ex->counters, .no_two_level = cfg->no_two_level};
    ex->report_fn = report_fn;
    ex->report_ctx = report_ctx;
    ex->dev = calloc((size_t)cfg->ndevices, sizeof *ex->dev);
    if (!ex->dev || exec_init_locks(ex) != 0) {
        free(ex->dev);
        ostore_free(ex->own_store);
        free(ex);
        return NULL;
    }
    for (int i = 0; i < cfg->ndevices; i++) {
        device_t *d = &ex->dev[i];
        d->ex = ex;
        d->index = i;
        if (pthread_cond_init(&d->cv, NULL) != 0)
            goto fail;
        if (pthread_create(&d->thread, NULL, device_main, d) != 0) {
            pthread_cond_destroy(&d->cv);
            goto fail;
        }
        ex->ndev = i + 1;
    }
    return ex;
fail:
    log_error("exec: cannot start device threads");
    exec_stop(ex);
    return NULL;
}

void exec_submit(exec_t *ex, const json_t *task)
{
    char err[256];
    int64_t id;
    wtask_t *t = NULL;
    qnode_t *q = NULL;
    if (wtask_parse(task, &t, &id, err, sizeof err) != 0)
        goto reject;
    if (t->device >= ex->ndev) {
        snprintf(err, sizeof err, "device %d not on this worker (%d devices)", (int)t->device,
                 ex->ndev);
        goto reject;
    }
    if (!(q = malloc(sizeof *q))) {
        snprintf(err, sizeof err, "out of memory");
        goto reject;
    }
    /* From now on the data plane takes frames for this task (and hands it
     * those that came early); until task_done(). */
    if (mbox_expect(ex->env.mb, t->job, t->attempt, t->comp, t->shard, t->npeers) != 0) {
        free(q);
        q = NULL;
        snprintf(err, sizeof err, "out of memory");
        goto reject;
    }
    /* Leftover messages of this job's earlier (failed) attempts are stale. */
    if (t->attempt > 0)
        mbox_drop_job(ex->env.mb, t->job, t->attempt - 1);
    q->t = t;
    pthread_mutex_lock(&ex->mu);
    device_t *d = &ex->dev[t->device];
    qnode_t **p = &d->queue;
    while (*p && (*p)->t->seq <= t->seq)   /* stable among equal seq */
        p = &(*p)->next;
    q->next = *p;
    *p = q;
    d->queued++;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&ex->mu);
    return;
reject:
    log_warn("rejecting task %lld: %s", (long long)id, err);
    wtask_free(t);
    if (id >= 0)
        report(ex, id, exec_report_failed(err));
}

/* Unlinks queued tasks of job whose attempt is <= attempt into *removed;
 * returns the largest attempt of that job queued or running with
 * attempt <= `attempt`, or -1. A newer attempt's tasks stay where they are.
 * Holds mu. */
static int32_t cancel_locked(exec_t *ex, int64_t job, int32_t attempt, qnode_t **removed)
{
    int32_t max_attempt = -1;
    for (int i = 0; i < ex->ndev; i++) {
        device_t *d = &ex->dev[i];
        const wtask_t *run = d->running;
        if (run && run->job == job && run->attempt <= attempt && run->attempt > max_attempt)
            max_attempt = run->attempt;
        qnode_t **p = &d->queue;
        while (*p) {
            qnode_t *q = *p;
            if (q->t->job != job || q->t->attempt > attempt) {
                p = &q->next;
                continue;
            }
            if (q->t->attempt > max_attempt)
                max_attempt = q->t->attempt;
            *p = q->next;
            d->queued--;
            q->next = *removed;
            *removed = q;
        }
    }
    return max_attempt;
}

int exec_cancel_attempt(exec_t *ex, int64_t job, int32_t attempt)
{
    qnode_t *removed = NULL;
    if (job < 1 || attempt < 0)
        return 0;
    pthread_mutex_lock(&ex->mu);
    int32_t held = cancel_locked(ex, job, attempt, &removed);
    pthread_cond_broadcast(&ex->idle_cv);
    pthread_mutex_unlock(&ex->mu);
    int fresh = held >= 0 && !mbox_is_cancelled(ex->env.mb, job, attempt);
    /* Attempts only grow, so attempts 0..attempt are all over: their
     * waiters wake, their kept messages go and later ones are dropped. A
     * newer attempt of the job (maybe queued here already) is untouched:
     * its tags, gate entries and store keys all carry its own attempt. */
    mbox_cancel_job(ex->env.mb, job, attempt);
    while (removed) {
        qnode_t *q = removed;
        removed = q->next;
        task_done(ex, q->t);
        report(ex, q->t->id, exec_report_cancelled());
        wtask_free(q->t);
        free(q);
        fresh++;
    }
    if (fresh)
        log_info("job %lld attempt %d aborted", (long long)job, (int)attempt);
    return fresh;
}

/* Every attempt held here: the newest one queued or running bounds it, so
 * an attempt this worker has not seen yet is not marked. */
int exec_cancel_job(exec_t *ex, int64_t job)
{
    int32_t held = -1;
    pthread_mutex_lock(&ex->mu);
    for (int i = 0; i < ex->ndev; i++) {
        const wtask_t *run = ex->dev[i].running;
        if (run && run->job == job && run->attempt > held)
            held = run->attempt;
        for (const qnode_t *q = ex->dev[i].queue; q; q = q->next)
            if (q->t->job == job && q->t->attempt > held)
                held = q->t->attempt;
    }
    pthread_mutex_unlock(&ex->mu);
    if (held >= 0)
        return exec_cancel_attempt(ex, job, held);
    mbox_drop_job(ex->env.mb, job, INT32_MAX);      /* the job ended: its messages too */
    return 0;
}

/* Holds mu. */
static int pending_locked(const exec_t *ex)
{
    int n = 0;
    for (int i = 0; i < ex->ndev; i++)
        n += ex->dev[i].queued + (ex->dev[i].running != NULL);
    return n;
}

int exec_pending(exec_t *ex)
{
    pthread_mutex_lock(&ex->mu);
    int n = pending_locked(ex);
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
    while (pending_locked(ex) > 0) {
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

void exec_stop(exec_t *ex)
{
    if (!ex)
        return;
    qnode_t *left = NULL;
    pthread_mutex_lock(&ex->mu);
    ex->stopping = 1;
    for (int i = 0; i < ex->ndev; i++) {
        while (ex->dev[i].queue) {
            qnode_t *q = ex->dev[i].queue;
            ex->dev[i].queue = q->next;
            q->next = left;
            left = q;
        }
        ex->dev[i].queued = 0;
        pthread_cond_signal(&ex->dev[i].cv);
    }
    pthread_mutex_unlock(&ex->mu);
    while (left) {
        qnode_t *q = left;
        left = q->next;
        task_done(ex, q->t);
        report(ex, q->t->id, exec_report_failed("worker shutting down"));
        wtask_free(q->t);
        free(q);
    }
    for (int i = 0; i < ex->ndev; i++) {
        pthread_join(ex->dev[i].thread, NULL);
        pthread_cond_destroy(&ex->dev[i].cv);
    }
    pthread_mutex_destroy(&ex->mu);
    pthread_cond_destroy(&ex->idle_cv);
    free(ex->dev);
    ostore_free(ex->own_store);
    free(ex);
}

exec_counters_t *exec_counters(exec_t *ex)
{
    return &ex->counters;
}

ostore_t *exec_store(exec_t *ex)
{
    return ex->env.st;
}
