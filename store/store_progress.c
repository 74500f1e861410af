/* store_progress.c - the workers' side of the job state machine
 * (docs/worker-protocol.md): a job, running since its first dispatch
 * (store_sched.c), moves on as reports come. A report is where a
 * host task leaves 'leased' (once: fencing), a computation reaches
 * succeeded, and a job reaches succeeded, failed, or a new attempt (an
 * unreachable peer); one report or a batch, each refused (if at all)
 * before its first write.
 * Batches that arrive together share one write transaction (combining,
 * below). */
#include "store_internal.h"
#include "report_acc.h"
#include "report_decode.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jtext.h"
#include "util.h"

/* Whether the row's job attempt is its job's current one and live: only
 * such a report moves the job. */
static int report_row_live(const report_row_t *r)
{
    return r->attempt == r->job_attempt && !store_state_is_terminal(r->job_state);
}

/* Parses the row's shards column: "[a,b,...]", nshards non-negative
 * integers, as the scheduler writes it (sched_dispatch.c). Read without
 * jansson: this runs on the report applier, once per report item. 0, or
 * -1 for anything else (or OOM). */
static int task_shards(report_row_t *r, const char *txt)
{
    if (!txt || txt[0] != '[' || r->nshards < 1 ||
        !(r->shards = malloc(sizeof *r->shards * (size_t)r->nshards)))
        return -1;
    const char *p = txt + 1;
    for (int i = 0; i < r->nshards; i++) {
        if (*p < '0' || *p > '9')
            return -1;
        int64_t v = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (v > (INT64_MAX - 9) / 10)
                return -1;
            v = v * 10 + (*p - '0');
        }
        r->shards[i] = v;
        if (*p != (i + 1 < r->nshards ? ',' : ']'))
            return -1;
        p++;
    }
    return *p == '\0' && (r->shards_txt = strdup(txt)) ? 0 : -1;
}

/* Why a report's task could not be taken: STORE_CONFLICT when the task
 * exists (reported already, reassigned, or the reporter is not its live
 * holder), STORE_NOTFOUND when it does not, STORE_ERR. */
static int task_refusal(store_t *st, int64_t task)
{
    static const char sql[] = "SELECT 1 FROM host_tasks WHERE id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, task);
    int found = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_reset(s);
    return found ? STORE_CONFLICT : STORE_NOTFOUND;
}

/* Computations' outputs (schema/031_comp_outputs.sql), by (job, comp): a
 * computation's never change once written with it (store_job_create), and
 * job ids are never reused (no job row is deleted), so the applier reads
 * each once, not once per report (a 4-worker gang reports each of its
 * computations 4 times; the read cost ~9K instructions a report as a
 * join). Per connection (store_outputs_cache: a cache belongs to one
 * database), direct-mapped; a text longer than an entry, or no cache (out
 * of memory), is read every time. 512 entries (132 KiB): a worker's batch
 * of a chain's reports reaches ~60 computations, and with 64 entries the
 * next worker's batch of the same ones found many evicted (stop 74: half
 * the applier's reads of a 1,000-step chain were misses). */
#define SIG_CACHE 512
#define SIG_CACHE_TEXT 240
typedef struct sig_entry {
    int64_t job;                /* 0: empty */
    int comp;
    int null;                   /* no outputs recorded (a computation from before 031) */
    int64_t total;              /* its shards_total (never changes either) */
    char text[SIG_CACHE_TEXT];
} sig_entry_t;

/* Checks a success's outputs against those of computation comp of job
 * (report_outputs_check): STORE_OK, or STORE_ERR with e set (400: refused;
 * e unset: a store error). The computation's shards_total in *total (for
 * its carried progress, comp_carry.h). */
static int comp_outputs_check(store_t *st, int64_t job, int comp, const report_prep_t *p,
                              int64_t *total, err_t *e)
{
    static const char sql[] =
        "SELECT outputs, shards_total FROM computations WHERE job_id = ?1 AND idx = ?2";
    sig_entry_t *cache = store_outputs_cache(st, sizeof *cache * SIG_CACHE), none = {0};
    sig_entry_t *c = cache ? &cache[(uint64_t)(job * 31 + comp) % SIG_CACHE] : &none;
    if (c->job == job && c->comp == comp) {
        *total = c->total;
        return report_outputs_check(c->null ? NULL : c->text, p->out, p->nout, e) == 0
                   ? STORE_OK : STORE_ERR;
    }
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, comp);
    int rc = STORE_ERR;
    if (sqlite3_step(s) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 0);
        size_t n = t ? strlen(t) : 0;
        *total = sqlite3_column_int64(s, 1);
        if (n < SIG_CACHE_TEXT) {
            *c = (sig_entry_t){job, comp, t == NULL, *total, ""};
            memcpy(c->text, t ? t : "", n + 1);
        }
        rc = report_outputs_check(t, p->out, p->nout, e) == 0 ? STORE_OK : STORE_ERR;
    }
    sqlite3_reset(s);
    return rc;
}

/* Which computation of the row's run the report is of (r->comp), or a
 * refusal: a run's computations succeed in order, each once, so a success
 * is of the next one (comp_idx + done); a success that names another is
 * STORE_CONFLICT (reported already, or out of order), and one of a run of
 * several that names none is 400 (field comp: it could not be told from a
 * retried one). A failure or cancel ends the run: it may name any of the
 * computations not yet reported (a cancel reaches the queued ones before
 * the one running), or none. STORE_OK, STORE_CONFLICT or STORE_ERR (e
 * set). */
static int task_comp(const report_prep_t *p, report_row_t *r, err_t *e)
{
    int64_t next = r->first + r->done;
    r->comp = p->has_comp ? p->comp : next;
    if (p->has_comp && (p->comp < next || p->comp >= r->first + r->ncomps))
        return STORE_CONFLICT;
    if (strcmp(p->state, "succeeded") != 0)
        return STORE_OK;
    if (!p->has_comp && r->ncomps > 1) {
        err_set(e, 400, "comp", "a report of a computation of a run (a host task of %lld"
                " computations) names it in comp", (long long)r->ncomps);
        return STORE_ERR;
    }
    return r->comp == next ? STORE_OK : STORE_CONFLICT;
}

