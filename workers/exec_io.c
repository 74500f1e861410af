/* exec_io.c - see exec_io.h.
 *
 * A take waits in the mailbox at most the peer timeout (the job's cancel
 * ends it at once); a send retries an unreachable peer with backoff (50 ms,
 * doubling up to 1 s) until the peer timeout, checking the cancel between
 * tries (one dplane_send() may itself block a while: dplane.h). Errors are
 * worded for the task's report: the controller shows them to users. */
#include "exec_io.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "util.h"

ostore_key_t exec_io_key(const run_t *r, int value, int shard)
{
    ostore_key_t k = {.job = r->t->job, .attempt = r->t->attempt, .comp = r->t->comp,
                      .value = value, .shard = shard};
    return k;
}

int exec_io_take(run_t *r, const mbox_tag_t *tag, tensor_t **out)
{
    int64_t deadline = util_mono_us() + r->env->peer_timeout_us;
    mbox_status_t st = mbox_take(r->env->mb, tag, deadline, out);
    switch (st) {
    case MBOX_OK:
        /* Ready times are the sim model's: on real devices a value exists
         * once it arrived, whatever a peer (a sim one, or a host whose
         * clock runs ahead) says. Every value a task takes comes here. */
        if (!r->env->sim)
            (*out)->ready_us = 0;
        return 0;
    case MBOX_CANCELLED:
        r->cancelled = 1;
        return -1;
    case MBOX_TIMEOUT:
        snprintf(r->err, sizeof r->err,
                 "timed out after %lld ms waiting for %s %d (op %d of computation %d)",
                 (long long)(r->env->peer_timeout_us / 1000), tag->op < 0 ? "process" : "shard",
                 (int)tag->src, (int)(tag->op < 0 ? (-tag->op - 1) % JOB_MAX_OPS : tag->op),
                 (int)tag->comp);
        return -1;
    case MBOX_STOPPED:
    default:
        snprintf(r->err, sizeof r->err, "worker shutting down");
        return -1;
    }
}

/* The slices end at deadlines counted from the start, so a late wake-up
 * (70-130 us per sleep on the 2-core development VM) is paid once, not
 * once a slice. */
int exec_io_wait_until(run_t *r, int64_t at_us)
{
    for (int64_t now = util_mono_us(); now < at_us; now = util_mono_us()) {
        int64_t to = at_us - now > 1000 ? now + 1000 : at_us;
        struct timespec ts = {(time_t)(to / 1000000), (long)(to % 1000000) * 1000};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
            ;
        if (mbox_is_cancelled(r->env->mb, r->t->job, r->t->attempt)) {
            r->cancelled = 1;
            return -1;
        }
    }
    return 0;
}

void exec_io_count_bad(const run_t *r)
{
    if (r->env->counters)
        atomic_fetch_add(&r->env->counters->bad_size, 1);
}

/* A peer that cannot be reached is retried with backoff for up to the
 * peer timeout: a peer worker that died is the controller's to handle (its
 * lease expires, the job is requeued or failed naming that worker, and the
 * cancel that follows ends this loop), so a task must not fail the job
 * first with a vaguer reason. */
int exec_io_send(run_t *r, const char *to, const mbox_tag_t *tag, const tensor_t *v)
{
    int64_t t0 = util_mono_us(), deadline = t0 + r->env->peer_timeout_us;
    long backoff_ms = 50;
    for (;;) {
        if (dplane_send_until(r->env->dp, to, tag, &r->t->place->key, v, deadline) == 0)
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
    snprintf(r->err, sizeof r->err, "cannot send to %s (peer unreachable for %lld ms)", to,
             (long long)((util_mono_us() - t0) / 1000));
    snprintf(r->unreachable, sizeof r->unreachable, "%s", to);
    return -1;
}
