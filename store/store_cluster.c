/* store_cluster.c - read-only views of islands, devices and workers, and
 * the Prometheus metrics text. */
#include "store_internal.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* A device's state is derived (see schema/001_init.sql). */
#define DEVICE_STATE_SQL \
    "CASE WHEN d.worker_id IS NULL THEN 'down' WHEN " \
    STORE_ALLOC_HOLDER_SQL("d.island_id", "d.idx") " IS NOT NULL OR EXISTS" \
    " (SELECT 1 FROM device_holds h WHERE h.island_id = d.island_id AND h.idx = d.idx)" \
    " THEN 'allocated'" \
    " ELSE 'free' END"

/* The job holding a device: its exclusive holder, else the lowest of the
 * shared jobs holding it (device_holds). */
#define HOLDER_SQL                                                                         \
    "COALESCE(" STORE_ALLOC_HOLDER_SQL("d.island_id", "d.idx") ","                         \
    " (SELECT MIN(h.job_id) FROM device_holds h"                                           \
    " WHERE h.island_id = d.island_id AND h.idx = d.idx))"

/* Device accounting.
 *  busy: devices.busy_us, credited per succeeded shard as finished -
 *        inputs_ready (store_progress.c), over the database's lifetime.
 *  up:   the time some worker covered the device, over the same lifetime:
 *        the sum over every worker registration that held it of (end -
 *        registered_at), end = now for a live worker, else its last
 *        heartbeat (when it left or was lost). The workers table keeps one
 *        row per registration, so this is exact up to one heartbeat period.
 *  idle: up - busy (never negative: clocks of different hosts may disagree).
 * Binds: ?2 = now (Unix us). d is the device row. */
#define DEVICE_UP_SQL \
    "(SELECT COALESCE(SUM(MAX(0, (CASE WHEN w.state = 'live' THEN ?2 ELSE w.heartbeat_at END)" \
    "   - w.registered_at)), 0) FROM workers w WHERE w.island_id = d.island_id" \
    "   AND d.idx >= w.first_device AND d.idx < w.first_device + w.ndevices)"

/* Utilization over the recent window: device time spent computing in the
 * last CLUSTER_UTIL_WINDOW_US divided by device time covered by workers in
 * it. Shards still running count once they report (a shard longer than the
 * window is clipped to it), so the figure lags by at most one shard. */
#define CLUSTER_UTIL_WINDOW_US 60000000LL

typedef struct island_acct {
    int64_t busy_us, up_us;             /* lifetime sums over the island's devices */
    int64_t win_busy_us, win_up_us;     /* within the recent window */
} island_acct_t;

static int64_t idle_of(int64_t up, int64_t busy)
{
    return up > busy ? up - busy : 0;
}

static double ratio_of(int64_t busy, int64_t up)
{
    if (up <= 0)
        return 0.0;
    double r = (double)busy / (double)up;
    return r > 1.0 ? 1.0 : r;
}

/* Fills the window sums of one island. 0 or -1. Uses the index
 * host_tasks_by_finish (schema/011, 019) so it reads only recent host
 * tasks; each counts once per shard (every one of its devices was busy). */
