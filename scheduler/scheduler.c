/* scheduler.c - the scheduler thread: admission, gang allocation, dispatch.
 * See scheduler.h for the contract and store_sched.c for the SQL. */
#include "scheduler.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "gspmd.h"
#include "store.h"
#include "util.h"

/* Period of the lease check when nothing wakes the thread. */
#define SCHED_TICK_US 200000
/* Admission also runs every this many ticks unwoken: a safety net for a
 * wake-up that never came (every change that can admit a job wakes the
 * thread; no condition opens with time alone since aborts are per attempt). */
#define SCHED_ADMIT_EVERY_TICKS 5
/* Per-tenant queues: in one round the scheduler stops reading further down
 * a tenant's queue once this many of its jobs waited (were not placed), so
 * a round costs O(tenants x SCHED_LOOKAHEAD + jobs placed + islands),
 * whatever the queue length. A tenant's deeper jobs come up as its head
 * moves. */
#define SCHED_LOOKAHEAD 16
/* Jobs read from one tenant's queue per index probe. */
#define SCHED_PAGE 8

static sched_config_t sched_cfg;
static _Atomic uint64_t sched_attempts, sched_successes;   /* for /metrics */
static _Atomic uint64_t sched_rounds, sched_round_us, sched_round_max_us;   /* for /metrics */
/* Upper bounds (µs) of the scheduler-pass histogram's buckets; the seconds
 * in scheduler.h's SCHED_PASS_BOUNDS_S, one order of magnitude per three. */
static const uint64_t pass_bound_us[SCHED_PASS_NBUCKETS] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000};
/* Passes per bucket (not cumulative); the last one counts those over 1 s. */
static _Atomic uint64_t pass_hist[SCHED_PASS_NBUCKETS + 1];
static pthread_t sched_thread;
static pthread_mutex_t sched_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sched_cv = PTHREAD_COND_INITIALIZER;
static int sched_wake;          /* guarded by sched_mu */
static int sched_running;       /* guarded by sched_mu */

/* The cluster as the allocator sees it for one admission round. */
typedef struct round {
    int n;
    int64_t island_id[16];
    alloc_island_t *isl[16];
    sched_dev_t *devs[16];
} round_t;

static void round_free(round_t *r)
{
    for (int i = 0; i < r->n; i++) {
        alloc_island_free(r->isl[i]);
        free(r->devs[i]);
    }
    r->n = 0;
}

/* The round's index of the island with store id island_id, or -1. */
static int round_island(const round_t *r, int64_t island_id)
{
    for (int i = 0; i < r->n; i++)
        if (r->island_id[i] == island_id)
            return i;
    return -1;
}

static int round_load(store_t *st, round_t *r)
{
    memset(r, 0, sizeof *r);
    for (int i = 0; i < sched_cfg.nislands && i < 16; i++) {
        const island_desc_t *d = &sched_cfg.islands[i];
        int64_t n = shape_numel(&d->shape);
        r->island_id[i] = store_island_id(st, d->name);
        r->isl[i] = alloc_island_new(d->name, &d->shape);
        r->devs[i] = calloc((size_t)n, sizeof(sched_dev_t));
        r->n = i + 1;
        if (r->island_id[i] < 0 || !r->isl[i] || !r->devs[i] ||
            store_sched_devices(st, r->island_id[i], r->devs[i], n) != 0)
            return -1;
        for (int64_t k = 0; k < n; k++) {
            const sched_dev_t *dv = &r->devs[i][k];
            alloc_island_set(r->isl[i], k, dv->worker == 0 ? ALLOC_DOWN
                                           : dv->job || dv->shared ? ALLOC_BUSY : ALLOC_FREE);
        }
    }
    return 0;
}

/* Describes why a job cannot be placed now, for the dashboard and the
 * job object, e.g. "needs a 4x4 slice on west; largest free block is 2x4". */
static void pending_reason(round_t *r, const job_plan_t *plan, const alloc_request_t *reqs,
                           char *buf, size_t len)
{
    for (int s = 0; s < plan->nslices; s++) {
        alloc_placement_t pl;
        if (alloc_gang(r->isl, r->n, &reqs[s], 1, &pl) == ALLOC_OK) {
            /* Fits alone: undo, it is the combination that does not fit. */
            for (int k = 0; k < pl.nshards; k++)
                alloc_island_set(r->isl[pl.island], pl.devices[k], ALLOC_FREE);
            alloc_placements_release(&pl, 1);
            continue;
        }
        char want[32];
        mesh_shape_format(&reqs[s].shape, want, sizeof want);
        size_t off = (size_t)snprintf(buf, len, "needs a %s slice (%s) on %s;", want,
                                      plan->slices[s].name,
                                      reqs[s].island ? reqs[s].island : "any island");
        for (int i = 0; i < r->n && off < len; i++) {
            if (reqs[s].island && strcmp(reqs[s].island, alloc_island_name(r->isl[i])) != 0)
                continue;
            shape_t big;
            char got[32];
            const char *isl = alloc_island_name(r->isl[i]);
            if (alloc_largest_free(r->isl[i], &big) > 0) {
                mesh_shape_format(&big, got, sizeof got);
                off += (size_t)snprintf(buf + off, len - off, " largest free block on %s is %s;",
                                        isl, got);
            } else {
                off += (size_t)snprintf(buf + off, len - off, " no free device on %s;", isl);
            }
        }
        if (off > 0 && off < len)
            buf[off - 1] = '\0';
        return;
    }
    snprintf(buf, len, "needs %d slices at once; they do not all fit together yet",
             plan->nslices);
}

