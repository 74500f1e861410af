/* api_cluster.c - islands, workers, health and metrics. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "util.h"

/* Tenant views (DESIGN.md Part E): a tenant sees its own job ids only.
 * Admin, read and auth-off callers (req->tenant 0) see everything. */

/* Jobs whose tenant was looked up for one view; the devices of one job are
 * many, its lookups one. */
#define VIEW_JOBS_CACHED 64

typedef struct view_jobs {
    int64_t id[VIEW_JOBS_CACHED];
    int own[VIEW_JOBS_CACHED];
    int n;
} view_jobs_t;

static int view_job_own(store_t *st, view_jobs_t *vj, int64_t tenant, int64_t job)
{
    for (int i = 0; i < vj->n; i++)
        if (vj->id[i] == job)
            return vj->own[i];
    int own = store_job_tenant(st, job) == tenant;
    if (vj->n < VIEW_JOBS_CACHED) {
        vj->id[vj->n] = job;
        vj->own[vj->n++] = own;
    }
    return own;
}

/* A shared device's holders ("jobs", DESIGN Part D) as the tenant may see
 * them: its own job ids only. Returns the first own holder (0: none) and
 * sets *other when another tenant's job holds the device too. */
static int64_t holders_tenant_view(store_t *st, json_t *d, int64_t tenant, view_jobs_t *vj,
                                   int *other)
{
    json_t *jobs = json_object_get(d, "jobs");
    int64_t first_own = 0;
    for (size_t k = json_array_size(jobs); k-- > 0;) {
        int64_t job = json_integer_value(json_array_get(jobs, k));
        if (json_is_integer(json_array_get(jobs, k)) && view_job_own(st, vj, tenant, job)) {
            first_own = job;
        } else {
            json_array_remove(jobs, k);
            *other = 1;
        }
    }
    if (jobs && json_array_size(jobs) == 0)
        json_object_del(d, "jobs");
    return first_own;
}

/* In an island object: a device held by another tenant's job (or a job
 * without a tenant) shows "tenant": "other" instead of its job and slice;
 * a shared device lists the tenant's own holders only, "tenant": "other"
 * saying that another tenant's job holds it too, and shows the tenant's
 * own job and slice there in place of the other's. (held_bytes stays the
 * device's total: what room a shared job of the tenant's has.) */
static void island_tenant_view(store_t *st, json_t *isl, int64_t tenant, view_jobs_t *vj)
{
    size_t i;
    json_t *d;
    const char *island = json_string_value(json_object_get(isl, "name"));
    json_array_foreach(json_object_get(isl, "devices"), i, d) {
        json_t *job = json_object_get(d, "job");
        int other = 0;
        int64_t own = holders_tenant_view(st, d, tenant, vj, &other);
        if (json_is_integer(job) && !view_job_own(st, vj, tenant, json_integer_value(job))) {
            other = 1;
            json_object_del(d, "slice");    /* the other job's slice name */
            char slice[NAME_MAX_LEN];
            if (own > 0) {
                json_object_set_new(d, "job", json_integer(own));
                if (island && store_job_slice_at(st, own, island,
                                                 json_integer_value(json_object_get(d, "index")),
                                                 slice, sizeof slice) == STORE_OK)
                    json_object_set_new(d, "slice", json_string(slice));
            } else {
                json_object_del(d, "job");
            }
        }
        if (other)
            json_object_set_new(d, "tenant", json_string("other"));
    }
}

void api_islands_list(http_req_t *req, http_resp_t *resp)
{
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *v = store_islands_json(st);
    if (v && req->tenant > 0) {
        view_jobs_t vj = {.n = 0};
        size_t i;
        json_t *isl;
        json_array_foreach(json_object_get(v, "islands"), i, isl)
            island_tenant_view(st, isl, req->tenant, &vj);
    }
    if (v)
        http_json(resp, 200, v);
    else
        http_problem(resp, 500, NULL, "could not read islands");
}

void api_islands_get(http_req_t *req, http_resp_t *resp)
{
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *v = store_island_json(st, req->params[0]);
    if (v && req->tenant > 0) {
        view_jobs_t vj = {.n = 0};
        island_tenant_view(st, v, req->tenant, &vj);
    }
    if (v)
        http_json(resp, 200, v);
    else
        http_problem(resp, 404, "name", "no island named '%.64s'", req->params[0]);
}

