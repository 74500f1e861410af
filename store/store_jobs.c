/* store_jobs.c - where a job's state changes at the user's request:
 * creation (queued), views, cancellation, results. The scheduler side of
 * the state machine is in store_sched.c, the workers' side in
 * store_progress.c (store.h lists every transition).
 *
 *   queued -> allocated -> running -> succeeded | failed
 *      \________\____________\____-> cancelled (DELETE)     */
#include "store_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jscan.h"
#include "jtext.h"
#include "util.h"

int store_state_is_terminal(const char *state)
{
    return state && (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0 ||
                     strcmp(state, "cancelled") == 0);
}

/* Unix microseconds as RFC 3339 UTC text with microseconds. */
static void time_text(int64_t us, char buf[48])
{
    time_t secs = (time_t)(us / 1000000);
    struct tm tm;
    char stamp[32];
    gmtime_r(&secs, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, 48, "%s.%06dZ", stamp, (int)(us % 1000000));
}

json_t *store_time_json(sqlite3_stmt *s, int col)
{
    if (sqlite3_column_type(s, col) == SQLITE_NULL)
        return json_null();
    char buf[48];
    time_text(sqlite3_column_int64(s, col), buf);
    return json_string(buf);
}

void store_set_int_or_null(json_t *obj, const char *key, sqlite3_stmt *s, int col)
{
    json_object_set_new(obj, key, sqlite3_column_type(s, col) == SQLITE_NULL
                                      ? json_null()
                                      : json_integer(sqlite3_column_int64(s, col)));
}

void store_set_text_or_null(json_t *obj, const char *key, sqlite3_stmt *s, int col)
{
    const char *t = (const char *)sqlite3_column_text(s, col);
    json_object_set_new(obj, key, t ? json_string(t) : json_null());
}

/* Room for "[i,j,...]" of every distinct producer of one computation. */
#define JOB_PRODUCERS_TEXT (JOB_MAX_COMPS * 6 + 4)

/* Writes the distinct producer indexes of c as a JSON array text. */
static void comp_producers_text(const comp_t *c, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < c->ninputs && off < len; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= c->inputs[j].producer == c->inputs[i].producer;
        if (!dup)
            off += (size_t)snprintf(buf + off, len - off, "%s%d", off > 1 ? "," : "",
                                    c->inputs[i].producer);
    }
    if (off < len)
        snprintf(buf + off, len - off, "]");
}

/* An idempotency key already used: STORE_CONFLICT (same document) or
 * STORE_MISMATCH (another one) with *id set; STORE_OK when it is new. A job
 * stored before document hashes were kept (NULL hash) counts as the same. */
static int idem_lookup(store_t *st, const store_job_new_t *nj, int64_t *id)
{
    static const char sql[] = "SELECT id, doc_hash IS NULL OR doc_hash = ?2 FROM jobs"
                              " WHERE idem_key = ?1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_text(s, 1, nj->idem_key, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, nj->doc_hash ? nj->doc_hash : "", -1, SQLITE_STATIC);
    int rc = STORE_OK;
    if (sqlite3_step(s) == SQLITE_ROW) {
        *id = sqlite3_column_int64(s, 0);
        rc = sqlite3_column_int(s, 1) ? STORE_CONFLICT : STORE_MISMATCH;
    }
    sqlite3_reset(s);
    return rc;
}

/* What a succeeded report of c must carry (schema/031_comp_outputs.sql):
 * "name:d0,d1;" per output in order, each shard's shape ("name:?;" when
 * only a run computation's program knows it). malloc'd (the caller
 * frees), or NULL when out of memory. */
static char *comp_outputs_text(const comp_t *c)
{
    /* Each output at most a name, ':', TENSOR_MAX_RANK dims of 20 digits
     * and their commas, ';'. */
    size_t cap = (size_t)c->noutputs * (NAME_MAX_LEN + 2 + TENSOR_MAX_RANK * 21) + 1, len = 0;
    char *t = malloc(cap);
    if (!t)
        return NULL;
    t[0] = '\0';
    for (int i = 0; i < c->noutputs; i++) {
        const shape_t *sh = &c->vshapes[c->outputs[i]];
        len = util_appendf(t, len, cap, "%s:", c->vnames[c->outputs[i]]);
        if (sh->rank < 0)
            len = util_appendf(t, len, cap, "?");
        for (int d = 0; d < sh->rank; d++)
            len = util_appendf(t, len, cap, d ? ",%lld" : "%lld", (long long)sh->dim[d]);
        len = util_appendf(t, len, cap, ";");
    }
    return t;
}

/* STORE_FULL when the tenant already has max_queued jobs queued. Counts at
 * most max_queued index entries (the partial index of migration 008). */
