/* sched_feed.c - interleaving shared jobs (DESIGN Part D), on the
 * scheduler thread after each admission round. Each live shared job has at
 * most SHARED_WINDOW computations dispatched and not finished; whenever
 * one has room, the next computation (topological order) of the job whose
 * tenant has the least virtual time is dispatched, and that tenant's
 * virtual time advances by the computation's expected device time over
 * its share (stride scheduling; the expectation is the job's measured
 * device time per shard, from the workers' reports: feed_cost). Every
 * computation still gets one island sequence number and every device runs
 * its tasks in that order, so interleaving cannot deadlock a collective. A
 * tenant that becomes backlogged starts at the least virtual time of those
 * already backlogged (no credit for idling).
 *
 * The island's lookahead. What is dispatched and not finished on an
 * island is bounded in expected device time by the island's budget, not
 * only per job: a newcomer's first computation gets the next sequence
 * number and so waits behind all of it, and with a per-job window alone
 * that queue grew with the number of shared jobs (bench_share, 2 cores: 8
 * chains -> 16 computations of 2 ms in flight, the newcomer started on
 * its devices after 20-30 ms; 32 chains -> 136 ms). The budget is as
 * small as keeps the devices 95-97 % busy: while the island has work to
 * feed, every FEED_ADJUST_TASKS host tasks that finished there, the
 * feed reads how long its devices were not computing between tasks (each
 * worker's own stamps, so no clock skew: store_sched_island_idle) and
 * keeps a moving average; above FEED_IDLE_HIGH of the time the budget
 * grows by a quarter, below FEED_IDLE_LOW it shrinks by a tenth
 * (sched_feed_budget_next), within SCHED_FEED_BUDGET_MIN_US..MAX_US. It
 * so settles where the controller's own feedback latency (report -> pass
 * -> lease) is covered, whatever the machine: on 16 cores at 9-18 ms (a
 * newcomer on its devices after 5-8 ms in most runs), on a 2-core VM at
 * the upper bound.
 *
 * Newcomers. The budget bounds how long a newcomer waits on its devices;
 * it does not make the newcomer wait for room in it: a job none of whose
 * computations has finished may have its next one fed over a full budget,
 * while fewer than FEED_NEWCOMERS such jobs have computations in flight
 * on the island (feed_fits). Waiting for room meant waiting for one of
 * the running computations to end and be reported (bench_share, 2 cores:
 * submission -> dispatched 2.5-8 ms of which 1.2-4.8 ms after allocation),
 * and where the island's computations are long, for whole chains: a
 * chain whose next computation fits once the island is empty is picked
 * first if its tenant is behind. The overshoot is bounded by
 * FEED_NEWCOMERS computations per island. */
#include "sched_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* A job's own lookahead, inside its island's budget: a chain runs one
 * computation at a time, and with 4 queued its next ones are there when
 * a report is slow (bench_share, 2 cores: with a window of 2 the devices
 * were 66-79 % busy, with 4, 82-91 %). */
#define SHARED_WINDOW 4
/* The least device time per shard assumed for a job none of whose host
 * tasks has finished yet (µs; feed_load); its own measurements replace it
 * after the first. */
#define FEED_DEFAULT_SHARD_US 1000.0
#define FEED_MAX 256
/* Jobs of an island that may have computations in flight over its budget
 * before any of theirs finished (newcomers, see the top). */
#define FEED_NEWCOMERS 2
#define VT_MAX 1024
/* The island budget (µs of expected device time in flight): where it
 * starts, its bounds, and the starvation band it steers into. */
#define FEED_BUDGET_INIT_US 8000.0
#define FEED_IDLE_HIGH 0.05
#define FEED_IDLE_LOW 0.03
/* Host tasks finished between two adjustments of an island's budget, so
 * each looks at new evidence only. */
#define FEED_ADJUST_TASKS 16
/* At most one look at an island's idle time per this many µs: a pass runs
 * after every report, and most looks would find too few new tasks. */
