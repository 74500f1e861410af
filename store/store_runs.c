/* store_runs.c - users' programs' processes and output (DESIGN.md Part F;
 * schema/014_run.sql). Workers write (store_run_*_put), the public API
 * reads (store_run_log_read, store_run_processes). */
#include "store_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int store_run_owned(store_t *st, int64_t worker, int64_t job, int attempt, int comp,
                    int process)
{
    /* A run computation's (its payload carries "run"), and a process it
     * has: ranks count shards or hosts, never more than its shard count.
     * So a worker cannot open output streams for computations that start
     * no process, nor a million streams of one (8 MiB kept each). */
    static const char sql[] =
        "SELECT 1 FROM host_tasks t JOIN computations c ON c.job_id = t.job_id"
        " AND c.idx = t.comp_idx JOIN comp_payloads p ON p.job_id = t.job_id"
        " AND p.attempt = t.attempt AND p.comp_idx = t.comp_idx"
        " WHERE t.job_id = ?1 AND t.attempt = ?2 AND t.comp_idx = ?3 AND t.worker_id = ?4"
        " AND ?5 < c.shards_total AND json_type(p.payload, '$.computation.run') IS NOT NULL"
        " LIMIT 1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, attempt);
    sqlite3_bind_int(s, 3, comp);
    sqlite3_bind_int64(s, 4, worker);
    sqlite3_bind_int(s, 5, process);
    int rc = sqlite3_step(s);
    sqlite3_reset(s);
    return rc == SQLITE_ROW ? STORE_OK : rc == SQLITE_DONE ? STORE_NOTFOUND : STORE_ERR;
}

/* Every statement here numbers the key ?1 job, ?2 comp, ?3 process,
 * ?4 attempt. */
static void bind_key(sqlite3_stmt *s, const store_run_key_t *k)
{
    sqlite3_bind_int64(s, 1, k->job);
    sqlite3_bind_int(s, 2, k->comp);
    sqlite3_bind_int(s, 3, k->process);
    sqlite3_bind_int(s, 4, k->attempt);
}

/* Deletes the oldest chunks of one stream beyond STORE_RUN_LOG_KEEP bytes. */
static int log_trim(store_t *st, const store_run_key_t *k, int stream)
{
    static const char sel[] =
        "SELECT id, length(bytes) FROM run_logs WHERE job_id = ?1 AND comp_idx = ?2"
        " AND process = ?3 AND attempt = ?4 AND stream = ?5 ORDER BY id DESC";
    static const char del[] =
        "DELETE FROM run_logs WHERE job_id = ?1 AND comp_idx = ?2 AND process = ?3"
        " AND attempt = ?4 AND stream = ?5 AND id <= ?6";
    sqlite3_stmt *s = store_stmt(st, sel);
    if (!s)
        return -1;
    bind_key(s, k);
    sqlite3_bind_int(s, 5, stream);
    int64_t total = 0, cut = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        total += sqlite3_column_int64(s, 1);
        if (total > STORE_RUN_LOG_KEEP) {
            cut = sqlite3_column_int64(s, 0);
            break;
        }
    }
    sqlite3_reset(s);
    if (!cut)
        return 0;
    if (!(s = store_stmt(st, del)))
        return -1;
    bind_key(s, k);
    sqlite3_bind_int(s, 5, stream);
    sqlite3_bind_int64(s, 6, cut);
    return store_step_done(s);
}