/* Reads the row of the reported task, leased to worker, with its job's
 * state, into r. STORE_OK, STORE_NOTFOUND (no such leased row: the caller
 * tells why) or STORE_ERR. */
static int task_read(store_t *st, int64_t task, int64_t worker, report_row_t *r)
{
    static const char read_sql[] =
        "SELECT t.job_id, t.attempt, t.comp_idx, t.island_id, t.nshards, t.shards, t.devices,"
        " j.state, j.attempt, j.shared, t.ncomps, t.done FROM host_tasks t"
        " JOIN jobs j ON j.id = t.job_id WHERE t.id = ?1 AND t.worker_id = ?2"
        " AND t.state = 'leased'";
    sqlite3_stmt *s = store_stmt(st, read_sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, task);
    sqlite3_bind_int64(s, 2, worker);
    int step = sqlite3_step(s), rc = step == SQLITE_DONE ? STORE_NOTFOUND : STORE_ERR;
    if (step == SQLITE_ROW) {
        r->job = sqlite3_column_int64(s, 0);
        r->attempt = sqlite3_column_int64(s, 1);
        r->first = sqlite3_column_int64(s, 2);
        r->island = sqlite3_column_int64(s, 3);
        r->nshards = sqlite3_column_int(s, 4);
        const char *dev = (const char *)sqlite3_column_text(s, 6);
        snprintf(r->job_state, sizeof r->job_state, "%s", sqlite3_column_text(s, 7));
        r->job_attempt = sqlite3_column_int64(s, 8);
        r->shared = sqlite3_column_int(s, 9);
        r->ncomps = sqlite3_column_int64(s, 10);
        r->done = sqlite3_column_int64(s, 11);
        if (task_shards(r, (const char *)sqlite3_column_text(s, 5)) == 0 &&
            (r->devices_txt = strdup(dev ? dev : "[]")))
            rc = STORE_OK;
    }
    sqlite3_reset(s);
    return rc;
}

/* Marks the row as the report says. A success of a run's computation
 * other than its last only counts it: the task stays leased, and its
 * progress waits in acc's run entry (cached, or added now) until the flush
 * (runs_write), so a run's row is written once per transaction, not once
 * per computation. Anything else ends it in one write, with the run's
 * first stamps and its count of computations done, and drops its entry.
 * 0 or -1. */
static int task_mark(store_t *st, const report_prep_t *p, const report_row_t *r, const char *msg,
                     int64_t worker, report_acc_t *acc, report_acc_run_t *cached)
{
    static const char mark_sql[] =
        "UPDATE host_tasks SET state = ?2, started_us = COALESCE(started_us, ?3),"
        " inputs_ready_us = COALESCE(inputs_ready_us, ?4), finished_us = ?5, error = ?6,"
        " done = ?7 WHERE id = ?1";
    int succeeded = strcmp(p->state, "succeeded") == 0;
    if (succeeded && r->done + 1 < r->ncomps) {
        if (cached) {
            cached->row.done++;
            return 0;
        }
        if (report_acc_run_add(acc, p->task, worker, r, p->started_us, p->inputs_ready_us) != 0)
            return -1;
        acc->run[acc->nrun - 1].row.done++;
        return 0;
    }
    sqlite3_stmt *s = store_stmt(st, mark_sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, p->task);
    sqlite3_bind_text(s, 2, p->state, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, cached ? cached->t0 : p->started_us);
    sqlite3_bind_int64(s, 4, cached ? cached->t1 : p->inputs_ready_us);
    sqlite3_bind_int64(s, 5, p->finished_us);
    if (msg)
        sqlite3_bind_text(s, 6, msg, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 7, r->done + succeeded);
    if (cached)
        report_acc_run_drop(acc, cached);
    return store_step_done(s);
}

/* Writes the progress of the runs acc took in part (done, and the first
 * stamps where the row has none) and forgets them: at the transaction's
 * end, and before a failure is applied, which may end or requeue their
 * jobs (the entries' job state would then be stale). 0 or -1. */
static int runs_write(store_t *st, report_acc_t *acc)
{
    static const char sql[] =
        "UPDATE host_tasks SET done = ?2, started_us = COALESCE(started_us, ?3),"
        " inputs_ready_us = COALESCE(inputs_ready_us, ?4) WHERE id = ?1";
    int rc = 0;
    while (acc->nrun > 0) {
        report_acc_run_t *r = &acc->run[acc->nrun - 1];
        sqlite3_stmt *s = rc == 0 ? store_stmt(st, sql) : NULL;
        if (s) {
            sqlite3_bind_int64(s, 1, r->task);
            sqlite3_bind_int64(s, 2, r->row.done);
            sqlite3_bind_int64(s, 3, r->t0);
            sqlite3_bind_int64(s, 4, r->t1);
            rc = store_step_done(s);
        } else {
            rc = -1;
        }
        report_acc_run_drop(acc, r);
    }
    return rc;
}

/* Fencing and marking: the task leaves 'leased' for `state` (with the
 * report's times and error) only while it is leased to `worker`, once (a
 * run's computations each once, in order: task_comp); a worker whose
 * lease expired is gone (its tasks were cancelled when it was lost), and
 * one that re-registered has a new id, so a result of the old lease can
 * never count, nor count twice. The read and the write are one step: the
 * caller's write transaction holds the lock between them. (Two plain
 * statements, not an UPDATE ... RETURNING: SQLite buffers RETURNING rows
 * in a temporary table, which cost more than the whole UPDATE.) The caller
 * checked that `worker` is live. On STORE_OK r holds the row, the
 * reported computation (r->comp) and its job's state; else
 * STORE_CONFLICT, STORE_NOTFOUND or STORE_ERR (with e filled, 400, when a
 * live attempt's succeeded report does not bring one tensor per shard of
 * the task: refused before the row is marked), r empty. */