#define FEED_LOOK_US 5000
/* The weight of a new look in the island's moving averages of idle and
 * span time. The devices' idle time is heavy-tailed (16 cores: most looks
 * ~1.5 % idle, one in seven 20-80 %, when a pass or a report is slow), so
 * steering on each look alone drifts to a budget that those tails starve;
 * the average's mean is what the devices' busy fraction is. */
#define FEED_AVG_NEW 0.2

/* How often a live shared job's measured cost is read again (µs). A pass
 * runs after every report, and reading each job's last 16 host tasks in
 * every pass was a fifth of the scheduler's CPU under bench_share; costs
 * that lag by this much change no decision that matters. */
#define FEED_COST_US 20000

/* A live shared job's device time per shard as last read (store_sched_
 * shard_us), kept in job id order like the feed's jobs. Scheduler thread
 * only. */
typedef struct feed_cost {
    int64_t job;
    int attempt;
    double shard_us;
    int64_t read_us;            /* monotonic, of the last read */
} feed_cost_t;

static feed_cost_t costs[FEED_MAX];
static int ncosts;

typedef struct island_feed {
    double budget_us;           /* 0: not used yet */
    double idle_us, span_us;    /* moving averages of the looks (FEED_AVG_NEW) */
    int64_t since_us;           /* wall clock of the last adjustment */
    int64_t looked_us;          /* monotonic clock of the last look */
    int backlogged;             /* a job there had computations to feed since then */
} island_feed_t;

/* Scheduler thread only (like vtimes). */
static island_feed_t island_feed[SCHED_MAX_ISLANDS];
/* What /metrics shows of each island's budget and of what is in flight
 * after the last feed pass: written here, read by any thread, under
 * gauge_mu so that a reader sees the three of one pass together. */
typedef struct feed_gauge {
    double budget_us, inflight_us;
    int inflight;
} feed_gauge_t;
static feed_gauge_t gauges[SCHED_MAX_ISLANDS];
static pthread_mutex_t gauge_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct vtime {
    int64_t key;                /* tenant id, or -job id for a job without one */
    double v;
    int active;                 /* backlogged in the last feed pass */
} vtime_t;

static vtime_t vtimes[VT_MAX];
static int nvtimes;

/* How many keys the table keeps (sched_cfg.vtimes_max, at most VT_MAX). */
static int vtimes_cap(void)
{
    int m = sched_cfg.vtimes_max;
    return m > 0 && m < VT_MAX ? m : VT_MAX;
}

/* Before a pass takes an entry: when its n keys might not fit, forgets
 * the keys that were not backlogged in the last pass. Entries move only
 * here, before the pass holds pointers to any (vtime_get hands them out
 * for the whole pass: compacting inside it moved entries under pointers
 * already handed out, so a job's virtual time was charged to another key
 * and its own was lost). */
static void vtime_room(int n)
{
    if (nvtimes + n <= vtimes_cap())
        return;
    int w = 0;
    for (int i = 0; i < nvtimes; i++)
        if (vtimes[i].active)
            vtimes[w++] = vtimes[i];
    nvtimes = w;
}

/* key's entry, added when absent; NULL when the table is full (the job
 * waits for a pass with room). Never moves an entry. */
static vtime_t *vtime_get(int64_t key, double vstart)
{
    for (int i = 0; i < nvtimes; i++)
        if (vtimes[i].key == key) {
            if (!vtimes[i].active && vtimes[i].v < vstart)
                vtimes[i].v = vstart;
            return &vtimes[i];
        }
    if (nvtimes >= vtimes_cap())
        return NULL;
    vtimes[nvtimes] = (vtime_t){key, vstart, 0};
    return &vtimes[nvtimes++];
}

double sched_feed_vtime(int64_t key)
{
    for (int i = 0; i < nvtimes; i++)
        if (vtimes[i].key == key)
            return vtimes[i].v;
    return -1;
}

void sched_feed_forget(void)
{
    nvtimes = 0;
}

/* Dispatches computation c of a live shared job, inside the caller's
 * transaction. 0 or -1. */
