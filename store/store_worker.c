/* store_worker.c - the worker protocol's side of the state machine:
 * registration, heartbeats, task leases and completion reports
 * (docs/worker-protocol.md). A report is where a computation and a job
 * reach succeeded/failed. */
#include "store_internal.h"
#include "report_decode.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* How long a re-registered worker is told to abort what it held under its
 * expired lease (see poll_cancels). */
#define PRED_ABORT_US 2000000

/* Lowest first index of `n` consecutive devices with no worker; -1 if none. */
static int64_t free_block(store_t *st, int64_t island, int64_t n)
{
    static const char sql[] =
        "SELECT idx FROM devices WHERE island_id = ? AND worker_id IS NULL ORDER BY idx";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, island);
    int64_t start = -1, run = 0, prev = -2, found = -1;
    while (sqlite3_step(s) == SQLITE_ROW) {
        int64_t idx = sqlite3_column_int64(s, 0);
        if (idx != prev + 1) {
            start = idx;
            run = 0;
        }
        prev = idx;
        if (++run == n) {
            found = start;
            break;
        }
    }
    sqlite3_reset(s);
    return found;
}

static json_t *register_reply(store_t *st, int64_t id, const worker_reg_t *reg, int64_t island,
                              int64_t first, int64_t epoch, int64_t lease_us)
{
    static const char sql[] =
        "SELECT idx, coords, local FROM devices WHERE island_id = ? AND worker_id = ? ORDER BY idx";
    json_t *out = json_object(), *devs = json_array();
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!out || !devs || !s) {
        json_decref(out);
        json_decref(devs);
        return NULL;
    }
    sqlite3_bind_int64(s, 1, island);
    sqlite3_bind_int64(s, 2, id);
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *d = json_object();
        json_object_set_new(d, "local", json_integer(sqlite3_column_int64(s, 2)));
        json_object_set_new(d, "index", json_integer(sqlite3_column_int64(s, 0)));
        json_object_set_new(d, "coords", store_col_json(s, 1));
        json_array_append_new(devs, d);
    }
    sqlite3_reset(s);
    json_object_set_new(out, "id", json_integer(id));
    json_object_set_new(out, "island", json_string(reg->island));
    json_object_set_new(out, "first_device", json_integer(first));
    json_object_set_new(out, "lease_ms", json_integer(lease_us / 1000));
    json_object_set_new(out, "epoch", json_integer(epoch));
    json_object_set_new(out, "devices", devs);
    return out;
}

int store_worker_register(store_t *st, const worker_reg_t *reg, int64_t lease_us, json_t **out)
{
    static const char ins_sql[] =
        "INSERT INTO workers(island_id, first_device, ndevices, data_addr, host, pid, backend,"
        " state, epoch, registered_at, heartbeat_at, secret_hash)"
        " VALUES (?,?,?,?,?,?,?,'live',(SELECT COALESCE(MAX(epoch),0)+1 FROM workers),?,?,?)";
    static const char dev_sql[] =
        "UPDATE devices SET worker_id = ?1, local = idx - ?2"
        " WHERE island_id = ?3 AND idx >= ?2 AND idx < ?2 + ?4";
    static const char epoch_sql[] = "SELECT epoch FROM workers WHERE id = ?";
    if (store_begin(st) != 0)
        return STORE_ERR;
    int rc = STORE_ERR;
    int64_t island = store_island_id(st, reg->island);
    if (island < 0) {
        rc = STORE_NOTFOUND;
        goto fail;
    }
    int64_t first = free_block(st, island, reg->ndevices);
    if (first < 0) {
        rc = STORE_FULL;
        goto fail;
    }
    int64_t now = util_wall_us();
    sqlite3_stmt *s = store_stmt(st, ins_sql);
    if (!s)
        goto fail;
    sqlite3_bind_int64(s, 1, island);
    sqlite3_bind_int64(s, 2, first);
    sqlite3_bind_int(s, 3, reg->ndevices);
    sqlite3_bind_text(s, 4, reg->data_addr, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, reg->host, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 6, reg->pid);
    sqlite3_bind_text(s, 7, reg->backend, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 8, now);
    sqlite3_bind_int64(s, 9, now);
    if (reg->secret_hash)
        sqlite3_bind_text(s, 10, reg->secret_hash, -1, SQLITE_STATIC);
    if (store_step_done(s) != 0)
        goto fail;
    int64_t id = sqlite3_last_insert_rowid(store_db(st));
    if (!(s = store_stmt(st, dev_sql)))
        goto fail;
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, first);
    sqlite3_bind_int64(s, 3, island);
    sqlite3_bind_int(s, 4, reg->ndevices);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, epoch_sql)))
        goto fail;
    sqlite3_bind_int64(s, 1, id);
    int64_t epoch = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    store_event(st, 0, "worker", "worker %ld joined %s devices %ld..%ld at %s", (long)id,
                reg->island, (long)first, (long)(first + reg->ndevices - 1), reg->data_addr);
    *out = register_reply(st, id, reg, island, first, epoch, lease_us);
    if (!*out || store_commit(st) != 0) {
        json_decref(*out);
        *out = NULL;
        goto fail;
    }
    return STORE_OK;
