/* store_worker.c - the worker protocol's membership side
 * (docs/worker-protocol.md): registration (a worker takes a free block of
 * an island's devices and becomes live), heartbeats and lease renewals, its
 * figures, leaving, and the liveness test that fences polls and reports.
 * A worker leaving is a worker loss (store_worker_lost, store_sched.c).
 * Task delivery is in store_poll.c, reports in store_progress.c. */
#include "store_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

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

/* Who holds data_addr: the oldest live worker registered at it, in
 * *holder. STORE_OK, STORE_NOTFOUND when none, STORE_ERR. */
static int addr_holder(store_t *st, const char *data_addr, int64_t *holder)
{
    /* Live, not "heartbeat within the lease": a worker whose lease ran out
     * stays live until the scheduler's next expiry pass declares it lost
     * (store_sched_expire, within one scheduler tick), and a renewal of
     * it may still be stored until then. */
    static const char sql[] =
        "SELECT id FROM workers WHERE data_addr = ? AND state = 'live' ORDER BY id LIMIT 1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_text(s, 1, data_addr, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *holder = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return rc == SQLITE_ROW ? STORE_OK : rc == SQLITE_DONE ? STORE_NOTFOUND : STORE_ERR;
}

int store_worker_register(store_t *st, const worker_reg_t *reg, int64_t lease_us, json_t **out,
                          int64_t *holder)
{
    static const char ins_sql[] =
        "INSERT INTO workers(island_id, first_device, ndevices, data_addr, host, pid, backend,"
        " state, epoch, registered_at, heartbeat_at, secret_hash, ucx_address)"
        " VALUES (?,?,?,?,?,?,?,'live',(SELECT COALESCE(MAX(epoch),0)+1 FROM workers),?,?,?,?)";
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
    /* Peers find a worker by its data_addr (store_worker_peer): a second
     * live holder would take the first one's place in the directory.
     * Checked in the write transaction that inserts, so two registrations
     * racing for one address cannot both pass. */
    int64_t held = 0;
    rc = addr_holder(st, reg->data_addr, &held);
    if (rc != STORE_NOTFOUND) {
        if (rc == STORE_OK) {
            rc = STORE_CONFLICT;
            if (holder)
                *holder = held;
        }
        goto fail;
    }
    rc = STORE_ERR;
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
    if (reg->ucx_address && *reg->ucx_address)
        sqlite3_bind_text(s, 11, reg->ucx_address, -1, SQLITE_STATIC);
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

/* Writes a worker's figures (inside the caller's transaction). 0 or -1. */
static int stats_put(store_t *st, int64_t worker, const worker_stats_t *ws)
{
    static const char sql[] =
        "UPDATE workers SET store_objects = ?2, store_bytes = ?3, store_cap_bytes = ?4,"
        " dplane_dropped = ?5, dplane_dropped_bytes = ?6, dplane_refused = ?7,"
        " dplane_bad_frames = ?8, dplane_bad_key = ?9 WHERE id = ?1 AND state = 'live'";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    stats_bind(s, ws);
    return store_step_done(s);
}

int store_worker_set_stats(store_t *st, int64_t worker, const worker_stats_t *ws)
{
    /* In a transaction of its own: a changed store cap changes the
     * devices' memory, which the scheduler learns at the commit (the
     * watch_dev_memory trigger, store.c). */
    if (store_begin(st) != 0)
        return STORE_ERR;
    if (stats_put(st, worker, ws) != 0) {
        store_rollback(st);
        return STORE_ERR;
    }
    return store_commit(st) == 0 ? STORE_OK : STORE_ERR;
}

int store_dplane_totals(store_t *st, int64_t out[STORE_DPLANE_TOTALS])
{
    /* TOTAL, not SUM: SUM fails with "integer overflow" once the figures
     * of all workers ever registered pass 2^63, and TOTAL (a double) cannot
     * fail on any data. The API bounds each figure to 2^53 - 1 (exact in a
     * double); a total past INT64_MAX reads as INT64_MAX. */
    static const char sql[] =
        "SELECT TOTAL(dplane_dropped), TOTAL(dplane_dropped_bytes), TOTAL(dplane_refused),"
        " TOTAL(dplane_bad_frames), TOTAL(dplane_bad_key) FROM workers";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    int rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        /* out is left as the caller had it: a failed read is not zeros. */
        log_warn("store: data-plane totals not read: %s", sqlite3_errmsg(store_db(st)));
        sqlite3_reset(s);
        return -1;
    }
    for (int i = 0; i < STORE_DPLANE_TOTALS; i++) {
        double v = sqlite3_column_double(s, i);
        out[i] = v >= 9223372036854775808.0 ? INT64_MAX : v > 0 ? (int64_t)v : 0;
    }
    sqlite3_reset(s);
    return 0;
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

/* Worker credentials as last read, by id (direct-mapped). Every worker
 * request checks one, and reading it was a read transaction of its own
 * (about 5 % of atolld's CPU during a chain). A worker's secret is written
 * only with its row (a new id); its state moves only through UPDATEs the
 * poll watch sees, and store_workers_gen() moves after their commit. An
 * entry tagged with the generation read before the row was read is used
 * while the generation stands still: a change committed meanwhile moved it
 * (or was already in the row read). Any thread; guarded by secret_mu. */
#define SECRET_CACHE 1024
typedef struct secret_ent {
    int64_t id;                 /* 0: empty */
    uint64_t gen;
    int live;
    char hash[65];
} secret_ent_t;
static secret_ent_t secret_cache[SECRET_CACHE];
static pthread_mutex_t secret_mu = PTHREAD_MUTEX_INITIALIZER;

static int secret_cached(int64_t worker, uint64_t gen, char hash[65], int *live)
{
    secret_ent_t *e = &secret_cache[(uint64_t)worker % SECRET_CACHE];
    pthread_mutex_lock(&secret_mu);
    int hit = e->id == worker && e->gen == gen;
    if (hit) {
        memcpy(hash, e->hash, 65);
        *live = e->live;
    }
    pthread_mutex_unlock(&secret_mu);
    return hit;
}

int store_worker_secret(store_t *st, int64_t worker, char hash[65], int *live)
{
    static const char sql[] = "SELECT secret_hash, state = 'live' FROM workers WHERE id = ?";
    uint64_t gen = store_workers_gen();
    if (worker > 0 && secret_cached(worker, gen, hash, live))
        return STORE_OK;
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
    if (rc == SQLITE_ROW && worker > 0) {
        secret_ent_t *e = &secret_cache[(uint64_t)worker % SECRET_CACHE];
        pthread_mutex_lock(&secret_mu);
        *e = (secret_ent_t){worker, gen, *live, ""};
        memcpy(e->hash, hash, 65);
        pthread_mutex_unlock(&secret_mu);
    }
    return rc == SQLITE_ROW ? STORE_OK : rc == SQLITE_DONE ? STORE_NOTFOUND : STORE_ERR;
}

int store_worker_peer(store_t *st, const char *data_addr, int64_t *peer, char **ucx_address)
{
    /* The newest live worker at that address. Registration refuses an
     * address a live worker holds (store_worker_register), so there is one; rows
     * from before that rule may hold two, and a restarted worker's is the
     * newer. */
    static const char sql[] =
        "SELECT id, ucx_address FROM workers WHERE data_addr = ? AND state = 'live'"
        " AND ucx_address IS NOT NULL ORDER BY id DESC LIMIT 1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return STORE_ERR;
    sqlite3_bind_text(s, 1, data_addr, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s), out = rc == SQLITE_DONE ? STORE_NOTFOUND : STORE_ERR;
    if (rc == SQLITE_ROW) {
        *peer = sqlite3_column_int64(s, 0);
        *ucx_address = strdup((const char *)sqlite3_column_text(s, 1));
        out = *ucx_address ? STORE_OK : STORE_ERR;
    }
    sqlite3_reset(s);
    return out;
}

int store_worker_renew(store_t *st, const worker_renew_t *r, int n)
{
    static const char hb_sql[] =
        "UPDATE workers SET heartbeat_at = MAX(heartbeat_at, ?2) WHERE id = ?1 AND state = 'live'";
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
        if (r[i].has_stats && stats_put(st, r[i].id, &r[i].ws) != 0)
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
int store_worker_is_live(store_t *st, int64_t worker)
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
