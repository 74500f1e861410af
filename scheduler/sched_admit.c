/* sched_admit.c - the admission round: the tenants' queues merged into one
 * order, each job placed (sched_place.c), preempting (sched_preempt.c) if
 * it must, and dispatched (sched_dispatch.c); quotas and pending reasons;
 * then the shared jobs' feed (sched_feed.c). Runs on the scheduler thread. */
#include "sched_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* Per-tenant queues: in one round the scheduler stops reading further down
 * a tenant's queue once this many of its jobs waited (were not placed), so
 * a round costs O(tenants x SCHED_LOOKAHEAD + jobs placed + islands),
 * whatever the queue length. A tenant's deeper jobs come up as its head
 * moves. */
#define SCHED_LOOKAHEAD 16
/* Jobs read from one tenant's queue per index probe. */
#define SCHED_PAGE 8
/* A round stops placing jobs once it has run this long (µs) and placed
 * one, or places none when the chunks it wrote first took that long; and
 * another round follows at once: a queue of jobs that the
 * island's release let in was placed in one round of 5-25 ms (bench_passes,
 * 2,048 devices), and for that long no report was fed on, no newcomer
 * admitted. The next round starts again from the queues' heads, so the
 * order is the same as one long round's. */
#define SCHED_ROUND_ADMIT_US 500
/* After this many rounds in a row stopped that way, the next one runs to
 * the end of the queues: only a round that saw every queue head drops
 * the cached plans of jobs that left them (sched_plans_sweep), and under
 * a steady stream of placements every round could stop early. */
#define SCHED_ROUNDS_CUT_MAX 32

static _Atomic uint64_t sched_attempts, sched_successes;   /* for /metrics */

/* A job allocated in this round has chunks left to dispatch
 * (sched_dispatch_job returned 1). Scheduler thread only. */
static int sched_more_pending;
/* Rounds stopped by SCHED_ROUND_ADMIT_US in a row. Scheduler thread only. */
static int sched_rounds_cut;
/* Devices held per tenant between rounds (store_sched_tenants); scheduler
 * thread only, emptied by sched_admit_free when it ends. */
static store_usage_t sched_usage;

void sched_admit_free(void)
{
    sched_dispatch_forget();
    store_usage_free(&sched_usage);
    sched_rounds_cut = 0;
}

/* Writes the job's pending_reason only when it differs from the one this
 * thread last wrote: a job waiting round after round for the same reason
 * costs no write (and no WAL growth). */
static void set_reason(store_t *st, plan_entry_t *pe, const char *reason)
{
    if (pe->reason && strcmp(pe->reason, reason) == 0)
        return;
    if (store_sched_set_reason(st, pe->id, reason) != 0)
        return;
    free(pe->reason);
    pe->reason = strdup(reason);    /* NULL (out of memory): written again next time */
}

/* Whether every island of r is as the store holds it now
 * (sched_round_current). */
static int round_current(store_t *st, const round_t *r)
{
    for (int i = 0; i < r->n; i++)
        if (!sched_round_current(st, r, i))
            return 0;
    return r->n > 0;
}

/* Marks the islands reqs[0..n) may take as blocked for the rest of the
 * round: a job that could not be placed keeps later ones off them. */
static void block_islands(const round_t *r, const alloc_request_t *reqs, int n, int *blocked)
{
    for (int s = 0; s < n; s++)
        for (int i = 0; i < r->n; i++)
            if (!reqs[s].island || strcmp(reqs[s].island, alloc_island_name(r->isl[i])) == 0)
                blocked[i] = 1;
}

static int64_t plan_devices(const job_plan_t *plan)
{
    int64_t need = 0;
    for (int s = 0; s < plan->nslices; s++)
        need += shape_numel(&plan->slices[s].shape);
    return need;
}

/* A tenant's devices in use are capped by its quota: a job that would go
 * past it waits (with a reason) until the tenant's own jobs free devices.
 * `used`: the tenant's devices in use, kept by the round. */
static int over_quota(store_t *st, plan_entry_t *pe, const sched_job_t *job, int64_t used)
{
    if (job->tenant == 0 || job->quota == 0)
        return 0;
    int64_t need = plan_devices(pe->plan);
    if (used + need <= job->quota)
        return 0;
    char reason[160];
    snprintf(reason, sizeof reason, "tenant at its quota: %ld of %ld devices in use, needs %ld",
             (long)used, (long)job->quota, (long)need);
    set_reason(st, pe, reason);
    return 1;
}

/* Tries to admit one queued job. Returns 1 if dispatched (*used grows by
 * its devices), 0 if it waits (islands it needs marked in blocked[]), -1 on
 * a store error. */