static int feed_comp(store_t *st, round_t *r, const sched_feed_job_t *fj,
                     const plan_entry_t *pe, int c)
{
    const job_plan_t *plan = pe->plan;
    const comp_t *cp = &plan->comps[c];
    alloc_placement_t pl[64];
    memset(pl, 0, sizeof pl);
    int rc = sched_slice_read(st, r, fj->id, plan, cp->slice, &pl[cp->slice]);
    if (rc == 0) {
        sched_job_t job = {fj->id, fj->attempt, fj->tenant, 0, 0};
        int64_t seq = store_sched_take_seq(st, r->island_id[pl[cp->slice].island], 1);
        rc = seq < 0 ? -1 : sched_dispatch_comp(st, &job, plan, pe->doc, r, pl, c, 1, seq, 0, 0, -1);
        if (rc == 0)
            rc = store_sched_started(st, fj->id);
    }
    free(pl[cp->slice].devices);
    return rc == 0 ? 0 : -1;
}

/* Sets fj[i].shard_us for the n live shared jobs (by id) from the cache,
 * reading those older than FEED_COST_US (or new, of a new attempt, or not
 * measured yet) again; forgets jobs no longer live. */
static void feed_costs(store_t *st, sched_feed_job_t *fj, int n)
{
    static feed_cost_t next[FEED_MAX];
    int64_t now = util_mono_us();
    for (int i = 0, k = 0; i < n; i++) {
        while (k < ncosts && costs[k].job < fj[i].id)
            k++;
        feed_cost_t c = {fj[i].id, fj[i].attempt, 0, 0};
        if (k < ncosts && costs[k].job == fj[i].id && costs[k].attempt == fj[i].attempt)
            c = costs[k];
        /* A job with nothing measured yet is read again in every pass:
         * its first finished task should count at once. */
        if (c.shard_us <= 0 || now - c.read_us >= FEED_COST_US) {
            double us = store_sched_shard_us(st, fj[i].id, fj[i].attempt);
            if (us >= 0) {
                c.shard_us = us;
                c.read_us = now;
            }
        }
        fj[i].shard_us = c.shard_us;
        next[i] = c;
    }
    ncosts = n > 0 ? n : 0;
    memcpy(costs, next, sizeof *next * (size_t)ncosts);
}

/* Per island during a feed pass: what is in flight (expected device time
 * and count) and its budget. */
typedef struct island_load {
    double us, budget;
    int n;
    int newcomers;              /* fresh jobs with computations in flight */
} island_load_t;

/* Does the island's budget let one more computation of fj go? An island
 * with nothing in flight always takes one (a computation longer than the
 * budget must still run), and a fresh job's, while few newcomers are in
 * flight there, goes over it (see the top). */
static int feed_fits(const island_load_t *il, int xi, const sched_feed_job_t *fj)
{
    if (xi < 0 || il[xi].n == 0 || il[xi].us + fj->shard_us <= il[xi].budget)
        return 1;
    return fj->fresh && fj->inflight == 0 && il[xi].newcomers < FEED_NEWCOMERS;
}

/* The live shared job to feed next: work left, room in its window, and
 * the least virtual time among the backlogged jobs of its island, full or
 * not (ties: lowest job id). While the least one's window is full, or its
 * island's budget is, nobody else on its island is fed: the queued tasks
 * keep the devices busy, and a completion feeds it (else a tenant of small
 * share would get a slot every time one of its computations finished).
 * xi[i]: fj[i]'s island in il, or -1. -1 when none. */
static int feed_pick(const sched_feed_job_t *fj, vtime_t *const *vt, const int *xi,
                     const island_load_t *il, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (fj[i].undispatched <= 0 || fj[i].inflight >= SHARED_WINDOW || !vt[i])
            continue;
        int least = 1;
        for (int k = 0; k < n && least; k++)
            least = k == i || !vt[k] || fj[k].undispatched <= 0 ||
                    fj[k].island != fj[i].island || vt[k]->v >= vt[i]->v;
        if (least && (best < 0 || vt[i]->v < vt[best]->v) && feed_fits(il, xi[i], &fj[i]))
            best = i;
    }
    return best;
}