int store_run_log_put(store_t *st, const store_run_key_t *k, const store_run_seg_t *segs,
                      int nsegs)
{
    static const char sql[] =
        "INSERT INTO run_logs(job_id, comp_idx, process, attempt, stream, bytes)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6)";
    int touched[3] = {0, 0, 0};
    if (store_begin(st) != 0)
        return STORE_ERR;
    for (int i = 0; i < nsegs; i++) {
        sqlite3_stmt *s = store_stmt(st, sql);
        if (!s)
            goto fail;
        bind_key(s, k);
        sqlite3_bind_int(s, 5, segs[i].stream);
        sqlite3_bind_blob64(s, 6, segs[i].data, segs[i].len, SQLITE_STATIC);
        if (store_step_done(s) != 0)
            goto fail;
        touched[segs[i].stream] = 1;
    }
    for (int stream = 1; stream <= 2; stream++)
        if (touched[stream] && log_trim(st, k, stream) != 0)
            goto fail;
    return store_commit(st) == 0 ? STORE_OK : STORE_ERR;
fail:
    store_rollback(st);
    return STORE_ERR;
}

/* One process-state event (validated by the caller). */
static int proc_put(store_t *st, int64_t worker, const json_t *ev)
{
    static const char run[] =
        "INSERT INTO run_procs(job_id, attempt, comp_idx, process, worker_id, host, pid, state,"
        " started_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'running', ?8)"
        " ON CONFLICT DO UPDATE SET worker_id = ?5, host = ?6, pid = ?7, state = 'running',"
        " exit_code = NULL, signal = NULL, started_at = ?8, ended_at = NULL";
    static const char end[] =
        "UPDATE run_procs SET state = ?5, exit_code = ?6, signal = ?7, ended_at = ?8"
        " WHERE job_id = ?1 AND attempt = ?2 AND comp_idx = ?3 AND process = ?4";
    const char *state = json_string_value(json_object_get(ev, "state"));
    int running = strcmp(state, "running") == 0;
    sqlite3_stmt *s = store_stmt(st, running ? run : end);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, json_integer_value(json_object_get(ev, "job")));
    sqlite3_bind_int64(s, 2, json_integer_value(json_object_get(ev, "attempt")));
    sqlite3_bind_int64(s, 3, json_integer_value(json_object_get(ev, "comp")));
    sqlite3_bind_int64(s, 4, json_integer_value(json_object_get(ev, "process")));
    if (running) {
        sqlite3_bind_int64(s, 5, worker);
        sqlite3_bind_text(s, 6, json_string_value(json_object_get(ev, "host")), -1,
                          SQLITE_STATIC);
        sqlite3_bind_int64(s, 7, json_integer_value(json_object_get(ev, "pid")));
    } else {
        sqlite3_bind_text(s, 5, state, -1, SQLITE_STATIC);
        const json_t *code = json_object_get(ev, "exit_code"), *sig = json_object_get(ev, "signal");
        if (code)
            sqlite3_bind_int64(s, 6, json_integer_value(code));
        if (sig)
            sqlite3_bind_int64(s, 7, json_integer_value(sig));
    }
    sqlite3_bind_int64(s, 8, util_wall_us());
    return store_step_done(s);
}

int store_run_procs_put(store_t *st, int64_t worker, const json_t *events)
{
    if (store_begin(st) != 0)
        return STORE_ERR;
    for (size_t i = 0; i < json_array_size(events); i++)
        if (proc_put(st, worker, json_array_get(events, i)) != 0) {
            store_rollback(st);
            return STORE_ERR;
        }
    return store_commit(st) == 0 ? STORE_OK : STORE_ERR;
}

int store_run_latest_attempt(store_t *st, int64_t job, int comp, int process)
{
    static const char sql[] =
        "SELECT coalesce(max(attempt), (SELECT attempt FROM jobs WHERE id = ?1)) FROM"
        " (SELECT attempt FROM run_procs WHERE job_id = ?1"
        " AND comp_idx = ?2 AND process = ?3 UNION ALL SELECT attempt FROM run_logs"
        " WHERE job_id = ?1 AND comp_idx = ?2 AND process = ?3)";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, comp);
    sqlite3_bind_int(s, 3, process);
    int a = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL
                ? sqlite3_column_int(s, 0) : -1;
    sqlite3_reset(s);
    return a;
}

