/* store_sched.c - the scheduler's side of the state machine: admission
 * (queued -> allocated), and worker loss (requeue or fail). Every function
 * that changes rows runs inside the scheduler's transaction or opens its
 * own. */
#include "store_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jtext.h"
#include "util.h"

/* A live worker of the island, for store_sched_devices. */
typedef struct live_worker {
    int64_t id, first, cap_bytes;
    int count;
    char addr[64];
} live_worker_t;

static int live_worker_cmp(const void *key, const void *elem)
{
    int64_t id = *(const int64_t *)key, other = ((const live_worker_t *)elem)->id;
    return (id > other) - (id < other);
}

/* Columns c.. of a row of live workers (id, data_addr, first_device,
 * ndevices, store_cap_bytes) into w. */
static void live_worker_read(sqlite3_stmt *s, int c, live_worker_t *w)
{
    const char *addr = (const char *)sqlite3_column_text(s, c + 1);
    w->id = sqlite3_column_int64(s, c);
    snprintf(w->addr, sizeof w->addr, "%s", addr ? addr : "");
    w->first = sqlite3_column_int64(s, c + 2);
    w->count = sqlite3_column_int(s, c + 3);
    w->cap_bytes = sqlite3_column_int64(s, c + 4);
}

/* Device d as on live worker w (NULL: none) with the rest of its state. A
 * device's memory is its share of the worker's object store: the store
 * is one per process, and every device of it runs its shards out of it. */
static void dev_fill(sched_dev_t *d, const live_worker_t *w, int local, int64_t job,
                     int shared, int64_t held_bytes)
{
    memset(d, 0, sizeof *d);
    if (w) {
        d->worker = w->id;
        d->local = local;
        d->first = w->first;
        d->count = w->count;
        d->cap_bytes = w->count > 0 ? w->cap_bytes / w->count : 0;
        memcpy(d->addr, w->addr, sizeof d->addr);
    }
    d->job = job;
    d->shared = shared;
    d->held_bytes = held_bytes;
}

/* The island's live workers, sorted by id, into ws (cap entries). Their
 * count, or -1. */
static int live_workers(store_t *st, int64_t island, live_worker_t *ws, int64_t cap)
{
    static const char sql[] =
        "SELECT id, data_addr, first_device, ndevices, store_cap_bytes FROM workers"
        " WHERE island_id = ? AND state = 'live' ORDER BY id";
    sqlite3_stmt *s = store_stmt(st, sql);
    int n = 0, step;
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, island);
    while ((step = sqlite3_step(s)) == SQLITE_ROW && n < cap)
        live_worker_read(s, 0, &ws[n++]);
    sqlite3_reset(s);
    return step == SQLITE_ROW || step == SQLITE_DONE ? n : -1;
}

/* Fills the exclusive holders of devs[0..n) from the island's allocation
 * runs. 0 or -1. */
static int alloc_runs_read(store_t *st, int64_t island, sched_dev_t *devs, int64_t n)
{
    static const char sql[] = "SELECT lo, hi, job_id FROM allocations WHERE island_id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    int step;
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, island);
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t lo = sqlite3_column_int64(s, 0), hi = sqlite3_column_int64(s, 1);
        for (int64_t i = lo < 0 ? 0 : lo; i <= hi && i < n; i++)
            devs[i].job = sqlite3_column_int64(s, 2);
    }
    sqlite3_reset(s);
    return step == SQLITE_DONE ? 0 : -1;
}

/* Four scans (the island's devices, its live workers, its allocation
 * runs, its shared holds per device) rather than one join with a
 * subquery per device: 2,048 devices took 2.2 ms that way, 0.3 ms this
 * way. */
int store_sched_devices(store_t *st, int64_t island, sched_dev_t *devs, int64_t n)
{
    static const char dev_sql[] =
        "SELECT idx, worker_id, local FROM devices WHERE island_id = ?";
    static const char hold_sql[] =
        "SELECT idx, COUNT(*), SUM(bytes) FROM device_holds WHERE island_id = ? GROUP BY idx";
    live_worker_t *ws = malloc(sizeof *ws * (size_t)(n > 0 ? n : 1));
    int nw = ws ? live_workers(st, island, ws, n) : -1, rc = -1, step = SQLITE_DONE;
    sqlite3_stmt *s = nw < 0 ? NULL : store_stmt(st, dev_sql);
    if (!s)
        goto cleanup;
    memset(devs, 0, sizeof *devs * (size_t)n);
    sqlite3_bind_int64(s, 1, island);
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(s, 0), wid = sqlite3_column_int64(s, 1);
        if (i < 0 || i >= n)
            continue;
        /* A returning process (paused past its lease) is allocatable at
         * once: the attempts it still runs are aborted by attempt
         * (poll_cancels), which leaves new work of the same job alone. */
        const live_worker_t *w = wid ? bsearch(&wid, ws, (size_t)nw, sizeof *ws,
                                               live_worker_cmp) : NULL;
        dev_fill(&devs[i], w, sqlite3_column_int(s, 2), 0, 0, 0);
    }
    sqlite3_reset(s);
    if (step != SQLITE_DONE || alloc_runs_read(st, island, devs, n) != 0 ||
        !(s = store_stmt(st, hold_sql)))
        goto cleanup;
    sqlite3_bind_int64(s, 1, island);
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t i = sqlite3_column_int64(s, 0);
        if (i >= 0 && i < n) {
            devs[i].shared = sqlite3_column_int(s, 1);
            devs[i].held_bytes = sqlite3_column_int64(s, 2);
        }
    }
    sqlite3_reset(s);
    rc = step == SQLITE_DONE ? 0 : -1;
cleanup:
    free(ws);
    return rc;
}

