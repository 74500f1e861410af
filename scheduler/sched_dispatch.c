/* sched_dispatch.c - dispatch: writes a placed job's allocation, its
 * PLACEMENT and its host tasks (TASK JSON of docs/worker-protocol.md), one
 * row per computation and worker, each computation under one island
 * sequence number. Runs on the scheduler thread, inside its transactions. */
#include "sched_internal.h"

#include <stdlib.h>
#include <string.h>

#include "gspmd.h"
#include "util.h"

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
 * docs/worker-protocol.md without "task", "shards" and "devices"), stored
 * once per computation; new reference, or NULL. O(computation size),
 * never O(shards) or O(workers). */
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

/* Writes one host task from refs[0..n-1] (one worker's shards,
 * increasing): its row carries only the shards and their local devices;
 * what all of the computation's host tasks share is stored once
 * (store_sched_add_comp_payload). 0 or -1. */
static int add_host_task(store_t *st, const sched_job_t *job, int c, int64_t island, int64_t seq,
                         int blocked, const shard_ref_t *refs, int n)
{
    json_t *shards = json_array(), *devices = json_array();
    char *shards_txt = NULL, *devices_txt = NULL;
    int rc = -1;
    for (int i = 0; shards && devices && i < n; i++)
        if (json_array_append_new(shards, json_integer(refs[i].shard)) != 0 ||
            json_array_append_new(devices, json_integer(refs[i].local)) != 0)
            goto cleanup;
    if (!shards || !devices || !(shards_txt = json_dumps(shards, JSON_COMPACT)) ||
        !(devices_txt = json_dumps(devices, JSON_COMPACT)))
        goto cleanup;
    sched_task_t task = {job->id, job->attempt, c, island, refs[0].worker, seq,
                         shards_txt, n, blocked, devices_txt};
    rc = store_sched_add_task(st, &task);
cleanup:
    json_decref(shards);
    json_decref(devices);
    free(shards_txt);
    free(devices_txt);
    return rc;
}

/* Writes computation c's host tasks: its shards grouped by the worker
 * holding their devices, one row per worker; blocked: they wait (sequential
 * dispatch) until store_progress.c releases them. 0 or -1. */
int sched_dispatch_comp(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                        const json_t *doc, round_t *r, const alloc_placement_t *pl, int c,
                        int blocked)
{
    const comp_t *cp = &plan->comps[c];
    const alloc_placement_t *p = &pl[cp->slice];
    int64_t island = r->island_id[p->island];
    int64_t seq = store_sched_take_seq(st, island, 1);
    if (seq < 0 || store_sched_set_comp(st, job->id, c, island, seq, !blocked) != 0)
        return -1;
    shard_ref_t *refs = malloc(sizeof *refs * (size_t)p->nshards);
    json_t *base = task_base(plan, doc, job, c, seq);
    char *text = base ? json_dumps(base, JSON_COMPACT) : NULL;
    int rc = refs && text ? store_sched_add_comp_payload(st, job->id, job->attempt, c, text) : -1;
    for (int k = 0; rc == 0 && k < p->nshards; k++) {
        const sched_dev_t *dv = &r->devs[p->island][p->devices[k]];
        refs[k] = (shard_ref_t){dv->worker, k, dv->local};
    }
    if (rc == 0)
        qsort(refs, (size_t)p->nshards, sizeof *refs, shard_ref_cmp);
    for (int i = 0, j; rc == 0 && i < p->nshards; i = j) {
        for (j = i + 1; j < p->nshards && refs[j].worker == refs[i].worker; j++)
            ;
        rc = add_host_task(st, job, c, island, seq, blocked, &refs[i], j - i);
    }
    json_decref(base);
    free(text);
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
    /* Only an exclusive job under parallel dispatch has every computation's
     * host tasks on its workers from the start, and nothing of the
     * controller's waits for a single report of it but the job's end: its
     * workers may hold reports while more of the attempt runs there
     * (workers/wreport.h). A sequential job's consumers are released by
     * their producers' reports, a shared job's fed by them. */
    int hold = !sched_cfg.sequential && !plan->shared;
    json_t *all = slices && procs ? json_pack("{s:O, s:O, s:b}", "procs", procs, "slices", slices,
                                              "hold_reports", hold)
                                  : NULL;
    text = all ? json_dumps(all, JSON_COMPACT) : NULL;
    json_decref(all);
cleanup:
    json_decref(slices);
    json_decref(procs);
    return text;
}