static int queue_full(store_t *st, const store_job_new_t *nj)
{
    static const char sql[] =
        "SELECT COUNT(*) FROM (SELECT 1 FROM jobs WHERE tenant_id = ?1 AND state = 'queued'"
        " LIMIT ?2)";
    if (nj->tenant <= 0 || nj->max_queued <= 0)
        return STORE_OK;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, nj->tenant);
    sqlite3_bind_int64(s, 2, nj->max_queued);
    int rc = sqlite3_step(s) == SQLITE_ROW
                 ? (sqlite3_column_int64(s, 0) >= nj->max_queued ? STORE_FULL : STORE_OK)
                 : STORE_ERR;
    sqlite3_reset(s);
    return rc;
}

int store_job_create(store_t *st, const job_plan_t *plan, const store_job_new_t *nj,
                     int64_t *id)
{
    static const char job_sql[] =
        "INSERT INTO jobs(name, state, priority, max_retries, idem_key, comps_total,"
        " created_at, tenant_id, doc_hash, preemptible, shared)"
        " VALUES (?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    static const char doc_sql[] = "INSERT INTO job_docs(job_id, doc) VALUES (?, ?)";
    static const char comp_sql[] =
        "INSERT INTO computations(job_id, idx, name, slice, state, shards_total, producers,"
        " deps_left, outputs) VALUES (?, ?, ?, ?, 'waiting', ?, ?, json_array_length(?6), ?)";
    if (store_begin(st) != 0)
        return STORE_ERR;
    /* A replay answers its job even when the queue is full now. */
    int rc = nj->idem_key ? idem_lookup(st, nj, id) : STORE_OK;
    if (rc == STORE_OK)
        rc = queue_full(st, nj);
    if (rc != STORE_OK) {
        store_rollback(st);
        return rc;
    }
    sqlite3_stmt *s = store_stmt(st, job_sql);
    if (!s)
        goto fail;
    sqlite3_bind_text(s, 1, plan->name, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, plan->priority);
    sqlite3_bind_int(s, 3, plan->max_retries);
    if (nj->idem_key) {
        sqlite3_bind_text(s, 4, nj->idem_key, -1, SQLITE_STATIC);
        if (nj->doc_hash)
            sqlite3_bind_text(s, 8, nj->doc_hash, -1, SQLITE_STATIC);
    }
    sqlite3_bind_int(s, 5, plan->ncomps);
    sqlite3_bind_int64(s, 6, util_wall_us());
    if (nj->tenant > 0)
        sqlite3_bind_int64(s, 7, nj->tenant);
    sqlite3_bind_int(s, 9, plan->preemptible);
    sqlite3_bind_int(s, 10, plan->shared);
    if (store_step_done(s) != 0)
        goto fail;
    *id = sqlite3_last_insert_rowid(store_db(st));
    if (!(s = store_stmt(st, doc_sql)))
        goto fail;
    sqlite3_bind_int64(s, 1, *id);
    sqlite3_bind_text(s, 2, nj->doc, -1, SQLITE_STATIC);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, comp_sql)))
        goto fail;
    for (int i = 0; i < plan->ncomps; i++) {
        const comp_t *c = &plan->comps[i];
        sqlite3_bind_int64(s, 1, *id);
        sqlite3_bind_int(s, 2, i);
        sqlite3_bind_text(s, 3, c->name, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, plan->slices[c->slice].name, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 5, c->nshards);
        char producers[JOB_PRODUCERS_TEXT];
        comp_producers_text(c, producers, sizeof producers);
        sqlite3_bind_text(s, 6, producers, -1, SQLITE_TRANSIENT);
        char *outputs = comp_outputs_text(c);
        if (!outputs)
            goto fail;
        sqlite3_bind_text(s, 7, outputs, -1, free);
        if (store_step_done(s) != 0)
            goto fail;
    }
    store_event(st, *id, "submitted", "job '%s' accepted: %d computations, %d slices",
                plan->name, plan->ncomps, plan->nslices);
    if (store_commit(st) != 0)
        goto fail;
    return STORE_OK;
fail:
    store_rollback(st);
    return STORE_ERR;
}

/* Columns shared by the job object and the list summary. */
#define JOB_COLS "id, name, state, priority, attempt, max_retries, comps_total, comps_done," \
                 " pending_reason, error, created_at, allocated_at, started_at, finished_at," \
                 " retries, restarts, preemptible, preemptions, shared"

/* The island shape column ("[4,4]") into *out; 0 or -1. */
static int island_shape(const json_t *arr, shape_t *out)
{
    size_t n = json_array_size(arr);
    if (n < 1 || n > MESH_MAX_RANK)
        return -1;
    out->rank = (int)n;
    for (size_t d = 0; d < n; d++)
        if ((out->dim[d] = json_integer_value(json_array_get(arr, d))) < 1)
            return -1;
    return 0;
}

/* The device of slice position k at island index idx: {shard, index,
 * coords}, its coordinates from the island's shape (as devices.coords
 * holds them, without a read per device); no coords without a shape. */
