/* store_cluster.c - read-only views of islands, devices and workers, and
 * the Prometheus metrics text. */
#include "store_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* A device's state is derived (see schema/001_init.sql). */
#define DEVICE_STATE_SQL \
    "CASE WHEN d.worker_id IS NULL THEN 'down' WHEN d.job_id IS NOT NULL THEN 'allocated'" \
    " ELSE 'free' END"

static json_t *island_devices(store_t *st, int64_t island_id, json_t *isl)
{
    static const char sql[] =
        "SELECT d.idx, d.coords, " DEVICE_STATE_SQL ", d.job_id, d.worker_id, d.local, d.busy_us,"
        " (SELECT s.name FROM slices s WHERE s.job_id = d.job_id AND s.island_id = d.island_id"
        "   AND EXISTS (SELECT 1 FROM json_each(s.devices) WHERE value = d.idx))"
        " FROM devices d WHERE d.island_id = ? ORDER BY d.idx";
    json_t *devs = json_array();
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!devs || !s)
        return devs;
    int64_t counts[3] = {0, 0, 0};
    sqlite3_bind_int64(s, 1, island_id);
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
        json_object_set_new(d, "busy_us", json_integer(sqlite3_column_int64(s, 6)));
        store_set_text_or_null(d, "slice", s, 7);
        json_array_append_new(devs, d);
    }
    sqlite3_reset(s);
    json_object_set_new(isl, "free", json_integer(counts[0]));
    json_object_set_new(isl, "allocated", json_integer(counts[1]));
    json_object_set_new(isl, "down", json_integer(counts[2]));
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

json_t *store_workers_json(store_t *st, int64_t lease_us)
{
    static const char sql[] =
        "SELECT w.id, i.name, w.first_device, w.ndevices, w.data_addr, w.host, w.pid, w.backend,"
        " w.state, w.epoch, w.registered_at, w.heartbeat_at,"
        " (SELECT COUNT(*) FROM tasks t WHERE t.worker_id = w.id AND t.state = 'leased'),"
        " w.store_objects, w.store_bytes, w.store_cap_bytes"
        " FROM workers w JOIN islands i ON i.id = w.island_id ORDER BY w.id";
    json_t *out = json_object(), *arr = json_array();
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!out || !arr || !s) {
        json_decref(out);
        json_decref(arr);
        return NULL;
    }
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
    return out;
}

/* A growable text buffer for the metrics page. */
typedef struct mbuf {
    char *p;
    size_t len, cap;
    int failed;
} mbuf_t;

static void mbuf_printf(mbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mbuf_printf(mbuf_t *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

char *store_metrics_text(store_t *st)
{
    static const char jobs_sql[] = "SELECT state, COUNT(*) FROM jobs GROUP BY state";
    static const char dev_sql[] =
        "SELECT i.name, " DEVICE_STATE_SQL ", COUNT(*), SUM(d.busy_us) FROM devices d"
        " JOIN islands i ON i.id = d.island_id GROUP BY i.name, 2 ORDER BY i.name";
    static const char workers_sql[] =
        "SELECT id, heartbeat_at FROM workers WHERE state = 'live' ORDER BY id";
    static const char *const states[] = {"queued", "allocated", "running",
                                         "succeeded", "failed", "cancelled"};
    mbuf_t b = {malloc(4096), 0, 4096, 0};
    if (!b.p)
        return NULL;
    b.p[0] = '\0';
    int64_t counts[6] = {0};
    sqlite3_stmt *s = store_stmt(st, jobs_sql);
    if (!s)
        goto fail;
    while (sqlite3_step(s) == SQLITE_ROW)
        for (int i = 0; i < 6; i++)
            if (strcmp((const char *)sqlite3_column_text(s, 0), states[i]) == 0)
                counts[i] = sqlite3_column_int64(s, 1);
    sqlite3_reset(s);
    mbuf_printf(&b, "# HELP atoll_jobs Jobs by state.\n# TYPE atoll_jobs gauge\n");
    for (int i = 0; i < 6; i++)
        mbuf_printf(&b, "atoll_jobs{state=\"%s\"} %ld\n", states[i], (long)counts[i]);
    mbuf_printf(&b, "# HELP atoll_queue_depth Jobs waiting for devices.\n"
                    "# TYPE atoll_queue_depth gauge\natoll_queue_depth %ld\n", (long)counts[0]);
    if (!(s = store_stmt(st, dev_sql)))
        goto fail;
    mbuf_printf(&b, "# HELP atoll_devices Devices by island and state.\n"
                    "# TYPE atoll_devices gauge\n");
    while (sqlite3_step(s) == SQLITE_ROW)
        mbuf_printf(&b, "atoll_devices{island=\"%s\",state=\"%s\"} %ld\n",
                    sqlite3_column_text(s, 0), sqlite3_column_text(s, 1),
                    (long)sqlite3_column_int64(s, 2));
    sqlite3_reset(s);
    if (!(s = store_stmt(st, workers_sql)))
        goto fail;
    mbuf_printf(&b, "# HELP atoll_worker_heartbeat_age_seconds Since each live worker's last"
                    " heartbeat.\n# TYPE atoll_worker_heartbeat_age_seconds gauge\n");
    int64_t now = util_wall_us();
    while (sqlite3_step(s) == SQLITE_ROW)
        mbuf_printf(&b, "atoll_worker_heartbeat_age_seconds{worker=\"%ld\"} %.3f\n",
                    (long)sqlite3_column_int64(s, 0),
                    (double)(now - sqlite3_column_int64(s, 1)) / 1e6);
    sqlite3_reset(s);
    if (b.failed)
        goto fail;
    return b.p;
fail:
    free(b.p);
    return NULL;
}