static int island_window(store_t *st, int64_t island_id, int64_t now, island_acct_t *a)
{
    static const char busy_sql[] =
        "SELECT COALESCE(SUM((finished_us - MAX(inputs_ready_us, ?2)) * nshards), 0)"
        " FROM host_tasks"
        " WHERE island_id = ?1 AND finished_us > ?2 AND state = 'succeeded'"
        " AND finished_us > inputs_ready_us";
    static const char up_sql[] =
        "SELECT COALESCE(SUM(w.ndevices * MAX(0, MIN(CASE WHEN w.state = 'live' THEN ?3"
        " ELSE w.heartbeat_at END, ?3) - MAX(w.registered_at, ?2))), 0)"
        " FROM workers w WHERE w.island_id = ?1";
    int64_t since = now - CLUSTER_UTIL_WINDOW_US;
    sqlite3_stmt *s = store_stmt(st, busy_sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, island_id);
    sqlite3_bind_int64(s, 2, since);
    a->win_busy_us = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    if (!(s = store_stmt(st, up_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, island_id);
    sqlite3_bind_int64(s, 2, since);
    sqlite3_bind_int64(s, 3, now);
    a->win_up_us = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    return 0;
}

/* The accounting members of an island object. */
static void island_acct_json(json_t *isl, const island_acct_t *a)
{
    json_object_set_new(isl, "busy_us", json_integer(a->busy_us));
    json_object_set_new(isl, "idle_us", json_integer(idle_of(a->up_us, a->busy_us)));
    json_object_set_new(isl, "utilization", json_real(ratio_of(a->busy_us, a->up_us)));
    json_object_set_new(isl, "utilization_recent", json_real(ratio_of(a->win_busy_us, a->win_up_us)));
    json_object_set_new(isl, "utilization_window_s",
                        json_integer(CLUSTER_UTIL_WINDOW_US / 1000000));
}

/* The island's device array; also sets the free/allocated/down counts and
 * the accounting totals on isl. */
static json_t *island_devices(store_t *st, int64_t island_id, json_t *isl)
{
    static const char sql[] =
        "SELECT d.idx, d.coords, " DEVICE_STATE_SQL ", " HOLDER_SQL ", d.worker_id, d.local,"
        " d.busy_us, (SELECT s.name FROM slices s WHERE s.job_id = " HOLDER_SQL
        "   AND s.island_id = d.island_id"
        "   AND EXISTS (SELECT 1 FROM json_each(s.devices) WHERE value = d.idx)), "
        DEVICE_UP_SQL ", h.jobs, h.bytes,"
        " CASE WHEN lw.ndevices > 0 AND lw.store_cap_bytes > 0"
        "  THEN lw.store_cap_bytes / lw.ndevices END"
        /* The island's shared holds grouped once, not two lookups per device. */
        " FROM devices d LEFT JOIN (SELECT idx, json_group_array(job_id) AS jobs,"
        "  SUM(bytes) AS bytes FROM device_holds WHERE island_id = ?1 GROUP BY idx) h"
        "  ON h.idx = d.idx"
        " LEFT JOIN workers lw ON lw.id = d.worker_id AND lw.state = 'live'"
        " WHERE d.island_id = ?1 ORDER BY d.idx";
    json_t *devs = json_array();
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!devs || !s)
        return devs;
    int64_t counts[3] = {0, 0, 0};
    int64_t now = util_wall_us();
    island_acct_t acct = {0, 0, 0, 0};
    sqlite3_bind_int64(s, 1, island_id);
    sqlite3_bind_int64(s, 2, now);
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *d = json_object();
        const char *state = (const char *)sqlite3_column_text(s, 2);
        counts[state[0] == 'f' ? 0 : state[0] == 'a' ? 1 : 2]++;
        json_object_set_new(d, "index", json_integer(sqlite3_column_int64(s, 0)));
        json_object_set_new(d, "coords", store_col_json(s, 1));
        json_object_set_new(d, "state", json_string(state));
        store_set_int_or_null(d, "job", s, 3);
        store_set_int_or_null(d, "worker", s, 4);
        store_set_int_or_null(d, "local", s, 5);
        int64_t busy = sqlite3_column_int64(s, 6), up = sqlite3_column_int64(s, 8);
        json_object_set_new(d, "busy_us", json_integer(busy));
        json_object_set_new(d, "idle_us", json_integer(idle_of(up, busy)));
        store_set_text_or_null(d, "slice", s, 7);
        /* Shared devices (DESIGN Part D): every job holding it, and the
         * memory their holds take of the device's (its worker's store cap
         * over its devices, once reported): what a shared job waiting for
         * memory waits on. */
        json_t *holders = store_col_json(s, 9);     /* NULL: no holds */
        if (json_array_size(holders) > 0) {
            json_object_set_new(d, "jobs", holders);
            store_set_int_or_null(d, "held_bytes", s, 10);
        } else {
            json_decref(holders);
        }
        if (sqlite3_column_type(s, 11) != SQLITE_NULL)
            store_set_int_or_null(d, "memory_bytes", s, 11);
        json_array_append_new(devs, d);
        acct.busy_us += busy;
        acct.up_us += up;
    }
    sqlite3_reset(s);
    json_object_set_new(isl, "free", json_integer(counts[0]));
    json_object_set_new(isl, "allocated", json_integer(counts[1]));
    json_object_set_new(isl, "down", json_integer(counts[2]));
    /* A failed window query leaves the window at 0: the view still serves. */
    island_window(st, island_id, now, &acct);
    island_acct_json(isl, &acct);
    return devs;
}