/* rank -1 (a run computation's undeclared output): null. */
static json_t *shape_json(const shape_t *s)
{
    if (s->rank < 0)
        return json_null();
    json_t *a = json_array();
    for (int i = 0; a && i < s->rank; i++)
        json_array_append_new(a, json_integer(s->dim[i]));
    return a;
}

/* Where computation c's outputs go: one entry per `input` op that reads
 * one of them. The same for every shard (shard k feeds shard k of the
 * consumer, or, for a cross-mesh edge, the pieces its "reshard" names), so
 * a host task carries the consumer's slice name and the worker resolves
 * the destination processes from the placement. New reference, or NULL. */
static json_t *task_sends(const job_plan_t *plan, int c)
{
    json_t *sends = json_array();
    for (int c2 = 0; sends && c2 < plan->ncomps; c2++) {
        const comp_t *cc = &plan->comps[c2];
        for (int i = 0; i < cc->ninputs; i++) {
            if (cc->inputs[i].producer != c)
                continue;
            json_t *e = json_pack("{s:s, s:i, s:i, s:s}", "value", cc->inputs[i].value,
                                  "comp", c2, "op", cc->inputs[i].op_index,
                                  "slice", plan->slices[cc->slice].name);
            /* A cross-mesh edge: the worker cuts its pieces for each consumer shard. */
            if (e && cc->inputs[i].edge &&
                json_object_set_new(e, "reshard", gspmd_edge_json(cc->inputs[i].edge)) != 0) {
                json_decref(e);
                e = NULL;
            }
            if (!e || json_array_append_new(sends, e) != 0) {
                json_decref(sends);
                return NULL;
            }
        }
    }
    return sends;
}

/* A global computation's "full_values" (gspmd.h), set on base when it
 * names any output. 0, or -1 on OOM. */
static int task_full_values(const job_plan_t *plan, const comp_t *cp, json_t *base)
{
    const job_slice_t *sl = &plan->slices[cp->slice];
    gspmd_mesh_t mesh = {.shape = sl->shape};
    memcpy(mesh.axes, sl->axes, sizeof mesh.axes);
    json_t *fv = gspmd_full_values_json(cp->gspmd, cp, &mesh);
    if (!fv)
        return -1;
    if (json_object_size(fv) == 0) {
        json_decref(fv);
        return 0;
    }
    return json_object_set_new(base, "full_values", fv);
}

/* What every host task of computation c has in common (TASK of
 * docs/worker-protocol.md without "task", "shards" and "devices"); new
 * reference, or NULL. O(computation size), never O(shards). */
static json_t *task_base(const job_plan_t *plan, const json_t *doc, const sched_job_t *job,
                         int c, int64_t seq)
{
    const comp_t *cp = &plan->comps[c];
    json_t *inputs = json_object();
    for (int i = 0; inputs && i < cp->ninputs; i++)
        json_object_set_new(inputs, cp->inputs[i].from, shape_json(&cp->inputs[i].shape));
    /* A global computation (DESIGN Part C) goes out as its partitioned
     * per-shard program: workers never see global shapes. */
    json_t *comp = cp->gspmd ? cp->gspmd->lowered
                 : cp->run_json ? cp->run_json   /* a run computation, lowered (Part F) */
                 : json_array_get(json_object_get(doc, "computations"), (size_t)c);
    json_t *base = json_pack("{s:I, s:i, s:i, s:I, s:s, s:o, s:O, s:o, s:o}",
                             "job", (json_int_t)job->id, "attempt", job->attempt, "comp", c,
                             "seq", (json_int_t)seq, "slice", plan->slices[cp->slice].name,
                             "slice_shape", shape_json(&cp->slice_shape), "computation", comp,
                             "input_shapes", inputs, "sends", task_sends(plan, c));
    if (base && cp->gspmd && task_full_values(plan, cp, base) != 0) {
        json_decref(base);
        base = NULL;
    }
    return base;
}

/* One shard of a computation and the device that runs it. */
typedef struct shard_ref {
    int64_t worker;
    int shard;
    int local;                  /* worker-local device */
} shard_ref_t;

static int shard_ref_cmp(const void *a, const void *b)
{
    const shard_ref_t *x = a, *y = b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return (x->shard > y->shard) - (x->shard < y->shard);
}

/* Writes one host task from refs[0..n-1] (one worker's shards, increasing)
 * with base's fields (base gets "shards" and "devices" set). 0 or -1. */