int store_sched_devices_patch(store_t *st, int64_t island, sched_dev_t *devs, int64_t n,
                              const int64_t *idx, int k)
{
    /* A point read per device (its row, its worker if live, its holds):
     * 2-4 µs each, against 0.3 ms for the whole of a 2,048-device island. */
    static const char sql[] =
        "SELECT d.local, " STORE_ALLOC_HOLDER_SQL("?1", "?2") ", h.n, h.bytes,"
        " w.id, w.data_addr, w.first_device, w.ndevices, w.store_cap_bytes"
        " FROM devices d LEFT JOIN workers w ON w.id = d.worker_id AND w.state = 'live',"
        " (SELECT COUNT(*) AS n, COALESCE(SUM(bytes), 0) AS bytes FROM device_holds"
        "  WHERE island_id = ?1 AND idx = ?2) h"
        " WHERE d.island_id = ?1 AND d.idx = ?2";
    for (int i = 0; i < k; i++) {
        if (idx[i] < 0 || idx[i] >= n)
            continue;       /* not one of this island's: nothing to hold it in */
        sqlite3_stmt *s = store_stmt(st, sql);
        if (!s)
            return -1;
        sqlite3_bind_int64(s, 1, island);
        sqlite3_bind_int64(s, 2, idx[i]);
        int step = sqlite3_step(s);
        memset(&devs[idx[i]], 0, sizeof devs[idx[i]]);
        if (step == SQLITE_ROW) {
            live_worker_t w;
            int live = sqlite3_column_type(s, 4) != SQLITE_NULL;
            if (live)
                live_worker_read(s, 4, &w);
            dev_fill(&devs[idx[i]], live ? &w : NULL, sqlite3_column_int(s, 0),
                     sqlite3_column_int64(s, 1), sqlite3_column_int(s, 2),
                     sqlite3_column_int64(s, 3));
        }
        sqlite3_reset(s);
        if (step != SQLITE_ROW && step != SQLITE_DONE)
            return -1;
    }
    return 0;
}

void store_usage_free(store_usage_t *u)
{
    free(u->rows);
    memset(u, 0, sizeof *u);
}

/* Reads the devices held per tenant into u, unless nothing that moves it
 * was committed since the last read (store_devices_gen: devices' holders
 * and shared holds; a job's tenant never changes). Scanning every held
 * device and joining its job was most of a pass at 2,048 devices. */
static int usage_refresh(store_t *st, store_usage_t *u)
{
    static const char sql[] =
        "SELECT j.tenant_id, SUM(d.n) FROM (" STORE_HELD_SQL ") d JOIN jobs j ON j.id = d.job_id"
        " WHERE j.tenant_id IS NOT NULL GROUP BY j.tenant_id";
    uint64_t gen = store_devices_gen();
    if (u->valid && u->gen == gen)
        return 0;
    u->valid = 0;
    u->n = 0;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (u->n == u->cap) {
            int ncap = u->cap ? u->cap * 2 : 16;
            store_usage_row_t *p = realloc(u->rows, sizeof *p * (size_t)ncap);
            if (!p)
                break;
            u->rows = p;
            u->cap = ncap;
        }
        u->rows[u->n].tenant = sqlite3_column_int64(s, 0);
        u->rows[u->n++].devices = sqlite3_column_int64(s, 1);
    }
    sqlite3_reset(s);
    if (step != SQLITE_DONE)
        return -1;
    u->gen = gen;
    u->valid = 1;
    return 0;
}

/* Devices held per tenant, set into the tenants of ts[0..n-1]. Jobs without
 * a tenant count as using none (fair share ranks them first among equal
 * priorities, as before per-tenant queues). */
static int tenants_usage(store_t *st, store_usage_t *u, sched_tenant_t *ts, int n)
{
    if (usage_refresh(st, u) != 0)
        return -1;
    for (int r = 0; r < u->n; r++)
        for (int i = 0; i < n; i++)
            if (ts[i].id == u->rows[r].tenant)
                ts[i].used = u->rows[r].devices;
    return 0;
}

int store_sched_tenants(store_t *st, store_usage_t *u, sched_tenant_t **out, int *n)
{
    /* One probe of the partial queue index per tenant; row 0 first: the
     * jobs without a tenant (admin, auth off). */
    static const char sql[] =
        "SELECT 0, 0, 1 WHERE EXISTS (SELECT 1 FROM jobs WHERE tenant_id IS NULL"
        "  AND state = 'queued')"
        " UNION ALL SELECT t.id, t.quota_devices, t.share FROM tenants t WHERE EXISTS"
        " (SELECT 1 FROM jobs j WHERE j.tenant_id = t.id AND j.state = 'queued')";
    *out = NULL;
    *n = 0;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    int cap = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (*n == cap) {
            int ncap = cap ? cap * 2 : 16;
            sched_tenant_t *p = realloc(*out, sizeof *p * (size_t)ncap);
            if (!p)
                goto fail;
            *out = p;
            cap = ncap;
        }
        sched_tenant_t *t = &(*out)[(*n)++];
        t->id = sqlite3_column_int64(s, 0);
        t->quota = sqlite3_column_int64(s, 1);
        t->share = sqlite3_column_int64(s, 2) > 0 ? sqlite3_column_int64(s, 2) : 1;
        t->used = 0;
    }
    sqlite3_reset(s);
    /* Nothing queued (most passes under a stream of reports), or one
     * queue without a quota: no usage to rank queues by or to check, and
     * the scan of every held device is saved (after each job's end, at
     * 2,048 devices: a tenth of the scheduler's CPU under bench_passes). */
    if (*n == 0 || (*n == 1 && (*out)[0].quota == 0) || tenants_usage(st, u, *out, *n) == 0)
        return 0;
fail:
    sqlite3_reset(s);
    free(*out);
    *out = NULL;
    *n = 0;
    return -1;
}

int store_sched_tenant_page(store_t *st, const sched_tenant_t *t, int64_t after_prio,
                            int64_t after_id, sched_job_t *jobs, int cap)
{
    /* tenant_id IS ?1 matches NULL for tenant 0 and still probes the index;
     * the (priority, id) bound walks the tenant's queue in order. */
    static const char sql[] =
        "SELECT id, attempt, priority FROM jobs WHERE tenant_id IS ?1 AND state = 'queued'"
        " AND (priority < ?2 OR (priority = ?2 AND id > ?3))"
        /* A requeued job is admitted at once, even while shards of its old
         * attempt are still leased (being aborted): aborts name an attempt,
         * so a worker may hold two attempts of one job. */
        " ORDER BY priority DESC, id LIMIT ?4";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    if (t->id > 0)
        sqlite3_bind_int64(s, 1, t->id);
    sqlite3_bind_int64(s, 2, after_prio);
    sqlite3_bind_int64(s, 3, after_id);
    sqlite3_bind_int(s, 4, cap);
    int n = 0;
    while (n < cap && sqlite3_step(s) == SQLITE_ROW) {
        jobs[n].id = sqlite3_column_int64(s, 0);
        jobs[n].attempt = sqlite3_column_int(s, 1);
        jobs[n].priority = sqlite3_column_int64(s, 2);
        jobs[n].tenant = t->id;
        jobs[n].quota = t->quota;
        n++;
    }
    sqlite3_reset(s);
    return n;
}