static json_t *island_row(store_t *st, sqlite3_stmt *s)
{
    json_t *isl = json_object();
    if (!isl)
        return NULL;
    int64_t id = sqlite3_column_int64(s, 0);
    json_object_set_new(isl, "name", json_string((const char *)sqlite3_column_text(s, 1)));
    json_object_set_new(isl, "shape", store_col_json(s, 2));
    json_object_set_new(isl, "next_seq", json_integer(sqlite3_column_int64(s, 3)));
    json_object_set_new(isl, "devices", island_devices(st, id, isl));
    return isl;
}

json_t *store_islands_json(store_t *st)
{
    static const char sql[] = "SELECT id, name, shape, next_seq FROM islands ORDER BY id";
    json_t *out = json_object(), *arr = json_array();
    /* island_row() runs other cached statements while this one iterates;
     * that is safe because each SQL text has its own statement. */
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!out || !arr || !s) {
        json_decref(out);
        json_decref(arr);
        return NULL;
    }
    while (sqlite3_step(s) == SQLITE_ROW)
        json_array_append_new(arr, island_row(st, s));
    sqlite3_reset(s);
    json_object_set_new(out, "islands", arr);
    return out;
}

json_t *store_island_json(store_t *st, const char *name)
{
    static const char sql[] = "SELECT id, name, shape, next_seq FROM islands WHERE name = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return NULL;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    json_t *isl = sqlite3_step(s) == SQLITE_ROW ? island_row(st, s) : NULL;
    sqlite3_reset(s);
    return isl;
}

int store_job_slice_at(store_t *st, int64_t job, const char *island, int64_t idx, char *out,
                       size_t cap)
{
    static const char sql[] =
        "SELECT s.name FROM slices s JOIN islands i ON i.id = s.island_id"
        " WHERE s.job_id = ?1 AND i.name = ?2"
        " AND EXISTS (SELECT 1 FROM json_each(s.devices) WHERE value = ?3)";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_text(s, 2, island, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, idx);
    int rc = STORE_NOTFOUND;
    if (sqlite3_step(s) == SQLITE_ROW) {
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(s, 0));
        rc = STORE_OK;
    }
    sqlite3_reset(s);
    return rc;
}

/* Gone workers listed at most (the newest): every registration makes a
 * worker (a restart, a new id), so the gone ones grow without end, and a
 * caller with the join token could register and leave 20,000 times (a
 * 5.8 MB answer, 600 ms to build). */
#define STORE_WORKERS_GONE_LISTED 128

/* How many gone workers there are; -1 on error. (The query takes no
 * parameter: store_scalar's argument binds nothing.) */
static int64_t workers_gone(store_t *st)
{
    static const char sql[] = "SELECT COUNT(*) FROM workers WHERE state <> 'live'";
    return store_scalar(st, sql, 0, -1);
}