static int add_host_task(store_t *st, const sched_job_t *job, int c, int64_t island, int64_t seq,
                         int blocked, json_t *base, const shard_ref_t *refs, int n)
{
    json_t *shards = json_array(), *devices = json_array();
    char *shards_txt = NULL, *text = NULL;
    int rc = -1;
    for (int i = 0; shards && devices && i < n; i++)
        if (json_array_append_new(shards, json_integer(refs[i].shard)) != 0 ||
            json_array_append_new(devices, json_integer(refs[i].local)) != 0)
            goto cleanup;
    if (!shards || !devices || !(shards_txt = json_dumps(shards, JSON_COMPACT)) ||
        json_object_set(base, "shards", shards) != 0 ||
        json_object_set(base, "devices", devices) != 0 ||
        !(text = json_dumps(base, JSON_COMPACT)))
        goto cleanup;
    sched_task_t task = {job->id, job->attempt, c, island, refs[0].worker, seq,
                         shards_txt, n, blocked, text};
    rc = store_sched_add_task(st, &task);
cleanup:
    json_decref(shards);
    json_decref(devices);
    free(shards_txt);
    free(text);
    return rc;
}

/* Writes computation c's host tasks: its shards grouped by the worker
 * holding their devices, one row per worker. 0 or -1. */
static int dispatch_comp(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                         const json_t *doc, round_t *r, const alloc_placement_t *pl, int c)
{
    const comp_t *cp = &plan->comps[c];
    const alloc_placement_t *p = &pl[cp->slice];
    int64_t island = r->island_id[p->island];
    int64_t seq = store_sched_take_seq(st, island, 1);
    /* Shared jobs are fed computation by computation (feed_shared), so
     * their tasks never wait blocked: sequential dispatch is for exclusive
     * jobs. */
    int blocked = sched_cfg.sequential && !plan->shared && cp->ninputs > 0;
    if (seq < 0 || store_sched_set_comp(st, job->id, c, island, seq, !blocked) != 0)
        return -1;
    shard_ref_t *refs = malloc(sizeof *refs * (size_t)p->nshards);
    json_t *base = task_base(plan, doc, job, c, seq);
    int rc = refs && base ? 0 : -1;
    for (int k = 0; rc == 0 && k < p->nshards; k++) {
        const sched_dev_t *dv = &r->devs[p->island][p->devices[k]];
        refs[k] = (shard_ref_t){dv->worker, k, dv->local};
    }
    if (rc == 0)
        qsort(refs, (size_t)p->nshards, sizeof *refs, shard_ref_cmp);
    for (int i = 0, j; rc == 0 && i < p->nshards; i = j) {
        for (j = i + 1; j < p->nshards && refs[j].worker == refs[i].worker; j++)
            ;
        rc = add_host_task(st, job, c, island, seq, blocked, base, &refs[i], j - i);
    }
    json_decref(base);
    free(refs);
    return rc;
}

/* One process of a placement: a worker holding a device of the job. */
typedef struct proc_ref {
    const char *island;         /* borrowed from the round */
    const sched_dev_t *dev;     /* one of its devices, borrowed from the round */
} proc_ref_t;

static int proc_ref_cmp(const void *a, const void *b)
{
    const proc_ref_t *x = a, *y = b;
    int c = strcmp(x->island, y->island);
    if (c != 0)
        return c;
    return (x->dev->first > y->dev->first) - (x->dev->first < y->dev->first);
}

/* The "procs" of the placement: every worker holding a device of one of
 * the job's slices, once, sorted by (island name, first device). New
 * reference, or NULL. */
static json_t *placement_procs(const job_plan_t *plan, round_t *r, const alloc_placement_t *pl,
                               int ndev)
{
    proc_ref_t *ps = malloc(sizeof *ps * (size_t)(ndev > 0 ? ndev : 1));
    json_t *arr = json_array();
    int n = 0;
    if (!ps || !arr)
        goto fail;
    for (int s = 0; s < plan->nslices; s++)
        for (int k = 0; k < pl[s].nshards; k++)
            ps[n++] = (proc_ref_t){alloc_island_name(r->isl[pl[s].island]),
                                   &r->devs[pl[s].island][pl[s].devices[k]]};
    qsort(ps, (size_t)n, sizeof *ps, proc_ref_cmp);
    for (int i = 0; i < n; i++) {
        if (i > 0 && ps[i].dev->worker == ps[i - 1].dev->worker)
            continue;   /* same worker: same island and first, so adjacent */
        json_t *e = json_pack("{s:s, s:s, s:I, s:i}", "addr", ps[i].dev->addr,
                              "island", ps[i].island, "first", (json_int_t)ps[i].dev->first,
                              "count", ps[i].dev->count);
        if (!e || json_array_append_new(arr, e) != 0)
            goto fail;
    }
    free(ps);
    return arr;
fail:
    free(ps);
    json_decref(arr);
    return NULL;
}

/* The PLACEMENT JSON text of the job attempt (docs/worker-protocol.md):
 * O(workers + slices). malloc'd, or NULL. */