fail:
    store_rollback(st);
    return rc;
}

int store_worker_heartbeat(store_t *st, int64_t worker)
{
    static const char sql[] =
        "UPDATE workers SET heartbeat_at = ? WHERE id = ? AND state = 'live'";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, util_wall_us());
    sqlite3_bind_int64(s, 2, worker);
    if (store_step_done(s) != 0)
        return STORE_ERR;
    return sqlite3_changes(store_db(st)) == 1 ? STORE_OK : STORE_NOTFOUND;
}

/* Binds a worker's figures as ?2..?8 of the stats UPDATE. */
static void stats_bind(sqlite3_stmt *s, const worker_stats_t *ws)
{
    const int64_t v[] = {ws->objects,    ws->bytes,            ws->cap_bytes, ws->dp_dropped,
                         ws->dp_dropped_bytes, ws->dp_refused, ws->dp_bad_frames,
                         ws->dp_bad_key};
    for (int i = 0; i < (int)(sizeof v / sizeof v[0]); i++)
        sqlite3_bind_int64(s, i + 2, v[i]);
}

int store_worker_set_stats(store_t *st, int64_t worker, const worker_stats_t *ws)
{
    static const char sql[] =
        "UPDATE workers SET store_objects = ?2, store_bytes = ?3, store_cap_bytes = ?4,"
        " dplane_dropped = ?5, dplane_dropped_bytes = ?6, dplane_refused = ?7,"
        " dplane_bad_frames = ?8, dplane_bad_key = ?9 WHERE id = ?1 AND state = 'live'";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, worker);
    stats_bind(s, ws);
    return store_step_done(s) == 0 ? STORE_OK : STORE_ERR;
}

int store_dplane_totals(store_t *st, int64_t out[STORE_DPLANE_TOTALS])
{
    static const char sql[] =
        "SELECT COALESCE(SUM(dplane_dropped), 0), COALESCE(SUM(dplane_dropped_bytes), 0),"
        " COALESCE(SUM(dplane_refused), 0), COALESCE(SUM(dplane_bad_frames), 0),"
        " COALESCE(SUM(dplane_bad_key), 0) FROM workers";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    int ok = sqlite3_step(s) == SQLITE_ROW;
    for (int i = 0; i < STORE_DPLANE_TOTALS; i++)
        out[i] = ok ? sqlite3_column_int64(s, i) : 0;
    sqlite3_reset(s);
    return ok ? 0 : -1;
}

int store_worker_leave(store_t *st, int64_t worker)
{
    static const char sql[] = "SELECT 1 FROM workers WHERE id = ? AND state = 'live'";
    if (store_begin(st) != 0)
        return STORE_ERR;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        goto fail;
    sqlite3_bind_int64(s, 1, worker);
    int live = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_reset(s);
    if (!live) {
        store_rollback(st);
        return STORE_NOTFOUND;
    }
    if (store_worker_lost(st, worker, "it left the cluster") != 0)
        goto fail;
    return store_commit(st) == 0 ? STORE_OK : STORE_ERR;
fail:
    store_rollback(st);
    return STORE_ERR;
}

int store_worker_secret(store_t *st, int64_t worker, char hash[65], int *live)
{
    static const char sql[] = "SELECT secret_hash, state = 'live' FROM workers WHERE id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, worker);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const char *h = (const char *)sqlite3_column_text(s, 0);
        snprintf(hash, 65, "%s", h ? h : "");
        *live = sqlite3_column_int(s, 1);
    }
    sqlite3_reset(s);
    return rc == SQLITE_ROW ? STORE_OK : rc == SQLITE_DONE ? STORE_NOTFOUND : STORE_ERR;
}

int store_worker_renew(store_t *st, const worker_renew_t *r, int n)
{
    static const char hb_sql[] =
        "UPDATE workers SET heartbeat_at = MAX(heartbeat_at, ?2) WHERE id = ?1 AND state = 'live'";
    static const char stats_sql[] =
        "UPDATE workers SET store_objects = ?2, store_bytes = ?3, store_cap_bytes = ?4,"
        " dplane_dropped = ?5, dplane_dropped_bytes = ?6, dplane_refused = ?7,"
        " dplane_bad_frames = ?8, dplane_bad_key = ?9 WHERE id = ?1 AND state = 'live'";
    if (n == 0)
        return STORE_OK;
    if (store_begin(st) != 0)
        return STORE_ERR;
    for (int i = 0; i < n; i++) {
        sqlite3_stmt *s = store_stmt(st, hb_sql);
        if (!s)
            goto fail;
        sqlite3_bind_int64(s, 1, r[i].id);
        sqlite3_bind_int64(s, 2, r[i].heard_at);
        if (store_step_done(s) != 0)
            goto fail;
        if (!r[i].has_stats)
            continue;
        if (!(s = store_stmt(st, stats_sql)))
            goto fail;
        sqlite3_bind_int64(s, 1, r[i].id);
        stats_bind(s, &r[i].ws);
        if (store_step_done(s) != 0)
            goto fail;
    }
    return store_commit(st) == 0 ? STORE_OK : STORE_ERR;
fail:
    store_rollback(st);
    return STORE_ERR;
}