static json_t *slice_device(size_t k, int64_t idx, const shape_t *ishape)
{
    int64_t c[MESH_MAX_RANK] = {0};
    json_t *coords = ishape ? json_array() : NULL;
    if (coords)
        store_idx_coords(ishape, idx, c);
    for (int d = 0; coords && d < ishape->rank; d++)
        json_array_append_new(coords, json_integer(c[d]));
    return json_pack("{s:I, s:I, s:o*}", "shard", (json_int_t)k, "index", (json_int_t)idx,
                     "coords", coords);
}

/* slices: {name: {island, shape, devices: [{shard, index, coords}]}} */
static json_t *job_slices_json(store_t *st, int64_t id)
{
    static const char sql[] =
        "SELECT s.name, i.name, s.shape, s.devices, i.shape FROM slices s"
        " JOIN islands i ON i.id = s.island_id WHERE s.job_id = ? ORDER BY s.name";
    json_t *out = json_object();
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!out || !s)
        return out;
    sqlite3_bind_int64(s, 1, id);
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *idxs = store_col_json(s, 3), *ish = store_col_json(s, 4);
        json_t *devs = json_array();
        shape_t ishape;
        const shape_t *shp = island_shape(ish, &ishape) == 0 ? &ishape : NULL;
        size_t k;
        json_t *v;
        json_array_foreach(idxs, k, v) {
            if (devs)
                json_array_append_new(devs, slice_device(k, json_integer_value(v), shp));
        }
        json_decref(idxs);
        json_decref(ish);
        json_object_set_new(out, (const char *)sqlite3_column_text(s, 0),
                            json_pack("{s:s, s:o*, s:o*}", "island",
                                      (const char *)sqlite3_column_text(s, 1), "shape",
                                      store_col_json(s, 2), "devices", devs));
    }
    sqlite3_reset(s);
    return out;
}

/* Appends s as a JSON string. s comes from the store, where every name
 * was a validated document's or flag's (valid UTF-8): only quotes,
 * backslashes and control characters need escaping. */
static void buf_json_str(store_buf_t *b, const char *s)
{
    STORE_BUF_LIT(b, "\"");
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c != '\0' && c != '"' && c != '\\' && c >= 0x20)
            continue;
        store_buf_put(b, run, (size_t)(s - run));
        if (c == '\0')
            break;
        if (c == '"' || c == '\\')
            store_buf_printf(b, "\\%c", c);
        else
            store_buf_printf(b, "\\u%04x", c);
        run = s + 1;
    }
    STORE_BUF_LIT(b, "\"");
}

/* Appends the literal head (a separator and "key":) and column col of s:
 * its integer, or null. */
#define BUF_INT_OR_NULL(b, head, s, col) buf_int_or_null((b), (head), sizeof(head) - 1, (s), (col))
static void buf_int_or_null(store_buf_t *b, const char *head, size_t n, sqlite3_stmt *s, int col)
{
    store_buf_put(b, head, n);
    if (sqlite3_column_type(s, col) == SQLITE_NULL)
        STORE_BUF_LIT(b, "null");
    else
        store_buf_int(b, sqlite3_column_int64(s, col));
}

/* Appends column col of s: its text as a JSON string, or null. */
static void buf_text_or_null(store_buf_t *b, sqlite3_stmt *s, int col)
{
    const char *t = (const char *)sqlite3_column_text(s, col);
    if (t)
        buf_json_str(b, t);
    else
        STORE_BUF_LIT(b, "null");
}

/* Appends column col of s, unix microseconds: RFC 3339 text, or null. */
static void buf_time(store_buf_t *b, sqlite3_stmt *s, int col)
{
    char t[48];
    if (sqlite3_column_type(s, col) == SQLITE_NULL) {
        STORE_BUF_LIT(b, "null");
        return;
    }
    time_text(sqlite3_column_int64(s, col), t);
    STORE_BUF_LIT(b, "\"");
    store_buf_put(b, t, strlen(t));
    STORE_BUF_LIT(b, "\"");
}

/* Appends the job's summary (a JOB_COLS row of s) as a JSON object: the
 * job as GET /v1/jobs lists it and the head of its full object. Written
 * as text, not built in jansson and printed (that was a third of a tiny
 * job's read-back). */
