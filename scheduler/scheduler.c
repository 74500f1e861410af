/* scheduler.c - the scheduler thread: its loop (lease expiry, then an
 * admission round when something changed), its start and stop, its
 * real-time policy and meter when asked (--sched-priority), and its pass
 * counters. The round itself is in sched_admit.c; the invariants of the
 * whole scheduler are at the top of sched_internal.h. See scheduler.h for
 * the contract and store_sched.c for the SQL. */
#include "sched_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "util.h"

/* Period of the lease check when nothing wakes the thread. */
#define SCHED_TICK_US 200000
/* Admission also runs every this many ticks unwoken: a safety net for a
 * wake-up that never came (every change that can admit a job wakes the
 * thread; no condition opens with time alone since aborts are per attempt). */
#define SCHED_ADMIT_EVERY_TICKS 5
/* The lease check runs at most every this many µs (or a tenth of the
 * lease, if shorter), not on every wake-up: each reads every live
 * worker's heartbeat (512 rows at 2,048 devices) and a pass follows every
 * report. A lost worker is then noticed within the lease plus this. */
#define SCHED_EXPIRE_US 50000

static _Atomic uint64_t sched_round_max_us;   /* for /metrics; the rest is in pass_hists */
/* Upper bounds (µs) of the scheduler-pass histograms' buckets, one order
 * of magnitude per three. */
static const int64_t pass_bound_us[] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000};
#define PASS_NBOUNDS ((int)(sizeof pass_bound_us / sizeof pass_bound_us[0]))
_Static_assert(PASS_NBOUNDS <= UTIL_HIST_MAX_BOUNDS, "util_hist_t holds the pass buckets");
/* Wall time (SCHED_PASS_WALL) and the thread's CPU time (SCHED_PASS_CPU):
 * on a machine short of cores a pass waits for one, and its wall time
 * then says more about the machine than about the pass's own work.
 * Written by the scheduler thread. */
static util_hist_t pass_hists[2] = {{.bounds_us = pass_bound_us, .nbounds = PASS_NBOUNDS},
                                    {.bounds_us = pass_bound_us, .nbounds = PASS_NBOUNDS}};
/* A real-time scheduler thread (--sched-priority) is never preempted by
 * the HTTP threads, the report applier or the players on its host, which
 * is what stretched a pass's wall time past its CPU time on 2 cores
 * (docs/performance.md, "Stop 70"). But a SCHED_FIFO thread that ran pass
 * after pass (chunks left, a round cut short, a stream of reports) would
 * hold a core against every thread of the default policy: its passes'
 * time is metered (sched_rt_rest_us) and it rests when they used more
 * than half of the time since, beyond a short burst. */
static _Atomic int sched_rt_prio;           /* in effect; 0: the default policy */
static _Atomic uint64_t sched_rt_rest_count;
static sched_rt_bucket_t sched_rt_meter;    /* the scheduler thread's */
static _Atomic int64_t sched_rt_left_us;    /* its balance after the last pass, for /metrics */
static pthread_t sched_thread;
static pthread_mutex_t sched_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sched_cv = PTHREAD_COND_INITIALIZER;
static int sched_wake;          /* guarded by sched_mu */
/* Guarded by sched_mu. sched_waiting: the last round's sched_admit()
 * result (1 before the first), whether devices freed since could let a
 * round do something. sched_freed: a sched_notify_freed() came since the
 * current round began; a round that ends waiting runs again at once if
 * one did, since the notice may have read sched_waiting from the round
 * before. */
static int sched_waiting = 1;
static int sched_freed;
static _Atomic uint64_t sched_freed_woke, sched_freed_skipped;   /* for /metrics */
static int sched_running;       /* guarded by sched_mu */