static int admit_job(store_t *st, round_t *r, const sched_job_t *job, int64_t *used,
                     int *blocked)
{
    plan_entry_t *pe = sched_plan_get(st, job->id);
    if (!pe)
        return 0;       /* failed (and recorded), or out of memory: next round */
    const job_plan_t *plan = pe->plan;
    const json_t *doc = pe->doc;
    alloc_request_t reqs[64];
    for (int s = 0; s < plan->nslices && s < 64; s++) {
        reqs[s].shape = plan->slices[s].shape;
        reqs[s].island = plan->slices[s].island[0] ? plan->slices[s].island : NULL;
    }
    if (over_quota(st, pe, job, *used))
        return 0;   /* waits for its own tenant's jobs; blocks nobody else */
    if (sched_touches_blocked(reqs, plan->nslices, r, blocked)) {
        set_reason(st, pe, "waiting behind a higher-priority or older job");
        return 0;
    }
    uint64_t gen = round_current(st, r) ? store_devices_gen() : 0;
    if (gen != 0 && pe->unplaced_gen == gen) {
        block_islands(r, reqs, plan->nslices, blocked);
        return 0;       /* nothing changed since it could not be placed */
    }
    alloc_placement_t pl[64];
    sched_gang_t g = {reqs, plan->nslices, plan->shared, pe->dev_bytes};
    int by_memory, a = sched_place(r, &g, pl, &by_memory);
    if (a == ALLOC_ENOSPACE) {
        int p = sched_try_preempt(st, r, job, &g);
        if (p < 0)
            return -1;
        r->evicted |= p == 1;
        if (p == 1)
            a = sched_place(r, &g, pl, &by_memory);
    }
    atomic_fetch_add(&sched_attempts, 1);
    if (a == ALLOC_OK) {
        atomic_fetch_add(&sched_successes, 1);
        sched_round_take(r, pl, &g, job->id);
        int d = sched_dispatch_job(st, job, plan, doc, r, pl, g.bytes), rc = d >= 0 ? 1 : -1;
        if (d == 1)
            sched_more_pending = 1;
        /* Its workers' parked polls answer now, not after the rest of the
         * round (the next heads' reads, the feed), and so do those of the
         * workers of jobs it preempted (they must abort). */
        if (rc == 1 && sched_cfg.on_dispatch)
            sched_cfg.on_dispatch();
        alloc_placements_release(pl, plan->nslices);
        if (rc == 1)
            *used += plan_devices(plan);
        pe->unplaced_gen = 0;
        /* Allocation cleared pending_reason; a requeue sets its own. */
        free(pe->reason);
        pe->reason = NULL;
        return rc;
    }
    char reason[512];
    if (by_memory)
        sched_memory_reason(r, &g, reason, sizeof reason);
    else
        sched_pending_reason(r, plan, reqs, reason, sizeof reason);
    set_reason(st, pe, reason);
    block_islands(r, reqs, plan->nslices, blocked);
    /* Read after the eviction search, which may have changed devices
     * (then the round is no longer current, and nothing is noted). */
    pe->unplaced_gen = a == ALLOC_ENOSPACE && round_current(st, r) ? store_devices_gen() : 0;
    return a == ALLOC_ENOMEM ? -1 : 0;
}

/* One tenant's queue during a round: a page of its next jobs in its own
 * order (priority desc, then age) and how far the round went down it. */
typedef struct tenant_q {
    sched_tenant_t t;           /* t.used grows as its jobs are placed */
    double fair;                /* devices in use per share at the round's start */
    sched_job_t page[SCHED_PAGE];
    int n, next;                /* jobs in page, the next one to look at */
    int64_t last_prio, last_id; /* the last job read: the next page starts after it */
    int waits;                  /* its jobs that waited in this round */
    int done;                   /* nothing more to look at in this round */
} tenant_q_t;

/* The next job of q (reading a page when the last one is used up), or NULL
 * when q is done. */
static const sched_job_t *tq_head(store_t *st, tenant_q_t *q)
{
    if (!q->done && q->next == q->n) {
        int n = store_sched_tenant_page(st, &q->t, q->last_prio, q->last_id, q->page,
                                        SCHED_PAGE);
        q->n = n > 0 ? n : 0;
        q->next = 0;
        if (n > 0) {
            q->last_prio = q->page[n - 1].priority;
            q->last_id = q->page[n - 1].id;
        }
        q->done = n <= 0;
    }
    return q->done ? NULL : &q->page[q->next];
}

/* Does a (of queue qa) come before b (of qb) in admission order: priority
 * desc, then the tenant furthest below its fair share, then age? */
static int job_before(const sched_job_t *a, const tenant_q_t *qa, const sched_job_t *b,
                      const tenant_q_t *qb)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    if (qa->fair != qb->fair)
        return qa->fair < qb->fair;
    return a->id < b->id;
}