static void job_summary_text(store_buf_t *b, sqlite3_stmt *s)
{
    const char *name = (const char *)sqlite3_column_text(s, 1);
    const char *state = (const char *)sqlite3_column_text(s, 2);
    STORE_BUF_LIT(b, "{\"id\":");
    store_buf_int(b, sqlite3_column_int64(s, 0));
    STORE_BUF_LIT(b, ",\"name\":");
    buf_json_str(b, name ? name : "");
    STORE_BUF_LIT(b, ",\"state\":");
    buf_json_str(b, state ? state : "");
    STORE_BUF_LIT(b, ",\"priority\":");
    store_buf_int(b, sqlite3_column_int64(s, 3));
    STORE_BUF_LIT(b, ",\"attempt\":");
    store_buf_int(b, sqlite3_column_int64(s, 4));
    STORE_BUF_LIT(b, ",\"max_retries\":");
    store_buf_int(b, sqlite3_column_int64(s, 5));
    STORE_BUF_LIT(b, ",\"computations_total\":");
    store_buf_int(b, sqlite3_column_int64(s, 6));
    STORE_BUF_LIT(b, ",\"computations_done\":");
    store_buf_int(b, sqlite3_column_int64(s, 7));
    STORE_BUF_LIT(b, ",\"pending_reason\":");
    buf_text_or_null(b, s, 8);
    STORE_BUF_LIT(b, ",\"error\":");
    buf_text_or_null(b, s, 9);
    static const char *const at[4] = {",\"created_at\":", ",\"allocated_at\":",
                                      ",\"started_at\":", ",\"finished_at\":"};
    for (int i = 0; i < 4; i++) {
        store_buf_put(b, at[i], strlen(at[i]));
        buf_time(b, s, 10 + i);
    }
    BUF_INT_OR_NULL(b, ",\"times_us\":{\"created\":", s, 10);
    BUF_INT_OR_NULL(b, ",\"allocated\":", s, 11);
    BUF_INT_OR_NULL(b, ",\"started\":", s, 12);
    BUF_INT_OR_NULL(b, ",\"finished\":", s, 13);
    /* attempt counts every attempt; retries only those caused by lost
     * workers (bounded by max_retries), restarts those caused by a
     * controller restart (schema/004_faults.sql). */
    STORE_BUF_LIT(b, "},\"retries\":");
    store_buf_int(b, sqlite3_column_int64(s, 14));
    STORE_BUF_LIT(b, ",\"restarts\":");
    store_buf_int(b, sqlite3_column_int64(s, 15));
    /* Evictions by higher-priority jobs (DESIGN Part D): not retries. */
    if (sqlite3_column_int(s, 16))
        STORE_BUF_LIT(b, ",\"preemptible\":true,\"preemptions\":");
    else
        STORE_BUF_LIT(b, ",\"preemptible\":false,\"preemptions\":");
    store_buf_int(b, sqlite3_column_int64(s, 17));
    if (sqlite3_column_int(s, 18))
        STORE_BUF_LIT(b, ",\"sharing\":\"shared\"}");
    else
        STORE_BUF_LIT(b, ",\"sharing\":\"exclusive\"}");
}

/* Appends the summary of job id, read now (*ncomps: its computations, when
 * not NULL); 0, or -1 when there is no such job (nothing appended) or the
 * read failed. */
static int job_summary_put(store_t *st, int64_t id, store_buf_t *b, int64_t *ncomps)
{
    static const char sql[] = "SELECT " JOB_COLS " FROM jobs WHERE id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, id);
    int found = sqlite3_step(s) == SQLITE_ROW;
    if (found) {
        job_summary_text(b, s);
        if (ncomps)
            *ncomps = sqlite3_column_int64(s, 6);
    }
    sqlite3_reset(s);
    return found ? 0 : -1;
}

/* The shards the job's current attempt's host tasks reported succeeded,
 * per computation, read in one pass over its rows: a row covers the run
 * comp_idx .. comp_idx + ncomps - 1 and its first `done` computations
 * succeeded (schema/032), each for its nshards. Every (job, attempt, comp,
 * shard) belongs to one row and a run's computation counts once (the
 * applier's task_comp), so for a succeeded job this equals shards_total;
 * more would mean a shard result was counted twice, which the fault suite
 * checks. O(computations x workers). */
static int job_comps_reported(store_t *st, int64_t id, int64_t ncomps, int64_t **out)
{
    static const char sql[] =
        "SELECT t.comp_idx, t.done, t.nshards FROM host_tasks t JOIN jobs j ON j.id = t.job_id"
        " WHERE t.job_id = ? AND t.attempt = j.attempt AND t.done > 0";
    *out = NULL;
    if (ncomps <= 0)
        return 0;
    if (!(*out = calloc((size_t)ncomps, sizeof **out)))
        return -1;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return 0;
    sqlite3_bind_int64(s, 1, id);
    while (sqlite3_step(s) == SQLITE_ROW) {
        int64_t c = sqlite3_column_int64(s, 0), done = sqlite3_column_int64(s, 1);
        for (int64_t k = c < 0 ? 0 : c; k < c + done && k < ncomps; k++)
            (*out)[k] += sqlite3_column_int64(s, 2);
    }
    sqlite3_reset(s);
    return 0;
}

/* Appends the job's "computations" array as JSON text: written here, not
 * built in jansson and printed (a 1,000-computation job's array was a
 * third of its POST's and GET's time). */
