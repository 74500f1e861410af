/* store_tenants.c - tenants and their token hashes (auth.h). */
#include "store_internal.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

int64_t store_tenant_by_hash(store_t *st, const char *hash)
{
    static const char sql[] =
        "SELECT id FROM tenants WHERE token_hash = ? AND revoked_at IS NULL";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return 0;
    sqlite3_bind_text(s, 1, hash, -1, SQLITE_STATIC);
    int64_t id = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    return id;
}

int64_t store_job_tenant(store_t *st, int64_t job)
{
    static const char sql[] = "SELECT COALESCE(tenant_id, 0) FROM jobs WHERE id = ?";
    return store_scalar(st, sql, job, -1);
}

int store_tenant_limits(store_t *st, int64_t tenant, tenant_limits_t *out)
{
    static const char sql[] =
        "SELECT quota_devices, share, max_queued, max_priority FROM tenants WHERE id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, tenant);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        out->quota = sqlite3_column_int64(s, 0);
        out->share = sqlite3_column_int64(s, 1);
        out->max_queued = sqlite3_column_int64(s, 2);
        out->max_priority = sqlite3_column_int64(s, 3);
    }
    sqlite3_reset(s);
    return rc == SQLITE_ROW ? STORE_OK : rc == SQLITE_DONE ? STORE_NOTFOUND : STORE_ERR;
}

int store_tenant_create(store_t *st, const char *name, const char *hash,
                        const tenant_limits_t *lim, int64_t *id)
{
    static const char sql[] =
        "INSERT INTO tenants(name, token_hash, quota_devices, share, max_queued, max_priority,"
        " created_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT(name) DO NOTHING";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, hash, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, lim->quota);
    sqlite3_bind_int64(s, 4, lim->share);
    sqlite3_bind_int64(s, 5, lim->max_queued);
    sqlite3_bind_int64(s, 6, lim->max_priority);
    sqlite3_bind_int64(s, 7, util_wall_us());
    if (store_step_done(s) != 0)
        return STORE_ERR;
    if (sqlite3_changes(store_db(st)) == 0)
        return STORE_CONFLICT;
    *id = sqlite3_last_insert_rowid(store_db(st));
    store_event(st, 0, "tenant",
                "tenant %s created (quota %ld devices, share %ld, max_queued %ld,"
                " max_priority %ld)", name, (long)lim->quota, (long)lim->share,
                (long)lim->max_queued, (long)lim->max_priority);
    return STORE_OK;
}

int store_tenant_revoke(store_t *st, const char *name)
{
    static const char sql[] =
        "UPDATE tenants SET token_hash = NULL, revoked_at = ? WHERE name = ?"
        " AND revoked_at IS NULL";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, util_wall_us());
    sqlite3_bind_text(s, 2, name, -1, SQLITE_STATIC);
    if (store_step_done(s) != 0)
        return STORE_ERR;
    if (sqlite3_changes(store_db(st)) == 0)
        return STORE_NOTFOUND;
    store_event(st, 0, "tenant", "tenant %s revoked", name);
    return STORE_OK;
}

json_t *store_tenants_json(store_t *st)
{
    static const char sql[] =
        "SELECT t.id, t.name, t.quota_devices, t.share, t.created_at, t.revoked_at,"
        " (SELECT COALESCE(SUM(d.n), 0) FROM (" STORE_HELD_SQL ") d JOIN jobs j"
        "  ON j.id = d.job_id WHERE j.tenant_id = t.id),"
        " (SELECT COUNT(*) FROM jobs j WHERE j.tenant_id = t.id AND j.state = 'queued'),"
        " t.max_queued, t.max_priority"
        " FROM tenants t ORDER BY t.id";
    json_t *arr = json_array();
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!arr || !s) {
        json_decref(arr);
        return NULL;
    }
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *t = json_object();
        json_object_set_new(t, "id", json_integer(sqlite3_column_int64(s, 0)));
        json_object_set_new(t, "name", json_string((const char *)sqlite3_column_text(s, 1)));
        /* 0 in the store = no cap: shown as null (absent on creation). */
        int64_t quota = sqlite3_column_int64(s, 2);
        json_object_set_new(t, "quota_devices", quota ? json_integer(quota) : json_null());
        json_object_set_new(t, "share", json_integer(sqlite3_column_int64(s, 3)));
        json_object_set_new(t, "created_at", store_time_json(s, 4));
        json_object_set_new(t, "revoked_at", store_time_json(s, 5));
        json_object_set_new(t, "devices_in_use", json_integer(sqlite3_column_int64(s, 6)));
        json_object_set_new(t, "jobs_queued", json_integer(sqlite3_column_int64(s, 7)));
        json_object_set_new(t, "max_queued", json_integer(sqlite3_column_int64(s, 8)));
        json_object_set_new(t, "max_priority", json_integer(sqlite3_column_int64(s, 9)));
        json_array_append_new(arr, t);
    }
    sqlite3_reset(s);
    return json_pack("{s:o}", "tenants", arr);
}