static int task_take(store_t *st, const report_prep_t *p, int64_t worker, const char *msg,
                     report_row_t *r, report_acc_t *acc, err_t *e)
{
    memset(r, 0, sizeof *r);
    /* A run this transaction already took reports of: its row as read
     * then, `done` advanced (task_mark). */
    report_acc_run_t *cached = report_acc_run_find(acc, p->task, worker);
    int rc = !cached ? task_read(st, p->task, worker, r)
             : report_row_copy(r, &cached->row) == 0 ? STORE_OK : STORE_ERR;
    if (rc == STORE_NOTFOUND)
        return task_refusal(st, p->task);
    if (rc == STORE_OK)
        rc = task_comp(p, r, e);
    /* The last refusals, before the first write (a live attempt's success
     * only: a stale report's outputs are not kept): outputs that are not
     * one tensor per shard of the task, or not the computation's (names,
     * each shard's shape). */
    int check = rc == STORE_OK && report_row_live(r) && strcmp(p->state, "succeeded") == 0;
    for (int i = 0; check && rc == STORE_OK && i < p->nout; i++)
        if (report_output_count(p->out[i].name, (size_t)p->out[i].n, r->nshards, e) != 0)
            rc = STORE_ERR;
    if (check && rc == STORE_OK)
        rc = comp_outputs_check(st, r->job, (int)r->comp, p, &r->total, e);
    if (rc == STORE_OK && task_mark(st, p, r, msg, worker, acc, cached) != 0)
        rc = STORE_ERR;
    if (rc != STORE_OK)
        report_row_clear(r);
    return rc;
}

/* Queues prepared output o (report_decode.h: one decoded tensor per shard
 * of the task, in its shards' order) as one outputs row for all the
 * task's shards: its meta (schema/023_task_outputs.sql: [shard, shape, sum
 * or null, nvals] per shard, from the tails printed when the report was
 * prepared) and its listed values. task_take refused any other tensor
 * count; one here is a store error, never a read past the row's shards.
 * The row is written by report_acc_flush_outputs. 0 or -1. */
static int report_output_row(report_acc_t *acc, const report_row_t *r, const report_prep_out_t *o)
{
    if (o->n != r->nshards)
        return -1;
    jtext_w_t meta = {0}, vals = {0};
    JTEXT_LIT(&meta, "[");
    for (int i = 0; i < o->n; i++) {
        jtext_raw(&meta, i ? ",[" : "[", i ? 2 : 1);
        jtext_int(&meta, r->shards[i]);
        JTEXT_LIT(&meta, ",");
        jtext_raw(&meta, o->tail[i], strlen(o->tail[i]));
        if (o->t[i].values)
            jtext_raw(&vals, (const char *)o->t[i].values,
                      sizeof *o->t[i].values * (size_t)o->t[i].numel);
    }
    JTEXT_LIT(&meta, "]");
    if (meta.failed || vals.failed) {
        jtext_drop(&meta);
        jtext_drop(&vals);
        return -1;
    }
    size_t meta_len, nvals = vals.len;
    char *meta_p = jtext_take(&meta, &meta_len), *vals_p = NULL;
    if (nvals)
        vals_p = jtext_take(&vals, NULL);
    else
        jtext_drop(&vals);
    if (!meta_p || (nvals && !vals_p)) {
        free(meta_p);
        free(vals_p);
        return -1;
    }
    return report_acc_output(acc, r->job, r->comp, o->name, r->shards[0], meta_p, meta_len,
                             vals_p, nvals);
}

/* Queues the prepared report's outputs, one row per output (GET
 * /v1/jobs/{id}/result splits it per shard); task_take checked their
 * tensor counts. 0 or -1. */
static int report_outputs(report_acc_t *acc, const report_row_t *r, const report_prep_t *p)
{
    for (int i = 0; i < p->nout; i++)
        if (report_output_row(acc, r, &p->out[i]) != 0)
            return -1;
    return 0;
}

/* The succeeded computations of a job, counted in acc by comp_succeeded:
 * one write of its row, either adding them to its comps_done or, when
 * they were its last, ending it (store_job_finish counts them). A shared
 * job's next computations are dispatched by the scheduler's feed pass,
 * which these completions may unblock. 0 or -1. */
static int jobs_progress(store_t *st, report_acc_t *acc, int *effects)
{
    static const char left_sql[] = "SELECT comps_total - comps_done, shared FROM jobs WHERE id = ?";
    static const char job_sql[] = "UPDATE jobs SET comps_done = comps_done + ?2 WHERE id = ?1";
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < acc->ndone; i++) {
        int64_t job = acc->done[i].job, k = acc->done[i].comps;
        sqlite3_stmt *s = store_stmt(st, left_sql);
        if (!s) {
            rc = -1;
            break;
        }
        sqlite3_bind_int64(s, 1, job);
        int row = sqlite3_step(s) == SQLITE_ROW;
        int64_t left = row ? sqlite3_column_int64(s, 0) : -1;
        int shared = row && sqlite3_column_int(s, 1);
        sqlite3_reset(s);
        if (shared)
            *effects |= STORE_FX_FEED;
        if (left == k) {
            *effects |= STORE_FX_JOB_SUCCEEDED;
            rc = store_job_finish(st, job, "succeeded", NULL);
        } else if (!(s = store_stmt(st, job_sql))) {
            rc = -1;
        } else {
            sqlite3_bind_int64(s, 1, job);
            sqlite3_bind_int64(s, 2, k);
            rc = store_step_done(s);
        }
    }
    acc->ndone = 0;
    return rc;
}

/* A computation finished (its row marked so by comp_progress_add): its
 * consumers unblocked (sequential dispatch), and counted for its job
 * (jobs_progress). */
