/* sched_dispatch.c - dispatch: writes a placed job's allocation, its
 * PLACEMENT and its host tasks (TASK JSON of docs/worker-protocol.md), one
 * row per computation and worker, each computation under one island
 * sequence number. Runs on the scheduler thread, inside its transactions. */
#include "sched_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gspmd.h"
#include "jtext.h"
#include "util.h"

/* A placement's mesh or box shape as a JSON array (a computation's
 * shapes go out as text: shape_text). */
static json_t *shape_json(const shape_t *s)
{
    json_t *a = json_array();
    for (int i = 0; a && i < s->rank; i++)
        json_array_append_new(a, json_integer(s->dim[i]));
    return a;
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

/* "[a,b,...]" of field `local` (1) or `shard` (0) of refs[0..n-1] into b
 * (room for 12 * n + 3 bytes): written here, not as a jansson array
 * printed (two per host task were a quarter of a dispatch's work). */
static void refs_text(const shard_ref_t *refs, int n, int local, char *b)
{
    size_t k = 0;
    b[k++] = '[';
    for (int i = 0; i < n; i++) {
        char d[12];
        int v = local ? refs[i].local : refs[i].shard, nd = 0;  /* both >= 0 */
        if (i)
            b[k++] = ',';
        do
            d[nd++] = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        while (nd > 0)
            b[k++] = d[--nd];
    }
    b[k++] = ']';
    b[k] = '\0';
}

/* Host tasks gathered for one multi-row write (store_sched_add_tasks): a
 * computation's rows, one per worker, go STORE_TASK_ROWS to a statement.
 * Each row carries only its shards and their local devices; what all of
 * the computation's host tasks share is stored once
 * (store_sched_add_comp_payload). */
typedef struct task_batch {
    sched_task_t t[STORE_TASK_ROWS];
    char *text[2 * STORE_TASK_ROWS];    /* owned: row i's shards and devices */
    int n;
} task_batch_t;

/* Writes b's rows (rc_in: 0, or -1 to only drop them) and empties it.
 * 0 or -1. */
static int batch_flush(store_t *st, task_batch_t *b, int rc_in)
{
    int rc = rc_in == 0 ? store_sched_add_tasks(st, b->t, b->n) : -1;
    for (int i = 0; i < 2 * b->n; i++)
        free(b->text[i]);
    b->n = 0;
    return rc;
}

/* Adds the host task of refs[0..n-1] (one worker's shards, increasing)
 * to b, writing b's rows first when it is full. 0 or -1. */
static int batch_add(store_t *st, task_batch_t *b, const sched_job_t *job, int c, int ncomps,
                     int64_t island, int64_t seq, int blocked, const shard_ref_t *refs, int n)
{
    if (b->n == STORE_TASK_ROWS && batch_flush(st, b, 0) != 0)
        return -1;
    char *shards_txt = malloc(12 * (size_t)n + 3), *devices_txt = malloc(12 * (size_t)n + 3);
    if (!shards_txt || !devices_txt) {
        free(shards_txt);
        free(devices_txt);
        return -1;
    }
    refs_text(refs, n, 0, shards_txt);
    refs_text(refs, n, 1, devices_txt);
    b->text[2 * b->n] = shards_txt;
    b->text[2 * b->n + 1] = devices_txt;
    b->t[b->n++] = (sched_task_t){job->id, job->attempt, c, ncomps, island, refs[0].worker,
                                  seq, shards_txt, n, blocked, devices_txt};
    return 0;
}

/* An edge out of a run's computation: `input` op inputs[i] of computation
 * c2 reads it. */
typedef struct send_ref {
    int c2, i;
} send_ref_t;

/* Where computations c .. c + n - 1's outputs go: those of c + k are
 * (*refs)[(*at)[k] .. (*at)[k + 1]), one per `input` op that reads an
 * output of c + k, in plan order. The same for every shard (shard k feeds
 * shard k of the consumer, or, for a cross-mesh edge, the pieces its
 * "reshard" names), so a host task carries the consumer's slice name and
 * the worker resolves the destination processes from the placement. One
 * scan of the plan for the whole run (two passes), not one per
 * computation: per computation that was O(computations), a 1,024-step
 * chain's dispatch O(computations^2). 0, or -1 on OOM; *refs and *at are
 * malloc'd (the caller frees both, also after -1). */
static int run_sends(const job_plan_t *plan, int c, int n, send_ref_t **refs, int **at)
{
    int *next = NULL, rc = -1;
    *refs = NULL;
    if (!(*at = calloc((size_t)n + 1, sizeof **at)) || !(next = calloc((size_t)n, sizeof *next)))
        goto cleanup;
    for (int c2 = 0; c2 < plan->ncomps; c2++)
        for (int i = 0; i < plan->comps[c2].ninputs; i++) {
            int p = plan->comps[c2].inputs[i].producer;
            if (p >= c && p < c + n)
                (*at)[p - c + 1]++;
        }
    for (int k = 0; k < n; k++) {
        (*at)[k + 1] += (*at)[k];
        next[k] = (*at)[k];
    }
    if (!(*refs = malloc(sizeof **refs * (size_t)((*at)[n] > 0 ? (*at)[n] : 1))))
        goto cleanup;
    for (int c2 = 0; c2 < plan->ncomps; c2++)
        for (int i = 0; i < plan->comps[c2].ninputs; i++) {
            int p = plan->comps[c2].inputs[i].producer;
            if (p >= c && p < c + n)
                (*refs)[next[p - c]++] = (send_ref_t){c2, i};
        }
    rc = 0;
cleanup:
    free(next);
    return rc;
}

/* A shape as JSON text; rank -1 (a run computation's undeclared output):
 * null. */
static void shape_text(jtext_w_t *w, const shape_t *s)
{
    if (s->rank < 0) {
        JTEXT_LIT(w, "null");
        return;
    }
    JTEXT_LIT(w, "[");
    for (int i = 0; i < s->rank; i++) {
        if (i)
            JTEXT_LIT(w, ",");
        jtext_int(w, s->dim[i]);
    }
    JTEXT_LIT(w, "]");
}

/* One entry of a TASK's "sends". 0, or -1 on OOM. */
static int send_text(jtext_w_t *w, const job_plan_t *plan, const send_ref_t *e)
{
    const comp_t *cc = &plan->comps[e->c2];
    const comp_input_t *in = &cc->inputs[e->i];
    JTEXT_LIT(w, "{\"value\":");
    jtext_str(w, in->value);
    JTEXT_LIT(w, ",\"comp\":");
    jtext_int(w, e->c2);
    JTEXT_LIT(w, ",\"op\":");
    jtext_int(w, in->op_index);
    JTEXT_LIT(w, ",\"slice\":");
    jtext_str(w, plan->slices[cc->slice].name);
    if (in->edge) {     /* a cross-mesh edge: the worker cuts its pieces for each consumer shard */
        json_t *r = gspmd_edge_json(in->edge);
        if (!r)
            return -1;
        JTEXT_LIT(w, ",\"reshard\":");
        jtext_value(w, r);
        json_decref(r);
    }
    JTEXT_LIT(w, "}");
    return 0;
}

/* A global computation's "full_values" (gspmd.h), when it names any
 * output. 0, or -1 on OOM. */
static int full_values_text(jtext_w_t *w, const job_plan_t *plan, const comp_t *cp)
{
    const job_slice_t *sl = &plan->slices[cp->slice];
    gspmd_mesh_t mesh = {.shape = sl->shape};
    memcpy(mesh.axes, sl->axes, sizeof mesh.axes);
    json_t *fv = gspmd_full_values_json(cp->gspmd, cp, &mesh);
    if (!fv)
        return -1;
    if (json_object_size(fv) > 0) {
        JTEXT_LIT(w, ",\"full_values\":");
        jtext_value(w, fv);
    }
    json_decref(fv);
    return 0;
}

/* Whether inputs[i] reads the same edge as an earlier input (its shape is
 * listed once in "input_shapes"). */
static int input_seen(const comp_t *cp, int i)
{
    for (int j = 0; j < i; j++)
        if (strcmp(cp->inputs[j].from, cp->inputs[i].from) == 0)
            return 1;
    return 0;
}

/* What every host task of computation c has in common (TASK of
 * docs/worker-protocol.md without "task", "shards" and "devices"), stored
 * once per computation, as JSON text written in place: built as a jansson
 * tree and printed it cost a chain's dispatch ~40 % of its instructions.
 * O(computation size), never O(shards) or O(workers). sends: its edges
 * out (run_sends). malloc'd, or NULL on OOM. */
static char *task_base_text(const job_plan_t *plan, const json_t *doc, const sched_job_t *job,
                            int c, int64_t seq, const send_ref_t *sends, int nsends)
{
    const comp_t *cp = &plan->comps[c];
    /* A global computation (DESIGN Part C) goes out as its partitioned
     * per-shard program: workers never see global shapes. */
    const json_t *comp = cp->gspmd ? cp->gspmd->lowered
                       : cp->run_json ? cp->run_json   /* a run computation, lowered (Part F) */
                       : json_array_get(json_object_get(doc, "computations"), (size_t)c);
    if (!comp)
        return NULL;
    jtext_w_t w = {0};
    int rc = 0;
    JTEXT_LIT(&w, "{\"job\":");
    jtext_int(&w, job->id);
    JTEXT_LIT(&w, ",\"attempt\":");
    jtext_int(&w, job->attempt);
    JTEXT_LIT(&w, ",\"comp\":");
    jtext_int(&w, c);
    JTEXT_LIT(&w, ",\"seq\":");
    jtext_int(&w, seq);
    JTEXT_LIT(&w, ",\"slice\":");
    jtext_str(&w, plan->slices[cp->slice].name);
    JTEXT_LIT(&w, ",\"slice_shape\":");
    shape_text(&w, &cp->slice_shape);
    JTEXT_LIT(&w, ",\"computation\":");
    jtext_value(&w, comp);
    JTEXT_LIT(&w, ",\"input_shapes\":{");
    for (int i = 0, n = 0; i < cp->ninputs; i++) {
        if (input_seen(cp, i))
            continue;
        if (n++)
            JTEXT_LIT(&w, ",");
        jtext_str(&w, cp->inputs[i].from);
        JTEXT_LIT(&w, ":");
        shape_text(&w, &cp->inputs[i].shape);
    }
    JTEXT_LIT(&w, "},\"sends\":[");
    for (int e = 0; rc == 0 && e < nsends; e++) {
        if (e)
            JTEXT_LIT(&w, ",");
        rc = send_text(&w, plan, &sends[e]);
    }
    JTEXT_LIT(&w, "]");
    if (rc == 0 && cp->gspmd)
        rc = full_values_text(&w, plan, cp);
    JTEXT_LIT(&w, "}");
    if (rc != 0) {
        jtext_drop(&w);
        return NULL;
    }
    return jtext_take(&w, NULL);
}

/* Writes the island sequence numbers of the computations c .. c + ncomps -
 * 1 of a run (seq, seq + 1, ...: one statement), and for each the payload
 * its host tasks share. 0 or -1. */
static int comps_heads(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                       const json_t *doc, int c, int ncomps, int64_t island, int64_t seq,
                       int blocked)
{
    send_ref_t *sends = NULL;
    int *at = NULL;
    int rc = store_sched_set_comp(st, job->id, c, ncomps, island, seq, !blocked);
    if (rc == 0)
        rc = run_sends(plan, c, ncomps, &sends, &at);
    for (int k = 0; rc == 0 && k < ncomps; k++) {
        char *text = task_base_text(plan, doc, job, c + k, seq + k, sends + at[k],
                                    at[k + 1] - at[k]);
        rc = text ? store_sched_add_comp_payload(st, job->id, job->attempt, c + k, text) : -1;
        free(text);
    }
    free(sends);
    free(at);
    return rc;
}

/* Writes computation c's host tasks, the lo-th to before the hi-th of
 * them (hi < 0: to the last), inside the caller's transaction: its shards
 * grouped by the worker holding their devices, one row per worker, the
 * rows in the order of their workers' ids (the same order every time: the
 * slice's devices are read back from the allocation). With lo = 0 it
 * first writes the computation's island sequence number seq (reserved by
 * the caller) and the payload its host tasks share; later parts carry the
 * seq written then. blocked: the tasks wait (sequential dispatch) until
 * store_progress.c releases them. A run (ncomps > 1, see sched_internal.h)
 * writes every computation's number and payload, then one row per worker
 * for them all. 0 or -1. */
int sched_dispatch_comp(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                        const json_t *doc, round_t *r, const alloc_placement_t *pl, int c,
                        int ncomps, int64_t seq, int blocked, int lo, int hi)
{
    const comp_t *cp = &plan->comps[c];
    const alloc_placement_t *p = &pl[cp->slice];
    int64_t island = r->island_id[p->island];
    int rc = lo == 0 ? comps_heads(st, job, plan, doc, c, ncomps, island, seq, blocked) : 0;
    shard_ref_t *refs = rc == 0 ? malloc(sizeof *refs * (size_t)p->nshards) : NULL;
    if (!refs)
        return -1;
    for (int k = 0; k < p->nshards; k++) {
        const sched_dev_t *dv = &r->devs[p->island][p->devices[k]];
        refs[k] = (shard_ref_t){dv->worker, k, dv->local};
    }
    qsort(refs, (size_t)p->nshards, sizeof *refs, shard_ref_cmp);
    task_batch_t b = {.n = 0};
    for (int i = 0, j, g = 0; rc == 0 && i < p->nshards && (hi < 0 || g < hi); i = j, g++) {
        for (j = i + 1; j < p->nshards && refs[j].worker == refs[i].worker; j++)
            ;
        if (g >= lo)
            rc = batch_add(st, &b, job, c, ncomps, island, seq, blocked, &refs[i], j - i);
    }
    rc = batch_flush(st, &b, rc);
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
    /* Names of one island are one pointer (alloc_island_name). */
    int c = x->island == y->island ? 0 : strcmp(x->island, y->island);
    if (c != 0)
        return c;
    return (x->dev->first > y->dev->first) - (x->dev->first < y->dev->first);
}

/* Whether s can stand in a JSON string as it is (no quote, backslash or
 * control character to escape). */
static int json_plain(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\')
            return 0;
    return 1;
}

/* The "procs" of the placement as JSON text: every worker holding a
 * device of one of the job's slices, once, sorted by (island name, first
 * device). Written with jtext's writer, not through jansson or snprintf:
 * 512 workers' entries cost ~1 ms of the whole-island allocation through
 * jansson, and ~250 us through snprintf on the 2-core VM. Addresses and
 * island names need no escaping (api_worker.c's data_addr_ok, the island
 * name rules); one that would is refused rather than written. malloc'd,
 * or NULL. */
static char *placement_procs(const job_plan_t *plan, round_t *r, const alloc_placement_t *pl,
                             int ndev)
{
    proc_ref_t *ps = malloc(sizeof *ps * (size_t)(ndev > 0 ? ndev : 1));
    jtext_w_t w = {0};
    int n = 0;
    if (!ps)
        return NULL;
    for (int s = 0; s < plan->nslices; s++)
        for (int k = 0; k < pl[s].nshards; k++)
            ps[n++] = (proc_ref_t){alloc_island_name(r->isl[pl[s].island]),
                                   &r->devs[pl[s].island][pl[s].devices[k]]};
    /* A one-slice job's shards come in island index order already; only a
     * job whose slices interleave is sorted. */
    util_sort(ps, (size_t)n, sizeof *ps, proc_ref_cmp);
    int plain = 1, written = 0;
    JTEXT_LIT(&w, "[");
    for (int i = 0; i < n; i++) {
        if (i > 0 && ps[i].dev->worker == ps[i - 1].dev->worker)
            continue;   /* same worker: same island and first, so adjacent */
        if (!(plain = json_plain(ps[i].dev->addr) && json_plain(ps[i].island)))
            break;
        if (written++)
            JTEXT_LIT(&w, ",");
        JTEXT_LIT(&w, "{\"addr\":\"");
        jtext_raw(&w, ps[i].dev->addr, strlen(ps[i].dev->addr));
        JTEXT_LIT(&w, "\",\"island\":\"");
        jtext_raw(&w, ps[i].island, strlen(ps[i].island));
        JTEXT_LIT(&w, "\",\"first\":");
        jtext_int(&w, ps[i].dev->first);
        JTEXT_LIT(&w, ",\"count\":");
        jtext_int(&w, ps[i].dev->count);
        JTEXT_LIT(&w, "}");
    }
    JTEXT_LIT(&w, "]");
    free(ps);
    if (!plain) {
        jtext_drop(&w);
        return NULL;
    }
    return jtext_take(&w, NULL);
}

/* The PLACEMENT JSON text of the job attempt (docs/worker-protocol.md):
 * O(workers + slices). malloc'd, or NULL. */
static char *placement_text(const job_plan_t *plan, round_t *r, const alloc_placement_t *pl,
                            int ndev)
{
    json_t *slices = json_object();
    char *procs = placement_procs(plan, r, pl, ndev), *stext = NULL, *text = NULL;
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
    if (!slices || !procs || !(stext = jtext_dump(slices, NULL)))
        goto cleanup;
    size_t cap = strlen(procs) + strlen(stext) + 64;
    if ((text = malloc(cap)))
        snprintf(text, cap, "{\"procs\":%s,\"slices\":%s,\"hold_reports\":%s}", procs, stext,
                 hold ? "true" : "false");
cleanup:
    json_decref(slices);
    free(procs);
    free(stext);
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

/* Host tasks per computation of each slice (the distinct workers holding
 * its devices), into out[plan->nslices]. */
static void slice_tasks(const job_plan_t *plan, const round_t *r, const alloc_placement_t *pl,
                        int *out)
{
    for (int s = 0; s < plan->nslices; s++) {
        const sched_dev_t *devs = r->devs[pl[s].island];
        out[s] = 0;
        /* Shards run in increasing island index and a worker's devices are
         * one range of indexes, so its shards are consecutive: count the
         * changes (were they not, this only overcounts a budget). */
        for (int k = 0; k < pl[s].nshards; k++)
            if (k == 0 || devs[pl[s].devices[k]].worker != devs[pl[s].devices[k - 1]].worker)
                out[s]++;
    }
}

/* A position in a job's dispatch: the computation at position t of its
 * topological order, of whose host tasks the first `part` are written. */
typedef struct dpos {
    int t;
    int part;
} dpos_t;

static int comp_tasks(const job_plan_t *plan, const int *tasks, int t)
{
    return tasks[plan->comps[plan->topo[t]].slice];
}

/* Where the chunk that starts at from ends: at most budget host tasks
 * later (none when budget < 1), or at the job's end ({ncomps, 0}). A
 * computation's host tasks are split between chunks only when it alone
 * fills the chunk: a whole-island gang's 512 rows written in one pass kept
 * every other job waiting for 3-10 ms. Any other that does not fit whole
 * waits for the next chunk: a split one goes out as rows of its own (a
 * run never holds a split computation), half of its workers' rows a
 * chunk later than the others', and ends the workers' runs and report
 * batches there. Progress: with budget >= 1 the chunk is never empty. */
static dpos_t chunk_end(const job_plan_t *plan, const int *tasks, dpos_t from, int64_t budget)
{
    dpos_t e = from;
    while (e.t < plan->ncomps && budget > 0) {
        int left = comp_tasks(plan, tasks, e.t) - e.part;
        if (left > budget) {
            if (e.t == from.t)
                e.part += (int)budget;
            break;
        }
        budget -= left;
        e = (dpos_t){e.t + 1, 0};
    }
    return e;
}

/* What writing host tasks costs, as the last chunks measured it (moving
 * averages; before any was measured, guesses): a chunk costs chunk_fixed_us
 * (its slices read back, its position, its share of the commit) plus
 * chunk_task_us per host task. One average over both hid the fixed part:
 * small chunks measured dear per task, large ones cheap, and the chunks
 * that followed a cheap measure doubled past the pass's time. Scheduler
 * thread only. */
static double chunk_task_us = 10.0, chunk_fixed_us = 100.0;
/* When the pass's writing of host tasks should end (util_mono_us; 0: no
 * pass is open, as for a direct call in a unit test: each chunk of
 * sched_dispatch_more then has SCHED_CHUNK_US to itself and a first chunk
 * its SCHED_CHUNK_FIRST_TASKS). Scheduler thread only. */
static int64_t pass_deadline;

static int64_t chunk_us(void)
{
    return sched_cfg.chunk_us > 0 ? sched_cfg.chunk_us : SCHED_CHUNK_US;
}

void sched_dispatch_pass(int64_t start_us)
{
    pass_deadline = start_us > 0 ? start_us + chunk_us() : 0;
}

/* Host tasks one chunk may have to end by `deadline` when `jobs` chunks
 * (this one included) share what is left: 0 to SCHED_CHUNK_MAX_TASKS. */
static int64_t tasks_until(int64_t deadline, int jobs)
{
    double n = ((double)(deadline - util_mono_us()) / (jobs > 0 ? jobs : 1) - chunk_fixed_us) /
               chunk_task_us;
    return n <= 0 ? 0 : n >= SCHED_CHUNK_MAX_TASKS ? SCHED_CHUNK_MAX_TASKS : (int64_t)n;
}

/* The host tasks of the job before position p. */
static int64_t dpos_done(const job_plan_t *plan, const int *tasks, dpos_t p)
{
    int64_t done = p.part;
    for (int t = 0; t < p.t; t++)
        done += comp_tasks(plan, tasks, t);
    return done;
}

/* Host tasks of the job's chunk starting at from, one of `jobs` chunks
 * still to write by deadline: as many as it already has dispatched
 * (chunks double), at most SCHED_CHUNK_MAX_TASKS and what its share of the
 * time left allows, at least SCHED_CHUNK_FIRST_TASKS. */
static int64_t chunk_budget(const job_plan_t *plan, const int *tasks, dpos_t from,
                            int64_t deadline, int jobs)
{
    int64_t done = dpos_done(plan, tasks, from), by_time = tasks_until(deadline, jobs);
    int64_t n = done < by_time ? done : by_time;
    if (n > SCHED_CHUNK_MAX_TASKS)
        n = SCHED_CHUNK_MAX_TASKS;
    return n < SCHED_CHUNK_FIRST_TASKS ? SCHED_CHUNK_FIRST_TASKS : n;
}

/* Counts what chunks measured: n host tasks written in task_us, and the
 * rest of k chunks (their reads, positions and commit) in fixed_us. */
static void chunk_cost(int64_t n, int64_t task_us, int k, int64_t fixed_us)
{
    if (n > 0) {
        double per = (double)task_us / (double)n;
        chunk_task_us = 0.75 * chunk_task_us + 0.25 * (per > 0.1 ? per : 0.1);
    }
    if (k > 0) {
        double per = (double)fixed_us / k;
        chunk_fixed_us = 0.75 * chunk_fixed_us + 0.25 * (per > 1 ? per : 1);
    }
}

/* How many computations from topological position t on (whole ones, up to
 * position last) go out as one run (schema/032): consecutive positions
 * whose computations have consecutive indexes and one slice, so one row
 * per worker covers them. Never under sequential dispatch (each waits for
 * its producers' reports), and a users' program (a run computation, DESIGN
 * Part F: its processes start and report apart) goes alone. (A shared
 * job's computations never come here: the feed dispatches them one at a
 * time.) 1 at least. */
static int run_length(const job_plan_t *plan, int t, int last)
{
    int c = plan->topo[t], n = 1;
    if (sched_cfg.sequential || plan->comps[c].run_json)
        return 1;
    while (t + n <= last && plan->topo[t + n] == c + n && !plan->comps[c + n].run_json &&
           plan->comps[c + n].slice == plan->comps[c].slice)
        n++;
    return n;
}

/* Dispatches the job's host tasks from position from to before position
 * to, inside the caller's transaction. Each island's sequence numbers for
 * the computations whose first host task is among them are reserved at
 * once and handed out in topological order; a computation begun in an
 * earlier chunk keeps its own (from_seq). Whole computations in a row on
 * one slice go out as runs (run_length): a run never holds a computation
 * a chunk splits, so a later chunk starts at a computation of its own.
 * 0 or -1. */
static int dispatch_range(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                          const json_t *doc, round_t *r, const alloc_placement_t *pl,
                          dpos_t from, dpos_t to, int64_t from_seq)
{
    int count[SCHED_MAX_ISLANDS] = {0}, waiting[SCHED_MAX_ISLANDS] = {0};
    int64_t seq[SCHED_MAX_ISLANDS];
    int last = to.part > 0 ? to.t : to.t - 1;     /* the last position touched */
    int last_whole = to.part > 0 ? to.t - 1 : last;
    for (int t = from.part > 0 ? from.t + 1 : from.t; t <= last; t++)
        count[pl[plan->comps[plan->topo[t]].slice].island]++;
    for (int i = 0; i < r->n; i++)
        if (count[i] > 0 && (seq[i] = store_sched_take_seq(st, r->island_id[i], count[i])) < 0)
            return -1;
    for (int t = from.t, n; t <= last; t += n) {
        int c = plan->topo[t], i = pl[plan->comps[c].slice].island;
        int lo = t == from.t ? from.part : 0, hi = t == to.t ? to.part : -1;
        n = lo == 0 && hi < 0 ? run_length(plan, t, last_whole) : 1;
        int64_t q = lo > 0 ? from_seq : seq[i];
        if (lo == 0)
            seq[i] += n;
        if (sched_dispatch_comp(st, job, plan, doc, r, pl, c, n, q,
                                sequential_waits(plan, pl, c, waiting), lo, hi) != 0)
            return -1;
    }
    return 0;
}

/* Whether a job may be in mid-dispatch (jobs.dispatch_next set): the
 * scheduler is the only writer of a position, so once a look found none,
 * passes skip the look (a read of its own, ~20 us of a tiny job's ~3 ms
 * of atolld CPU on 2 cores) until it writes one. A position it wrote in
 * a transaction that rolled back only costs one look. 1 at start: a job
 * left in mid-dispatch by the previous atolld is continued. Scheduler
 * thread only. */
static int more_maybe = 1;
static uint64_t more_looks;
/* The job served last by sched_dispatch_more: the next pass begins after
 * it, so that when the time allows fewer chunks than there are jobs in
 * mid-dispatch, each still advances in turn. Scheduler thread only. */
static int64_t more_after;

void sched_dispatch_forget(void)
{
    more_maybe = 1;
    more_after = 0;
}

uint64_t sched_dispatch_looks(void)
{
    return more_looks;
}

/* Where the job's dispatch stands after a chunk that ended at e: the
 * computation that e is in, or -1 when none is left (then no pass needs
 * to look for it). */
static int next_position(const job_plan_t *plan, dpos_t e)
{
    if (e.t < plan->ncomps)
        more_maybe = 1;
    return e.t < plan->ncomps ? e.t : -1;
}

/* The end of an exclusive job's first chunk, written with its allocation:
 * everything under sequential dispatch; under parallel, the first chunk
 * if what is left of the pass's time allows it whole, or if it is small
 * (SCHED_CHUNK_INLINE_TASKS); after a big allocation, or chunks of other
 * jobs, none: the next pass, at once, writes it (sched_dispatch_more),
 * whole too, rather than a part now and a part then (a worker would
 * report between the parts instead of holding its reports). */
static dpos_t first_chunk(const job_plan_t *plan, const int *tasks)
{
    if (sched_cfg.sequential)
        return (dpos_t){plan->ncomps, 0};
    dpos_t end = chunk_end(plan, tasks, (dpos_t){0, 0}, SCHED_CHUNK_FIRST_TASKS);
    int64_t n = dpos_done(plan, tasks, end);
    if (pass_deadline > 0 && n > SCHED_CHUNK_INLINE_TASKS && tasks_until(pass_deadline, 1) < n)
        return (dpos_t){0, 0};
    return end;
}

/* Writes the allocation, the placement and the job's first host tasks in
 * one transaction. Sequence numbers follow the job's topological order, so
 * on each island every device meets the job's computations in the same
 * order. An exclusive job under parallel dispatch gets its first chunk
 * now and the rest from sched_dispatch_more; under sequential dispatch
 * every computation is written now (blocked ones are released by reports);
 * a shared job's are fed later (sched_feed_shared). Rows written: O(chunk
 * computations x workers). */
int sched_dispatch_job(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                       const json_t *doc, round_t *r, const alloc_placement_t *pl,
                       int64_t bytes)
{
    int ndev = 0, tasks[64];
    dpos_t end = {0, 0};
    for (int s = 0; s < plan->nslices; s++)
        ndev += pl[s].nshards;
    store_mark_t *m = malloc(sizeof *m * (size_t)(ndev > 0 ? ndev : 1));
    char *placement = placement_text(plan, r, pl, ndev);
    if (!m || !placement || store_begin(st) != 0)
        goto fail;
    /* Only now, inside the transaction: has anyone else changed devices
     * since the round read them? */
    int current = 1;
    for (int s = 0; s < plan->nslices; s++)
        current &= sched_round_current(st, r, pl[s].island);
    ndev = 0;
    for (int s = 0; s < plan->nslices; s++) {
        int64_t island = r->island_id[pl[s].island];
        for (int k = 0; k < pl[s].nshards; k++)
            m[ndev++] = (store_mark_t){island, pl[s].devices[k],
                                       r->devs[pl[s].island][pl[s].devices[k]].worker};
        if (store_sched_add_slice(st, job->id, plan->slices[s].name, island, &plan->slices[s].shape,
                                  pl[s].devices, pl[s].nshards) != 0)
            goto fail;
    }
    if (!plan->shared) {
        slice_tasks(plan, r, pl, tasks);
        end = first_chunk(plan, tasks);
    }
    /* A first chunk's tasks are never all blocked: the job's first
     * computation in topological order waits for nobody. */
    int running = end.t > 0 || end.part > 0;
    if (store_sched_mark_allocated(st, job->id, plan->shared, bytes, m, ndev, placement, current,
                                   running, plan->shared ? -1 : next_position(plan, end)) != 0 ||
        (running && dispatch_range(st, job, plan, doc, r, pl, (dpos_t){0, 0}, end, 0) != 0))
        goto fail;
    if (store_commit(st) != 0)
        goto fail;
    free(m);
    free(placement);
    log_info("job %ld allocated: %d devices, %d of %d computations dispatched in full",
             (long)job->id,
             ndev, end.t, plan->ncomps);
    return !plan->shared && end.t < plan->ncomps;
fail:
    store_rollback(st);
    free(m);
    free(placement);
    sched_round_invalidate();
    log_error("job %ld: allocation could not be written; will retry", (long)job->id);
    return -1;
}

int sched_slice_read(store_t *st, const round_t *r, int64_t job, const job_plan_t *plan, int s,
                     alloc_placement_t *p)
{
    int64_t island = 0;
    int n = store_sched_slice_devices(st, job, plan->slices[s].name, &island, &p->devices);
    p->nshards = n;
    p->island = sched_round_island(r, island);
    if (n < 0)
        return -1;
    /* Read back from the file: each index must name a device of the island
     * before it indexes the round's device array. */
    if (n != shape_numel(&plan->slices[s].shape) || p->island < 0)
        return 1;
    for (int k = 0; k < n; k++)
        if (p->devices[k] < 0 || p->devices[k] >= alloc_island_size(r->isl[p->island]))
            return 1;
    return 0;
}

/* What a pass's chunks wrote: host tasks, the µs spent writing them
 * (dispatch_range), chunks. */
typedef struct chunk_acct {
    int64_t tasks, task_us;
    int chunks;
} chunk_acct_t;

/* The next chunk of one job in mid-dispatch, inside the caller's
 * transaction, one of `jobs` chunks still to write by deadline: its
 * slices' devices as allocated (the slices rows), its host tasks from
 * position m->next on (those of that computation already written, and its
 * seq, read back). 1 when more are left after it, 0 when it was the last
 * (or the job could not go on: its allocation or position is not what its
 * plan needs, so it fails rather than hold the others' chunks up), -1 on
 * a store error. */
static int dispatch_chunk(store_t *st, round_t *r, const sched_more_t *m, const plan_entry_t *pe,
                          int64_t deadline, int jobs, chunk_acct_t *acct)
{
    const job_plan_t *plan = pe->plan;
    alloc_placement_t pl[64];
    int tasks[64], rc = -1, bad = m->next < 0 || m->next >= plan->ncomps;
    dpos_t from = {m->next, 0};
    int64_t from_seq = 0;
    memset(pl, 0, sizeof pl);
    for (int s = 0; !bad && s < plan->nslices; s++) {
        int k = sched_slice_read(st, r, m->id, plan, s, &pl[s]);
        if (k < 0)
            goto cleanup;
        bad = k;
    }
    if (!bad) {
        slice_tasks(plan, r, pl, tasks);
        from.part = store_sched_comp_written(st, m->id, m->attempt, plan->topo[from.t], &from_seq);
        if (from.part < 0)
            goto cleanup;
        /* All of them written, yet the position not past them: not ours. */
        bad = from.part >= comp_tasks(plan, tasks, from.t);
    }
    if (bad) {
        log_error("job %ld: its allocation or dispatch position does not read back as its plan"
                  " needs; failing it", (long)m->id);
        rc = store_sched_fail_dispatch(st, m->id, "its allocation could not be read back") == 0
                 ? 0 : -1;
        /* Its devices freed by this connection, and not in the round's
         * view: the mirror must not keep the view (sched_round_keep). */
        sched_round_invalidate();
        goto cleanup;
    }
    dpos_t end = chunk_end(plan, tasks, from, chunk_budget(plan, tasks, from, deadline, jobs));
    sched_job_t job = {m->id, m->attempt, 0, 0, 0};
    int64_t t0 = util_mono_us();
    if (dispatch_range(st, &job, plan, pe->doc, r, pl, from, end, from_seq) != 0)
        goto cleanup;
    acct->task_us += util_mono_us() - t0;
    if (store_sched_dispatched(st, m->id, next_position(plan, end)) != 0)
        goto cleanup;
    rc = end.t < plan->ncomps;
    acct->tasks += dpos_done(plan, tasks, end) - dpos_done(plan, tasks, from);
    acct->chunks++;
cleanup:
    for (int i = 0; i < plan->nslices; i++)
        free(pl[i].devices);
    return rc;
}

int sched_dispatch_more(store_t *st, round_t *r, int *wrote)
{
    sched_more_t m[SCHED_MORE_MAX];
    plan_entry_t *pe[SCHED_MORE_MAX];
    *wrote = 0;
    if (!more_maybe)
        return 0;
    more_looks++;
    int n = store_sched_dispatching(st, m, SCHED_MORE_MAX), left = 0, first = 0, j;
    if (n == 0)
        more_maybe = 0;
    if (n <= 0)
        return n;
    /* Plans first, outside the transaction (a plan that no longer compiles
     * fails its job in a transaction of its own); then their entries,
     * since compiling one may move those got before it (sched_plan_find:
     * after a restart every job in mid-dispatch compiles here). */
    for (int i = 0; i < n; i++)
        pe[i] = sched_plan_get(st, m[i].id);
    for (int i = 0; i < n; i++)
        pe[i] = pe[i] ? sched_plan_find(m[i].id) : NULL;
    while (first < n && m[first].id <= more_after)
        first++;
    int64_t t0 = util_mono_us(), deadline = pass_deadline > 0 ? pass_deadline : t0 + chunk_us();
    chunk_acct_t acct = {0, 0, 0};
    if (store_begin(st) != 0)
        return -1;
    for (j = 0; j < n; j++) {
        int i = (first + j) % n;
        if (acct.chunks > 0 && util_mono_us() >= deadline)
            break;      /* the rest in the next pass, at once */
        /* Still this attempt, still where the list said (a cancel, a
         * report or a lost worker may have ended it since). */
        int next = store_sched_dispatch_next(st, m[i].id, m[i].attempt);
        if (next == -2)
            goto fail;
        if (next != m[i].next || !pe[i])
            continue;
        int more = dispatch_chunk(st, r, &m[i], pe[i], deadline, n - j, &acct);
        if (more < 0)
            goto fail;
        left += more;
        (*wrote)++;
        more_after = m[i].id;
    }
    left += n - j;
    if (store_commit(st) != 0)
        goto fail;
    chunk_cost(acct.tasks, acct.task_us, acct.chunks, util_mono_us() - t0 - acct.task_us);
    return left;
fail:
    store_rollback(st);
    *wrote = 0;
    log_error("dispatch of the next chunks could not be written; will retry");
    return -1;
}