double sched_feed_budget_next(double budget_us, double idle)
{
    if (idle > FEED_IDLE_HIGH)
        budget_us *= 1.25;
    else if (idle < FEED_IDLE_LOW)
        budget_us *= 0.9;
    if (budget_us < SCHED_FEED_BUDGET_MIN_US)
        budget_us = SCHED_FEED_BUDGET_MIN_US;
    return budget_us > SCHED_FEED_BUDGET_MAX_US ? SCHED_FEED_BUDGET_MAX_US : budget_us;
}

/* Island xi's budget for this pass: adjusted when it had work to feed and
 * FEED_ADJUST_TASKS host tasks finished since the last adjustment. */
static double feed_budget(store_t *st, const round_t *r, int xi)
{
    island_feed_t *f = &island_feed[xi];
    int64_t idle, span;
    int ntasks;
    if (f->budget_us <= 0) {
        f->budget_us = FEED_BUDGET_INIT_US;
        f->since_us = util_wall_us();
    }
    int64_t now = util_mono_us();
    if (!f->backlogged || now - f->looked_us < FEED_LOOK_US)
        return f->budget_us;
    f->looked_us = now;
    if (store_sched_island_idle(st, r->island_id[xi], f->since_us, &idle, &span, &ntasks) == 0 &&
        ntasks >= FEED_ADJUST_TASKS) {
        double w = f->span_us > 0 ? FEED_AVG_NEW : 1.0;
        f->idle_us += w * ((double)idle - f->idle_us);
        f->span_us += w * ((double)span - f->span_us);
        f->budget_us = sched_feed_budget_next(f->budget_us,
                                              f->span_us > 0 ? f->idle_us / f->span_us : 0.0);
        f->since_us = util_wall_us();
        f->backlogged = 0;
    }
    return f->budget_us;
}

/* Each island's load from its live shared jobs (xi[i] set), with its
 * budget. Every fj[i].shard_us is > 0 after it (the expected device time
 * of one of its computations on a device): a job with no finished host
 * task yet is costed like its island's most expensive measured job (at
 * least FEED_DEFAULT_SHARD_US): its first computations may be long, and
 * costed low they would slip past the budget (a 1 ms guess let 20 ms
 * computations pile up four deep). */
static void feed_load(store_t *st, const round_t *r, sched_feed_job_t *fj, int n, int *xi,
                      island_load_t *il)
{
    double most[SCHED_MAX_ISLANDS];
    for (int k = 0; k < SCHED_MAX_ISLANDS; k++)
        most[k] = FEED_DEFAULT_SHARD_US;
    for (int i = 0; i < n; i++) {
        xi[i] = sched_round_island(r, fj[i].island);
        if (xi[i] >= 0 && fj[i].shard_us > most[xi[i]])
            most[xi[i]] = fj[i].shard_us;
    }
    memset(il, 0, sizeof *il * SCHED_MAX_ISLANDS);
    for (int i = 0; i < n; i++) {
        if (fj[i].shard_us <= 0)
            fj[i].shard_us = xi[i] >= 0 ? most[xi[i]] : FEED_DEFAULT_SHARD_US;
        if (xi[i] < 0)
            continue;
        if (fj[i].undispatched > 0)
            island_feed[xi[i]].backlogged = 1;
        il[xi[i]].us += fj[i].inflight * fj[i].shard_us;
        il[xi[i]].n += fj[i].inflight;
        il[xi[i]].newcomers += fj[i].fresh && fj[i].inflight > 0;
        if (il[xi[i]].budget == 0)
            il[xi[i]].budget = feed_budget(st, r, xi[i]);
    }
}

/* Publishes the islands' budgets and loads after a pass. */
static void feed_gauges(const round_t *r, const island_load_t *il)
{
    pthread_mutex_lock(&gauge_mu);
    for (int k = 0; k < r->n && k < SCHED_MAX_ISLANDS; k++)
        gauges[k] = (feed_gauge_t){island_feed[k].budget_us, il[k].us, il[k].n};
    pthread_mutex_unlock(&gauge_mu);
}