/* Whether the worker is live (registered, lease not expired). A worker
 * whose lease expired is fenced: its polls and reports are refused, its
 * heartbeat gets 404 and it registers again under a new id. */
static int worker_is_live(store_t *st, int64_t worker)
{
    static const char sql[] = "SELECT 1 FROM workers WHERE id = ? AND state = 'live'";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    int live = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_reset(s);
    return live;
}

/* Appends {"job": job, "attempt": attempt} to arr unless it is there. */
static void cancel_add(json_t *arr, json_int_t job, json_int_t attempt)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
        if (json_integer_value(json_object_get(v, "job")) == job &&
            json_integer_value(json_object_get(v, "attempt")) == attempt)
            return;
    json_array_append_new(arr, json_pack("{s:I, s:I}", "job", job, "attempt", attempt));
}

/* Runs s (bound by the caller) and adds each (job_id, attempt) row. */
static void cancel_rows(sqlite3_stmt *s, json_t *arr)
{
    while (sqlite3_step(s) == SQLITE_ROW)
        cancel_add(arr, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1));
    sqlite3_reset(s);
}

/* The attempts, as {"job", "attempt"} entries, of which this worker still
 * holds tasks although their job ended (failed or cancelled) or moved to a
 * newer attempt: the worker aborts exactly those (and older attempts of
 * the job), never a newer attempt, so the job's current attempt may be
 * leased to the same worker at once. The first time a stale task is named,
 * abort_sent_at records it: a task still leased a lease period later was
 * never received and is settled (store_sched_expire), so the naming ends.
 * Inside the poll's transaction. */
static json_t *poll_cancels(store_t *st, int64_t worker)
{
    static const char mark_sql[] =
        "UPDATE host_tasks SET abort_sent_at = ?2 WHERE worker_id = ?1 AND state = 'leased'"
        " AND abort_sent_at IS NULL AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = host_tasks.job_id"
        " AND (j.state IN ('succeeded','failed','cancelled') OR host_tasks.attempt < j.attempt))";
    static const char sql[] =
        "SELECT DISTINCT t.job_id, t.attempt FROM host_tasks t JOIN jobs j ON j.id = t.job_id"
        " WHERE t.worker_id = ? AND t.state = 'leased'"
        " AND (j.state IN ('succeeded','failed','cancelled') OR t.attempt < j.attempt)";
    /* The same process under an earlier, expired lease (a worker paused
     * past its lease registers again under a new id): the tasks it held
     * then were cancelled when it was lost, but it may still run them, and
     * a collective among aborted peers would hold its device until the peer
     * timeout. Name their attempts for PRED_ABORT_US after the first time
     * (its reports of them are refused, so nothing else ends the
     * repetition). Losing the worker requeued or ended their jobs, so these
     * attempts are stale; the attempt test only makes sure. */
    static const char pred_mark_sql[] =
        "UPDATE host_tasks SET abort_sent_at = ?2 WHERE abort_sent_at IS NULL AND state = 'cancelled'"
        " AND error = 'worker lost' AND worker_id IN (SELECT g.id FROM workers g"
        "  JOIN workers me ON me.id = ?1 WHERE g.state = 'gone' AND g.id <> me.id"
        "  AND g.pid = me.pid AND g.host = me.host AND g.data_addr = me.data_addr)";
    static const char pred_sql[] =
        "SELECT DISTINCT t.job_id, t.attempt FROM host_tasks t JOIN jobs j ON j.id = t.job_id"
        " WHERE t.state = 'cancelled' AND t.error = 'worker lost' AND t.abort_sent_at > ?2"
        " AND t.worker_id IN (SELECT g.id FROM workers g JOIN workers me ON me.id = ?1"
        "  WHERE g.state = 'gone' AND g.id <> me.id AND g.pid = me.pid AND g.host = me.host"
        "  AND g.data_addr = me.data_addr)"
        " AND (j.state IN ('succeeded','failed','cancelled') OR t.attempt < j.attempt)";
    int64_t now = util_wall_us();
    json_t *arr = json_array();
    sqlite3_stmt *s = store_stmt(st, mark_sql);
    if (!arr || !s)
        return arr;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, now);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, pred_mark_sql)))
        return arr;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, now);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, pred_sql)))
        return arr;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, now - PRED_ABORT_US);
    cancel_rows(s, arr);
    if (!(s = store_stmt(st, sql)))
        return arr;
    sqlite3_bind_int64(s, 1, worker);
    cancel_rows(s, arr);
    return arr;
}

/* The read before a poll's write transaction: 1 when the poll has
 * something to do (tasks to lease, stale leases to name or mark, an
 * earlier registration of the same process whose jobs to name; the same
 * conditions as store_worker_poll and poll_cancels, a little wider), 0 when
 * not, PROBE_GONE when the worker is not live, -1 on error. One
 * statement: one snapshot, no transaction to open. */