void api_workers_list(http_req_t *req, http_resp_t *resp)
{
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *v = store_workers_json(st, api_cfg.lease_us);
    if (v && req->tenant > 0) {
        /* Where workers listen and run is for operators, not tenants. */
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(v, "workers"), i, w) {
            json_object_del(w, "data_addr");
            json_object_del(w, "host");
            json_object_del(w, "pid");
        }
    }
    if (v)
        http_json(resp, 200, v);
    else
        http_problem(resp, 500, NULL, "could not read workers");
}

void api_healthz(http_req_t *req, http_resp_t *resp)
{
    (void)req;
    store_t *st = api_store(resp);
    if (!st)
        return;
    /* Healthy = serving HTTP and the database answers. */
    sqlite3_stmt *s = store_stmt(st, "SELECT COUNT(*) FROM islands");
    int ok = s && sqlite3_step(s) == SQLITE_ROW;
    if (s)
        sqlite3_reset(s);
    if (ok)
        http_json(resp, 200, json_pack("{s:s, s:s}", "status", "ok", "version", ATOLL_VERSION));
    else
        http_problem(resp, 503, "db", "database not answering");
}

/* The store's own families: write transactions, group-commit rounds,
 * checkpoints and the jobs retention deleted. */
static size_t metrics_store(char *buf, size_t len, size_t cap)
{
    uint64_t runs, frames, forced, kicks, mem, file, db_mem, db_file;
    store_ckpt_counts(&runs, &frames, &forced, &kicks);
    store_file_reads(1, &mem, &file);
    store_file_reads(0, &db_mem, &db_file);
    return util_appendf(buf, len, cap,
                        "# HELP atoll_store_write_transactions_total SQLite write"
                        " transactions committed.\n"
                        "# TYPE atoll_store_write_transactions_total counter\n"
                        "atoll_store_write_transactions_total %lu\n"
                        "# HELP atoll_store_sync_rounds_total Group commit: fdatasync rounds"
                        " of the WAL.\n"
                        "# TYPE atoll_store_sync_rounds_total counter\n"
                        "atoll_store_sync_rounds_total %lu\n"
                        "# HELP atoll_store_sync_waits_total Writes acknowledged only after a"
                        " sync round (submits, cancels, tenant changes).\n"
                        "# TYPE atoll_store_sync_waits_total counter\n"
                        "atoll_store_sync_waits_total %lu\n"
                        "# HELP atoll_store_checkpoints_total WAL checkpoints run by the"
                        " checkpointer thread (none inside a commit).\n"
                        "# TYPE atoll_store_checkpoints_total counter\n"
                        "atoll_store_checkpoints_total %lu\n"
                        "# HELP atoll_store_checkpoint_frames_total WAL frames copied into"
                        " the database by checkpoints.\n"
                        "# TYPE atoll_store_checkpoint_frames_total counter\n"
                        "atoll_store_checkpoint_frames_total %lu\n"
                        "# HELP atoll_store_checkpoints_forced_total RESTART checkpoints (the"
                        " WAL outgrew what passive ones kept up with).\n"
                        "# TYPE atoll_store_checkpoints_forced_total counter\n"
                        "atoll_store_checkpoints_forced_total %lu\n"
                        "# HELP atoll_store_checkpoint_requests_total Commits that asked the"
                        " checkpointer for a checkpoint (the WAL gained 1,000 pages since the"
                        " last one).\n"
                        "# TYPE atoll_store_checkpoint_requests_total counter\n"
                        "atoll_store_checkpoint_requests_total %lu\n"
                        "# HELP atoll_store_wal_reads_total Reads of the WAL, answered from"
                        " its copy in memory or from the file.\n"
                        "# TYPE atoll_store_wal_reads_total counter\n"
                        "atoll_store_wal_reads_total{from=\"memory\"} %lu\n"
                        "atoll_store_wal_reads_total{from=\"file\"} %lu\n"
                        "# HELP atoll_store_db_reads_total Reads of the database file,"
                        " answered from its copy in memory or from the file.\n"
                        "# TYPE atoll_store_db_reads_total counter\n"
                        "atoll_store_db_reads_total{from=\"memory\"} %lu\n"
                        "atoll_store_db_reads_total{from=\"file\"} %lu\n"
                        "# HELP atoll_jobs_pruned_total Ended jobs deleted past their retention"
                        " (--keep-jobs-s) since atolld started.\n"
                        "# TYPE atoll_jobs_pruned_total counter\n"
                        "atoll_jobs_pruned_total %lu\n",
                        (unsigned long)store_write_transactions(),
                        (unsigned long)store_sync_rounds(), (unsigned long)store_sync_waits(),
                        (unsigned long)runs, (unsigned long)frames, (unsigned long)forced,
                        (unsigned long)kicks, (unsigned long)mem, (unsigned long)file,
                        (unsigned long)db_mem, (unsigned long)db_file,
                        (unsigned long)store_jobs_pruned());
}

