/* sampler.c - the dashboard's watcher thread: change detection for the
 * event stream and utilization samples (see sampler.h).
 *
 * One thread, its own store connection. Each tick it reads SQLite's
 * data_version (it moves only when another connection committed), and
 * only then hashes what the dashboard shows, calling on_change when the
 * hash moved; every interval_ms it writes the sample rows (busy and down
 * devices per island, jobs per state)
 * in one transaction and prunes rows older than retain_s.
 * sampler_running is guarded by sampler_mu, which the stop signals. */
#include "sampler.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

static sampler_config_t sampler_cfg;
static pthread_t sampler_thread;
static pthread_mutex_t sampler_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sampler_cv;
static int sampler_running;        /* guarded by sampler_mu */

/* ---- change detection ---- */

/* FNV-1a over column texts; a column separator keeps "1","23" and "12","3"
 * apart. */
static uint64_t fnv_text(uint64_t h, const unsigned char *p)
{
    for (; p && *p; p++)
        h = (h ^ *p) * 1099511628211ULL;
    return (h ^ 0x1f) * 1099511628211ULL;
}

/* Hashes every row of `sql` (no parameters) into h. -1 on error. */
static int hash_rows(store_t *st, const char *sql, uint64_t *h)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW)
        for (int c = 0; c < sqlite3_column_count(s); c++)
            *h = fnv_text(*h, sqlite3_column_text(s, c));
    sqlite3_reset(s);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* What the dashboard shows, as one number: live jobs (state, progress,
 * pending reason), their computations (state, shards done), and the newest
 * event (submissions, allocations, ends, workers joining or lost all write
 * one). Terminal jobs never change again, so they need not be read. */
static int dashboard_hash(store_t *st, uint64_t *out)
{
    static const char jobs_sql[] =
        "SELECT id, state, comps_done, pending_reason FROM jobs"
        " WHERE " STORE_JOB_LIVE("state") " ORDER BY id";
    static const char comps_sql[] =
        "SELECT c.job_id, c.idx, c.state, c.shards_done, c.started_at FROM computations c"
        " JOIN jobs j ON j.id = c.job_id WHERE " STORE_JOB_HOLDING("j.state")
        " ORDER BY c.job_id, c.idx";
    static const char events_sql[] = "SELECT MAX(id) FROM events";
    uint64_t h = 1469598103934665603ULL;
    if (hash_rows(st, jobs_sql, &h) != 0 || hash_rows(st, comps_sql, &h) != 0 ||
        hash_rows(st, events_sql, &h) != 0)
        return -1;
    *out = h;
    return 0;
}

/* SQLite's data_version for this connection: it moves exactly when another
 * connection committed, so an idle cluster costs one PRAGMA per tick. */
static int64_t data_version(store_t *st)
{
    static const char sql[] = "PRAGMA data_version";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    int64_t v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_reset(s);
    return v;
}

/* ---- samples ---- */