json_t *store_sched_job_doc(store_t *st, int64_t job)
{
    static const char sql[] = "SELECT doc FROM job_docs WHERE job_id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return NULL;
    sqlite3_bind_int64(s, 1, job);
    json_t *doc = sqlite3_step(s) == SQLITE_ROW ? store_col_json(s, 0) : NULL;
    sqlite3_reset(s);
    return doc;
}

int store_sched_set_reason(store_t *st, int64_t job, const char *reason)
{
    static const char sql[] =
        "UPDATE jobs SET pending_reason = ?2 WHERE id = ?1 AND state = 'queued'"
        " AND pending_reason IS NOT ?2";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_text(s, 2, reason, -1, SQLITE_STATIC);
    return store_step_done(s);
}

int64_t store_sched_take_seq(store_t *st, int64_t island, int count)
{
    static const char sql[] =
        "UPDATE islands SET next_seq = next_seq + ?2 WHERE id = ?1 RETURNING next_seq - ?2";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, island);
    sqlite3_bind_int(s, 2, count);
    int64_t first = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_reset(s);
    return first;
}

/* "[a,b,...]" of v[0..n): malloc'd, or NULL. A slice's device list is
 * written with its allocation and read back by every later chunk of its
 * job: at 2,048 devices jansson's arrays cost ~0.3 ms each way. */
static char *idx_list_text(const int64_t *v, int n)
{
    /* jtext's integers, not snprintf: a whole island's 2,048 indexes
     * took ~200 us of its allocation's pass that way on the 2-core VM. */
    jtext_w_t w = {0};
    JTEXT_LIT(&w, "[");
    for (int i = 0; i < n; i++) {
        if (i)
            JTEXT_LIT(&w, ",");
        jtext_int(&w, v[i]);
    }
    JTEXT_LIT(&w, "]");
    return jtext_take(&w, NULL);
}

/* Parses what idx_list_text wrote into *out (malloc'd, caller frees):
 * the count, 0 for a text that is not such a list (nothing allocated),
 * -1 when out of memory. */
static int idx_list_parse(const char *t, int64_t **out)
{
    *out = NULL;
    size_t n = 0, len = t ? strlen(t) : 0;
    if (len < 2 || t[0] != '[' || t[len - 1] != ']' || len > (size_t)INT32_MAX)
        return 0;
    for (size_t i = 1; i + 1 < len; i++)
        n += t[i] == ',';
    int64_t *v = len > 2 ? malloc(sizeof *v * (n + 1)) : NULL;
    if (len > 2 && !v)
        return -1;
    const char *p = t + 1;
    for (size_t k = 0; len > 2 && k <= n; k++) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno != 0 || (*end != ',' && *end != ']')) {
            free(v);
            return 0;
        }
        v[k] = x;
        p = end + 1;
    }
    *out = v;
    return len > 2 ? (int)(n + 1) : 0;
}

int store_sched_add_slice(store_t *st, int64_t job, const char *name, int64_t island,
                          const shape_t *shape, const int64_t *devices, int n)
{
    static const char sql[] =
        "INSERT OR REPLACE INTO slices(job_id, name, island_id, shape, devices) VALUES (?,?,?,?,?)";
    char *sh_txt = idx_list_text(shape->dim, shape->rank), *dv_txt = idx_list_text(devices, n);
    sqlite3_stmt *s = store_stmt(st, sql);
    int rc = -1;
    if (!s || !sh_txt || !dv_txt)
        goto cleanup;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, island);
    sqlite3_bind_text(s, 4, sh_txt, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, dv_txt, -1, SQLITE_STATIC);
    rc = store_step_done(s);
cleanup:
    free(sh_txt);
    free(dv_txt);
    return rc;
}

int store_sched_set_comp(store_t *st, int64_t job, int comp, int ncomps, int64_t island,
                         int64_t seq, int dispatched)
{
    static const char sql[] =
        "UPDATE computations SET island_id = ?3, seq = ?4 + (idx - ?2),"
        " state = CASE WHEN ?5 THEN 'dispatched' ELSE 'waiting' END,"
        " dispatched_at = CASE WHEN ?5 THEN ?6 END"
        " WHERE job_id = ?1 AND idx BETWEEN ?2 AND ?2 + ?7 - 1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, comp);
    sqlite3_bind_int(s, 7, ncomps);
    sqlite3_bind_int64(s, 3, island);
    sqlite3_bind_int64(s, 4, seq);
    sqlite3_bind_int(s, 5, dispatched);
    sqlite3_bind_int64(s, 6, util_wall_us());
    return store_step_done(s);
}

/* INSERT statements of 1 to STORE_TASK_ROWS host-task rows, built once:
 * a statement writing k rows opens its cursors and runs its program once,
 * so a computation's host tasks, one per worker, are written together
 * (bench_reports 300 32 4 under callgrind: 35.9K -> 31.1K instructions a
 * row; the rest is the row's indexes and watch trigger). */
#define TASK_HEAD "INSERT INTO host_tasks(job_id, attempt, comp_idx, island_id, worker_id," \
    " seq, shards, nshards, state, devices, dispatched_at, leased_at, ncomps) VALUES "
#define TASK_COLS "(?,?,?,?,?,?,?,?,?,?,?,?,?)"
#define TASK_NCOLS 13
static char task_insert_sql[STORE_TASK_ROWS][sizeof TASK_HEAD + STORE_TASK_ROWS * sizeof TASK_COLS];
static pthread_once_t task_insert_once = PTHREAD_ONCE_INIT;

static void task_insert_build(void)
{
    for (int k = 0; k < STORE_TASK_ROWS; k++)
        store_multirow_sql(task_insert_sql[k], sizeof task_insert_sql[k], TASK_HEAD, TASK_COLS,
                           k + 1);
}