#define PROBE_GONE (-2)
/* Redelivery: host tasks leased to worker ?1 in a poll answer newer than
 * the last one it acknowledged (?3), still of their job's live attempt.
 * Such an answer was lost on the way (the worker polls one at a time, so
 * an answer it has not acknowledged by its next poll never arrived). */
#define POLL_RESEND_ROWS                                                                  \
    "SELECT r.id FROM host_tasks r JOIN jobs rj ON rj.id = r.job_id WHERE r.worker_id = ?1" \
    " AND r.state = 'leased' AND r.leased_at > ?3 AND r.abort_sent_at IS NULL"             \
    " AND rj.attempt = r.attempt AND rj.state IN ('allocated', 'running')"
static int poll_probe(store_t *st, int64_t worker, int64_t ack)
{
    static const char sql[] =
        "SELECT (SELECT state = 'live' FROM workers WHERE id = ?1),"
        " EXISTS (SELECT 1 FROM host_tasks WHERE worker_id = ?1 AND state = 'pending')"
        " OR EXISTS (SELECT 1 FROM host_tasks t JOIN jobs j ON j.id = t.job_id"
        "  WHERE t.worker_id = ?1 AND t.state = 'leased'"
        "  AND (j.state IN ('succeeded','failed','cancelled') OR t.attempt < j.attempt))"
        " OR EXISTS (SELECT 1 FROM host_tasks t WHERE t.state = 'cancelled' AND t.error = 'worker lost'"
        "  AND (t.abort_sent_at IS NULL OR t.abort_sent_at > ?2)"
        "  AND t.worker_id IN (SELECT g.id FROM workers g JOIN workers me ON me.id = ?1"
        "   WHERE g.state = 'gone' AND g.id <> me.id AND g.pid = me.pid AND g.host = me.host"
        "   AND g.data_addr = me.data_addr))"
        " OR (?3 >= 0 AND EXISTS (" POLL_RESEND_ROWS "))";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, util_wall_us() - PRED_ABORT_US);
    sqlite3_bind_int64(s, 3, ack);
    int rc = -1;
    if (sqlite3_step(s) == SQLITE_ROW)
        rc = sqlite3_column_int(s, 0) != 1 ? PROBE_GONE : sqlite3_column_int(s, 1) != 0;
    sqlite3_reset(s);
    return rc;
}

/* The group of (job, attempt) in jobs, appended (with the placement in
 * column `col` of s) when absent; borrowed, or NULL on OOM. Groups are few
 * (the jobs with work on one worker), so a scan is enough. */
static json_t *poll_group(json_t *jobs, json_int_t job, json_int_t attempt, sqlite3_stmt *s,
                          int col)
{
    size_t i;
    json_t *g;
    json_array_foreach(jobs, i, g)
        if (json_integer_value(json_object_get(g, "job")) == job &&
            json_integer_value(json_object_get(g, "attempt")) == attempt)
            return g;
    json_t *pl = store_col_json(s, col);
    char key[STORE_KEY_HEX_LEN];
    store_attempt_key(job, (int32_t)attempt, key);
    g = json_pack("{s:I, s:I, s:s, s:o, s:[]}", "job", job, "attempt", attempt, "key", key,
                  "placement", pl ? pl : json_null(), "tasks");
    if (!g || json_array_append_new(jobs, g) != 0)
        return NULL;
    return g;
}

/* Reads the worker's pending host tasks, and with ack >= 0 those leased
 * in answers after `ack` that it never received (POLL_RESEND_ROWS), into
 * jobs, grouped by (job, attempt) in seq order, each group with its
 * attempt's placement (a pending row is always of its job's current
 * attempt: a requeue cancels the others). *resent_max: the newest lease
 * among the redelivered rows (0 if none). Returns the number of tasks, or
 * -1. */
static int poll_read(store_t *st, int64_t worker, int64_t ack, json_t *jobs,
                     int64_t *resent_max)
{
    static const char sql[] =
        "SELECT t.id, t.payload, t.job_id, t.attempt, j.placement, t.state, t.leased_at"
        " FROM host_tasks t JOIN jobs j ON j.id = t.job_id WHERE t.worker_id = ?1"
        " AND (t.state = 'pending' OR (?3 >= 0 AND t.id IN (" POLL_RESEND_ROWS ")))"
        " ORDER BY t.seq, t.id";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 3, ack);
    int n = 0;
    *resent_max = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (strcmp((const char *)sqlite3_column_text(s, 5), "leased") == 0 &&
            sqlite3_column_int64(s, 6) > *resent_max)
            *resent_max = sqlite3_column_int64(s, 6);
        /* The id is only known once the row exists, so it joins the
         * payload here rather than in the stored text. */
        json_t *t = store_col_json(s, 1);
        json_t *g = t ? poll_group(jobs, sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3),
                                   s, 4) : NULL;
        if (!g || json_object_set_new(t, "task", json_integer(sqlite3_column_int64(s, 0))) != 0) {
            json_decref(t);
            sqlite3_reset(s);
            return -1;
        }
        if (json_array_append_new(json_object_get(g, "tasks"), t) != 0) {
            sqlite3_reset(s);   /* the failed append released t */
            return -1;
        }
        n++;
    }
    sqlite3_reset(s);
    return n;
}