json_t *store_workers_json(store_t *st, int64_t lease_us)
{
    /* Every live worker, and the gone ones from the newest
     * STORE_WORKERS_GONE_LISTED-th on (by id: registration order). */
    static const char sql[] =
        "SELECT w.id, i.name, w.first_device, w.ndevices, w.data_addr, w.host, w.pid, w.backend,"
        " w.state, w.epoch, w.registered_at, w.heartbeat_at,"
        /* Computations, not rows: a run's row counts those not yet reported. */
        " (SELECT COALESCE(SUM(t.ncomps - t.done), 0) FROM host_tasks t"
        "  WHERE t.worker_id = w.id AND t.state = 'leased'),"
        " w.store_objects, w.store_bytes, w.store_cap_bytes"
        " FROM workers w JOIN islands i ON i.id = w.island_id"
        " WHERE w.state = 'live' OR w.id >= COALESCE((SELECT id FROM workers"
        "  WHERE state <> 'live' ORDER BY id DESC LIMIT 1 OFFSET ?1), 0) ORDER BY w.id";
    int64_t gone = workers_gone(st);
    json_t *out = json_object(), *arr = json_array();
    sqlite3_stmt *s = gone < 0 ? NULL : store_stmt(st, sql);
    if (!out || !arr || !s) {
        json_decref(out);
        json_decref(arr);
        return NULL;
    }
    sqlite3_bind_int(s, 1, STORE_WORKERS_GONE_LISTED - 1);
    int64_t now = util_wall_us();
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *w = json_object();
        int64_t first = sqlite3_column_int64(s, 2), n = sqlite3_column_int64(s, 3);
        json_object_set_new(w, "id", json_integer(sqlite3_column_int64(s, 0)));
        json_object_set_new(w, "island", json_string((const char *)sqlite3_column_text(s, 1)));
        json_t *devs = json_array();
        for (int64_t i = 0; i < n; i++)
            json_array_append_new(devs, json_integer(first + i));
        json_object_set_new(w, "devices", devs);
        json_object_set_new(w, "data_addr", json_string((const char *)sqlite3_column_text(s, 4)));
        json_object_set_new(w, "host", json_string((const char *)sqlite3_column_text(s, 5)));
        json_object_set_new(w, "pid", json_integer(sqlite3_column_int64(s, 6)));
        json_object_set_new(w, "backend", json_string((const char *)sqlite3_column_text(s, 7)));
        json_object_set_new(w, "state", json_string((const char *)sqlite3_column_text(s, 8)));
        json_object_set_new(w, "epoch", json_integer(sqlite3_column_int64(s, 9)));
        json_object_set_new(w, "registered_at", store_time_json(s, 10));
        double age = (double)(now - sqlite3_column_int64(s, 11)) / 1e6;
        json_object_set_new(w, "heartbeat_age_s", json_real(age < 0 ? 0 : age));
        json_object_set_new(w, "lease_s", json_real((double)lease_us / 1e6));
        json_object_set_new(w, "tasks_leased", json_integer(sqlite3_column_int64(s, 12)));
        json_object_set_new(w, "store", json_pack("{s:I, s:I, s:I}",
                            "objects", (json_int_t)sqlite3_column_int64(s, 13),
                            "bytes", (json_int_t)sqlite3_column_int64(s, 14),
                            "cap_bytes", (json_int_t)sqlite3_column_int64(s, 15)));
        json_array_append_new(arr, w);
    }
    sqlite3_reset(s);
    json_object_set_new(out, "workers", arr);
    json_object_set_new(out, "gone_omitted", json_integer(gone > STORE_WORKERS_GONE_LISTED
                                                          ? gone - STORE_WORKERS_GONE_LISTED : 0));
    return out;
}

/* Per-device busy and idle counters, then per-island utilization over the
 * recent window (see DEVICE_UP_SQL and island_window). 0 or -1. */
static int metrics_devices(store_t *st, store_buf_t *b, int64_t now)
{
    static const char dev_sql[] =
        "SELECT i.name, d.idx, d.busy_us, " DEVICE_UP_SQL " FROM devices d"
        " JOIN islands i ON i.id = d.island_id ORDER BY i.id, d.idx";
    static const char isl_sql[] = "SELECT id, name FROM islands ORDER BY id";
    sqlite3_stmt *s = store_stmt(st, dev_sql);
    if (!s)
        return -1;
    /* Two passes over one statement would interleave the two families;
     * Prometheus wants each family's samples together, so the idle values
     * wait in a small text buffer. */
    store_buf_t idle = store_buf_new(1024);
    if (idle.failed)
        return -1;
    store_buf_printf(b, "# HELP atoll_device_busy_seconds_total Time each device spent computing"
                        " (shard inputs ready to finished).\n"
                        "# TYPE atoll_device_busy_seconds_total counter\n");
    store_buf_printf(&idle, "# HELP atoll_device_idle_seconds_total Time each device was covered by a"
                            " worker but not computing.\n"
                            "# TYPE atoll_device_idle_seconds_total counter\n");
    sqlite3_bind_int64(s, 2, now);
    while (sqlite3_step(s) == SQLITE_ROW) {
        const char *isl = (const char *)sqlite3_column_text(s, 0);
        long idx = (long)sqlite3_column_int64(s, 1);
        int64_t busy = sqlite3_column_int64(s, 2), up = sqlite3_column_int64(s, 3);
        store_buf_printf(b, "atoll_device_busy_seconds_total{island=\"%s\",device=\"%ld\"} %.6f\n",
                         isl, idx, (double)busy / 1e6);
        store_buf_printf(&idle, "atoll_device_idle_seconds_total{island=\"%s\",device=\"%ld\"} %.6f\n",
                         isl, idx, (double)idle_of(up, busy) / 1e6);
    }
    sqlite3_reset(s);
    store_buf_put(b, idle.p, idle.len);
    int failed = idle.failed;
    free(idle.p);
    if (failed || !(s = store_stmt(st, isl_sql)))
        return -1;
    store_buf_printf(b, "# HELP atoll_island_utilization Fraction of the island's device time spent"
                        " computing over the last %lld s.\n# TYPE atoll_island_utilization gauge\n",
                     CLUSTER_UTIL_WINDOW_US / 1000000);
    /* island_window() uses other statements while this one iterates: each
     * SQL text has its own cached statement. */
    while (sqlite3_step(s) == SQLITE_ROW) {
        island_acct_t a = {0, 0, 0, 0};
        island_window(st, sqlite3_column_int64(s, 0), now, &a);
        store_buf_printf(b, "atoll_island_utilization{island=\"%s\"} %.4f\n", sqlite3_column_text(s, 1),
                         ratio_of(a.win_busy_us, a.win_up_us));
    }
    sqlite3_reset(s);
    return 0;
}