/* Binds host task t as row r (0-based) of a multi-row INSERT. */
static void task_bind(sqlite3_stmt *s, int r, const sched_task_t *t)
{
    int b = r * TASK_NCOLS;
    sqlite3_bind_int64(s, b + 1, t->job);
    sqlite3_bind_int(s, b + 2, t->attempt);
    sqlite3_bind_int(s, b + 3, t->comp);
    sqlite3_bind_int64(s, b + 4, t->island);
    sqlite3_bind_int64(s, b + 5, t->worker);
    sqlite3_bind_int64(s, b + 6, t->seq);
    sqlite3_bind_text(s, b + 7, t->shards, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, b + 8, t->nshards);
    /* Not blocked: leased at once, under a lease id of this transaction;
     * the worker's next poll reads it (store_poll.c), with no write. */
    sqlite3_bind_text(s, b + 9, t->blocked ? "blocked" : "leased", -1, SQLITE_STATIC);
    sqlite3_bind_text(s, b + 10, t->devices, -1, SQLITE_STATIC);
    if (!t->blocked) {
        sqlite3_bind_int64(s, b + 11, util_wall_us());
        sqlite3_bind_int64(s, b + 12, store_lease_id());
    }
    sqlite3_bind_int(s, b + 13, t->ncomps);
}

int store_sched_add_tasks(store_t *st, const sched_task_t *t, int n)
{
    pthread_once(&task_insert_once, task_insert_build);
    for (int i = 0; i < n;) {
        int k = n - i < STORE_TASK_ROWS ? n - i : STORE_TASK_ROWS;
        sqlite3_stmt *s = store_stmt(st, task_insert_sql[k - 1]);
        if (!s)
            return -1;
        for (int r = 0; r < k; r++)
            task_bind(s, r, &t[i + r]);
        if (store_step_done(s) != 0)
            return -1;
        for (int r = 0; r < k; r++)
            if (!t[i + r].blocked)
                store_note_leased(st, t[i + r].job, t[i + r].attempt);
        i += k;
    }
    return 0;
}

int store_sched_add_comp_payload(store_t *st, int64_t job, int attempt, int comp,
                                 const char *payload)
{
    static const char sql[] =
        "INSERT INTO comp_payloads(job_id, attempt, comp_idx, payload) VALUES (?, ?, ?, ?)";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, attempt);
    sqlite3_bind_int(s, 3, comp);
    sqlite3_bind_text(s, 4, payload, -1, SQLITE_STATIC);
    return store_step_done(s);
}

static int mark_cmp(const void *a, const void *b)
{
    const store_mark_t *x = a, *y = b;
    if (x->island != y->island)
        return x->island < y->island ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* sql with the run m[0..n) bound: ?1 its island, ?2 and ?3 its first and
 * last index, ?4 (if sql has it) `extra`. NULL on error. */
static sqlite3_stmt *marks_stmt(store_t *st, const char *sql, const store_mark_t *m, int n,
                                int64_t extra)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (s) {
        sqlite3_bind_int64(s, 1, m[0].island);
        sqlite3_bind_int64(s, 2, m[0].idx);
        sqlite3_bind_int64(s, 3, m[n - 1].idx);
        if (sqlite3_bind_parameter_count(s) >= 4)
            sqlite3_bind_int64(s, 4, extra);
    }
    return s;
}

/* Is each of devices m[0..n) (one island, consecutive indexes) still on
 * the worker the round saw? A range scan (2,048 rows: ~0.4 ms). */
static int marks_on_workers(store_t *st, const store_mark_t *m, int n)
{
    static const char dev_sql[] =
        "SELECT idx, worker_id FROM devices WHERE island_id = ?1"
        " AND idx BETWEEN ?2 AND ?3 ORDER BY idx";
    sqlite3_stmt *s = marks_stmt(st, dev_sql, m, n, 0);
    int k = 0, ok = s != NULL;
    while (ok && sqlite3_step(s) == SQLITE_ROW) {
        ok = k < n && sqlite3_column_int64(s, 0) == m[k].idx &&
             sqlite3_column_int64(s, 1) == m[k].worker;
        k++;
    }
    if (s)
        sqlite3_reset(s);
    return ok && k == n;
}

/* Are devices m[0..n) (one island, consecutive indexes) each on the worker
 * the round saw (not read again when the caller knows the round's view is
 * current) and held by no exclusive job, and, for an exclusive allocation,
 * by no shared one either? One seek for the allocation run nearest below
 * the range's end (runs never overlap, so only that one can reach into
 * the range) and a range count: the two seeks that keep allocations
 * exclusive run whatever the caller knows. Memory is not checked again
 * here: only the scheduler thread adds holds, so the round's view can only
 * overstate what the holds take. */
static int marks_free(store_t *st, const store_mark_t *m, int n, int shared, int current)
{
    static const char run_sql[] =
        "SELECT hi >= ?2 FROM allocations WHERE island_id = ?1 AND lo <= ?3"
        " ORDER BY lo DESC LIMIT 1";
    static const char hold_sql[] =
        "SELECT COUNT(*) FROM device_holds WHERE island_id = ?1 AND idx BETWEEN ?2 AND ?3";
    sqlite3_stmt *s = NULL;
    if ((!current && !marks_on_workers(st, m, n)) || !(s = marks_stmt(st, run_sql, m, n, 0)))
        return 0;
    int step = sqlite3_step(s);
    int ok = step == SQLITE_DONE || (step == SQLITE_ROW && sqlite3_column_int(s, 0) == 0);
    sqlite3_reset(s);
    if (!ok || shared)
        return ok;
    if (!(s = marks_stmt(st, hold_sql, m, n, 0)))
        return 0;
    ok = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int64(s, 0) == 0;
    sqlite3_reset(s);
    return ok;
}

/* Holds devices m[0..n) (one island, consecutive indexes, checked by
 * marks_free) for job: exclusively, one allocation run; shared, a hold
 * taking `bytes` of each device. One statement per run. 0 or -1. */
static int marks_take(store_t *st, int64_t job, const store_mark_t *m, int n, int shared,
                      int64_t bytes)
{
    static const char run_sql[] =
        "INSERT INTO allocations (island_id, lo, hi, job_id) VALUES (?1, ?2, ?3, ?4)";
    static const char hold_sql[] =
        "INSERT INTO device_holds (island_id, idx, job_id, bytes) SELECT island_id, idx, ?4, ?5"
        " FROM devices WHERE island_id = ?1 AND idx BETWEEN ?2 AND ?3";
    sqlite3_stmt *s = marks_stmt(st, shared ? hold_sql : run_sql, m, n, job);
    if (!s)
        return -1;
    if (shared)
        sqlite3_bind_int64(s, 5, bytes);
    return store_step_devices(st, s, m[0].island, m[0].idx, m[n - 1].idx) == 0 &&
                   sqlite3_changes(store_db(st)) == (shared ? n : 1) ? 0 : -1;
}