static int comp_succeeded(store_t *st, const report_acc_comp_t *r, report_acc_t *acc,
                          int *effects)
{
    /* Only computations waiting with a seq (sequential dispatch: blocked)
     * have anything to unblock: with parallel dispatch none are (those of
     * an exclusive job whose chunk is not written yet wait without a seq),
     * and the producers JSON of the job's other computations is never
     * parsed (a chain of n computations would otherwise cost n^2 of it).
     * These statements and the release below read them through the index
     * computations_blocked (schema 030), which holds only those. */
    static const char deps_sql[] =
        "UPDATE computations SET deps_left = deps_left - 1 WHERE job_id = ?1"
        " AND state = 'waiting' AND seq IS NOT NULL"
        " AND EXISTS (SELECT 1 FROM json_each(producers) WHERE value = ?2)";
    /* Released in seq order on each island: a computation whose producers
     * are done still waits while an earlier-numbered one of the job on its
     * island waits for its own (the scheduler blocked it for that:
     * sequential_waits, sched_dispatch.c), so every worker receives the
     * job's computations there in seq order. Both statements below read
     * the blocked computations (waiting with a seq) that this releases,
     * through computations_blocked. */
#define COMP_RELEASED(c)                                                                   \
    c ".state = 'waiting' AND " c ".seq IS NOT NULL AND "                                 \
    c ".deps_left = 0 AND NOT EXISTS (SELECT 1 FROM computations e WHERE e.job_id = ?1"    \
    " AND e.state = 'waiting' AND e.island_id = " c ".island_id AND e.seq < " c ".seq"     \
    " AND e.deps_left > 0)"
    static const char unblock_sql[] =
        "UPDATE host_tasks SET state = 'leased', dispatched_at = ?3, leased_at = ?4"
        " WHERE job_id = ?1 AND attempt = ?2 AND state = 'blocked' AND comp_idx IN"
        " (SELECT c.idx FROM computations c WHERE c.job_id = ?1 AND " COMP_RELEASED("c") ")";
    static const char disp_sql[] =
        "UPDATE computations AS c SET state = 'dispatched', dispatched_at = ?2 WHERE c.job_id = ?1"
        " AND " COMP_RELEASED("c");
#undef COMP_RELEASED
    if (report_acc_job_done(acc, r->job) != 0)
        return -1;
    /* A shared job's computations are never blocked: the feed dispatches
     * them one by one in topological order. Its unfed ones are 'waiting',
     * though, so the statements below would scan all of them (and parse
     * their producers) for every computation that succeeds. (A job's last
     * computations get here too, before jobs_progress ends it: they have
     * no waiting consumers, and the statements find nothing.) Nor is any
     * computation of a job written in runs (report_acc_comp_t.unblocks):
     * the statements below would find nothing (~5K instructions a
     * computation of a chain, 2 % of the applier's). */
    if (!r->unblocks)
        return 0;
    int64_t now = util_wall_us();
    sqlite3_stmt *s = store_stmt(st, deps_sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, r->job);
    sqlite3_bind_int64(s, 2, r->comp);
    if (store_step_done(s) != 0)
        return -1;
    if (sqlite3_changes(store_db(st)) == 0)
        return 0;                       /* no consumer was waiting for it */
    if (!(s = store_stmt(st, unblock_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, r->job);
    sqlite3_bind_int64(s, 2, r->attempt);
    sqlite3_bind_int64(s, 3, now);
    sqlite3_bind_int64(s, 4, store_lease_id());    /* one id for all: one release */
    if (store_step_done(s) != 0)
        return -1;
    if (sqlite3_changes(store_db(st)) > 0)
        *effects |= STORE_FX_TASKS_READY;
    if (!(s = store_stmt(st, disp_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, r->job);
    sqlite3_bind_int64(s, 2, now);
    return store_step_done(s);
}

/* The reporting worker, read once per request: whether it is live (only a
 * live worker's reports count), and its first device on its island. */
typedef struct reporter {
    int64_t id;
    int live;
    int64_t first_device;
} reporter_t;

/* 0 with *rep filled, or -1. */
static int reporter_load(store_t *st, int64_t worker, reporter_t *rep)
{
    static const char sql[] = "SELECT first_device FROM workers WHERE id = ? AND state = 'live'";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    int step = sqlite3_step(s);
    *rep = (reporter_t){worker, step == SQLITE_ROW,
                        step == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0};
    sqlite3_reset(s);
    return step == SQLITE_ROW || step == SQLITE_DONE ? 0 : -1;
}

/* Records a succeeded host task in acc, written at the transaction's end
 * or before the next failure it applies (progress_flush): its outputs,
 * device busy time (each of its shards' devices was busy for the task's
 * inputs-ready-to-finished time) and the computation's progress (nshards
 * more shards done, its stamps). The task's devices column lists the
 * worker-local devices of its shards, so their island indexes are the
 * reporter's first device plus those: O(task), never O(slice); the
 * reporter is live (fenced), so its block is current. */
static int host_succeeded(const reporter_t *rep, const report_row_t *r, const report_prep_t *p,
                          report_acc_t *acc)
{
    int64_t t0 = p->started_us, t1 = p->inputs_ready_us, t2 = p->finished_us;
    int64_t busy = t2 > t1 ? t2 - t1 : 0;
    /* Stamps are at most REPORT_TIME_MAX_US, shards up to a worker's 4096
     * devices: the product saturates rather than overflow. */
    int64_t dev_us = r->nshards > 0 && busy > INT64_MAX / r->nshards ? INT64_MAX
                                                                      : busy * r->nshards;
    if (report_outputs(acc, r, p) != 0 ||
        report_acc_add(acc, r->island, rep->first_device, r->devices_txt, busy, r->job,
                       dev_us) != 0)
        return -1;
    return report_acc_comp(acc, r->job, r->attempt, r->comp, !r->shared && r->ncomps <= 1,
                           r->total, r->nshards, t0, t1, t2);
}

/* Adds progress c to its computation's row, in one of the UPDATEs built
 * by COMP_PROGRESS, which differ in what they set and in their last
 * condition (attempt >= 0 binds ?8, carry_show's guard): rows changed (0
 * or 1), or -1. */
#define COMP_PROGRESS(state_set, cond)                                                       \
    "UPDATE computations SET shards_done = shards_done + ?6," state_set                   \
    " busy_us = CASE WHEN busy_us > 9223372036854775807 - ?7 THEN 9223372036854775807"     \
    " ELSE busy_us + ?7 END,"                                                              \
    " started_at = MIN(COALESCE(started_at, ?3), ?3),"                                     \
    " inputs_ready_at = MAX(COALESCE(inputs_ready_at, ?4), ?4),"                           \
    " finished_at = MAX(COALESCE(finished_at, ?5), ?5)"                                    \
    " WHERE job_id = ?1 AND idx = ?2" cond
static int comp_progress(store_t *st, const report_acc_comp_t *c, const char *sql,
                         int64_t attempt)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, c->job);
    sqlite3_bind_int64(s, 2, c->comp);
    sqlite3_bind_int64(s, 3, c->t0);
    sqlite3_bind_int64(s, 4, c->t1);
    sqlite3_bind_int64(s, 5, c->t2);
    sqlite3_bind_int64(s, 6, c->shards);
    sqlite3_bind_int64(s, 7, c->busy_us);
    if (attempt >= 0)               /* carry_show's guard */
        sqlite3_bind_int64(s, 8, attempt);
    return store_step_done(s) == 0 ? sqlite3_changes(store_db(st)) : -1;
}

/* Adds c, the rest of its computation's shards (its carried part and
 * this transaction's reports, comp_progress_carry), to its row and marks
 * it succeeded: one statement. 1 when that made the computation succeed,
 * 0 when not, -1 on error. It matches no row whose count would then differ
 * from its shards_total, which never happens unless something counted
 * twice or was lost: that row gets the plain add, and does not succeed. */
static int comp_progress_add(store_t *st, const report_acc_comp_t *c)
{
    static const char last_sql[] =
        COMP_PROGRESS(" state = 'succeeded',", " AND shards_done + ?6 = shards_total");
    static const char any_sql[] = COMP_PROGRESS("", "");
    int n = comp_progress(st, c, last_sql, -1);
    if (n != 0)
        return n;
    return comp_progress(st, c, any_sql, -1) < 0 ? -1 : 0;
}

/* Adds c (this transaction's progress of a computation) to its carried
 * part p. */
static void carry_add(comp_carry_t *p, const report_acc_comp_t *c)
{
    if (p->shards == 0) {           /* nothing carried: c's stamps, and a new wait */
        p->t0 = c->t0;
        p->t1 = c->t1;
        p->t2 = c->t2;
        p->busy_us = c->busy_us;
        p->due_us = util_mono_us() + comp_carry_show_us();
    } else {
        p->t0 = c->t0 < p->t0 ? c->t0 : p->t0;
        p->t1 = c->t1 > p->t1 ? c->t1 : p->t1;
        p->t2 = c->t2 > p->t2 ? c->t2 : p->t2;
        p->busy_us = p->busy_us > INT64_MAX - c->busy_us ? INT64_MAX : p->busy_us + c->busy_us;
    }
    p->shards += c->shards;
    p->unblocks &= c->unblocks;
}

/* This transaction's progress of a computation, c, with the part carried
 * from earlier ones (comp_carry.h): carried on while shards remain for
 * other reports (nothing written), else written with the part in one
 * UPDATE (comp_progress_add) and the part dropped; what was written in *m.
 * 1 when that made the computation succeed, 0 when not, -1 on error. */
static int comp_progress_carry(store_t *st, const report_acc_comp_t *c, report_acc_comp_t *m)
{
    comp_carry_txn_t *t = store_carry(st);
    comp_carry_t p;
    *m = *c;
    /* A computation whose shards all came in this transaction (one
     * worker's, nearly always) has no part: no lookup. */
    int had = c->shards < c->total && comp_carry_get(t, c->job, c->attempt, c->comp, &p);
    if (!had)
        p = (comp_carry_t){.job = c->job, .attempt = c->attempt, .comp = c->comp,
                           .total = c->total, .unblocks = 1};
    carry_add(&p, c);
    if (p.written + p.shards < p.total)
        return comp_carry_put(t, &p) == 0 ? 0 : -1;
    *m = (report_acc_comp_t){c->job, c->attempt, c->comp, p.unblocks, p.total, p.shards,
                             p.t0, p.t1, p.t2, p.busy_us};
    p.gone = 1;
    if (had && comp_carry_put(t, &p) != 0)
        return -1;
    return comp_progress_add(st, m);
}

/* Carried parts written as they stood after COMP_CARRY_SHOW_US
 * (store_carried_shown). */
static _Atomic uint64_t carry_shown;

uint64_t store_carried_shown(void) { return atomic_load(&carry_shown); }
size_t store_carried_computations(void) { return comp_carry_count(); }
void store_set_carry_show_us(int64_t us) { comp_carry_set_show_us(us); }

/* Writes carried part p as it stands (shards done so far) while its job
 * attempt is live, or drops it: the applier's, for a part carried past
 * COMP_CARRY_SHOW_US, and store_job_finish's, for a job about to fail or
 * be cancelled (its rows show every shard reported; `drop`: the part goes
 * too). A part with nothing to write is dropped once its attempt ended,
 * else looked at again in COMP_CARRY_GC_US. 0 or -1. */
static int carry_show(store_t *st, comp_carry_t *p, int drop)
{
    static const char show_sql[] = COMP_PROGRESS("", " AND shards_done + ?6 < shards_total AND"
        " EXISTS (SELECT 1 FROM jobs j WHERE j.id = ?1 AND j.attempt = ?8 AND NOT "
        STORE_JOB_ENDED("j.state") ")");
    static const char live_sql[] =
        "SELECT 1 FROM jobs WHERE id = ?1 AND attempt = ?2 AND NOT " STORE_JOB_ENDED("state");
    int live;
    if (p->shards > 0) {
        report_acc_comp_t c = {p->job, p->attempt, p->comp, p->unblocks, p->total, p->shards,
                               p->t0, p->t1, p->t2, p->busy_us};
        if ((live = comp_progress(st, &c, show_sql, p->attempt)) < 0)
            return -1;
        if (live && !drop)          /* counted in the transaction: a rare rolled-back
                                     * one still counts */
            atomic_fetch_add(&carry_shown, 1);
    } else {
        sqlite3_stmt *s = store_stmt(st, live_sql);
        if (!s)
            return -1;
        sqlite3_bind_int64(s, 1, p->job);
        sqlite3_bind_int64(s, 2, p->attempt);
        int step = sqlite3_step(s);
        sqlite3_reset(s);
        if (step != SQLITE_ROW && step != SQLITE_DONE)
            return -1;
        live = step == SQLITE_ROW;
    }
    p->gone = drop || !live;
    p->written += p->shards;
    p->shards = 0;
    p->due_us = util_mono_us() + COMP_CARRY_GC_US;
    return comp_carry_put(store_carry(st), p);
}
#undef COMP_PROGRESS

int store_carry_show_job(store_t *st, int64_t job)
{
    comp_carry_t *parts;
    long n = comp_carry_of_job(store_carry(st), job, &parts);
    int rc = n < 0 ? -1 : 0;
    for (long i = 0; rc == 0 && i < n; i++)
        rc = carry_show(st, &parts[i], 1);
    free(parts);
    return rc;
}

int store_reports_show_carried(store_t *st, int64_t now_us)
{
    comp_carry_t due[64];
    size_t n = comp_carry_due(now_us, due, sizeof due / sizeof due[0]);
    if (n == 0)
        return 0;
    if (store_begin(st) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = carry_show(st, &due[i], 0);
    if (rc == 0 && store_commit(st) == 0)
        return 0;
    store_rollback(st);
    return -1;
}

/* Writes what acc gathered of outputs and computations' progress, in the
 * order they came: a computation whose shards are now all done succeeds
 * (comp_succeeded: its consumers), then its job counts them and ends when
 * they were its last (jobs_progress). Runs before a failure is applied and
 * before the transaction's end (report_acc.h, Order). 0 or -1. */
static int progress_flush(store_t *st, report_acc_t *acc, int *effects)
{
    int rc = runs_write(st, acc) == 0 ? report_acc_flush_outputs(st, acc) : -1;
    for (size_t i = 0; rc == 0 && i < acc->ncomp; i++) {
        report_acc_comp_t m;
        int done = comp_progress_carry(st, &acc->comp[i], &m);
        rc = done < 0 ? -1 : done ? comp_succeeded(st, &m, acc, effects) : 0;
    }
    acc->ncomp = 0;
    return rc == 0 ? jobs_progress(st, acc, effects) : rc;
}

/* The computation's name for messages; "?" if it cannot be read. The
 * returned text lives in a per-thread buffer until the next call. */
static const char *comp_name(store_t *st, const report_row_t *r)
{
    static const char sql[] = "SELECT name FROM computations WHERE job_id = ? AND idx = ?";
    static _Thread_local char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "?");
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return name;
    sqlite3_bind_int64(s, 1, r->job);
    sqlite3_bind_int64(s, 2, r->comp);
    if (sqlite3_step(s) == SQLITE_ROW)
        snprintf(name, sizeof name, "%s", sqlite3_column_text(s, 0));
    sqlite3_reset(s);
    return name;
}

/* A host task that failed because it could not reach a peer over the data
 * plane (the report's "unreachable_peer" names the peer's data address)
 * failed for a fault outside the job: the peer's worker died (its lease
 * expires a moment later) or is cut off. Such a job is retried like one
 * that lost a worker, not failed outright. Returns 1 when handled, 0 when
 * the error is not of that kind, -1 on a store error. */
static int peer_unreachable(store_t *st, const report_row_t *r, int64_t worker, const char *msg,
                            const char *addr)
{
    static const char sql[] =
        "SELECT id FROM workers WHERE data_addr = ? ORDER BY id DESC LIMIT 1";
    if (!addr)
        return 0;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_text(s, 1, addr, -1, SQLITE_STATIC);
    int64_t peer = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    char why[400];
    snprintf(why, sizeof why, "worker %ld was lost or unreachable: worker %ld could not send to"
             " it from computation '%s' shards %.64s (%s)", (long)peer, (long)worker,
             comp_name(st, r), r->shards_txt, msg ? msg : "no detail");
    return store_job_retry(st, r->job, why) == 0 ? 1 : -1;
}

/* A failed report of the job's live attempt: requeue (unreachable peer)
 * or fail the job. 0 or -1. */
static int host_failed(store_t *st, const report_row_t *r, int64_t worker, const char *peer_addr,
                       const char *msg)
{
    int peer = peer_unreachable(st, r, worker, msg, peer_addr);
    if (peer != 0)
        return peer > 0 ? 0 : -1;
    char why[400];
    snprintf(why, sizeof why, "computation '%s' shards %.64s on worker %ld failed: %s",
             comp_name(st, r), r->shards_txt, (long)worker, msg ? msg : "no reason given");
    return store_job_finish(st, r->job, "failed", why);
}

/* Applies one prepared report of rep inside the caller's transaction.
 * Returns STORE_OK; a refusal, STORE_NOTFOUND, STORE_CONFLICT or STORE_ERR
 * with e->status 400 (outputs that are not one tensor per shard of the
 * task), always before anything is written (task_take); or STORE_ERR with
 * e->status 0, a store failure, after which the caller rolls the whole
 * transaction back. So an item refused in a batch needs no savepoint of
 * its own: there is nothing of it to undo. */
static int report_apply(store_t *st, const reporter_t *rep, const report_prep_t *p,
                        report_acc_t *acc, int *effects, err_t *e)
{
    if (!rep->live)
        return task_refusal(st, p->task);  /* fenced: see task_take */
    const char *msg = p->error;
    report_row_t r;
    int rc = task_take(st, p, rep->id, msg, &r, acc, e);
    if (rc != STORE_OK)
        return rc;
    rc = STORE_ERR;
    /* Only the job's current attempt, while it is live, moves the job. */
    int live = report_row_live(&r);
    if (live && strcmp(p->state, "succeeded") == 0) {
        if (host_succeeded(rep, &r, p, acc) != 0)
            goto out;
    } else if (live && strcmp(p->state, "failed") == 0) {
        /* The successes gathered so far go first: a failure may requeue
         * the job, deleting its outputs and zeroing its computations, and
         * what it deletes must include them (report_acc.h, Order). */
        if (progress_flush(st, acc, effects) != 0 ||
            host_failed(st, &r, rep->id, p->unreachable_peer, msg) != 0)
            goto out;
        *effects |= STORE_FX_JOB_ENDED;
    }
    rc = STORE_OK;
out:
    report_row_clear(&r);
    return rc;
}

int store_worker_report(store_t *st, int64_t worker, const report_prep_t *p, int *effects,
                        err_t *e)
{
    *effects = 0;
    if (store_begin(st) != 0) {
        err_set(e, 503, "", "store busy");
        return STORE_ERR;
    }
    reporter_t rep;
    report_acc_t acc = REPORT_ACC_INIT;
    int rc = reporter_load(st, worker, &rep) == 0 ? report_apply(st, &rep, p, &acc, effects, e)
                                                  : STORE_ERR;
    if (rc == STORE_OK && (progress_flush(st, &acc, effects) != 0 ||
                           report_acc_flush(st, &acc) != 0 || store_commit(st) != 0))
        rc = STORE_ERR;
    if (rc != STORE_OK)
        store_rollback(st);
    report_acc_free(&acc);
    return rc;
}

static int status_of(int rc, const err_t *e)
{
    if (rc == STORE_OK)
        return 200;
    if (rc == STORE_NOTFOUND)
        return 404;
    if (rc == STORE_CONFLICT)
        return 409;
    return e->status >= 400 ? e->status : 503;
}

/* Applies one request's prepared reports (n of them) inside the open
 * transaction, its answer per item appended to res. An item refused when
 * it was prepared gets that answer without touching the store; one refused
 * by report_apply wrote nothing (see there), so the others of the batch
 * still apply. STORE_OK, or STORE_ERR when the store failed (the
 * transaction must then be rolled back). */
static int batch_items(store_t *st, int64_t worker, const report_prep_t *preps, size_t n,
                       store_report_result_t *res, report_acc_t *acc, int *effects)
{
    reporter_t rep;
    if (reporter_load(st, worker, &rep) != 0)
        return STORE_ERR;
    for (size_t i = 0; i < n; i++) {
        const report_prep_t *p = &preps[i];
        err_t e = p->e;
        int rc = STORE_ERR;
        if (e.status == 0) {
            rc = report_apply(st, &rep, p, acc, effects, &e);
            /* A store failure (not a refusal) fails the whole transaction:
             * nothing is committed and the workers send again. */
            if (rc == STORE_ERR && e.status < 400)
                return STORE_ERR;
        }
        res[i] = (store_report_result_t){p->task, status_of(rc, &e), NULL};
        if (rc != STORE_OK && e.detail[0] && !(res[i].detail = strdup(e.detail)))
            return STORE_ERR;
    }
    return STORE_OK;
}

void store_report_results_clear(store_report_result_t *results, size_t n)
{
    for (size_t i = 0; results && i < n; i++) {
        free(results[i].detail);
        results[i].detail = NULL;
    }
}

/* ---- one applier for the workers' report batches ----
 *
 * Report batches are most of the controller's write transactions while
 * jobs run. They queue here, and one thread applies them; the requests
 * that queued while it applied the previous ones go into one transaction
 * (up to COMBINE_MAX_ITEMS items). A store failure rolls back the whole
 * transaction and every request in it gets STORE_ERR (nothing was
 * applied: the workers send again), as for one request alone. */
typedef struct report_req {
    int64_t worker;
    const report_prep_t *preps; /* borrowed: the requester waits until done */
    size_t n;
    store_report_result_t *results; /* the requester's, n of them */
    int effects, rc, done;
    struct report_req *next;
} report_req_t;

/* A combined transaction takes whole requests until this many items. */
#define COMBINE_MAX_ITEMS 1024

static pthread_mutex_t comb_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t comb_cv = PTHREAD_COND_INITIALIZER;
static report_req_t *comb_head;         /* guarded by comb_mu: FIFO of waiting requests */

/* Report transactions committed (store_report_transactions). */
static _Atomic uint64_t comb_txns;

uint64_t store_report_transactions(void) { return atomic_load(&comb_txns); }

/* Applies the requests of list (linked by next) in one transaction. */
static void combine_apply(store_t *st, report_req_t *list)
{
    report_req_t *r, *last = list;
    report_acc_t acc = REPORT_ACC_INIT;
    int ok = store_begin(st) == 0;
    for (r = list; ok && r; r = r->next) {
        last = r;
        ok = batch_items(st, r->worker, r->preps, r->n, r->results, &acc, &r->effects) ==
             STORE_OK;
    }
    /* What the flush does (a computation done, a job ended) is told to
     * the last request's thread, which wakes whom it concerns. */
    ok = ok && progress_flush(st, &acc, &last->effects) == 0 && report_acc_flush(st, &acc) == 0;
    report_acc_free(&acc);
    if (ok && store_commit(st) == 0) {
        atomic_fetch_add(&comb_txns, 1);
        for (r = list; r; r = r->next)
            r->rc = STORE_OK;
        return;
    }
    store_rollback(st);
    for (r = list; r; r = r->next) {
        store_report_results_clear(r->results, r->n);
        r->effects = 0;
        r->rc = STORE_ERR;
    }
}

/* Takes the first requests of the queue, up to COMBINE_MAX_ITEMS items
 * (at least one request). Holds comb_mu. */
static report_req_t *combine_take(void)
{
    report_req_t *list = comb_head, *last = comb_head;
    size_t items = last->n;
    while (last->next && items + last->next->n <= COMBINE_MAX_ITEMS) {
        last = last->next;
        items += last->n;
    }
    comb_head = last->next;
    last->next = NULL;
    return list;
}

/* The applier thread applies the queued requests with its own connection,
 * whose page cache stays warm from one report transaction to the next
 * (SQLite drops a connection's cache when another connection wrote in
 * between, and refetching the pages cost a pread each). Requests wait on
 * comb_cv until it marks them done. Started on the first batch; without it
 * (it could not start, or store_reports_stop ran) a request is applied by
 * its own thread. */
static pthread_cond_t comb_work_cv = PTHREAD_COND_INITIALIZER;
static int comb_work_mono;      /* comb_work_cv's clock is CLOCK_MONOTONIC (combine_start) */
static pthread_once_t comb_once = PTHREAD_ONCE_INIT;
static pthread_t comb_thread;
static int comb_state;          /* guarded by comb_mu: COMB_* */
static int comb_closed;         /* guarded by comb_mu: store_reports_stop ran */
enum { COMB_OFF, COMB_STARTING, COMB_ON, COMB_STOPPING };

static void combine_done(report_req_t *list)
{
    for (report_req_t *r = list, *next; r; r = next) {
        next = r->next;     /* r belongs to its waiting requester once done */
        r->done = 1;
    }
    pthread_cond_broadcast(&comb_cv);
}

/* Waits on comb_work_cv (holding comb_mu) until signalled or, when
 * until_us (util_mono_us) is not 0, until then. */
static void combine_wait(int64_t until_us)
{
    if (until_us == 0) {
        pthread_cond_wait(&comb_work_cv, &comb_mu);
        return;
    }
    int64_t left = until_us - util_mono_us();
    if (left <= 0)
        return;
    /* On the condition's clock: CLOCK_MONOTONIC, which a step of the wall
     * clock does not move (CLOCK_REALTIME only if that could not be set). */
    struct timespec ts;
    clock_gettime(comb_work_mono ? CLOCK_MONOTONIC : CLOCK_REALTIME, &ts);
    int64_t ns = ts.tv_nsec + (left % 1000000) * 1000;
    ts.tv_sec += (time_t)(left / 1000000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&comb_work_cv, &comb_mu, &ts);
}

/* A failed write of carried parts is tried again after this long. */
#define SHOW_RETRY_US 10000

/* The applier: queued report requests first, then the carried parts that
 * fell due (store_reports_show_carried), else a wait for either. */
static void *combine_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "atoll-reports");
    store_t *st = store_thread();
    pthread_mutex_lock(&comb_mu);
    comb_state = st ? COMB_ON : COMB_OFF;
    pthread_cond_broadcast(&comb_cv);
    int64_t retry_at = 0;
    while (st) {
        if (!comb_head) {
            if (comb_state != COMB_ON)
                break;      /* stopping, and every queued request answered */
            int64_t now = util_mono_us(), due = comp_carry_next_due();
            if (due && due < retry_at)
                due = retry_at;
            if (!due || due > now) {
                combine_wait(due);
                continue;
            }
            pthread_mutex_unlock(&comb_mu);
            retry_at = store_reports_show_carried(st, now) == 0 ? 0 : now + SHOW_RETRY_US;
            pthread_mutex_lock(&comb_mu);
            continue;
        }
        report_req_t *list = combine_take();
        pthread_mutex_unlock(&comb_mu);
        combine_apply(st, list);
        pthread_mutex_lock(&comb_mu);
        combine_done(list);
    }
    pthread_mutex_unlock(&comb_mu);
    store_thread_close();
    return NULL;
}