/* The queue whose head comes first across all tenants; NULL when every
 * queue is done. A k-way merge of the tenants' heads: the order among the
 * jobs looked at is the order of one global queue. */
static tenant_q_t *tq_pick(store_t *st, tenant_q_t *qs, int n)
{
    tenant_q_t *best = NULL;
    const sched_job_t *bj = NULL;
    for (int i = 0; i < n; i++) {
        const sched_job_t *j = tq_head(st, &qs[i]);
        if (j && (!best || job_before(j, &qs[i], bj, best))) {
            best = &qs[i];
            bj = j;
        }
    }
    return best;
}

/* One admission round over the heads of the tenants' queues. */
int sched_admit(store_t *st)
{
    sched_tenant_t *ts = NULL;
    tenant_q_t *qs = NULL;
    int nt = 0, complete = 0, yielded = 0, fed = -1, wrote = 0, left = 0, waited = 0, live = 0;
    int64_t t0 = util_mono_us();
    int64_t admit_us = sched_rounds_cut >= SCHED_ROUNDS_CUT_MAX ? INT64_MAX
                       : sched_cfg.round_admit_us > 0 ? sched_cfg.round_admit_us
                                                      : SCHED_ROUND_ADMIT_US;
    round_t r;
    sched_dispatch_pass(t0);
    if (sched_round_load(st, &r) != 0)
        goto cleanup;
    /* Jobs in mid-dispatch first: their workers are running the chunks
     * already written and wait for the next. Their workers' polls answer
     * now, not after the round. */
    left = sched_dispatch_more(st, &r, &wrote);
    if (wrote > 0 && sched_cfg.on_dispatch)
        sched_cfg.on_dispatch();
    if (left < 0 || store_sched_tenants(st, &sched_usage, &ts, &nt) != 0 ||
        !(qs = calloc((size_t)(nt > 0 ? nt : 1), sizeof *qs)))
        goto cleanup;
    for (int i = 0; i < nt; i++) {
        qs[i].t = ts[i];
        qs[i].fair = (double)ts[i].used / (double)ts[i].share;
        qs[i].last_prio = INT64_MAX;
    }
    int blocked[SCHED_MAX_ISLANDS] = {0};
    tenant_q_t *q = NULL;
    /* Chunks that used the round's time leave placing to the next pass,
     * which follows at once: a pass of both was most of those over 1 ms
     * (bench_passes: 0.3-1 ms of chunks, then a big job's placement or a
     * look at the queue). The first job placed after them would be
     * placed in the next pass anyway, and sooner in wall time than
     * behind a long pass. */
    if (wrote > 0 && util_mono_us() - t0 >= admit_us)
        yielded = 1;
    while (!yielded && (q = tq_pick(st, qs, nt))) {
        int rc = admit_job(st, &r, &q->page[q->next++], &q->t.used, blocked);
        if (rc < 0)
            break;
        if (rc == 1 && util_mono_us() - t0 >= admit_us) {
            yielded = 1;
            break;
        }
        waited += rc == 0;
        if (rc == 0 && ++q->waits >= SCHED_LOOKAHEAD)
            q->done = 1;
    }
    complete = !yielded && q == NULL;
    sched_rounds_cut = yielded ? sched_rounds_cut + 1 : 0;
    fed = sched_feed_shared(st, &r, &live);
    /* Every device change of this round is in r and committed: it is the
     * next round's view unless someone else changed devices meanwhile. A
     * round that preempted (its evictions are recorded in r too, but the
     * path is rare) reads the island again rather than keep its view. */
    if ((complete || yielded) && fed >= 0 && !r.evicted)
        sched_round_keep(st, &r);
cleanup:
    /* A round stopped early (store error) keeps unseen plans too: their
     * jobs may still be queued. */
    if (complete)
        sched_plans_sweep();
    /* Whether freed devices could matter to the next round; in doubt, yes. */
    int waiting = !complete || yielded || waited > 0 || left != 0 || sched_more_pending ||
                  fed < 0 || live > 0 || r.evicted;
    sched_round_free(&r);
    free(qs);
    free(ts);
    if (fed > 0 && sched_cfg.on_dispatch)
        sched_cfg.on_dispatch();    /* admissions woke their workers already */
    /* Chunks left, a first one written in this round, or jobs left to
     * place: another pass at once, not at the next report or tick. */
    if (left > 0 || sched_more_pending || yielded)
        sched_notify();
    sched_more_pending = 0;
    sched_dispatch_pass(0);
    return waiting;
}

void sched_counters(uint64_t *attempts, uint64_t *successes)
{
    *attempts = atomic_load(&sched_attempts);
    *successes = atomic_load(&sched_successes);
}