/* What each live worker's object store holds (from its heartbeats). */
static int metrics_worker_store(store_t *st, store_buf_t *b)
{
    static const char sql[] =
        "SELECT id, store_objects, store_bytes FROM workers WHERE state = 'live' ORDER BY id";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    store_buf_printf(b, "# HELP atoll_worker_store_objects Buffers in each live worker's object store.\n"
                        "# TYPE atoll_worker_store_objects gauge\n");
    while (sqlite3_step(s) == SQLITE_ROW)
        store_buf_printf(b, "atoll_worker_store_objects{worker=\"%ld\"} %ld\n",
                         (long)sqlite3_column_int64(s, 0), (long)sqlite3_column_int64(s, 1));
    sqlite3_reset(s);
    store_buf_printf(b, "# HELP atoll_worker_store_bytes Bytes in each live worker's object store.\n"
                        "# TYPE atoll_worker_store_bytes gauge\n");
    while (sqlite3_step(s) == SQLITE_ROW)
        store_buf_printf(b, "atoll_worker_store_bytes{worker=\"%ld\"} %ld\n",
                         (long)sqlite3_column_int64(s, 0), (long)sqlite3_column_int64(s, 2));
    sqlite3_reset(s);
    return 0;
}

/* Admission latency (created -> allocated, for every allocation the
 * store remembers: jobs allocated now or before) as a Prometheus histogram.
 * Kept per bucket by triggers as jobs are allocated and requeued
 * (admission_buckets, schema 035), so it survives restarts, a requeued job
 * counts its latest admission, and a scrape reads 12 rows, not every job.
 * The last bucket's bound is +Inf. */
static int metrics_admission(store_t *st, store_buf_t *b)
{
    static const char sql[] =
        "SELECT le_us, n, sum_us FROM admission_buckets ORDER BY le_us";
    int64_t n = 0, sum_us = 0;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    store_buf_printf(b, "# HELP atoll_admission_latency_seconds From submission to allocation.\n"
                        "# TYPE atoll_admission_latency_seconds histogram\n");
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t le_us = sqlite3_column_int64(s, 0);
        n += sqlite3_column_int64(s, 1);
        sum_us += sqlite3_column_int64(s, 2);
        if (le_us == INT64_MAX)
            break;          /* the +Inf bucket, written with the count below */
        store_buf_printf(b, "atoll_admission_latency_seconds_bucket{le=\"%g\"} %ld\n",
                         (double)le_us / 1e6, (long)n);
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return -1;
    store_buf_printf(b, "atoll_admission_latency_seconds_bucket{le=\"+Inf\"} %ld\n"
                        "atoll_admission_latency_seconds_sum %.6f\n"
                        "atoll_admission_latency_seconds_count %ld\n", (long)n,
                     (double)sum_us / 1e6, (long)n);
    return 0;
}

/* Device time by tenant since the store began (tenant_usage), a counter
 * per tenant; jobs without a tenant count under tenant="". A tenant's
 * caller (tenant > 0) gets its own counter only: tenants see no other
 * tenant's figures (DESIGN Part D, as /v1/stats/tenants). */
static int metrics_tenant_usage(store_t *st, store_buf_t *b, int64_t tenant)
{
    static const char sql[] =
        "SELECT COALESCE(t.name, ''), u.device_us FROM tenant_usage u"
        " LEFT JOIN tenants t ON t.id = u.tenant_id WHERE ?1 = 0 OR u.tenant_id = ?1"
        " ORDER BY u.tenant_id";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, tenant);
    store_buf_printf(b, "# HELP atoll_tenant_device_seconds_total Device time of each tenant's"
                        " computations (busy devices x seconds, from the workers' reports).\n"
                        "# TYPE atoll_tenant_device_seconds_total counter\n");
    while (sqlite3_step(s) == SQLITE_ROW)
        store_buf_printf(b, "atoll_tenant_device_seconds_total{tenant=\"%s\"} %.6f\n",
                         sqlite3_column_text(s, 0), (double)sqlite3_column_int64(s, 1) / 1e6);
    sqlite3_reset(s);
    return 0;
}