/* Lease ids (leased_at) only grow, even if the wall clock steps back:
 * the worker acknowledges the newest it received. */
static _Atomic int64_t poll_last_lease;

static int64_t poll_lease_id(void)
{
    int64_t now = util_wall_us(), last = atomic_load(&poll_last_lease);
    while (1) {
        int64_t id = now > last ? now : last + 1;
        if (atomic_compare_exchange_weak(&poll_last_lease, &last, id))
            return id;
    }
}

/* The poll's write: leases pending host tasks, redelivers unacknowledged
 * ones, names aborts; the answer's "lease" is the newest lease id in it. */
static int poll_lease(store_t *st, int64_t worker, int64_t ack, json_t **out, int *any)
{
    static const char lease_sql[] =
        "UPDATE host_tasks SET state = 'leased', leased_at = ?2 WHERE worker_id = ?1"
        " AND state = 'pending'";
    static const char run_sql[] =
        "UPDATE jobs SET state = 'running', started_at = ?1 WHERE state = 'allocated' AND id IN"
        " (SELECT job_id FROM host_tasks WHERE worker_id = ?2 AND leased_at = ?1)";
    *any = 0;
    int rc = STORE_ERR, n = 0;
    json_t *res = json_object(), *jobs = json_array();
    if (!res || !jobs || store_begin(st) != 0)
        goto fail;
    /* Checked inside the transaction: a parked long poll may outlive its
     * worker's lease, and a fenced worker must get nothing. */
    int live = worker_is_live(st, worker);
    if (live <= 0) {
        rc = live == 0 ? STORE_NOTFOUND : STORE_ERR;
        goto fail;
    }
    int64_t resent_max = 0, lease = ack > 0 ? ack : 0;
    if ((n = poll_read(st, worker, ack, jobs, &resent_max)) < 0)
        goto fail;
    if (resent_max > lease)
        lease = resent_max;
    sqlite3_stmt *s;
    if (n > 0) {
        int64_t now = poll_lease_id();
        if (!(s = store_stmt(st, lease_sql)))
            goto fail;
        sqlite3_bind_int64(s, 1, worker);
        sqlite3_bind_int64(s, 2, now);
        if (store_step_done(s) != 0 || !(s = store_stmt(st, run_sql)))
            goto fail;
        if (sqlite3_changes(store_db(st)) > 0)    /* pending rows leased: a new lease id */
            lease = now;
        sqlite3_bind_int64(s, 1, now);
        sqlite3_bind_int64(s, 2, worker);
        if (store_step_done(s) != 0)
            goto fail;
    }
    json_t *cancels = poll_cancels(st, worker);
    *any = n > 0 || json_array_size(cancels) > 0;
    json_object_set_new(res, "jobs", jobs);
    json_object_set_new(res, "cancel", cancels);
    json_object_set_new(res, "lease", json_integer(lease));
    jobs = NULL;
    if (store_commit(st) != 0)
        goto fail;
    *out = res;
    return STORE_OK;
fail:
    store_rollback(st);
    json_decref(res);
    json_decref(jobs);
    return rc;
}

int store_worker_poll(store_t *st, int64_t worker, int64_t ack, json_t **out, int *any)
{
    *any = 0;
    int work = poll_probe(st, worker, ack);
    if (work < 0)
        return work == PROBE_GONE ? STORE_NOTFOUND : STORE_ERR;
    if (work == 0) {
        /* Nothing: no write transaction (an idle worker's poll costs reads). */
        *out = json_pack("{s:[], s:[], s:I}", "jobs", "cancel", "lease",
                         (json_int_t)(ack > 0 ? ack : 0));
        return *out ? STORE_OK : STORE_ERR;
    }
    return poll_lease(st, worker, ack, out, any);
}

/* The row of a host task being reported, read under the report's
 * transaction. task_row_clear() it after a successful task_load. */
typedef struct task_row {
    int64_t job, attempt, comp, island, worker, job_attempt;
    int nshards;
    int64_t *shards;            /* owned: nshards shard indexes, increasing */
    char *shards_txt;           /* owned: the same as JSON text, for messages */
    char state[16], job_state[16];
} task_row_t;

static void task_row_clear(task_row_t *r)
{
    free(r->shards);
    free(r->shards_txt);
    r->shards = NULL;
    r->shards_txt = NULL;
}