/* The workers' data-plane drop counters (summed from their heartbeats);
 * none when they cannot be read (a counter must not read as zero then:
 * Prometheus would take it for a reset). */
static size_t metrics_dplane(store_t *st, char *buf, size_t len, size_t cap)
{
    int64_t dp[STORE_DPLANE_TOTALS] = {0};
    if (store_dplane_totals(st, dp) != 0)
        return len;
    return util_appendf(buf, len, cap,
                        "# HELP atoll_dplane_dropped_frames_total Data-plane frames workers"
                        " dropped (not for a task of theirs, over the unclaimed cap, expired).\n"
                        "# TYPE atoll_dplane_dropped_frames_total counter\n"
                        "atoll_dplane_dropped_frames_total %lld\n"
                        "# HELP atoll_dplane_dropped_bytes_total Payload bytes of those frames.\n"
                        "# TYPE atoll_dplane_dropped_bytes_total counter\n"
                        "atoll_dplane_dropped_bytes_total %lld\n"
                        "# HELP atoll_dplane_refused_connections_total Data connection"
                        " requests workers rejected (over the cap).\n"
                        "# TYPE atoll_dplane_refused_connections_total counter\n"
                        "atoll_dplane_refused_connections_total %lld\n"
                        "# HELP atoll_dplane_bad_frames_total Data-plane messages dropped"
                        " for a bad header (size, magic, shape, length claim).\n"
                        "# TYPE atoll_dplane_bad_frames_total counter\n"
                        "atoll_dplane_bad_frames_total %lld\n"
                        "# HELP atoll_dplane_bad_key_frames_total Data-plane messages dropped"
                        " because their key was not that of the job attempt they claimed.\n"
                        "# TYPE atoll_dplane_bad_key_frames_total counter\n"
                        "atoll_dplane_bad_key_frames_total %lld\n",
                        (long long)dp[0], (long long)dp[1], (long long)dp[2], (long long)dp[3],
                        (long long)dp[4]);
}

/* One family with a single unlabelled sample. */
static size_t metric_one(char *buf, size_t len, size_t cap, const char *name, const char *type,
                         const char *help, uint64_t value)
{
    return util_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s %s\n%s %lu\n", name, help, name,
                        type, name, (unsigned long)value);
}

/* The HTTP front door's counters: header timeouts, parked requests, the
 * workers' polls and reports, responses by class and by code. */