const char *const store_job_states[STORE_JOB_NSTATES] = {
    "queued", "allocated", "running", "succeeded", "failed", "cancelled"};

int store_job_counts(store_t *st, int64_t counts[STORE_JOB_NSTATES])
{
    static const char sql[] =
        "SELECT state, COUNT(*) FROM jobs WHERE " STORE_JOB_LIVE("state") " GROUP BY state"
        " UNION ALL SELECT state, n FROM job_counts";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    memset(counts, 0, sizeof *counts * STORE_JOB_NSTATES);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *state = (const char *)sqlite3_column_text(s, 0);   /* NULL on OOM */
        if (!state) {
            rc = SQLITE_NOMEM;
            break;
        }
        for (int i = 0; i < STORE_JOB_NSTATES; i++)
            if (strcmp(state, store_job_states[i]) == 0)
                counts[i] = sqlite3_column_int64(s, 1);
    }
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? 0 : -1;
}

char *store_metrics_text(store_t *st, int64_t tenant)
{
    static const char dev_sql[] =
        "SELECT i.name, " DEVICE_STATE_SQL ", COUNT(*), SUM(d.busy_us) FROM devices d"
        " JOIN islands i ON i.id = d.island_id GROUP BY i.name, 2 ORDER BY i.name";
    static const char workers_sql[] =
        "SELECT id, heartbeat_at FROM workers WHERE state = 'live' ORDER BY id";
    store_buf_t b = store_buf_new(4096);
    if (b.failed)
        return NULL;
    int64_t counts[STORE_JOB_NSTATES];
    sqlite3_stmt *s;
    if (store_job_counts(st, counts) != 0)
        goto fail;
    store_buf_printf(&b, "# HELP atoll_jobs Jobs by state.\n# TYPE atoll_jobs gauge\n");
    for (int i = 0; i < STORE_JOB_NSTATES; i++)
        store_buf_printf(&b, "atoll_jobs{state=\"%s\"} %ld\n", store_job_states[i],
                         (long)counts[i]);
    store_buf_printf(&b, "# HELP atoll_queue_depth Jobs waiting for devices.\n"
                         "# TYPE atoll_queue_depth gauge\natoll_queue_depth %ld\n", (long)counts[0]);
    if (!(s = store_stmt(st, dev_sql)))
        goto fail;
    store_buf_printf(&b, "# HELP atoll_devices Devices by island and state.\n"
                         "# TYPE atoll_devices gauge\n");
    while (sqlite3_step(s) == SQLITE_ROW)
        store_buf_printf(&b, "atoll_devices{island=\"%s\",state=\"%s\"} %ld\n",
                         sqlite3_column_text(s, 0), sqlite3_column_text(s, 1),
                         (long)sqlite3_column_int64(s, 2));
    sqlite3_reset(s);
    int64_t now = util_wall_us();
    if (metrics_devices(st, &b, now) != 0)
        goto fail;
    if (!(s = store_stmt(st, workers_sql)))
        goto fail;
    store_buf_printf(&b, "# HELP atoll_worker_heartbeat_age_seconds Since each live worker's last"
                         " heartbeat.\n# TYPE atoll_worker_heartbeat_age_seconds gauge\n");
    while (sqlite3_step(s) == SQLITE_ROW)
        store_buf_printf(&b, "atoll_worker_heartbeat_age_seconds{worker=\"%ld\"} %.3f\n",
                         (long)sqlite3_column_int64(s, 0),
                         (double)(now - sqlite3_column_int64(s, 1)) / 1e6);
    sqlite3_reset(s);
    if (metrics_worker_store(st, &b) != 0 || metrics_admission(st, &b) != 0 ||
        metrics_tenant_usage(st, &b, tenant) != 0)
        goto fail;
    if (b.failed)
        goto fail;
    return b.p;
fail:
    free(b.p);
    return NULL;
}

int64_t store_tasks_leased(store_t *st, int64_t lease_us)
{
    /* Only host tasks on workers that are alive can still report. */
    static const char sql[] =
        "SELECT COUNT(*) FROM host_tasks t JOIN workers w ON w.id = t.worker_id"
        " WHERE t.state = 'leased' AND w.state = 'live' AND w.heartbeat_at > ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, util_wall_us() - lease_us);
    int64_t n = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_reset(s);
    return n;
}
