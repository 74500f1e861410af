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
 * already backlogged (no credit for idling). */
#include "sched_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The lookahead: with 2, four tenants' chains of 2 ms computations kept
 * the devices 66-79 % busy, with 4, 82-91 %, with 8, 94-95 % (bench_share,
 * 2 cores, 3 runs each). A newcomer waits behind what is dispatched before
 * it (every device keeps the island's one order): its first computation
 * started 3-15 ms after its lease with 2, 5-14 ms with 4, 20-31 ms with 8. */
#define SHARED_WINDOW 4
/* Assumed device time per shard of a job none of whose host tasks has
 * finished yet (µs); its own measurements replace it after the first. */
#define FEED_DEFAULT_SHARD_US 1000.0
#define FEED_MAX 256
#define VT_MAX 1024

typedef struct vtime {
    int64_t key;                /* tenant id, or -job id for a job without one */
    double v;
    int active;                 /* backlogged in the last feed pass */
} vtime_t;

static vtime_t vtimes[VT_MAX];
static int nvtimes;

static vtime_t *vtime_get(int64_t key, double vstart)
{
    for (int i = 0; i < nvtimes; i++)
        if (vtimes[i].key == key) {
            if (!vtimes[i].active && vtimes[i].v < vstart)
                vtimes[i].v = vstart;
            return &vtimes[i];
        }
    if (nvtimes == VT_MAX) {            /* forget the inactive */
        int w = 0;
        for (int i = 0; i < nvtimes; i++)
            if (vtimes[i].active)
                vtimes[w++] = vtimes[i];
        nvtimes = w;
        if (nvtimes == VT_MAX)
            return NULL;
    }
    vtimes[nvtimes] = (vtime_t){key, vstart, 0};
    return &vtimes[nvtimes++];
}

/* Dispatches computation c of a live shared job, inside the caller's
 * transaction. 0 or -1. */
static int feed_comp(store_t *st, round_t *r, const sched_feed_job_t *fj,
                     const plan_entry_t *pe, int c)
{
    const job_plan_t *plan = pe->plan;
    const comp_t *cp = &plan->comps[c];
    alloc_placement_t pl[64];
    int64_t island = 0, *devices = NULL;
    int n = store_sched_slice_devices(st, fj->id, plan->slices[cp->slice].name, &island,
                                      &devices);
    int rc = -1;
    memset(pl, 0, sizeof pl);
    pl[cp->slice].island = sched_round_island(r, island);
    if (n > 0 && n == cp->nshards && pl[cp->slice].island >= 0) {
        pl[cp->slice].devices = devices;
        pl[cp->slice].nshards = n;
        sched_job_t job = {fj->id, fj->attempt, fj->tenant, 0, 0};
        rc = sched_dispatch_comp(st, &job, plan, pe->doc, r, pl, c, 0);
    }
    free(devices);
    return rc;
}

/* The live shared job to feed next: work left, room in its window, and
 * the least virtual time among the backlogged jobs of its island, full or
 * not (ties: lowest job id). While the least one's window is full nobody
 * else on its island is fed: its queued tasks keep the devices busy, and
 * its next completion feeds it (else a tenant of small share would get a
 * slot every time one of its computations finished). -1 when none. */
static int feed_pick(const sched_feed_job_t *fj, vtime_t *const *vt, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (fj[i].undispatched <= 0 || fj[i].inflight >= SHARED_WINDOW || !vt[i])
            continue;
        int least = 1;
        for (int k = 0; k < n && least; k++)
            least = k == i || !vt[k] || fj[k].undispatched <= 0 ||
                    fj[k].island != fj[i].island || vt[k]->v >= vt[i]->v;
        if (least && (best < 0 || vt[i]->v < vt[best]->v))
            best = i;
    }
    return best;
}

/* What dispatching a computation of nshards shards costs fj's tenant in
 * virtual time: its expected device time (shards x the job's measured
 * device time per shard, FEED_DEFAULT_SHARD_US until a host task of it
 * finished) over the tenant's share. So device time, not the count of
 * computations, follows shares when jobs' computations cost differently. */
static double feed_cost(const sched_feed_job_t *fj, int nshards)
{
    double per = fj->shard_us > 0 ? fj->shard_us : FEED_DEFAULT_SHARD_US;
    return (double)nshards * per / (double)(fj->share > 0 ? fj->share : 1);
}

/* One feed pass over the live shared jobs, all its dispatches in one
 * transaction: with a commit each, a pass feeding 8 chains took the
 * store's write turn 8 times between the workers' reports (bench_share:
 * mean pass 4.7-5.0 ms). A failure rolls the whole pass back (the
 * in-memory virtual times keep what it charged: a tenant pays for
 * dispatches it did not get once, which the next passes absorb).
 * Returns computations dispatched, or -1 on a store error. */
int sched_feed_shared(store_t *st, round_t *r)
{
    static sched_feed_job_t fj[FEED_MAX];
    vtime_t *vt[FEED_MAX];
    int n = store_sched_feed_jobs(st, fj, FEED_MAX), fed = 0;
    double vstart = INFINITY;
    for (int i = 0; i < nvtimes; i++)
        if (vtimes[i].active && vtimes[i].v < vstart)
            vstart = vtimes[i].v;
    if (vstart == INFINITY)
        vstart = 0;
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
    int i, began = 0;
    while (n > 0 && (i = feed_pick(fj, vt, n)) >= 0) {
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
        vt[i]->v += feed_cost(&fj[i], pe->plan->comps[c].nshards);
        fed++;
    }
    if (began && store_commit(st) != 0)
        goto fail;
    return n < 0 ? -1 : fed;
fail:
    store_rollback(st);
    return -1;
}