/* Parses the row's shards column (JSON text written by the scheduler). */
static int task_shards(task_row_t *r, const char *txt)
{
    json_t *a = txt ? json_loads(txt, 0, NULL) : NULL;
    size_t i;
    json_t *v;
    int ok = json_is_array(a) && json_array_size(a) == (size_t)r->nshards && r->nshards >= 1 &&
             (r->shards = malloc(sizeof *r->shards * (size_t)r->nshards)) &&
             (r->shards_txt = strdup(txt));
    json_array_foreach(a, i, v)
        if (ok)
            r->shards[i] = json_integer_value(v);
    json_decref(a);
    return ok ? 0 : -1;
}

static int task_load(store_t *st, int64_t task, task_row_t *r)
{
    static const char sql[] =
        "SELECT t.job_id, t.attempt, t.comp_idx, t.island_id, t.worker_id, t.nshards, t.shards,"
        " t.state, j.state, j.attempt FROM host_tasks t JOIN jobs j ON j.id = t.job_id"
        " WHERE t.id = ?";
    memset(r, 0, sizeof *r);
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, task);
    int rc = STORE_NOTFOUND;
    if (sqlite3_step(s) == SQLITE_ROW) {
        r->job = sqlite3_column_int64(s, 0);
        r->attempt = sqlite3_column_int64(s, 1);
        r->comp = sqlite3_column_int64(s, 2);
        r->island = sqlite3_column_int64(s, 3);
        r->worker = sqlite3_column_int64(s, 4);
        r->nshards = sqlite3_column_int(s, 5);
        snprintf(r->state, sizeof r->state, "%s", sqlite3_column_text(s, 7));
        snprintf(r->job_state, sizeof r->job_state, "%s", sqlite3_column_text(s, 8));
        r->job_attempt = sqlite3_column_int64(s, 9);
        rc = task_shards(r, (const char *)sqlite3_column_text(s, 6)) == 0 ? STORE_OK : STORE_ERR;
    }
    sqlite3_reset(s);
    if (rc != STORE_OK)
        task_row_clear(r);
    return rc;
}

/* Validates tensor o, shard `shard` of output `name` (element `index` of
 * its array; report_output_decode), and stores it as that shard's output.
 * Returns 0, 400 (e filled) or -1. */
static int report_tensor(store_t *st, const task_row_t *r, const char *name, int index,
                         json_t *o, err_t *e)
{
    static const char sql[] =
        "INSERT OR REPLACE INTO outputs(job_id, comp_idx, value, shard, shape, sum, vals)"
        " VALUES (?,?,?,?,?,?,?)";
    report_output_t out;
    int rc = report_output_decode(name, index, o, &out, e);
    if (rc != 0) {
        report_output_clear(&out);
        return rc;
    }
    rc = -1;
    char *shape_txt = json_dumps(json_object_get(o, "shape"), JSON_COMPACT);
    sqlite3_stmt *s = store_stmt(st, sql);
    if (shape_txt && s) {
        sqlite3_bind_int64(s, 1, r->job);
        sqlite3_bind_int64(s, 2, r->comp);
        sqlite3_bind_text(s, 3, name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 4, r->shards[index]);
        sqlite3_bind_text(s, 5, shape_txt, -1, SQLITE_STATIC);
        if (out.has_sum)
            sqlite3_bind_double(s, 6, out.sum);
        if (out.values)
            sqlite3_bind_blob(s, 7, out.values, (int)(sizeof *out.values * (size_t)out.numel),
                              SQLITE_STATIC);
        rc = store_step_done(s);
    }
    free(shape_txt);
    report_output_clear(&out);
    return rc;
}

/* Stores the report's outputs: each an array with one tensor per shard of
 * the task, in the order of its shards (one outputs row per shard, as
 * GET /v1/jobs/{id}/result reads them). Returns 0, 400 (e filled) or -1. */