static char *placement_text(const job_plan_t *plan, round_t *r, const alloc_placement_t *pl,
                            int ndev)
{
    json_t *slices = json_object(), *procs = placement_procs(plan, r, pl, ndev);
    char *text = NULL;
    for (int s = 0; slices && s < plan->nslices; s++) {
        const alloc_placement_t *p = &pl[s];
        json_t *origin = json_array();
        for (int i = 0; origin && i < p->box.rank; i++)
            json_array_append_new(origin, json_integer(p->origin[i]));
        json_t *e = json_pack("{s:s, s:o, s:o, s:o}", "island", alloc_island_name(r->isl[p->island]),
                              "mesh", shape_json(alloc_island_shape(r->isl[p->island])),
                              "origin", origin, "box", shape_json(&p->box));
        if (!e || json_object_set_new(slices, plan->slices[s].name, e) != 0)
            goto cleanup;
    }
    json_t *all = slices && procs ? json_pack("{s:O, s:O}", "procs", procs, "slices", slices) : NULL;
    text = all ? json_dumps(all, JSON_COMPACT) : NULL;
    json_decref(all);
cleanup:
    json_decref(slices);
    json_decref(procs);
    return text;
}

/* Writes the allocation, the placement and every host task of the job in
 * one transaction. Sequence numbers follow the job's topological order, so
 * on each island every device meets the job's computations in the same
 * order. Rows written: O(computations x workers). */
static int dispatch_job(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                        const json_t *doc, round_t *r, const alloc_placement_t *pl)
{
    int ndev = 0;
    for (int s = 0; s < plan->nslices; s++)
        ndev += pl[s].nshards;
    int64_t *isl = malloc(sizeof *isl * (size_t)ndev), *dev = malloc(sizeof *dev * (size_t)ndev);
    char *placement = placement_text(plan, r, pl, ndev);
    if (!isl || !dev || !placement || store_begin(st) != 0)
        goto fail;
    ndev = 0;
    for (int s = 0; s < plan->nslices; s++) {
        int64_t island = r->island_id[pl[s].island];
        for (int k = 0; k < pl[s].nshards; k++) {
            isl[ndev] = island;
            dev[ndev++] = pl[s].devices[k];
        }
        if (store_sched_add_slice(st, job->id, plan->slices[s].name, island, &plan->slices[s].shape,
                                  pl[s].devices, pl[s].nshards) != 0)
            goto fail;
    }
    if (store_sched_mark_allocated(st, job->id, plan->shared, isl, dev, ndev, placement) != 0)
        goto fail;
    /* A shared job's computations are dispatched later, interleaved with
     * the other shared jobs' by tenant share (feed_shared). */
    for (int t = 0; !plan->shared && t < plan->ncomps; t++)
        if (dispatch_comp(st, job, plan, doc, r, pl, plan->topo[t]) != 0)
            goto fail;
    if (store_commit(st) != 0)
        goto fail;
    free(isl);
    free(dev);
    free(placement);
    log_info("job %ld allocated: %d devices, %d computations dispatched", (long)job->id, ndev,
             plan->ncomps);
    return 0;
fail:
    store_rollback(st);
    free(isl);
    free(dev);
    free(placement);
    log_error("job %ld: allocation could not be written; will retry", (long)job->id);
    return -1;
}

/* An island a blocked job could use: lower-priority jobs may not take it
 * (no backfill on contended islands, so a big job is never starved). */
static int touches_blocked(const alloc_request_t *reqs, int n, round_t *r, const int *blocked)
{
    for (int s = 0; s < n; s++)
        for (int i = 0; i < r->n; i++)
            if (blocked[i] && (!reqs[s].island || strcmp(reqs[s].island, alloc_island_name(r->isl[i])) == 0))
                return 1;
    return 0;
}

/* Compiled plans of queued jobs, kept across admission rounds so that a
 * long queue is not re-read and re-compiled every round. A plan depends
 * only on the job document (never changed once accepted) and the islands
 * (fixed for the life of atolld), so an entry stays valid until its job
 * leaves the queue; entries not seen in a round are dropped after it.
 * Sorted by job id; owned by the scheduler thread alone. */
typedef struct plan_entry {
    int64_t id;
    json_t *doc;                /* owned reference */
    job_plan_t *plan;           /* owned */
    int seen;                   /* looked up in the current round */
    char *reason;               /* owned; the pending_reason last written, or NULL */
} plan_entry_t;

static plan_entry_t *plans;
static int nplans, plans_cap;