static size_t metrics_http(char *buf, size_t len, size_t cap)
{
    uint64_t parks, reads, parked_now, resumes, rreq, ritems;
    api_worker_poll_counts(&parks, &reads);
    http_park_counts(&parked_now, &resumes);
    api_worker_report_counts(&rreq, &ritems);
    len = metric_one(buf, len, cap, "atoll_http_header_timeouts_total", "counter",
                     "Connections closed because a request's headers did not arrive in time.",
                     http_header_timeouts());
    len = metric_one(buf, len, cap, "atoll_worker_poll_parks_total", "counter",
                     "Worker polls that parked with nothing to answer yet.", parks);
    len = metric_one(buf, len, cap, "atoll_worker_poll_reads_total", "counter",
                     "Worker polls' reads of the store (a parked poll reads only after a commit"
                     " that can change its answer).", reads);
    len = metric_one(buf, len, cap, "atoll_http_parked", "gauge",
                     "Requests parked now (long polls, job waits).", parked_now);
    len = metric_one(buf, len, cap, "atoll_http_park_resumes_total", "counter",
                     "Parked requests resumed: when what they wait for changed, or their time"
                     " was up.", resumes);
    len = metric_one(buf, len, cap, "atoll_worker_report_requests_total", "counter",
                     "Worker report requests (single or batch).", rreq);
    len = metric_one(buf, len, cap, "atoll_worker_report_items_total", "counter",
                     "Host-task reports those requests carried (a worker sends what queued while"
                     " its last request was out).", ritems);
    len = metric_one(buf, len, cap, "atoll_store_report_transactions_total", "counter",
                     "Transactions the report applier committed (report requests that queued"
                     " together share one).", store_report_transactions());
    len = metric_one(buf, len, cap, "atoll_store_carried_computations", "gauge",
                     "Computations whose progress from their reported shards is held in memory"
                     " until their last shards' report (or written as it stands after 100 ms).",
                     (uint64_t)store_carried_computations());
    len = metric_one(buf, len, cap, "atoll_store_carried_shown_total", "counter",
                     "Carried progress written as it stood, its computation's last shards not"
                     " reported 100 ms after its first.", store_carried_shown());
    uint64_t counts[6];
    http_counts(counts);
    len = util_appendf(buf, len, cap,
                       "# HELP atoll_http_responses Responses sent by status class.\n"
                       "# TYPE atoll_http_responses counter\n");
    for (int c = 1; c <= 5; c++)
        len = util_appendf(buf, len, cap, "atoll_http_responses{code=\"%dxx\"} %lu\n", c,
                           (unsigned long)counts[c]);
    static _Thread_local uint64_t codes[HTTP_CODE_MAX];
    http_code_counts_get(codes);
    len = util_appendf(buf, len, cap,
                       "# HELP atoll_http_requests_total Requests answered, by status code.\n"
                       "# TYPE atoll_http_requests_total counter\n");
    for (int c = 100; c < HTTP_CODE_MAX; c++)
        if (codes[c])
            len = util_appendf(buf, len, cap, "atoll_http_requests_total{code=\"%d\"} %lu\n",
                               c, (unsigned long)codes[c]);
    return len;
}

/* /metrics: the store's text (jobs, tasks, devices, tenants) followed by
 * the families of each layer; the scheduler's come through its hook. */
void api_metrics(http_req_t *req, http_resp_t *resp)
{
    store_t *st = api_store(resp);
    if (!st)
        return;
    char *text = store_metrics_text(st, req->tenant);
    if (!text) {
        http_problem(resp, 500, NULL, "could not build metrics");
        return;
    }
    /* The families appended below take ~10 KB with one island, ~14 KB with
     * SCHED_MAX_ISLANDS; util_appendf would cut anything past cap. */
    size_t len = strlen(text), cap = len + 32768;
    char *all = realloc(text, cap);
    if (!all) {
        free(text);
        http_problem(resp, 500, NULL, "out of memory");
        return;
    }
    if (api_cfg.scheduler_metrics)
        len = api_cfg.scheduler_metrics(all, len, cap);
    len = metrics_store(all, len, cap);
    len = util_hist_prom(all, len, cap, store_lock_histogram(STORE_LOCK_WAIT),
                         "atoll_store_write_lock_wait_seconds",
                         "Time a write transaction waited for the store's write lock.");
    len = util_hist_prom(all, len, cap, store_lock_histogram(STORE_LOCK_HOLD),
                         "atoll_store_write_lock_hold_seconds",
                         "Time a write transaction held the store's write lock.");
    len = util_hist_prom(all, len, cap, store_sync_histogram(), "atoll_store_sync_seconds",
                         "Group commit: each round's fdatasync of the WAL.");
    len = util_hist_prom(all, len, cap, api_durable_histogram(),
                         "atoll_http_durable_wait_seconds",
                         "Time an acknowledged write (a submit's 201, a cancel's 200) waited"
                         " for its group-commit round, from asking to answering.");
    len = metrics_dplane(st, all, len, cap);
    len = metrics_http(all, len, cap);
    free(resp->body);
    resp->body = all;
    resp->len = len;
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
}