static int report_outputs(store_t *st, const task_row_t *r, const json_t *body, err_t *e)
{
    json_t *outputs = json_object_get(body, "outputs"), *arr;
    if (outputs && !json_is_object(outputs))
        return err_set(e, 400, "outputs", "outputs must be an object");
    const char *name;
    json_object_foreach(outputs, name, arr) {
        int rc = report_output_shards(name, arr, r->nshards, e);
        for (int i = 0; rc == 0 && i < r->nshards; i++)
            rc = report_tensor(st, r, name, i, json_array_get(arr, (size_t)i), e);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int64_t json_time(const json_t *body, const char *key)
{
    json_t *v = json_object_get(body, key);
    return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* A computation finished: count it, unblock its consumers (sequential
 * dispatch), and end the job when it was the last one. */
static int comp_succeeded(store_t *st, const task_row_t *r, int *effects)
{
    static const char comp_sql[] =
        "UPDATE computations SET state = 'succeeded' WHERE job_id = ? AND idx = ?";
    static const char job_sql[] =
        "UPDATE jobs SET comps_done = comps_done + 1 WHERE id = ?"
        " RETURNING comps_done = comps_total, shared";
    /* Only computations still waiting (sequential dispatch) have anything
     * to unblock: with parallel dispatch none are, and the producers JSON
     * of the job's other computations is never parsed (a chain of n
     * computations would otherwise cost n^2 of it). */
    static const char deps_sql[] =
        "UPDATE computations SET deps_left = deps_left - 1 WHERE job_id = ?1"
        " AND state = 'waiting' AND EXISTS (SELECT 1 FROM json_each(producers) WHERE value = ?2)";
    static const char unblock_sql[] =
        "UPDATE host_tasks SET state = 'pending', dispatched_at = ?3 WHERE job_id = ?1"
        " AND attempt = ?2 AND state = 'blocked' AND comp_idx IN"
        " (SELECT idx FROM computations WHERE job_id = ?1 AND deps_left = 0)";
    static const char disp_sql[] =
        "UPDATE computations SET state = 'dispatched', dispatched_at = ?2 WHERE job_id = ?1"
        " AND state = 'waiting' AND deps_left = 0 AND seq IS NOT NULL";
    sqlite3_stmt *s = store_stmt(st, comp_sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, r->job);
    sqlite3_bind_int64(s, 2, r->comp);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, job_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, r->job);
    int row = sqlite3_step(s) == SQLITE_ROW;
    int done = row && sqlite3_column_int(s, 0), shared = row && sqlite3_column_int(s, 1);
    sqlite3_reset(s);
    /* A shared job's next computations are dispatched by the scheduler's
     * feed pass, which this completion may unblock. */
    if (shared)
        *effects |= STORE_FX_FEED;
    if (done) {
        *effects |= STORE_FX_JOB_ENDED;
        return store_job_finish(st, r->job, "succeeded", NULL);
    }
    int64_t now = util_wall_us();
    if (!(s = store_stmt(st, deps_sql)))
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

/* Adds busy_us to the device of each of the task's shards: the TASK's
 * "devices" are the worker-local devices of its shards, so their island
 * indexes are the worker's first device plus those. O(task), never
 * O(slice): the reporter is live (fenced), so its block is current. */
static int task_busy(store_t *st, int64_t task, const task_row_t *r, int64_t busy_us)
{
    static const char sql[] =
        "UPDATE devices SET busy_us = busy_us + ?1 WHERE island_id = ?2 AND idx IN"
        " (SELECT w.first_device + d.value FROM host_tasks t JOIN workers w ON w.id = t.worker_id,"
        "  json_each(t.payload, '$.devices') d WHERE t.id = ?3)";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, busy_us);
    sqlite3_bind_int64(s, 2, r->island);
    sqlite3_bind_int64(s, 3, task);
    return store_step_done(s);
}

/* Records a succeeded host task: outputs, timings, device busy time (each
 * of its shards' devices was busy for the task's inputs-ready-to-finished
 * time), and the computation's progress (nshards more shards done). */
static int host_succeeded(store_t *st, int64_t task, const task_row_t *r, const json_t *body,
                          int *effects, err_t *e)
{
    static const char comp_sql[] =
        "UPDATE computations SET shards_done = shards_done + ?6,"
        " started_at = MIN(COALESCE(started_at, ?3), ?3),"
        " inputs_ready_at = MAX(COALESCE(inputs_ready_at, ?4), ?4),"
        " finished_at = MAX(COALESCE(finished_at, ?5), ?5)"
        " WHERE job_id = ?1 AND idx = ?2 RETURNING shards_done = shards_total";
    int rc = report_outputs(st, r, body, e);
    if (rc != 0)
        return rc;
    int64_t t0 = json_time(body, "started_us"), t1 = json_time(body, "inputs_ready_us");
    int64_t t2 = json_time(body, "finished_us");
    sqlite3_stmt *s;
    int64_t busy = t2 > t1 ? t2 - t1 : 0;
    if (task_busy(st, task, r, busy) != 0 || store_usage_add(st, r->job, busy * r->nshards) != 0 ||
        !(s = store_stmt(st, comp_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, r->job);
    sqlite3_bind_int64(s, 2, r->comp);
    sqlite3_bind_int64(s, 3, t0);
    sqlite3_bind_int64(s, 4, t1);
    sqlite3_bind_int64(s, 5, t2);
    sqlite3_bind_int(s, 6, r->nshards);
    int comp_done = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    return comp_done ? comp_succeeded(st, r, effects) : 0;
}

/* The computation's name for messages; "?" if it cannot be read. The
 * returned text lives in a per-thread buffer until the next call. */
static const char *comp_name(store_t *st, const task_row_t *r)
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
static int peer_unreachable(store_t *st, const task_row_t *r, int64_t worker, const char *msg,
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
static int host_failed(store_t *st, const task_row_t *r, int64_t worker, const json_t *body,
                       const char *msg)
{
    int peer = peer_unreachable(st, r, worker, msg,
                                json_string_value(json_object_get(body, "unreachable_peer")));
    if (peer != 0)
        return peer > 0 ? 0 : -1;
    char why[400];
    snprintf(why, sizeof why, "computation '%s' shards %.64s on worker %ld failed: %s",
             comp_name(st, r), r->shards_txt, (long)worker, msg ? msg : "no reason given");
    return store_job_finish(st, r->job, "failed", why);
}

/* Marks the task reported. 0 or -1. */
static int task_mark(store_t *st, int64_t task, const json_t *body, const char *state,
                     const char *msg)
{
    static const char sql[] =
        "UPDATE host_tasks SET state = ?2, started_us = ?3, inputs_ready_us = ?4,"
        " finished_us = ?5, error = ?6 WHERE id = ?1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, task);
    sqlite3_bind_text(s, 2, state, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, json_time(body, "started_us"));
    sqlite3_bind_int64(s, 4, json_time(body, "inputs_ready_us"));
    sqlite3_bind_int64(s, 5, json_time(body, "finished_us"));
    if (msg)
        sqlite3_bind_text(s, 6, msg, -1, SQLITE_STATIC);
    return store_step_done(s);
}

/* Applies one validated report inside the caller's transaction. Returns
 * STORE_OK, STORE_NOTFOUND, STORE_CONFLICT, or STORE_ERR (e->status 400
 * for a malformed output, else a store failure). On failure the caller
 * undoes what this wrote. */
static int report_apply(store_t *st, int64_t worker, int64_t task, const json_t *body,
                        const char *state, int *effects, err_t *e)
{
    task_row_t r;
    int rc = task_load(st, task, &r);
    if (rc != STORE_OK)
        return rc;
    /* Fencing: only the live worker holding the lease may report, once. A
     * worker whose lease expired is gone (its tasks were cancelled when it
     * was lost), and one that re-registered has a new id, so a result of
     * the old lease can never count, nor count twice. */
    int live_worker = worker_is_live(st, worker);
    if (live_worker < 0) {
        rc = STORE_ERR;
        goto out;
    }
    if (!live_worker || r.worker != worker || strcmp(r.state, "leased") != 0) {
        rc = STORE_CONFLICT;
        goto out;
    }
    const char *msg = json_string_value(json_object_get(body, "error"));
    rc = STORE_ERR;
    if (task_mark(st, task, body, state, msg) != 0)
        goto out;
    /* Only the job's current attempt, while it is live, moves the job. */
    int live = r.attempt == r.job_attempt && !store_state_is_terminal(r.job_state);
    if (live && strcmp(state, "succeeded") == 0) {
        /* A 400 from a malformed output leaves e->status set for the caller. */
        if (host_succeeded(st, task, &r, body, effects, e) != 0)
            goto out;
    } else if (live && strcmp(state, "failed") == 0) {
        if (host_failed(st, &r, worker, body, msg) != 0)
            goto out;
        *effects |= STORE_FX_JOB_ENDED;
    }
    rc = STORE_OK;
out:
    task_row_clear(&r);
    return rc;
}

int store_worker_report(store_t *st, int64_t worker, int64_t task, const json_t *body,
                        int *effects, err_t *e)
{
    const char *state = NULL;
    *effects = 0;
    if (report_validate(body, &state, e) != 0)
        return STORE_ERR;
    if (store_begin(st) != 0)
        return err_set(e, 503, "", "store busy"), STORE_ERR;
    int rc = report_apply(st, worker, task, body, state, effects, e);
    if (rc == STORE_OK && store_commit(st) != 0)
        rc = STORE_ERR;
    if (rc != STORE_OK)
        store_rollback(st);
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

int store_worker_report_batch(store_t *st, int64_t worker, const json_t *reports,
                              json_t **results, int *effects)
{
    *effects = 0;
    json_t *res = json_array();
    if (!res || store_begin(st) != 0) {
        json_decref(res);
        return STORE_ERR;
    }
    size_t i;
    json_t *item;
    json_array_foreach(reports, i, item) {
        err_t e = {0};
        int64_t task = 0;
        const char *state = NULL;
        int rc = STORE_ERR;
        json_t *body = report_batch_item(item, &task, &e);
        /* Each item is checked alone: one malformed report is its own 400,
         * the others of the batch still apply. */
        if (body && report_validate(body, &state, &e) == 0 &&
            report_outputs_check(body, &e) == 0) {
            if (store_savepoint(st) != 0) {
                json_decref(body);
                goto fail;
            }
            int fx = 0;
            rc = report_apply(st, worker, task, body, state, &fx, &e);
            /* A store failure (not a refusal) fails the whole batch: nothing
             * is committed and the worker sends it again. */
            int store_failed = rc == STORE_ERR && e.status < 400;
            if (store_failed || (rc == STORE_OK ? store_release(st) : store_rollback_to(st)) != 0) {
                json_decref(body);
                goto fail;
            }
            if (rc == STORE_OK)
                *effects |= fx;
        }
        json_decref(body);
        json_t *r = json_pack("{s:I, s:i}", "task", (json_int_t)task, "status", status_of(rc, &e));
        if (r && rc != STORE_OK && e.detail[0])
            json_object_set_new(r, "detail", json_string(e.detail));
        json_array_append_new(res, r);
    }
    if (store_commit(st) != 0)
        goto fail;
    *results = res;
    return STORE_OK;
fail:
    store_rollback(st);
    json_decref(res);
    *effects = 0;
    return STORE_ERR;
}