static int insert_sample(sqlite3_stmt *ins, int64_t at, const char *kind, const char *key,
                         int64_t value)
{
    sqlite3_bind_int64(ins, 1, at);
    sqlite3_bind_text(ins, 2, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(ins, 3, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(ins, 4, value);
    return store_step_done(ins);
}

typedef struct island_sample {
    char name[NAME_MAX_LEN];
    int64_t busy, down;
} island_sample_t;

/* What one sample records: busy and down devices per island, jobs per
 * state, read in one read transaction (one snapshot). *isl: malloc'd, the
 * caller frees (also on failure). 0 or -1. */
static int sample_read(store_t *st, island_sample_t **isl, int *nisl,
                       int64_t counts[STORE_JOB_NSTATES])
{
    static const char dev_sql[] =
        "SELECT i.name, COALESCE(SUM(d.worker_id IS NOT NULL AND ("
        STORE_ALLOC_HOLDER_SQL("d.island_id", "d.idx") " IS NOT NULL OR EXISTS"
        " (SELECT 1 FROM device_holds h WHERE h.island_id = d.island_id AND h.idx = d.idx))), 0),"
        " COALESCE(SUM(d.worker_id IS NULL), 0) FROM islands i"
        " LEFT JOIN devices d ON d.island_id = i.id GROUP BY i.id ORDER BY i.id";
    int rc = SQLITE_ERROR, cap = 0;
    *isl = NULL;
    *nisl = 0;
    if (store_begin_read(st) != 0)
        return -1;
    sqlite3_stmt *s = store_stmt(st, dev_sql);
    while (s && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (*nisl == cap) {
            int ncap = cap ? 2 * cap : 8;
            island_sample_t *grown = realloc(*isl, sizeof **isl * (size_t)ncap);
            if (!grown) {
                rc = SQLITE_NOMEM;
                break;
            }
            *isl = grown;
            cap = ncap;
        }
        const char *name = (const char *)sqlite3_column_text(s, 0);     /* NULL on OOM */
        if (!name) {
            rc = SQLITE_NOMEM;
            break;
        }
        island_sample_t *e = &(*isl)[(*nisl)++];
        snprintf(e->name, sizeof e->name, "%s", name);
        e->busy = sqlite3_column_int64(s, 1);
        e->down = sqlite3_column_int64(s, 2);
    }
    if (s)
        sqlite3_reset(s);
    if (rc == SQLITE_DONE && store_job_counts(st, counts) != 0)
        rc = SQLITE_ERROR;
    if (store_commit(st) != 0)      /* ends the read transaction */
        return -1;
    return rc == SQLITE_DONE ? 0 : -1;
}

/* Reads first, then takes the write lock for the inserts and the prune
 * only: the device count over a 2,048-device island takes ~1 ms, and
 * inside the write transaction every report and scheduler pass waited for
 * it once a second. */
int sampler_record(store_t *st, int64_t at_us, int retain_s)
{
    static const char ins_sql[] =
        "INSERT OR REPLACE INTO samples(at, kind, key, value) VALUES (?, ?, ?, ?)";
    static const char prune_sql[] = "DELETE FROM samples WHERE at < ?";
    int64_t counts[STORE_JOB_NSTATES] = {0};
    island_sample_t *isl = NULL;
    int nisl = 0, rc = -1;
    if (sample_read(st, &isl, &nisl, counts) != 0 || store_begin(st) != 0)
        goto cleanup;
    sqlite3_stmt *ins = store_stmt(st, ins_sql), *s;
    if (!ins)
        goto fail;
    for (int k = 0; k < nisl; k++)
        if (insert_sample(ins, at_us, "busy", isl[k].name, isl[k].busy) != 0 ||
            insert_sample(ins, at_us, "down", isl[k].name, isl[k].down) != 0)
            goto fail;
    for (int i = 0; i < STORE_JOB_NSTATES; i++)
        if (insert_sample(ins, at_us, "jobs", store_job_states[i], counts[i]) != 0)
            goto fail;
    if (!(s = store_stmt(st, prune_sql)))
        goto fail;
    sqlite3_bind_int64(s, 1, at_us - (int64_t)retain_s * 1000000);
    if (store_step_done(s) != 0 || store_commit(st) != 0)
        goto fail;
    rc = 0;
    goto cleanup;
fail:
    store_rollback(st);
cleanup:
    free(isl);
    return rc;
}

json_t *sampler_series(store_t *st, int64_t since_us)
{
    static const char sql[] =
        "SELECT at, kind, key, value FROM samples WHERE at > ? ORDER BY at, kind, key";
    json_t *out = json_array(), *cur = NULL;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!out || !s)
        goto fail;
    sqlite3_bind_int64(s, 1, since_us);
    int64_t cur_at = -1;
    int rc;
    /* Rows arrive grouped by `at`; one object per round, its maps filled
     * as the round's rows go by. `cur` is borrowed from `out`. */
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t at = sqlite3_column_int64(s, 0);
        if (!cur || at != cur_at) {
            cur = json_pack("{s:I, s:{}, s:{}, s:{}}", "t", (json_int_t)at, "busy", "down", "jobs");
            if (!cur || json_array_append_new(out, cur) != 0) {
                sqlite3_reset(s);
                goto fail;
            }
            cur_at = at;
        }
        json_t *map = json_object_get(cur, (const char *)sqlite3_column_text(s, 1));
        if (map)
            json_object_set_new(map, (const char *)sqlite3_column_text(s, 2),
                                json_integer(sqlite3_column_int64(s, 3)));
    }
    sqlite3_reset(s);
    if (rc != SQLITE_DONE)
        goto fail;
    return out;
fail:
    json_decref(out);
    return NULL;
}