/* This thread's CPU time, µs. */
static int64_t thread_cpu_us(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Accounts one admission/dispatch pass of `us` microseconds, `cpu_us` of
 * them on a CPU. */
static void pass_record(uint64_t us, uint64_t cpu_us)
{
    util_hist_add(&pass_hists[SCHED_PASS_WALL], (int64_t)us);
    util_hist_add(&pass_hists[SCHED_PASS_CPU], (int64_t)cpu_us);
    if (us > atomic_load(&sched_round_max_us))
        atomic_store(&sched_round_max_us, us);   /* one writer: this thread */
}

/* Puts the calling thread under SCHED_FIFO at sched_cfg.rt_priority when
 * asked; refused (no CAP_SYS_NICE, a container without it, an RT budget of
 * 0), it stays under the default policy and says so once. */
static void rt_enter(void)
{
    if (sched_cfg.rt_priority <= 0)
        return;
    struct sched_param sp = {.sched_priority = sched_cfg.rt_priority};
    int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    if (rc != 0) {
        log_warn("scheduler: SCHED_FIFO priority %d refused (%s): the scheduler thread keeps"
                 " the default policy", sched_cfg.rt_priority, strerror(rc));
        return;
    }
    atomic_store(&sched_rt_prio, sched_cfg.rt_priority);
    log_info("scheduler: thread runs under SCHED_FIFO priority %d", sched_cfg.rt_priority);
}

int64_t sched_rt_rest_us(sched_rt_bucket_t *b, int64_t now_us, int64_t pass_us, int at_once)
{
    if (b->last_us == 0 || now_us < b->last_us) {
        b->balance_us = SCHED_RT_BURST_US;      /* the first pass, or a clock gone back */
        b->last_us = now_us;
    }
    b->balance_us += (now_us - b->last_us) / 2;
    if (b->balance_us > SCHED_RT_BURST_US)
        b->balance_us = SCHED_RT_BURST_US;      /* what it holds at most; the pass draws on it */
    b->balance_us -= pass_us;
    b->last_us = now_us;
    if (!at_once || b->balance_us >= 0)
        return 0;
    /* Half of a rest is earned back: twice the debt clears it. */
    return -2 * b->balance_us < SCHED_RT_REST_MAX_US ? -2 * b->balance_us : SCHED_RT_REST_MAX_US;
}

/* After a pass of pass_us (at_once: another follows at once), a real-time
 * thread sleeps for what sched_rt_rest_us says, so that the threads it
 * would preempt get the core back. Called without sched_mu. */
static void rt_rest(int64_t pass_us, int at_once)
{
    if (atomic_load(&sched_rt_prio) == 0)
        return;
    int64_t us = sched_rt_rest_us(&sched_rt_meter, util_mono_us(), pass_us, at_once);
    atomic_store(&sched_rt_left_us, sched_rt_meter.balance_us);
    if (us <= 0)
        return;
    struct timespec ts = {0, (long)us * 1000L};
    nanosleep(&ts, NULL);
    atomic_fetch_add(&sched_rt_rest_count, 1);
}

sched_rt_stats_t sched_rt_stats(void)
{
    return (sched_rt_stats_t){atomic_load(&sched_rt_prio), atomic_load(&sched_rt_rest_count),
                              atomic_load(&sched_rt_left_us)};
}

static void *sched_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "atoll-sched");
    rt_enter();
    store_t *st = store_thread();
    if (!st) {
        log_error("scheduler: no database connection");
        return NULL;
    }
    /* Recovery after a restart (store_sched_recover) already ran in main(),
     * before the API opened. */
    int ticks = 0;
    int64_t expire_every = sched_cfg.lease_us / 10 < SCHED_EXPIRE_US ? sched_cfg.lease_us / 10
                                                                      : SCHED_EXPIRE_US;
    int64_t expired_at = 0;
    pthread_mutex_lock(&sched_mu);
    while (sched_running) {
        if (!sched_wake) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += SCHED_TICK_US * 1000L;
            ts.tv_sec += ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&sched_cv, &sched_mu, &ts);
        }
        if (!sched_running)
            break;
        int woke = sched_wake;
        sched_wake = 0;
        sched_freed = 0;
        if (++ticks >= SCHED_ADMIT_EVERY_TICKS) {
            ticks = 0;
            woke = 1;
        }
        pthread_mutex_unlock(&sched_mu);
        int64_t now = util_mono_us();
        int expire = now - expired_at >= expire_every;
        if (expire)
            expired_at = now;
        if (expire && store_sched_expire(st, sched_cfg.lease_us) > 0) {
            woke = 1;
            if (sched_cfg.on_dispatch)
                sched_cfg.on_dispatch();   /* pollers learn about aborted jobs */
        }
        /* Admission only when something changed, so idle ticks stay cheap
         * (a round reads each tenant's head, not the queue). */
        int waiting = -1;
        int64_t pass_us = 0;
        if (woke) {
            int64_t t0 = util_mono_us(), c0 = thread_cpu_us();
            waiting = sched_admit(st);
            int64_t cpu = thread_cpu_us() - c0;
            pass_us = util_mono_us() - t0;
            pass_record((uint64_t)pass_us, (uint64_t)(cpu > 0 ? cpu : 0));
        }
        pthread_mutex_lock(&sched_mu);
        if (waiting >= 0) {
            sched_waiting = waiting;
            if (waiting && sched_freed)
                sched_wake = 1;
        }
        if (woke) {
            int at_once = sched_wake && sched_running;
            pthread_mutex_unlock(&sched_mu);
            rt_rest(pass_us, at_once);
            pthread_mutex_lock(&sched_mu);
        }
    }
    pthread_mutex_unlock(&sched_mu);
    sched_plans_free_all();
    sched_round_cache_free();
    sched_admit_free();
    store_thread_close();
    return NULL;
}