int store_run_log_read(store_t *st, const store_run_key_t *k, int64_t after_id, size_t max,
                       char **buf, size_t *len, int64_t *last_id)
{
    static const char sql[] =
        "SELECT id, bytes FROM run_logs WHERE job_id = ?1 AND comp_idx = ?2 AND process = ?3"
        " AND attempt = ?4 AND id > ?5 ORDER BY id";
    sqlite3_stmt *s = store_stmt(st, sql);
    *buf = NULL;
    *len = 0;
    *last_id = after_id;
    if (!s)
        return STORE_ERR;
    bind_key(s, k);
    sqlite3_bind_int64(s, 5, after_id);
    size_t cap = 0;
    int rc = STORE_OK;
    while (*len < max && sqlite3_step(s) == SQLITE_ROW) {
        size_t n = (size_t)sqlite3_column_bytes(s, 1);
        const void *b = sqlite3_column_blob(s, 1);
        if (*len + n > cap) {
            size_t ncap = cap ? cap : 65536;
            while (ncap < *len + n)
                ncap *= 2;
            char *nb = realloc(*buf, ncap);
            if (!nb) {
                rc = STORE_ERR;
                break;
            }
            *buf = nb;
            cap = ncap;
        }
        if (n)
            memcpy(*buf + *len, b, n);
        *len += n;
        *last_id = sqlite3_column_int64(s, 0);
    }
    sqlite3_reset(s);
    return rc;
}

int store_run_proc_ended(store_t *st, const store_run_key_t *k)
{
    static const char sql[] =
        "SELECT p.state != 'running' OR " STORE_JOB_ENDED("j.state")
        " OR j.attempt > ?4 FROM jobs j LEFT JOIN run_procs p ON p.job_id = j.id"
        " AND p.attempt = ?4 AND p.comp_idx = ?2 AND p.process = ?3 WHERE j.id = ?1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return 1;
    bind_key(s, k);
    int ended = sqlite3_step(s) != SQLITE_ROW || sqlite3_column_int(s, 0) != 0;
    sqlite3_reset(s);
    return ended;
}

json_t *store_run_processes(store_t *st, int64_t job)
{
    static const char sql[] =
        "SELECT attempt, comp_idx, process, worker_id, host, pid, state, exit_code, signal,"
        " started_at, ended_at FROM run_procs WHERE job_id = ?1"
        " ORDER BY attempt, comp_idx, process";
    sqlite3_stmt *s = store_stmt(st, sql);
    json_t *arr = json_array();
    if (!s || !arr) {
        json_decref(arr);
        return NULL;
    }
    sqlite3_bind_int64(s, 1, job);
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *p = json_pack("{s:i, s:i, s:i, s:I, s:s, s:i, s:s, s:I}", "attempt",
                              sqlite3_column_int(s, 0), "comp", sqlite3_column_int(s, 1),
                              "process", sqlite3_column_int(s, 2), "worker",
                              (json_int_t)sqlite3_column_int64(s, 3), "host",
                              (const char *)sqlite3_column_text(s, 4), "pid",
                              sqlite3_column_int(s, 5), "state",
                              (const char *)sqlite3_column_text(s, 6), "started_at_us",
                              (json_int_t)sqlite3_column_int64(s, 9));
        if (p && sqlite3_column_type(s, 7) != SQLITE_NULL)
            json_object_set_new(p, "exit_code", json_integer(sqlite3_column_int(s, 7)));
        if (p && sqlite3_column_type(s, 8) != SQLITE_NULL)
            json_object_set_new(p, "signal", json_integer(sqlite3_column_int(s, 8)));
        if (p && sqlite3_column_type(s, 10) != SQLITE_NULL)
            json_object_set_new(p, "ended_at_us", json_integer(sqlite3_column_int64(s, 10)));
        json_array_append_new(arr, p);
    }
    sqlite3_reset(s);
    return arr;
}