/* Sequential dispatch: whether computation c's tasks wait blocked. One
 * with inputs waits for its producers; so does, on its island, every
 * computation after one that waits (waiting[] marks the round's islands
 * where one did, in the job's topological order, which is also its seq
 * order there): store_progress.c releases them in seq order, so no worker
 * can start a later-numbered computation of the job before it has received
 * an earlier one that another worker runs first (that could deadlock two
 * collectives). Shared jobs are fed one computation at a time
 * (sched_feed_shared) and never wait blocked. */
static int sequential_waits(const job_plan_t *plan, const alloc_placement_t *pl, int c,
                            int *waiting)
{
    if (!sched_cfg.sequential || plan->shared)
        return 0;
    int island = pl[plan->comps[c].slice].island;
    if (plan->comps[c].ninputs > 0)
        waiting[island] = 1;
    return waiting[island];
}

/* Writes the allocation, the placement and every host task of the job in
 * one transaction. Sequence numbers follow the job's topological order, so
 * on each island every device meets the job's computations in the same
 * order. Rows written: O(computations x workers). */
int sched_dispatch_job(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                       const json_t *doc, round_t *r, const alloc_placement_t *pl)
{
    int waiting[SCHED_MAX_ISLANDS] = {0}, ndev = 0;
    for (int s = 0; s < plan->nslices; s++)
        ndev += pl[s].nshards;
    int64_t *isl = malloc(sizeof *isl * (size_t)ndev), *dev = malloc(sizeof *dev * (size_t)ndev);
    int64_t *wrk = malloc(sizeof *wrk * (size_t)ndev);
    char *placement = placement_text(plan, r, pl, ndev);
    if (!isl || !dev || !wrk || !placement || store_begin(st) != 0)
        goto fail;
    ndev = 0;
    for (int s = 0; s < plan->nslices; s++) {
        int64_t island = r->island_id[pl[s].island];
        for (int k = 0; k < pl[s].nshards; k++) {
            isl[ndev] = island;
            wrk[ndev] = r->devs[pl[s].island][pl[s].devices[k]].worker;
            dev[ndev++] = pl[s].devices[k];
        }
        if (store_sched_add_slice(st, job->id, plan->slices[s].name, island, &plan->slices[s].shape,
                                  pl[s].devices, pl[s].nshards) != 0)
            goto fail;
    }
    if (store_sched_mark_allocated(st, job->id, plan->shared, isl, dev, wrk, ndev,
                                   placement) != 0)
        goto fail;
    /* A shared job's computations are dispatched later, interleaved with
     * the other shared jobs' by tenant share (sched_feed_shared). */
    for (int t = 0; !plan->shared && t < plan->ncomps; t++)
        if (sched_dispatch_comp(st, job, plan, doc, r, pl, plan->topo[t],
                                sequential_waits(plan, pl, plan->topo[t], waiting)) != 0)
            goto fail;
    if (store_commit(st) != 0)
        goto fail;
    free(isl);
    free(dev);
    free(wrk);
    free(placement);
    log_info("job %ld allocated: %d devices, %d computations dispatched", (long)job->id, ndev,
             plan->ncomps);
    return 0;
fail:
    store_rollback(st);
    free(isl);
    free(dev);
    free(wrk);
    free(placement);
    log_error("job %ld: allocation could not be written; will retry", (long)job->id);
    return -1;
}