int store_sched_mark_allocated(store_t *st, int64_t job, int shared, int64_t bytes,
                               store_mark_t *m, int n, const char *placement, int current,
                               int running, int next)
{
    /* Each device still on the worker the round saw (its host tasks and the
     * placement name that worker: one that left or was lost meanwhile would
     * never run them), and free: a device taken meanwhile (by anyone, for
     * an exclusive job; by an exclusive job, for a shared one) would break
     * the rule. Either aborts. A gang's devices are runs of consecutive
     * indexes (a slice's rows of the mesh; a whole island is one run), and
     * each run is checked and taken with a range scan and one statement:
     * a statement per device cost a statement's start, bindings and
     * journal each (2,048 devices: 4.3 ms, a fifth of the scheduler's CPU
     * under bench_passes). */
    /* The job's row is written once: allocated, or running when its first
     * host tasks go out in this transaction too, with its dispatch
     * position (a tiny job's admission wrote the row three times). */
    static const char job_sql[] =
        "UPDATE jobs SET state = CASE WHEN ?4 THEN 'running' ELSE 'allocated' END,"
        " allocated_at = ?2, started_at = CASE WHEN ?4 THEN ?2 END, pending_reason = NULL,"
        " placement = ?3, dispatch_next = ?5 WHERE id = ?1 AND state = 'queued'";
    sqlite3_stmt *s;
    util_sort(m, (size_t)n, sizeof *m, mark_cmp);   /* a one-slice gang's: in order */
    for (int i = 0, k; i < n; i = k) {
        for (k = i + 1; k < n && m[k].island == m[i].island && m[k].idx == m[k - 1].idx + 1; k++)
            ;
        if (!marks_free(st, &m[i], k - i, shared, current) ||
            marks_take(st, job, &m[i], k - i, shared, bytes) != 0)
            return -1;
    }
    if (!(s = store_stmt(st, job_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, util_wall_us());
    sqlite3_bind_text(s, 3, placement, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 4, running != 0);
    if (next >= 0)
        sqlite3_bind_int(s, 5, next);
    if (store_step_done(s) != 0 || sqlite3_changes(store_db(st)) != 1)
        return -1;
    store_event(st, job, "allocated", "%d devices allocated", n);
    return 0;
}

int store_sched_started(store_t *st, int64_t job)
{
    /* A no-op (a primary-key probe, no write) once the job runs. */
    static const char sql[] =
        "UPDATE jobs SET state = 'running', started_at = ?2 WHERE id = ?1 AND state = 'allocated'";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, util_wall_us());
    return store_step_done(s);
}

int store_sched_dispatched(store_t *st, int64_t job, int next)
{
    static const char sql[] =
        "UPDATE jobs SET dispatch_next = ?2,"
        " started_at = CASE WHEN state = 'allocated' THEN ?3 ELSE started_at END,"
        " state = CASE WHEN state = 'allocated' THEN 'running' ELSE state END WHERE id = ?1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    if (next >= 0)
        sqlite3_bind_int(s, 2, next);
    sqlite3_bind_int64(s, 3, util_wall_us());
    return store_step_done(s);
}

int store_sched_comp_written(store_t *st, int64_t job, int attempt, int comp, int64_t *seq)
{
    /* Through host_tasks_by_job: at most one row per worker of the slice. */
    static const char sql[] =
        "SELECT COUNT(*), MAX(seq) FROM host_tasks WHERE job_id = ?1 AND attempt = ?2"
        " AND comp_idx = ?3";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, attempt);
    sqlite3_bind_int(s, 3, comp);
    int n = -1;
    if (sqlite3_step(s) == SQLITE_ROW) {
        n = sqlite3_column_int(s, 0);
        *seq = sqlite3_column_int64(s, 1);
    }
    sqlite3_reset(s);
    return n;
}

int store_sched_dispatching(store_t *st, sched_more_t *out, int cap)
{
    /* Through the partial index jobs_dispatching: only jobs in mid-dispatch. */
    static const char sql[] =
        "SELECT id, attempt, dispatch_next FROM jobs WHERE dispatch_next IS NOT NULL"
        " ORDER BY id LIMIT ?1";
    sqlite3_stmt *s = store_stmt(st, sql);
    int n = 0;
    if (!s)
        return -1;
    sqlite3_bind_int(s, 1, cap);
    while (n < cap && sqlite3_step(s) == SQLITE_ROW)
        out[n++] = (sched_more_t){sqlite3_column_int64(s, 0), sqlite3_column_int(s, 1),
                                  sqlite3_column_int(s, 2)};
    sqlite3_reset(s);
    return n;
}

int store_sched_fail_dispatch(store_t *st, int64_t job, const char *why)
{
    return store_job_finish(st, job, "failed", why);
}

int store_sched_dispatch_next(store_t *st, int64_t job, int attempt)
{
    static const char sql[] =
        "SELECT dispatch_next FROM jobs WHERE id = ?1 AND attempt = ?2"
        " AND dispatch_next IS NOT NULL";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -2;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, attempt);
    int rc = sqlite3_step(s);
    int next = rc == SQLITE_ROW ? sqlite3_column_int(s, 0) : rc == SQLITE_DONE ? -1 : -2;
    sqlite3_reset(s);
    return next;
}

/* 1 when the job is in state a or b now (in the caller's transaction),
 * 0 when not or gone, -1 on error. The scheduler acts on what it read
 * before its transaction; a report, a cancel or a lost worker may have
 * moved the job since, and a terminal job must never move again. */
static int job_state_is(store_t *st, int64_t job, const char *a, const char *b)
{
    static const char sql[] = "SELECT state IN (?2, ?3) FROM jobs WHERE id = ?1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_text(s, 2, a, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, b, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    int is = rc == SQLITE_ROW ? sqlite3_column_int(s, 0) : rc == SQLITE_DONE ? 0 : -1;
    sqlite3_reset(s);
    return is;
}

int store_sched_fail(store_t *st, int64_t job, const char *why)
{
    if (store_begin(st) != 0)
        return -1;
    int queued = job_state_is(st, job, "queued", "queued");
    if (queued <= 0) {
        store_rollback(st);
        return queued < 0 ? -1 : 1;
    }
    if (store_job_finish(st, job, "failed", why) != 0 || store_commit(st) != 0) {
        store_rollback(st);
        return -1;
    }
    return 0;
}