/* ------------------------------------------------------------------ */
/* Device time (DESIGN Part D). */

int store_usage_add(store_t *st, int64_t job, int64_t device_us)
{
    static const char sql[] =
        "INSERT INTO tenant_usage (tenant_id, device_us)"
        " VALUES (COALESCE((SELECT tenant_id FROM jobs WHERE id = ?1), 0), ?2)"
        " ON CONFLICT (tenant_id) DO UPDATE SET device_us = device_us + excluded.device_us";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, device_us);
    return store_step_done(s);
}

/* Device time in [from, now) of the succeeded host tasks of the jobs the
 * WHERE clause picks (j: jobs), each task's busy span clipped to the window. */
#define WINDOW_US_SQL(who)                                                                  \
    "COALESCE((SELECT SUM(MAX(0, MIN(h.finished_us, ?2) - MAX(h.inputs_ready_us, ?1))"     \
    " * h.nshards) FROM host_tasks h JOIN jobs j ON j.id = h.job_id"                        \
    " WHERE " who " AND h.finished_us >= ?1 AND h.state = 'succeeded'), 0)"

static json_t *usage_row(const char *name, int64_t share, int64_t us, int64_t running,
                         int64_t queued)
{
    return json_pack("{s:s, s:I, s:f, s:I, s:I}", "name", name, "share", (json_int_t)share,
                     "device_seconds", (double)us / 1e6, "jobs_running", (json_int_t)running,
                     "jobs_queued", (json_int_t)queued);
}

static int usage_tenants(store_t *st, int64_t from, int64_t now, int64_t only, json_t *arr)
{
    static const char sql[] =
        "SELECT t.id, t.name, t.share, " WINDOW_US_SQL("j.tenant_id = t.id") ","
        " (SELECT COUNT(*) FROM jobs j WHERE j.tenant_id = t.id"
        "  AND j.state IN ('allocated', 'running')),"
        " (SELECT COUNT(*) FROM jobs j WHERE j.tenant_id = t.id AND j.state = 'queued')"
        " FROM tenants t WHERE t.revoked_at IS NULL AND (?3 = 0 OR t.id = ?3) ORDER BY t.id";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, from);
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_int64(s, 3, only);
    while (sqlite3_step(s) == SQLITE_ROW)
        json_array_append_new(arr, usage_row((const char *)sqlite3_column_text(s, 1),
                                             sqlite3_column_int64(s, 2),
                                             sqlite3_column_int64(s, 3),
                                             sqlite3_column_int64(s, 4),
                                             sqlite3_column_int64(s, 5)));
    sqlite3_reset(s);
    return 0;
}

/* Without auth every job is its own tenant of share 1 ("job-ID"): those
 * queued or holding devices now, or whose tasks finished in the window. */
static int usage_jobs(store_t *st, int64_t from, int64_t now, json_t *arr)
{
    static const char sql[] =
        "SELECT j.id, j.state, " WINDOW_US_SQL("j.id = o.id") " FROM jobs o"
        " JOIN jobs j ON j.id = o.id"
        " WHERE o.tenant_id IS NULL AND o.id IN"
        " (SELECT id FROM jobs WHERE tenant_id IS NULL"
        "  AND " STORE_JOB_LIVE("state")
        "  UNION SELECT job_id FROM host_tasks WHERE finished_us >= ?1)"
        " ORDER BY o.id LIMIT 1000";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, from);
    sqlite3_bind_int64(s, 2, now);
    while (sqlite3_step(s) == SQLITE_ROW) {
        char name[32];
        const char *state = (const char *)sqlite3_column_text(s, 1);
        snprintf(name, sizeof name, "job-%lld", (long long)sqlite3_column_int64(s, 0));
        int running = strcmp(state, "allocated") == 0 || strcmp(state, "running") == 0;
        json_array_append_new(arr, usage_row(name, 1, sqlite3_column_int64(s, 2), running,
                                             strcmp(state, "queued") == 0));
    }
    sqlite3_reset(s);
    return 0;
}

json_t *store_tenant_stats(store_t *st, int64_t seconds, int64_t only_tenant)
{
    int64_t now = util_wall_us(), from = now - seconds * 1000000;
    json_t *arr = json_array();
    if (!arr || usage_tenants(st, from, now, only_tenant, arr) != 0 ||
        (only_tenant == 0 && usage_jobs(st, from, now, arr) != 0)) {
        json_decref(arr);
        return NULL;
    }
    return json_pack("{s:I, s:o}", "seconds", (json_int_t)seconds, "tenants", arr);
}