static void job_comps_text(store_t *st, int64_t id, int64_t ncomps, store_buf_t *b)
{
    /* times_us.queued: when the current attempt entered the queue (the job's
     * creation, or its latest requeue event). busy_us: the device time its
     * reports brought (inputs ready to finished, once per shard, the same
     * measure as devices.busy_us); shards_reported: job_comps_reported. */
    static const char sql[] =
        "SELECT c.idx, c.name, c.slice, i.name, c.seq, c.state, c.shards_total, c.shards_done,"
        " c.dispatched_at, c.started_at, c.inputs_ready_at, c.finished_at,"
        " COALESCE((SELECT MAX(at) FROM events WHERE job_id = ?1"
        "           AND kind IN ('requeued', 'preempted')),"
        "          (SELECT created_at FROM jobs WHERE id = ?1)), c.busy_us"
        " FROM computations c LEFT JOIN islands i ON i.id = c.island_id"
        " WHERE c.job_id = ?1 ORDER BY c.idx";
    int64_t *rep = NULL;
    if (job_comps_reported(st, id, ncomps, &rep) != 0)
        b->failed = 1;
    sqlite3_stmt *s = store_stmt(st, sql);
    STORE_BUF_LIT(b, "[");
    if (s)
        sqlite3_bind_int64(s, 1, id);
    for (int first = 1; s && !b->failed && sqlite3_step(s) == SQLITE_ROW; first = 0) {
        int64_t idx = sqlite3_column_int64(s, 0);
        const char *name = (const char *)sqlite3_column_text(s, 1);
        const char *slice = (const char *)sqlite3_column_text(s, 2);
        const char *island = (const char *)sqlite3_column_text(s, 3);
        const char *state = (const char *)sqlite3_column_text(s, 5);
        if (!first)
            STORE_BUF_LIT(b, ",");
        STORE_BUF_LIT(b, "{\"index\":");
        store_buf_int(b, idx);
        STORE_BUF_LIT(b, ",\"name\":");
        buf_json_str(b, name ? name : "");
        STORE_BUF_LIT(b, ",\"slice\":");
        buf_json_str(b, slice ? slice : "");
        STORE_BUF_LIT(b, ",\"island\":");
        if (island)
            buf_json_str(b, island);
        else
            STORE_BUF_LIT(b, "null");
        BUF_INT_OR_NULL(b, ",\"seq\":", s, 4);
        STORE_BUF_LIT(b, ",\"state\":");
        buf_json_str(b, state ? state : "");
        STORE_BUF_LIT(b, ",\"shards_total\":");
        store_buf_int(b, sqlite3_column_int64(s, 6));
        STORE_BUF_LIT(b, ",\"shards_done\":");
        store_buf_int(b, sqlite3_column_int64(s, 7));
        BUF_INT_OR_NULL(b, ",\"times_us\":{\"queued\":", s, 12);
        BUF_INT_OR_NULL(b, ",\"dispatched\":", s, 8);
        BUF_INT_OR_NULL(b, ",\"started\":", s, 9);
        BUF_INT_OR_NULL(b, ",\"inputs_ready\":", s, 10);
        BUF_INT_OR_NULL(b, ",\"finished\":", s, 11);
        STORE_BUF_LIT(b, "},\"busy_us\":");
        store_buf_int(b, sqlite3_column_int64(s, 13));
        STORE_BUF_LIT(b, ",\"shards_reported\":");
        store_buf_int(b, rep && idx >= 0 && idx < ncomps ? rep[idx] : 0);
        STORE_BUF_LIT(b, "}");
    }
    if (s)
        sqlite3_reset(s);
    STORE_BUF_LIT(b, "]");
    free(rep);
}

static json_t *job_events_json(store_t *st, int64_t id)
{
    static const char sql[] =
        "SELECT at, kind, detail FROM events WHERE job_id = ? ORDER BY id DESC LIMIT 100";
    json_t *out = json_array();
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!out || !s)
        return out;
    sqlite3_bind_int64(s, 1, id);
    while (sqlite3_step(s) == SQLITE_ROW) {
        json_t *e = json_object();
        json_object_set_new(e, "at", store_time_json(s, 0));
        json_object_set_new(e, "kind", json_string((const char *)sqlite3_column_text(s, 1)));
        json_object_set_new(e, "detail", json_string((const char *)sqlite3_column_text(s, 2)));
        json_array_insert_new(out, 0, e);
    }
    sqlite3_reset(s);
    return out;
}