/* Puts a job back in the queue for a new attempt: its work so far is
 * discarded (outputs, slices, seq numbers), its devices freed; tasks still
 * leased on live workers are aborted through the poll's cancel list (their
 * attempt is now stale), while the new attempt may be admitted at once,
 * on the same workers too. `retry` says why: REQUEUE_RETRY, a lost worker
 * (spends one of the job's max_retries); REQUEUE_RESTART, a controller
 * restart (counted in restarts); REQUEUE_PREEMPT, a higher-priority job
 * took its devices (counted in preemptions; event `preempted`). */
enum { REQUEUE_RESTART = 0, REQUEUE_RETRY = 1, REQUEUE_PREEMPT = 2 };

static int job_requeue(store_t *st, int64_t job, const char *why, int retry)
{
    static const char *const sqls[] = {
        "UPDATE jobs SET state = 'queued', attempt = attempt + 1, retries = retries + (?3 = 1),"
        " restarts = restarts + (?3 = 0), preemptions = preemptions + (?3 = 2), comps_done = 0,"
        " allocated_at = NULL, started_at = NULL,"
        " pending_reason = CASE ?3 WHEN 2 THEN 'preempted' ELSE 'requeued' END, error = ?2,"
        " placement = NULL, dispatch_next = NULL WHERE id = ?1",
        "DELETE FROM device_holds WHERE job_id = ?1",
        "UPDATE host_tasks SET state = 'cancelled' WHERE job_id = ?1 AND state = 'blocked'",
        "DELETE FROM outputs WHERE job_id = ?1",
        "DELETE FROM slices WHERE job_id = ?1",
        "UPDATE computations SET state = 'waiting', island_id = NULL, seq = NULL, shards_done = 0,"
        " busy_us = 0,"
        " deps_left = json_array_length(producers), dispatched_at = NULL, started_at = NULL,"
        " inputs_ready_at = NULL, finished_at = NULL WHERE job_id = ?1",
    };
    for (size_t i = 0; i < sizeof sqls / sizeof sqls[0]; i++) {
        sqlite3_stmt *s = store_stmt(st, sqls[i]);
        if (!s)
            return -1;
        sqlite3_bind_int64(s, 1, job);
        if (i == 0) {
            sqlite3_bind_text(s, 2, why, -1, SQLITE_STATIC);
            sqlite3_bind_int(s, 3, retry);
        }
        if (store_step_done(s) != 0)
            return -1;
    }
    if (store_free_job_devices(st, job) != 0)
        return -1;
    store_event(st, job, retry == REQUEUE_PREEMPT ? "preempted" : "requeued", "%s", why);
    return 0;
}

int store_sched_victims(store_t *st, int64_t below, sched_victim_t *out, int cap)
{
    static const char sql[] =
        "SELECT id, priority, shared,"
        " (SELECT bytes FROM device_holds h WHERE h.job_id = jobs.id LIMIT 1)"
        " FROM jobs WHERE preemptible = 1 AND priority < ?1"
        " AND state IN ('allocated', 'running')"
        " ORDER BY priority, allocated_at DESC, id DESC"
        " LIMIT ?2";
    sqlite3_stmt *s = store_stmt(st, sql);
    int n = 0;
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, below);
    sqlite3_bind_int(s, 2, cap);
    while (n < cap && sqlite3_step(s) == SQLITE_ROW) {
        out[n].job = sqlite3_column_int64(s, 0);
        out[n].priority = sqlite3_column_int64(s, 1);
        out[n].shared = sqlite3_column_int(s, 2) != 0;
        out[n].bytes = sqlite3_column_int64(s, 3);      /* NULL (no hold): 0 */
        n++;
    }
    sqlite3_reset(s);
    return n;
}

int store_sched_holds(store_t *st, int64_t job, int64_t *island, int64_t *idx, int cap)
{
    static const char sql[] =
        "SELECT island_id, idx FROM device_holds WHERE job_id = ?1 LIMIT ?2";
    sqlite3_stmt *s = store_stmt(st, sql);
    int n = 0;
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, cap);
    while (n < cap && sqlite3_step(s) == SQLITE_ROW) {
        island[n] = sqlite3_column_int64(s, 0);
        idx[n] = sqlite3_column_int64(s, 1);
        n++;
    }
    sqlite3_reset(s);
    return n;
}

int store_sched_preempt(store_t *st, int64_t victim, int64_t by, int64_t by_priority)
{
    char why[160];
    snprintf(why, sizeof why, "preempted by job %lld (priority %lld), which took its devices",
             (long long)by, (long long)by_priority);
    if (store_begin(st) != 0)
        return -1;
    int live = job_state_is(st, victim, "allocated", "running");
    if (live <= 0) {
        store_rollback(st);
        return live < 0 ? -1 : 1;
    }
    if (job_requeue(st, victim, why, REQUEUE_PREEMPT) != 0) {
        store_rollback(st);
        return -1;
    }
    return store_commit(st);
}

int store_job_retry(store_t *st, int64_t job, const char *why)
{
    static const char sql[] = "SELECT retries < max_retries FROM jobs WHERE id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    int left = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0);
    sqlite3_reset(s);
    return left ? job_requeue(st, job, why, REQUEUE_RETRY)
                : store_job_finish(st, job, "failed", why);
}