/* ---- job retention ---- */

static int sampler_sleep(int ms);

/* Deletes the jobs past their retention, a batch at a time, within the
 * round's budget (sampler.h). */
static void sampler_prune_jobs(store_t *st)
{
    if (sampler_cfg.keep_jobs_s <= 0)
        return;
    int64_t cutoff = util_wall_us() - sampler_cfg.keep_jobs_s * 1000000;
    int64_t until = util_mono_us() + SAMPLER_PRUNE_BUDGET_MS * 1000;
    int n;
    do
        n = store_jobs_prune(st, cutoff, SAMPLER_PRUNE_BATCH);
    while (n == SAMPLER_PRUNE_BATCH && util_mono_us() < until && sampler_sleep(0));
    if (n < 0)
        log_warn("sampler: could not delete the jobs past their retention (retrying each round)");
}

/* ---- the thread ---- */

/* Waits up to ms or until sampler_stop(); returns 0 when stopping. */
static int sampler_sleep(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&sampler_mu);
    while (sampler_running && pthread_cond_timedwait(&sampler_cv, &sampler_mu, &ts) == 0)
        ;
    int running = sampler_running;
    pthread_mutex_unlock(&sampler_mu);
    return running;
}

static void *sampler_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "atoll-sampler");
    store_t *st = store_thread();
    if (!st) {
        log_error("sampler: no database connection; utilization and live updates are off");
        return NULL;
    }
    int64_t seen_version = -1, next_sample = util_mono_us();
    uint64_t seen_hash = 0;
    int failures = 0;
    do {
        int64_t v = data_version(st);
        if (v != seen_version) {
            uint64_t h;
            if (dashboard_hash(st, &h) == 0) {
                if (seen_version != -1 && h != seen_hash && sampler_cfg.on_change)
                    sampler_cfg.on_change();
                seen_hash = h;
                seen_version = v;
            }
        }
        if (util_mono_us() >= next_sample) {
            next_sample += (int64_t)sampler_cfg.interval_ms * 1000;
            if (next_sample < util_mono_us())   /* fell behind (busy disk): no burst */
                next_sample = util_mono_us() + (int64_t)sampler_cfg.interval_ms * 1000;
            if (sampler_record(st, util_wall_us(), sampler_cfg.retain_s) == 0) {
                failures = 0;
                if (sampler_cfg.on_sample)
                    sampler_cfg.on_sample();
            } else if (failures++ == 0) {
                log_warn("sampler: could not record a utilization sample (retrying each round)");
            }
            sampler_prune_jobs(st);
        }
    } while (sampler_sleep(SAMPLER_WATCH_MS));
    store_thread_close();
    return NULL;
}

int sampler_start(const sampler_config_t *cfg)
{
    sampler_cfg = *cfg;
    if (sampler_cfg.interval_ms < 100)
        sampler_cfg.interval_ms = 1000;
    if (sampler_cfg.retain_s < 60)
        sampler_cfg.retain_s = 3600;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&sampler_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        return -1;
    sampler_running = 1;
    if (pthread_create(&sampler_thread, NULL, sampler_main, NULL) != 0) {
        sampler_running = 0;
        pthread_cond_destroy(&sampler_cv);
        return -1;
    }
    return 0;
}

void sampler_stop(void)
{
    pthread_mutex_lock(&sampler_mu);
    int was = sampler_running;
    sampler_running = 0;
    pthread_cond_signal(&sampler_cv);
    pthread_mutex_unlock(&sampler_mu);
    if (!was)
        return;
    pthread_join(sampler_thread, NULL);
    pthread_cond_destroy(&sampler_cv);
}