static void combine_start(void)
{
    pthread_mutex_lock(&comb_mu);
    if (comb_closed) {          /* stopping before any batch came: none is started */
        pthread_mutex_unlock(&comb_mu);
        return;
    }
    /* Nobody waits on comb_work_cv yet (the applier is not started), so it
     * can take the monotonic clock now, for combine_wait's deadlines. */
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) == 0) {
        if (pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
            pthread_cond_destroy(&comb_work_cv) == 0) {
            comb_work_mono = pthread_cond_init(&comb_work_cv, &ca) == 0;
            if (!comb_work_mono)        /* never on Linux; the default clock then */
                pthread_cond_init(&comb_work_cv, NULL);
        }
        pthread_condattr_destroy(&ca);
    }
    comb_state = COMB_STARTING;
    if (pthread_create(&comb_thread, NULL, combine_main, NULL) != 0)
        comb_state = COMB_OFF;
    while (comb_state == COMB_STARTING)
        pthread_cond_wait(&comb_cv, &comb_mu);
    if (comb_state == COMB_OFF)
        log_warn("store: no report applier thread; reports apply on their own threads");
    pthread_mutex_unlock(&comb_mu);
}

void store_reports_stop(void)
{
    pthread_mutex_lock(&comb_mu);
    comb_closed = 1;            /* a later first batch starts no thread */
    int on = comb_state == COMB_ON;
    if (on)
        comb_state = COMB_STOPPING;
    pthread_cond_broadcast(&comb_work_cv);
    pthread_mutex_unlock(&comb_mu);
    if (on)
        pthread_join(comb_thread, NULL);
}

int store_worker_report_batch(store_t *st, int64_t worker, const report_prep_t *preps,
                              size_t n, store_report_result_t *results, int *effects)
{
    *effects = 0;
    if (n > 0)
        memset(results, 0, sizeof *results * n);
    pthread_once(&comb_once, combine_start);
    report_req_t me = {.worker = worker, .preps = preps, .n = n, .results = results,
                       .rc = STORE_ERR};
    pthread_mutex_lock(&comb_mu);
    if (comb_state != COMB_ON) {
        pthread_mutex_unlock(&comb_mu);
        combine_apply(st, &me);
    } else {
        report_req_t **tail = &comb_head;
        while (*tail)
            tail = &(*tail)->next;
        *tail = &me;
        pthread_cond_signal(&comb_work_cv);
        while (!me.done)
            pthread_cond_wait(&comb_cv, &comb_mu);
        pthread_mutex_unlock(&comb_mu);
    }
    *effects = me.effects;
    return me.rc;
}