int store_worker_lost(store_t *st, int64_t worker, const char *how)
{
    static const char jobs_sql[] =
        "SELECT j.id, j.retries, j.max_retries FROM jobs j"
        " WHERE j.state IN ('allocated','running') AND j.id IN"
        " (SELECT a.job_id FROM devices d JOIN allocations a ON a.island_id = d.island_id"
        "  AND a.lo <= d.idx AND a.hi >= d.idx WHERE d.worker_id = ?1"
        "  UNION SELECT h.job_id FROM device_holds h JOIN devices d"
        "  ON d.island_id = h.island_id AND d.idx = h.idx WHERE d.worker_id = ?1)";
    static const char dev_sql[] =
        "UPDATE devices SET worker_id = NULL, local = NULL WHERE worker_id = ?";
    static const char w_sql[] = "UPDATE workers SET state = 'gone' WHERE id = ?";
    static const char t_sql[] =
        "UPDATE host_tasks SET state = 'cancelled', error = 'worker lost' WHERE worker_id = ?"
        " AND (state = 'leased' OR state = 'blocked')";
    /* In batches: each job handled frees its devices, so the query finds
     * only the rest; it ends when no live job holds a device of the worker. */
    enum { BATCH = 256 };
    int64_t ids[BATCH];
    int used[BATCH], retries[BATCH], n, total = 0;
    sqlite3_stmt *s;
    do {
        if (!(s = store_stmt(st, jobs_sql)))
            return -1;
        sqlite3_bind_int64(s, 1, worker);
        for (n = 0; n < BATCH && sqlite3_step(s) == SQLITE_ROW; n++) {
            ids[n] = sqlite3_column_int64(s, 0);
            used[n] = sqlite3_column_int(s, 1);
            retries[n] = sqlite3_column_int(s, 2);
        }
        sqlite3_reset(s);
        for (int i = 0; i < n; i++) {
            char why[160];
            snprintf(why, sizeof why, "worker %ld was lost (%s)", (long)worker, how);
            int rc = used[i] < retries[i] ? job_requeue(st, ids[i], why, REQUEUE_RETRY)
                                          : store_job_finish(st, ids[i], "failed", why);
            if (rc != 0)
                return -1;
        }
        total += n;
    } while (n == BATCH);
    if (!(s = store_stmt(st, dev_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, w_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, t_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    if (store_step_done(s) != 0)
        return -1;
    store_event(st, 0, "worker", "worker %ld lost (%s), %d jobs affected", (long)worker, how,
                total);
    return 0;
}

/* Stale tasks still leased although their worker was told to abort them
 * at least `window_us` ago: the worker never received them (a poll answer
 * lost with a controller crash), so no report will ever come. They are
 * settled as cancelled, so the poll stops naming their attempt; nothing
 * waits for this (the job's new attempt was admitted at once). A late
 * report for one gets 409 like any other. Returns how many, or -1. Inside
 * the caller's transaction. */
static int abandon_stale(store_t *st, int64_t window_us)
{
    static const char sql[] =
        "UPDATE host_tasks SET state = 'cancelled',"
        " error = 'abandoned: the worker never acknowledged the abort'"
        " WHERE state = 'leased' AND abort_sent_at IS NOT NULL AND abort_sent_at < ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, util_wall_us() - window_us);
    if (store_step_done(s) != 0)
        return -1;
    int n = sqlite3_changes(store_db(st));
    if (n > 0)
        log_warn("%d stale task(s) abandoned: their workers never acknowledged the abort", n);
    return n;
}

/* Expires silent workers (see store.h) and abandons stale tasks whose
 * abort went unanswered for a lease period (at least 500 ms). Returns the
 * number of workers expired plus tasks abandoned; the caller runs
 * admission when it is > 0 (an expiry frees devices). */
int store_sched_expire(store_t *st, int64_t lease_us)
{
    static const char sql[] = "SELECT id FROM workers WHERE state = 'live' AND heartbeat_at < ?";
    static const char any_sql[] =
        "SELECT 1 FROM host_tasks WHERE state = 'leased' AND abort_sent_at IS NOT NULL"
        " AND abort_sent_at < ? LIMIT 1";
    int64_t lost[64];
    int n = 0, stale = 0;
    int64_t window = lease_us > 500000 ? lease_us : 500000;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, util_wall_us() - lease_us);
    while (n < 64 && sqlite3_step(s) == SQLITE_ROW)
        lost[n++] = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    /* Read first, write only when needed: the tick must not take the write
     * lock every 200 ms. */
    if (!(s = store_stmt(st, any_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, util_wall_us() - window);
    stale = sqlite3_step(s) == SQLITE_ROW;
    sqlite3_reset(s);
    if (n == 0 && !stale)
        return 0;
    if (store_begin(st) != 0)
        return -1;
    for (int i = 0; i < n; i++) {
        if (store_worker_lost(st, lost[i], "missed its heartbeat lease") != 0) {
            store_rollback(st);
            return -1;
        }
        log_warn("worker %ld lost: no heartbeat for %ld ms", (long)lost[i], (long)(lease_us / 1000));
    }
    int abandoned = stale ? abandon_stale(st, window) : 0;
    if (abandoned < 0) {
        store_rollback(st);
        return -1;
    }
    return store_commit(st) == 0 ? n + abandoned : -1;
}

/* At controller start, before the API and the scheduler run. What happened
 * while atolld was down is unknown: a poll answer may have been lost after
 * its tasks were marked leased (the worker never got them), and workers may
 * have died. So every allocated or running job starts a new attempt, which
 * does not spend its max_retries (counted in jobs.restarts instead); the
 * old attempt's leased tasks are aborted through the workers' cancel lists
 * (or abandoned), while the new attempt may be admitted at once. Queued jobs stay as
 * they are. Live workers get a fresh lease, so those that kept running are
 * not declared lost; dead ones expire one lease later.
 * Returns the number of jobs requeued, or -1. */
int store_sched_recover(store_t *st)
{
    static const char hb_sql[] = "UPDATE workers SET heartbeat_at = ? WHERE state = 'live'";
    static const char jobs_sql[] =
        "SELECT id FROM jobs WHERE " STORE_JOB_HOLDING("state") " ORDER BY id";
    int64_t *ids = NULL;
    int n = 0, cap = 0;
    if (store_begin(st) != 0)
        return -1;
    sqlite3_stmt *s = store_stmt(st, hb_sql);
    if (!s)
        goto fail;
    sqlite3_bind_int64(s, 1, util_wall_us());
    if (store_step_done(s) != 0 || !(s = store_stmt(st, jobs_sql)))
        goto fail;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (n == cap) {
            int ncap = cap ? cap * 2 : 64;
            int64_t *p = realloc(ids, sizeof *p * (size_t)ncap);
            if (!p) {
                sqlite3_reset(s);
                goto fail;
            }
            ids = p;
            cap = ncap;
        }
        ids[n++] = sqlite3_column_int64(s, 0);
    }
    sqlite3_reset(s);
    for (int i = 0; i < n; i++)
        if (job_requeue(st, ids[i], "controller restarted; running again", REQUEUE_RESTART) != 0)
            goto fail;
    if (n > 0)
        store_event(st, 0, "recovery", "controller restarted: %d running job(s) requeued", n);
    if (store_commit(st) != 0)
        goto fail;
    free(ids);
    return n;
fail:
    store_rollback(st);
    free(ids);
    return -1;
}

int store_sched_feed_jobs(store_t *st, sched_feed_job_t *out, int cap)
{
    static const char sql[] =
        /* In flight: dispatched (a seq) and not finished, through the
         * partial index computations_in_flight. Left to feed: the rest of
         * comps_total, since a live job's dispatched computations are the
         * comps_done that succeeded and those in flight. */
        "SELECT j.id, j.attempt, COALESCE(j.tenant_id, 0), COALESCE(t.share, 1),"
        " (SELECT COUNT(*) FROM computations c WHERE c.job_id = j.id AND c.seq IS NOT NULL"
        "  AND c.state IN ('waiting', 'dispatched')),"
        " j.comps_total - j.comps_done,"
        " (SELECT MIN(s.island_id) FROM slices s WHERE s.job_id = j.id), j.comps_done = 0"
        /* Through jobs_shared_live (schema 013), which the planner passed
         * over for jobs_by_state (schema 034 and before): every live job read, then sorted in a
         * temporary b-tree, on every pass. */
        " FROM jobs j INDEXED BY jobs_shared_live LEFT JOIN tenants t ON t.id = j.tenant_id"
        " WHERE j.shared = 1 AND j.state IN ('allocated', 'running') ORDER BY j.id LIMIT ?1";
    sqlite3_stmt *s = store_stmt(st, sql);
    int n = 0;
    if (!s)
        return -1;
    sqlite3_bind_int(s, 1, cap);
    while (n < cap && sqlite3_step(s) == SQLITE_ROW) {
        out[n].id = sqlite3_column_int64(s, 0);
        out[n].attempt = sqlite3_column_int(s, 1);
        out[n].tenant = sqlite3_column_int64(s, 2);
        out[n].share = sqlite3_column_int64(s, 3);
        out[n].inflight = sqlite3_column_int(s, 4);
        out[n].undispatched = sqlite3_column_int(s, 5) - out[n].inflight;
        out[n].island = sqlite3_column_int64(s, 6);
        out[n].fresh = sqlite3_column_int(s, 7);
        out[n].shard_us = 0;
        n++;
    }
    sqlite3_reset(s);
    return n;
}

typedef struct idle_row {
    int64_t worker, start, ready, end;
} idle_row_t;

static int idle_row_cmp(const void *a, const void *b)
{
    const idle_row_t *x = a, *y = b;
    if (x->worker != y->worker)
        return x->worker < y->worker ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

/* Sums, per worker, the gaps in rows sorted by (worker, start): from the
 * end of every earlier task to a task's inputs ready, its devices were not
 * computing (no task there yet, the worker's hand-off between tasks, its
 * inputs on their way): the complement of device busy time as the
 * accounting counts it (finished_us - inputs_ready_us). */
static void idle_sum(const idle_row_t *rw, int n, int64_t *idle_us, int64_t *span_us)
{
    *idle_us = *span_us = 0;
    for (int i = 0; i < n;) {
        int64_t first = rw[i].start, end = rw[i].end;
        int k = i + 1;
        for (; k < n && rw[k].worker == rw[i].worker; k++) {
            if (rw[k].ready > end)
                *idle_us += rw[k].ready - end;
            if (rw[k].end > end)
                end = rw[k].end;
        }
        *span_us += end - first;
        i = k;
    }
}

int store_sched_island_idle(store_t *st, int64_t island, int64_t since_us, int64_t *idle_us,
                            int64_t *span_us, int *ntasks)
{
    static const char sql[] =
        /* Newest first through host_tasks_by_finish, back to since_us. */
        "SELECT h.worker_id, h.started_us, h.inputs_ready_us, h.finished_us FROM host_tasks h"
        " JOIN jobs j ON j.id = h.job_id"
        " WHERE h.finished_us > ?2 AND h.island_id = ?1 AND h.state = 'succeeded'"
        " AND j.shared = 1 AND h.finished_us >= h.inputs_ready_us"
        " AND h.inputs_ready_us >= h.started_us"
        " ORDER BY h.finished_us DESC LIMIT ?3";
    idle_row_t rw[STORE_IDLE_TASKS];
    int n = 0, step = SQLITE_DONE;
    sqlite3_stmt *s = store_stmt(st, sql);
    *idle_us = *span_us = 0;
    *ntasks = 0;
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, island);
    sqlite3_bind_int64(s, 2, since_us);
    sqlite3_bind_int(s, 3, STORE_IDLE_TASKS);
    while (n < STORE_IDLE_TASKS && (step = sqlite3_step(s)) == SQLITE_ROW) {
        rw[n].worker = sqlite3_column_int64(s, 0);
        rw[n].start = sqlite3_column_int64(s, 1);
        rw[n].ready = sqlite3_column_int64(s, 2);
        rw[n++].end = sqlite3_column_int64(s, 3);
    }
    sqlite3_reset(s);
    if (step != SQLITE_ROW && step != SQLITE_DONE)
        return -1;
    qsort(rw, (size_t)n, sizeof *rw, idle_row_cmp);
    idle_sum(rw, n, idle_us, span_us);
    *ntasks = n;
    return 0;
}

double store_sched_shard_us(store_t *st, int64_t job, int attempt)
{
    static const char sql[] =
        /* Newest first through host_tasks_by_job. */
        "SELECT SUM((h.finished_us - h.inputs_ready_us) * h.nshards) * 1.0 / SUM(h.nshards)"
        " FROM (SELECT finished_us, inputs_ready_us, nshards FROM host_tasks"
        "       WHERE job_id = ?1 AND attempt = ?2 AND state = 'succeeded'"
        "       AND finished_us >= inputs_ready_us ORDER BY comp_idx DESC LIMIT 16) h";
    sqlite3_stmt *s = store_stmt(st, sql);
    double us = -1;
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, attempt);
    if (sqlite3_step(s) == SQLITE_ROW)
        us = sqlite3_column_double(s, 0);       /* NULL (none finished) reads 0 */
    sqlite3_reset(s);
    return us;
}

int store_sched_slice_devices(store_t *st, int64_t job, const char *slice, int64_t *island,
                              int64_t **devices)
{
    static const char sql[] =
        "SELECT island_id, devices FROM slices WHERE job_id = ?1 AND name = ?2";
    sqlite3_stmt *s = store_stmt(st, sql);
    int n = -1;
    *devices = NULL;
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_text(s, 2, slice, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) {
        *island = sqlite3_column_int64(s, 0);
        n = idx_list_parse((const char *)sqlite3_column_text(s, 1), devices);
    }
    sqlite3_reset(s);
    return n;
}