int sched_feed_gauge(int island, double *budget_s, double *inflight_s)
{
    if (island < 0 || island >= SCHED_MAX_ISLANDS)
        return -1;
    pthread_mutex_lock(&gauge_mu);
    feed_gauge_t g = gauges[island];
    pthread_mutex_unlock(&gauge_mu);
    *budget_s = g.budget_us / 1e6;
    *inflight_s = g.inflight_us / 1e6;
    return g.inflight;
}

/* What dispatching a computation of nshards shards costs fj's tenant in
 * virtual time: its expected device time (shards x the job's device time
 * per shard as feed_load set it) over the tenant's share. So device time, not the count of
 * computations, follows shares when jobs' computations cost differently. */
static double feed_cost(const sched_feed_job_t *fj, int nshards)
{
    return (double)nshards * fj->shard_us / (double)(fj->share > 0 ? fj->share : 1);
}

/* One feed pass over the live shared jobs, all its dispatches in one
 * transaction: with a commit each, a pass feeding 8 chains took the
 * store's write turn 8 times between the workers' reports (bench_share:
 * mean pass 4.7-5.0 ms). A failure rolls the whole pass back (the
 * in-memory virtual times keep what it charged: a tenant pays for
 * dispatches it did not get once, which the next passes absorb).
 * Returns computations dispatched, or -1 on a store error. */
int sched_feed_shared(store_t *st, round_t *r, int *live)
{
    static sched_feed_job_t fj[FEED_MAX];
    vtime_t *vt[FEED_MAX];
    int xi[FEED_MAX];
    island_load_t il[SCHED_MAX_ISLANDS];
    int n = store_sched_feed_jobs(st, fj, FEED_MAX), fed = 0;
    *live = n > 0 ? n : 0;
    feed_costs(st, fj, n);
    double vstart = INFINITY;
    for (int i = 0; i < nvtimes; i++)
        if (vtimes[i].active && vtimes[i].v < vstart)
            vstart = vtimes[i].v;
    if (vstart == INFINITY)
        vstart = 0;
    int wanting = 0;
    for (int i = 0; i < n; i++)
        wanting += fj[i].undispatched > 0;
    vtime_room(wanting);
    for (int i = 0; i < n; i++)
        vt[i] = fj[i].undispatched > 0
                    ? vtime_get(fj[i].tenant ? fj[i].tenant : -fj[i].id, vstart) : NULL;
    for (int i = 0; i < nvtimes; i++)
        vtimes[i].active = 0;
    for (int i = 0; i < n; i++)
        if (vt[i]) {
            vt[i]->active = 1;
            /* Fed or not in this pass, its plan stays cached: compiling
             * the document again for every computation fed cost O(its
             * computations) per computation. */
            sched_plan_keep(fj[i].id);
        }
    feed_load(st, r, fj, n, xi, il);
    int i, began = 0;
    while (n > 0 && (i = feed_pick(fj, vt, xi, il, n)) >= 0) {
        plan_entry_t *pe = sched_plan_get(st, fj[i].id);
        if (!pe) {
            fj[i].undispatched = 0;
            continue;
        }
        int c = pe->plan->topo[pe->plan->ncomps - fj[i].undispatched];
        if (!began) {
            if (store_begin(st) != 0)
                return -1;
            began = 1;
        }
        if (feed_comp(st, r, &fj[i], pe, c) != 0)
            goto fail;
        fj[i].undispatched--;
        fj[i].inflight++;
        if (xi[i] >= 0) {
            il[xi[i]].us += fj[i].shard_us;
            il[xi[i]].n++;
            il[xi[i]].newcomers += fj[i].fresh && fj[i].inflight == 1;   /* its first */
        }
        vt[i]->v += feed_cost(&fj[i], pe->plan->comps[c].nshards);
        fed++;
    }
    if (began && store_commit(st) != 0)
        goto fail;
    if (n >= 0)
        feed_gauges(r, il);
    return n < 0 ? -1 : fed;
fail:
    store_rollback(st);
    return -1;
}