int sched_start(const sched_config_t *cfg)
{
    sched_cfg = *cfg;
    sched_running = 1;
    sched_wake = 1;
    if (pthread_create(&sched_thread, NULL, sched_main, NULL) != 0) {
        sched_running = 0;
        return -1;
    }
    return 0;
}

/* Reads only the islands of sched_cfg, set before any other thread asked. */
int sched_ever_fits(const job_plan_t *plan)
{
    alloc_island_t *isl[SCHED_MAX_ISLANDS] = {0};
    alloc_request_t reqs[64];
    int n = sched_cfg.nislands < SCHED_MAX_ISLANDS ? sched_cfg.nislands : SCHED_MAX_ISLANDS;
    int fits = -1;
    for (int i = 0; i < n; i++)
        if (!(isl[i] = alloc_island_new(sched_cfg.islands[i].name, &sched_cfg.islands[i].shape)))
            goto cleanup;
    for (int s = 0; s < plan->nslices && s < 64; s++) {
        reqs[s].shape = plan->slices[s].shape;
        reqs[s].island = plan->slices[s].island[0] ? plan->slices[s].island : NULL;
    }
    fits = alloc_ever_fits(isl, n, reqs, plan->nslices);
cleanup:
    for (int i = 0; i < n; i++)
        alloc_island_free(isl[i]);
    return fits;
}

void sched_round_stats(uint64_t *rounds, uint64_t *total_us, uint64_t *max_us)
{
    uint64_t cum[UTIL_HIST_MAX_BOUNDS];
    util_hist_read(&pass_hists[SCHED_PASS_WALL], cum, rounds, total_us);
    *max_us = atomic_load(&sched_round_max_us);
}

const util_hist_t *sched_pass_histogram(int which)
{
    return &pass_hists[which == SCHED_PASS_CPU];
}

void sched_notify(void)
{
    pthread_mutex_lock(&sched_mu);
    sched_wake = 1;
    pthread_cond_signal(&sched_cv);
    pthread_mutex_unlock(&sched_mu);
}

void sched_notify_freed(void)
{
    pthread_mutex_lock(&sched_mu);
    sched_freed = 1;
    int wake = sched_waiting;
    if (wake) {
        sched_wake = 1;
        pthread_cond_signal(&sched_cv);
    }
    pthread_mutex_unlock(&sched_mu);
    atomic_fetch_add(wake ? &sched_freed_woke : &sched_freed_skipped, 1);
}

void sched_freed_counts(uint64_t *woke, uint64_t *skipped)
{
    *woke = atomic_load(&sched_freed_woke);
    *skipped = atomic_load(&sched_freed_skipped);
}

void sched_stop(void)
{
    pthread_mutex_lock(&sched_mu);
    int was = sched_running;
    sched_running = 0;
    pthread_cond_signal(&sched_cv);
    pthread_mutex_unlock(&sched_mu);
    if (was)
        pthread_join(sched_thread, NULL);
}