static void plan_entry_free(plan_entry_t *pe)
{
    job_plan_free(pe->plan);
    json_decref(pe->doc);
    free(pe->reason);
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

/* Index of id, or of where it would go (lower bound). */
static int plan_find(int64_t id)
{
    int lo = 0, hi = nplans;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (plans[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The job's compiled plan, compiling it on first sight. A document that no
 * longer compiles (the cluster changed, e.g. an island was removed from the
 * command line) fails its job. NULL when the job cannot be planned now. */
static plan_entry_t *plan_get(store_t *st, int64_t id)
{
    int k = plan_find(id);
    if (k < nplans && plans[k].id == id) {
        plans[k].seen = 1;
        return &plans[k];
    }
    err_t e = {0};
    plan_entry_t pe = {id, store_sched_job_doc(st, id), NULL, 1, NULL};
    if (!pe.doc ||
        compiler_job(pe.doc, sched_cfg.islands, sched_cfg.nislands, &pe.plan, &e) != 0) {
        char why[400];
        snprintf(why, sizeof why, "no longer valid on this cluster: %s",
                 e.detail[0] ? e.detail : "its document cannot be read");
        if (pe.doc)
            store_sched_fail(st, id, why);
        plan_entry_free(&pe);
        return NULL;
    }
    if (nplans == plans_cap) {
        int cap = plans_cap ? plans_cap * 2 : 64;
        plan_entry_t *p = realloc(plans, sizeof *p * (size_t)cap);
        if (!p) {
            plan_entry_free(&pe);
            return NULL;
        }
        plans = p;
        plans_cap = cap;
    }
    memmove(&plans[k + 1], &plans[k], sizeof *plans * (size_t)(nplans - k));
    plans[k] = pe;
    nplans++;
    return &plans[k];
}

/* After a round: drop the plans of jobs that left the queue. */
static void plans_sweep(void)
{
    int w = 0;
    for (int i = 0; i < nplans; i++) {
        if (plans[i].seen) {
            plans[i].seen = 0;
            plans[w++] = plans[i];
        } else {
            plan_entry_free(&plans[i]);
        }
    }
    nplans = w;
}

static void plans_free_all(void)
{
    for (int i = 0; i < nplans; i++)
        plan_entry_free(&plans[i]);
    free(plans);
    plans = NULL;
    nplans = plans_cap = 0;
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

/* ------------------------------------------------------------------ */
/* Preemption (DESIGN Part D). */

#define PREEMPT_CANDIDATES 64

/* The candidates of one preemption and, for shared ones, the devices they
 * hold in round coordinates (island i of the round, device d). A shared
 * device frees only when every job holding it is evicted. */
typedef struct victims {
    sched_victim_t v[PREEMPT_CANDIDATES];
    int n;
    int nheld[PREEMPT_CANDIDATES];
    int *held[PREEMPT_CANDIDATES];      /* owned: 2 ints (i, d) per device */
} victims_t;

static void victims_free(victims_t *vs)
{
    for (int c = 0; c < vs->n; c++)
        free(vs->held[c]);
}

/* Loads the devices shared victim c holds. 0 or -1. */
static int victims_load_holds(store_t *st, const round_t *r, victims_t *vs, int c)
{
    int64_t total = 0;
    for (int i = 0; i < r->n; i++)
        total += alloc_island_size(r->isl[i]);
    int64_t *isl = malloc(sizeof *isl * (size_t)(total + 1));
    int64_t *idx = malloc(sizeof *idx * (size_t)(total + 1));
    int rc = -1, m = -1;
    if (isl && idx && (m = store_sched_holds(st, vs->v[c].job, isl, idx, (int)total)) >= 0 &&
        (vs->held[c] = malloc(sizeof(int) * 2 * (size_t)(m + 1)))) {
        for (int k = 0; k < m; k++) {
            int i = round_island(r, isl[k]);
            if (i >= 0 && idx[k] >= 0 && idx[k] < alloc_island_size(r->isl[i])) {
                vs->held[c][2 * vs->nheld[c]] = i;
                vs->held[c][2 * vs->nheld[c]++ + 1] = (int)idx[k];
            }
        }
        rc = 0;
    }
    free(isl);
    free(idx);
    return rc;
}

/* Is job id among the chosen victims? */
static int chosen_has(const victims_t *vs, const int *chosen, int k, int64_t id)
{
    for (int i = 0; i < k; i++)
        if (vs->v[chosen[i]].job == id)
            return 1;
    return 0;
}

/* Would the gang fit if the chosen victims' devices were free? The round's
 * islands are copied (they include this round's placements), the victims'
 * devices freed in the copies: an exclusive victim's devices, and a shared
 * device when all its holders are chosen (or always, for a shared gang:
 * it may join them there); nothing in r changes. 1, 0, or -1 (OOM). */
static int fits_without(const round_t *r, const victims_t *vs, const int *chosen, int k,
                        const alloc_request_t *reqs, int nreq, int shared_gang)
{
    alloc_island_t *tmp[16] = {0};
    int *gone[16] = {0};            /* chosen shared holders per device */
    alloc_placement_t pl[64];
    int rc = -1;
    for (int i = 0; i < r->n; i++)
        if (!(gone[i] = calloc((size_t)alloc_island_size(r->isl[i]) + 1, sizeof(int))))
            goto cleanup;
    for (int c = 0; c < k; c++)
        for (int h = 0; h < vs->nheld[chosen[c]]; h++)
            gone[vs->held[chosen[c]][2 * h]][vs->held[chosen[c]][2 * h + 1]]++;
    for (int i = 0; i < r->n; i++) {
        int64_t n = alloc_island_size(r->isl[i]);
        if (!(tmp[i] = alloc_island_new(alloc_island_name(r->isl[i]),
                                        alloc_island_shape(r->isl[i]))))
            goto cleanup;
        for (int64_t d = 0; d < n; d++) {
            const sched_dev_t *dv = &r->devs[i][d];
            int freed = dv->job ? chosen_has(vs, chosen, k, dv->job)
                                : dv->shared > 0 && (shared_gang || gone[i][d] >= dv->shared);
            alloc_island_set(tmp[i], d, freed ? ALLOC_FREE : alloc_island_get(r->isl[i], d));
        }
    }
    int a = alloc_gang(tmp, r->n, reqs, nreq, pl);
    if (a == ALLOC_OK)
        alloc_placements_release(pl, nreq);
    rc = a == ALLOC_OK ? 1 : a == ALLOC_ENOSPACE ? 0 : -1;
cleanup:
    for (int i = 0; i < r->n; i++) {
        alloc_island_free(tmp[i]);
        free(gone[i]);
    }
    return rc;
}

/* Records victim c's eviction in the round: its devices (exclusive) or its
 * holds (shared) are released; a device no one holds any more is free. */
static void round_evict(round_t *r, const victims_t *vs, int c)
{
    for (int i = 0; i < r->n; i++)
        for (int64_t d = 0; !vs->v[c].shared && d < alloc_island_size(r->isl[i]); d++)
            if (r->devs[i][d].job == vs->v[c].job) {
                r->devs[i][d].job = 0;
                if (!r->devs[i][d].shared)
                    alloc_island_set(r->isl[i], d, ALLOC_FREE);
            }
    for (int h = 0; h < vs->nheld[c]; h++) {
        sched_dev_t *dv = &r->devs[vs->held[c][2 * h]][vs->held[c][2 * h + 1]];
        if (dv->shared > 0 && --dv->shared == 0 && !dv->job)
            alloc_island_set(r->isl[vs->held[c][2 * h]], vs->held[c][2 * h + 1], ALLOC_FREE);
    }
}

/* The fewest of vs (lowest priority first) whose eviction lets the gang
 * fit, into chosen. Count (0: none does), or -1 on OOM. */
static int choose_victims(const round_t *r, const victims_t *vs, int *chosen,
                          const alloc_request_t *reqs, int nreq, int shared_gang)
{
    int k = 0, fit = 0;
    for (int i = 0; i < vs->n && fit == 0; i++) {
        chosen[k++] = i;
        fit = fits_without(r, vs, chosen, k, reqs, nreq, shared_gang);
    }
    if (fit != 1)
        return fit < 0 ? -1 : 0;
    for (int c = k - 1; c >= 0 && k > 1; c--) {    /* spare the unnecessary */
        int save = chosen[c];
        memmove(&chosen[c], &chosen[c + 1], sizeof *chosen * (size_t)(k - c - 1));
        if (fits_without(r, vs, chosen, k - 1, reqs, nreq, shared_gang) == 1) {
            k--;
            continue;
        }
        memmove(&chosen[c + 1], &chosen[c], sizeof *chosen * (size_t)(k - c - 1));
        chosen[c] = save;
    }
    return k;
}

/* A job that cannot be placed evicts the fewest, lowest-priority
 * preemptible jobs of lower priority that make room, exclusive or shared
 * (a shared gang never evicts shared jobs only to join their devices):
 * candidates are added lowest priority first until the gang fits, then any
 * whose eviction turns out unnecessary is kept. The evicted jobs are
 * requeued (store) and their devices freed in the round. 1 when room was
 * made, 0 when none can be, -1 on a store error. */
static int try_preempt(store_t *st, round_t *r, const sched_job_t *job,
                       const alloc_request_t *reqs, int nreq, int shared_gang)
{
    victims_t vs = {.n = 0};
    int chosen[PREEMPT_CANDIDATES], rc = -1;
    int n = store_sched_victims(st, job->priority, vs.v, PREEMPT_CANDIDATES);
    if (n <= 0)
        return n < 0 ? -1 : 0;
    for (; vs.n < n; vs.n++)
        if (vs.v[vs.n].shared && victims_load_holds(st, r, &vs, vs.n) != 0) {
            vs.n++;
            goto cleanup;
        }
    int k = choose_victims(r, &vs, chosen, reqs, nreq, shared_gang);
    if (k <= 0) {
        rc = k;
        goto cleanup;
    }
    for (int c = 0; c < k; c++) {
        int64_t victim = vs.v[chosen[c]].job;
        if (store_sched_preempt(st, victim, job->id, job->priority) != 0)
            goto cleanup;
        log_info("job %lld preempted by job %lld", (long long)victim, (long long)job->id);
        round_evict(r, &vs, chosen[c]);
    }
    rc = 1;
cleanup:
    victims_free(&vs);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Shared placement (DESIGN Part D). In a round, r->isl marks every held
 * device BUSY; r->devs says by whom: job (an exclusive holder) or shared
 * (how many shared jobs). Placements made in the round update both. */

/* Places a shared job's gang on devices no exclusive job holds, least
 * loaded first: the gang is tried with only unheld devices free, then also
 * those held by at most 1 shared job, 2, ...; the first bound at which it
 * fits wins (so it lands on the least-loaded feasible devices). Works on
 * copies of the round's islands. ALLOC_OK with pl filled, ALLOC_ENOSPACE
 * or ALLOC_ENOMEM. */
static int place_shared(const round_t *r, const alloc_request_t *reqs, int nreq,
                        alloc_placement_t *pl)
{
    int maxload = 0, a = ALLOC_ENOSPACE;
    for (int i = 0; i < r->n; i++)
        for (int64_t d = 0; d < alloc_island_size(r->isl[i]); d++)
            if (r->devs[i][d].shared > maxload && !r->devs[i][d].job)
                maxload = r->devs[i][d].shared;
    for (int load = 0; load <= maxload && a == ALLOC_ENOSPACE; load++) {
        alloc_island_t *tmp[16] = {0};
        int ok = 1;
        for (int i = 0; i < r->n && ok; i++) {
            if (!(tmp[i] = alloc_island_new(alloc_island_name(r->isl[i]),
                                            alloc_island_shape(r->isl[i])))) {
                ok = 0;
                break;
            }
            for (int64_t d = 0; d < alloc_island_size(r->isl[i]); d++) {
                const sched_dev_t *dv = &r->devs[i][d];
                alloc_state_t s0 = alloc_island_get(r->isl[i], d);
                int shareable = s0 == ALLOC_BUSY && !dv->job && dv->shared > 0 &&
                                dv->shared <= load;
                alloc_island_set(tmp[i], d, shareable ? ALLOC_FREE : s0);
            }
        }
        a = ok ? alloc_gang(tmp, r->n, reqs, nreq, pl) : ALLOC_ENOMEM;
        for (int i = 0; i < r->n; i++)
            alloc_island_free(tmp[i]);
    }
    return a;
}

/* Records a placement made in this round in r (see above). */
static void round_take(round_t *r, const alloc_placement_t *pl, int n, int64_t job, int shared)
{
    for (int s = 0; s < n; s++)
        for (int k = 0; k < pl[s].nshards; k++) {
            sched_dev_t *dv = &r->devs[pl[s].island][pl[s].devices[k]];
            if (shared)
                dv->shared++;
            else
                dv->job = job;
            alloc_island_set(r->isl[pl[s].island], pl[s].devices[k], ALLOC_BUSY);
        }
}

/* Tries to admit one queued job. Returns 1 if dispatched (*used grows by
 * its devices), 0 if it waits (islands it needs marked in blocked[]), -1 on
 * a store error. */
static int admit_job(store_t *st, round_t *r, const sched_job_t *job, int64_t *used,
                     int *blocked)
{
    plan_entry_t *pe = plan_get(st, job->id);
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
    if (touches_blocked(reqs, plan->nslices, r, blocked)) {
        set_reason(st, pe, "waiting behind a higher-priority or older job");
        return 0;
    }
    alloc_placement_t pl[64];
    int a = plan->shared ? place_shared(r, reqs, plan->nslices, pl)
                         : alloc_gang(r->isl, r->n, reqs, plan->nslices, pl);
    if (a == ALLOC_ENOSPACE) {
        int p = try_preempt(st, r, job, reqs, plan->nslices, plan->shared);
        if (p < 0)
            return -1;
        if (p == 1)
            a = plan->shared ? place_shared(r, reqs, plan->nslices, pl)
                             : alloc_gang(r->isl, r->n, reqs, plan->nslices, pl);
    }
    atomic_fetch_add(&sched_attempts, 1);
    if (a == ALLOC_OK) {
        atomic_fetch_add(&sched_successes, 1);
        round_take(r, pl, plan->nslices, job->id, plan->shared);
        int rc = dispatch_job(st, job, plan, doc, r, pl) == 0 ? 1 : -1;
        alloc_placements_release(pl, plan->nslices);
        if (rc == 1)
            *used += plan_devices(plan);
        /* Allocation cleared pending_reason; a requeue sets its own. */
        free(pe->reason);
        pe->reason = NULL;
        return rc;
    }
    char reason[512];
    pending_reason(r, plan, reqs, reason, sizeof reason);
    set_reason(st, pe, reason);
    for (int s = 0; s < plan->nslices; s++)
        for (int i = 0; i < r->n; i++)
            if (!reqs[s].island || strcmp(reqs[s].island, alloc_island_name(r->isl[i])) == 0)
                blocked[i] = 1;
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

/* ------------------------------------------------------------------ */
/* Interleaving shared jobs (DESIGN Part D). Each live shared job has at
 * most SHARED_WINDOW computations dispatched and not finished; whenever
 * one has room, the next computation (topological order) of the job whose
 * tenant has the least virtual time is dispatched, and that tenant's
 * virtual time advances by the computation's expected device time over
 * its share (stride scheduling; the expectation is the job's measured
 * device time per shard, from the workers' reports: feed_cost). Every computation still gets one island sequence number and
 * every device runs its tasks in that order, so interleaving cannot
 * deadlock a collective. A tenant that becomes backlogged starts at the
 * least virtual time of those already backlogged (no credit for idling). */

#define SHARED_WINDOW 2
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

/* Dispatches computation c of a live shared job. 0 or -1. */
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
    pl[cp->slice].island = round_island(r, island);
    if (n > 0 && n == cp->nshards && pl[cp->slice].island >= 0) {
        pl[cp->slice].devices = devices;
        pl[cp->slice].nshards = n;
        sched_job_t job = {fj->id, fj->attempt, fj->tenant, 0, 0};
        if (store_begin(st) == 0) {
            rc = dispatch_comp(st, &job, plan, pe->doc, r, pl, c);
            if (rc == 0)
                rc = store_commit(st);
            if (rc != 0)
                store_rollback(st);
        }
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

/* One feed pass over the live shared jobs. Returns computations
 * dispatched, or -1 on a store error. */
static int feed_shared(store_t *st, round_t *r)
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
        if (vt[i])
            vt[i]->active = 1;
    int i;
    while (n > 0 && (i = feed_pick(fj, vt, n)) >= 0) {
        plan_entry_t *pe = plan_get(st, fj[i].id);
        if (!pe) {
            fj[i].undispatched = 0;
            continue;
        }
        int c = pe->plan->topo[pe->plan->ncomps - fj[i].undispatched];
        if (feed_comp(st, r, &fj[i], pe, c) != 0)
            return -1;
        fj[i].undispatched--;
        fj[i].inflight++;
        vt[i]->v += feed_cost(&fj[i], pe->plan->comps[c].nshards);
        fed++;
    }
    return n < 0 ? -1 : fed;
}

/* One admission round over the heads of the tenants' queues. */
static void admit(store_t *st)
{
    sched_tenant_t *ts = NULL;
    tenant_q_t *qs = NULL;
    int nt = 0, dispatched = 0, complete = 0;
    round_t r;
    if (round_load(st, &r) != 0 || store_sched_tenants(st, &ts, &nt) != 0 ||
        !(qs = calloc((size_t)(nt > 0 ? nt : 1), sizeof *qs)))
        goto cleanup;
    for (int i = 0; i < nt; i++) {
        qs[i].t = ts[i];
        qs[i].fair = (double)ts[i].used / (double)ts[i].share;
        qs[i].last_prio = INT64_MAX;
    }
    int blocked[16] = {0};
    tenant_q_t *q;
    while ((q = tq_pick(st, qs, nt))) {
        int rc = admit_job(st, &r, &q->page[q->next++], &q->t.used, blocked);
        if (rc < 0)
            break;
        dispatched += rc;
        if (rc == 0 && ++q->waits >= SCHED_LOOKAHEAD)
            q->done = 1;
    }
    complete = q == NULL;
    int fed = feed_shared(st, &r);
    if (fed > 0)
        dispatched += fed;
cleanup:
    /* A round stopped early (store error) keeps unseen plans too: their
     * jobs may still be queued. */
    if (complete)
        plans_sweep();
    round_free(&r);
    free(qs);
    free(ts);
    if (dispatched && sched_cfg.on_dispatch)
        sched_cfg.on_dispatch();
}

/* Accounts one admission/dispatch pass of `us` microseconds. */
static void pass_record(uint64_t us)
{
    int b = 0;
    while (b < SCHED_PASS_NBUCKETS && us > pass_bound_us[b])
        b++;
    atomic_fetch_add(&pass_hist[b], 1);
    atomic_fetch_add(&sched_rounds, 1);
    atomic_fetch_add(&sched_round_us, us);
    if (us > atomic_load(&sched_round_max_us))
        atomic_store(&sched_round_max_us, us);   /* one writer: this thread */
}

static void *sched_main(void *arg)
{
    (void)arg;
    store_t *st = store_thread();
    if (!st) {
        log_error("scheduler: no database connection");
        return NULL;
    }
    /* Recovery after a restart (store_sched_recover) already ran in main(),
     * before the API opened. */
    int ticks = 0;
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
        if (++ticks >= SCHED_ADMIT_EVERY_TICKS) {
            ticks = 0;
            woke = 1;
        }
        pthread_mutex_unlock(&sched_mu);
        if (store_sched_expire(st, sched_cfg.lease_us) > 0) {
            woke = 1;
            if (sched_cfg.on_dispatch)
                sched_cfg.on_dispatch();   /* pollers learn about aborted jobs */
        }
        /* Admission only when something changed, so idle ticks stay cheap
         * (a round reads each tenant's head, not the queue). */
        if (woke) {
            int64_t t0 = util_mono_us();
            admit(st);
            pass_record((uint64_t)(util_mono_us() - t0));
        }
        pthread_mutex_lock(&sched_mu);
    }
    pthread_mutex_unlock(&sched_mu);
    plans_free_all();
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
    alloc_island_t *isl[16] = {0};
    alloc_request_t reqs[64];
    int n = sched_cfg.nislands < 16 ? sched_cfg.nislands : 16, fits = -1;
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

void sched_counters(uint64_t *attempts, uint64_t *successes)
{
    *attempts = atomic_load(&sched_attempts);
    *successes = atomic_load(&sched_successes);
}

void sched_round_stats(uint64_t *rounds, uint64_t *total_us, uint64_t *max_us)
{
    *rounds = atomic_load(&sched_rounds);
    *total_us = atomic_load(&sched_round_us);
    *max_us = atomic_load(&sched_round_max_us);
}

void sched_pass_hist(uint64_t cumulative[SCHED_PASS_NBUCKETS], uint64_t *count,
                     uint64_t *sum_us)
{
    /* Lock-free reads: a pass recorded meanwhile may show in some figures
     * and not yet in others; count always equals the +Inf bucket, and the
     * next scrape catches up. */
    *sum_us = atomic_load(&sched_round_us);
    uint64_t run = 0;
    for (int b = 0; b < SCHED_PASS_NBUCKETS; b++) {
        run += atomic_load(&pass_hist[b]);
        cumulative[b] = run;
    }
    *count = run + atomic_load(&pass_hist[SCHED_PASS_NBUCKETS]);
}

void sched_notify(void)
{
    pthread_mutex_lock(&sched_mu);
    sched_wake = 1;
    pthread_cond_signal(&sched_cv);
    pthread_mutex_unlock(&sched_mu);
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