char *store_job_summary_text(store_t *st, int64_t id, size_t *len)
{
    store_buf_t b = store_buf_new(512);
    if (job_summary_put(st, id, &b, NULL) != 0 || b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

int store_job_state(store_t *st, int64_t id, char out[16])
{
    static const char sql[] = "SELECT state FROM jobs WHERE id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        snprintf(out, 16, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_reset(s);
    return rc == SQLITE_ROW ? STORE_OK : rc == SQLITE_DONE ? STORE_NOTFOUND : STORE_ERR;
}

/* Appends ,"key": and v printed (compact); v is new, consumed here; a
 * NULL v (out of memory) fails b. */
static void buf_json(store_buf_t *b, const char *key, json_t *v)
{
    size_t len = 0;
    char *t = v ? jtext_dump(v, &len) : NULL;
    json_decref(v);
    if (!t) {
        b->failed = 1;
        return;
    }
    STORE_BUF_LIT(b, ",\"");
    store_buf_put(b, key, strlen(key));
    STORE_BUF_LIT(b, "\":");
    store_buf_put(b, t, len);
    free(t);
}

/* The job object as text: its summary, slices, computations and events,
 * then its document as stored. The document is the body the job was
 * accepted with (store_job_create): valid JSON, so it goes out as it came
 * in, neither parsed nor printed again (a 1,000-computation document is
 * ~280 KiB: parsing it back and printing it was a third of a POST's time
 * and most of a GET's); the computations are written as text too
 * (job_comps_text). The caller provides the snapshot. malloc'd (*len
 * bytes), or NULL when there is no such job or on OOM. */
static char *job_text(store_t *st, int64_t id, size_t *len)
{
    static const char doc_sql[] = "SELECT doc FROM job_docs WHERE job_id = ?";
    store_buf_t b = store_buf_new(4096);
    int64_t ncomps = 0;
    if (job_summary_put(st, id, &b, &ncomps) != 0 || b.failed) {
        free(b.p);              /* no job (or OOM) */
        return NULL;
    }
    b.len--;                    /* without its closing brace */
    buf_json(&b, "slices", job_slices_json(st, id));
    store_buf_put(&b, ",\"computations\":", 16);
    job_comps_text(st, id, ncomps, &b);
    buf_json(&b, "events", job_events_json(st, id));
    sqlite3_stmt *ds = store_stmt(st, doc_sql);
    const char *doc = NULL;
    if (ds) {
        sqlite3_bind_int64(ds, 1, id);
        if (sqlite3_step(ds) == SQLITE_ROW)
            doc = (const char *)sqlite3_column_text(ds, 0);
    }
    store_buf_put(&b, ",\"document\":", 12);
    if (doc)
        store_buf_put(&b, doc, (size_t)sqlite3_column_bytes(ds, 0));
    else
        store_buf_put(&b, "null", 4);
    store_buf_put(&b, "}", 1);
    if (ds)
        sqlite3_reset(ds);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

char *store_job_json_text(store_t *st, int64_t id, size_t *len)
{
    /* One read transaction: the job's state, slices, computations and
     * document come from the same snapshot even while the scheduler
     * writes. Inside a caller's transaction (autocommit off) that one
     * already is. */
    int own = sqlite3_get_autocommit(store_db(st)) && store_begin_read(st) == 0;
    char *text = job_text(st, id, len);
    if (own)
        store_commit(st);
    return text;
}

json_t *store_job_json(store_t *st, int64_t id)
{
    size_t len;
    char *text = store_job_json_text(st, id, &len);
    json_t *j = text ? jscan_load(text, len, 0, NULL) : NULL;
    free(text);
    return j;
}

char *store_jobs_list_text(store_t *st, const char *state, int64_t before, int limit,
                           int64_t tenant, size_t *len)
{
    /* Any state but succeeded is a seek in jobs_unsucceeded (schema 036),
     * whose entries follow the ids: no reading past the history to fill a
     * page. No state, or succeeded (most of the history), pages the table. */
    static const char all_sql[] =
        "SELECT " JOB_COLS " FROM jobs WHERE (?1 IS NULL OR state = ?1)"
        " AND (?2 <= 0 OR id < ?2) AND (?4 = 0 OR tenant_id = ?4) ORDER BY id DESC LIMIT ?3";
    static const char unsucceeded_sql[] =
        "SELECT " JOB_COLS " FROM jobs WHERE " STORE_JOB_UNSUCCEEDED("state") " AND state = ?1"
        " AND (?2 <= 0 OR id < ?2) AND (?4 = 0 OR tenant_id = ?4) ORDER BY id DESC LIMIT ?3";
    int seek = state && strcmp(state, "succeeded") != 0;
    sqlite3_stmt *s = store_stmt(st, seek ? unsucceeded_sql : all_sql);
    if (!s)
        return NULL;
    store_buf_t b = store_buf_new(4096);
    if (state)
        sqlite3_bind_text(s, 1, state, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, before);
    sqlite3_bind_int(s, 3, limit + 1);   /* one extra row tells whether there is a next page */
    sqlite3_bind_int64(s, 4, tenant);
    int n = 0, rc;
    int64_t last = 0, next = 0;
    STORE_BUF_LIT(&b, "{\"jobs\":[");
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (n == limit) {
            next = last;
            break;
        }
        if (n++)
            STORE_BUF_LIT(&b, ",");
        last = sqlite3_column_int64(s, 0);
        job_summary_text(&b, s);
    }
    sqlite3_reset(s);
    STORE_BUF_LIT(&b, "],\"next_before\":");
    if (next)
        store_buf_int(&b, next);
    else
        STORE_BUF_LIT(&b, "null");
    STORE_BUF_LIT(&b, "}");
    if (b.failed || (rc != SQLITE_ROW && rc != SQLITE_DONE)) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

int store_job_finish(store_t *st, int64_t job, const char *state, const char *error)
{
    /* A job succeeds when its last computations did: they are counted
     * here, in the one write of its row (jobs_progress, store_progress.c). */
    static const char job_sql[] =
        "UPDATE jobs SET state = ?2, error = COALESCE(?3, error), finished_at = ?4,"
        " pending_reason = NULL, dispatch_next = NULL,"
        " comps_done = CASE WHEN ?2 = 'succeeded' THEN comps_total ELSE comps_done END"
        " WHERE id = ?1";
    static const char hold_sql[] = "DELETE FROM device_holds WHERE job_id = ?";
    static const char task_sql[] =
        "UPDATE host_tasks SET state = 'cancelled' WHERE job_id = ? AND state = 'blocked'";
    static const char comp_sql[] =
        "UPDATE computations SET state = ?2 WHERE job_id = ?1 AND state NOT IN ('succeeded')";
    int64_t now = util_wall_us();
    /* A success has nothing carried (its last shards wrote its rows); any
     * other end first writes what its reported shards did. */
    if (strcmp(state, "succeeded") != 0 && store_carry_show_job(st, job) != 0)
        return -1;
    sqlite3_stmt *s = store_stmt(st, job_sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_text(s, 2, state, -1, SQLITE_STATIC);
    if (error)
        sqlite3_bind_text(s, 3, error, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 4, now);
    if (store_step_done(s) != 0 || store_free_job_devices(st, job) != 0 ||
        !(s = store_stmt(st, hold_sql)))
        return -1;
    sqlite3_bind_int64(s, 1, job);
    if (store_step_done(s) != 0)
        return -1;
    /* A job that succeeded has no blocked task and no computation left to
     * end: each of its computations succeeded, so every host task of
     * theirs was released and reported. */
    if (strcmp(state, "succeeded") != 0) {
        if (!(s = store_stmt(st, task_sql)))
            return -1;
        sqlite3_bind_int64(s, 1, job);
        if (store_step_done(s) != 0 || !(s = store_stmt(st, comp_sql)))
            return -1;
        sqlite3_bind_int64(s, 1, job);
        sqlite3_bind_text(s, 2, state, -1, SQLITE_STATIC);
        if (store_step_done(s) != 0)
            return -1;
    }
    store_event(st, job, state, "job %s%s%s", state, error ? ": " : "", error ? error : "");
    return 0;
}

/* Reads a job's state into state_out; STORE_NOTFOUND if there is no job. */
static int job_state(store_t *st, int64_t id, char state_out[16])
{
    static const char sql[] = "SELECT state FROM jobs WHERE id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_int64(s, 1, id);
    int rc = STORE_NOTFOUND;
    if (sqlite3_step(s) == SQLITE_ROW) {
        snprintf(state_out, 16, "%s", sqlite3_column_text(s, 0));
        rc = STORE_OK;
    }
    sqlite3_reset(s);
    return rc;
}

int store_job_cancel(store_t *st, int64_t id, char state_out[16])
{
    if (store_begin(st) != 0)
        return STORE_ERR;
    int rc = job_state(st, id, state_out);
    if (rc == STORE_OK && store_state_is_terminal(state_out))
        rc = STORE_CONFLICT;
    if (rc == STORE_OK) {
        if (store_job_finish(st, id, "cancelled", "cancelled by request") != 0)
            rc = STORE_ERR;
        else
            snprintf(state_out, 16, "cancelled");
    }
    if (rc != STORE_OK || store_commit(st) != 0) {
        store_rollback(st);
        return rc == STORE_OK ? STORE_ERR : rc;
    }
    return STORE_OK;
}

/* One shard's entry of the result, {"shard","shape","sum","values"?}, from
 * entry m of an outputs row's meta (schema/023_task_outputs.sql) and its
 * nv values at vals (unaligned: read by memcpy); values listed up to
 * max_values. New reference, or NULL when m is malformed or on OOM. */
static json_t *result_shard(const json_t *m, const unsigned char *vals, json_int_t nv,
                            int64_t max_values)
{
    json_t *sum = json_array_get(m, 2);
    json_t *e = json_pack("{s:O, s:O, s:o}", "shard", json_array_get(m, 0), "shape",
                          json_array_get(m, 1), "sum",
                          json_is_number(sum) ? json_real(json_number_value(sum)) : json_null());
    if (!e || nv == 0 || nv > max_values)
        return e;
    json_t *arr = json_array();
    /* JSON has no NaN or infinity: such elements are null. */
    for (json_int_t i = 0; arr && i < nv; i++) {
        float v;
        memcpy(&v, vals + (size_t)i * sizeof v, sizeof v);
        json_array_append_new(arr, isfinite(v) ? json_real(v) : json_null());
    }
    json_object_set_new(e, "values", arr);
    return e;
}

/* Appends the shards of the outputs row at s (columns 2: meta, 3: vals)
 * to arr. 0, or -1 when the row does not add up (its values overrun) or
 * on OOM. */
static int result_row(sqlite3_stmt *s, int64_t max_values, json_t *arr)
{
    json_t *meta = store_col_json(s, 2), *m;
    const unsigned char *vals = sqlite3_column_blob(s, 3);
    json_int_t nfloats = sqlite3_column_bytes(s, 3) / (json_int_t)sizeof(float), off = 0;
    size_t i;
    int rc = json_is_array(meta) ? 0 : -1;
    json_array_foreach(meta, i, m) {
        json_int_t nv = json_integer_value(json_array_get(m, 3));
        json_t *e = nv >= 0 && nv <= nfloats - off
                        ? result_shard(m, vals + (size_t)off * sizeof(float), nv, max_values)
                        : NULL;
        if (!e || json_array_append_new(arr, e) != 0) {
            rc = -1;
            break;
        }
        off += nv;
    }
    json_decref(meta);
    return rc;
}

static json_int_t shard_of(const json_t *e)
{
    return json_integer_value(json_object_get(e, "shard"));
}

static int shard_cmp(const void *a, const void *b)
{
    json_int_t x = shard_of(*(json_t *const *)a), y = shard_of(*(json_t *const *)b);
    return x < y ? -1 : x > y;
}

/* Puts arr's entries in shard order. Rows come in their first shard's
 * order and each row's shards increase, so arr is sorted unless two
 * workers' shard sets interleave. 0 or -1 (OOM). */
static int result_sort(json_t *arr)
{
    size_t n = json_array_size(arr), i;
    for (i = 1; i < n && shard_of(json_array_get(arr, i - 1)) < shard_of(json_array_get(arr, i));
         i++)
        ;
    if (i >= n)
        return 0;
    json_t **es = malloc(sizeof *es * n);
    if (!es)
        return -1;
    for (i = 0; i < n; i++)
        es[i] = json_incref(json_array_get(arr, i));
    qsort(es, n, sizeof *es, shard_cmp);
    json_array_clear(arr);
    int rc = 0;
    for (i = 0; i < n; i++)
        if (json_array_append_new(arr, es[i]) != 0)
            rc = -1;
    free(es);
    return rc;
}

int store_job_result(store_t *st, int64_t id, int64_t max_values, json_t **out,
                     char state_out[16])
{
    static const char sql[] =
        "SELECT c.name, o.value, o.meta, o.vals FROM outputs o"
        " JOIN computations c ON c.job_id = o.job_id AND c.idx = o.comp_idx"
        " WHERE o.job_id = ? ORDER BY o.comp_idx, o.value, o.shard0";
    int rc = job_state(st, id, state_out);
    if (rc != STORE_OK)
        return rc;
    if (strcmp(state_out, "succeeded") != 0)
        return STORE_CONFLICT;
    sqlite3_stmt *s = store_stmt(st, sql);
    json_t *res = json_object(), *outputs = json_object();
    if (!s || !res || !outputs) {
        json_decref(res);
        json_decref(outputs);
        return STORE_ERR;
    }
    sqlite3_bind_int64(s, 1, id);
    int ok = 1;
    while (ok && sqlite3_step(s) == SQLITE_ROW) {
        char key[2 * NAME_MAX_LEN + 2];
        snprintf(key, sizeof key, "%s.%s", sqlite3_column_text(s, 0), sqlite3_column_text(s, 1));
        json_t *arr = json_object_get(outputs, key);   /* borrowed */
        if (!arr && (!(arr = json_array()) || json_object_set_new(outputs, key, arr) != 0))
            ok = 0;
        ok = ok && result_row(s, max_values, arr) == 0;
    }
    sqlite3_reset(s);
    const char *key;
    json_t *arr;
    json_object_foreach(outputs, key, arr)
        ok = ok && result_sort(arr) == 0;
    if (!ok) {
        json_decref(res);
        json_decref(outputs);
        return STORE_ERR;
    }
    json_object_set_new(res, "id", json_integer(id));
    json_object_set_new(res, "outputs", outputs);
    *out = res;
    return STORE_OK;
}
