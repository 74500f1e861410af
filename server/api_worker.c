/* api_worker.c - the worker protocol (docs/worker-protocol.md).
 *
 * Credentials: registration needs the join token (the router's
 * ACCESS_WORKER) and answers the worker's own secret; the store keeps only
 * its hash. Every later call about a live worker must carry that secret in
 * WORKER_SECRET_HEADER (worker_auth); the join token alone is refused.
 *
 * Leases without writes: heartbeats and polls note the time a worker was
 * heard in an in-memory book; lease_flush() writes the book in one
 * transaction at most LEASE_FLUSHES_PER_LEASE times a lease, whatever the
 * number of workers. A parked poll re-reads the store only when a write
 * transaction that can change its answer committed since its last look
 * (store_poll_gen(id): not after reports, nor after other workers' tasks),
 * and that read takes no write lock when there is nothing to lease. */
#include "api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "f32b64.h"
#include "jtext.h"
#include "report_decode.h"
#include "store.h"
#include "util.h"

/* A worker's devices at most: the most shards one host task can have, so
 * also the most tensors one report output may list (report_decode.h). */
#define WORKER_MAX_DEVICES REPORT_SHARDS_MAX
#define POLL_WAIT_MAX_MS 30000
#define WORKER_SECRET_HEADER "X-Atoll-Worker-Secret"
/* The book is written every lease/5: a renewal reaches the store within a
 * fifth of a lease (plus one call's delay) of the worker's call. */
#define LEASE_FLUSHES_PER_LEASE 5
/* A UCX worker address's bytes at most (the worker's DPLANE_UCX_ADDR_MAX;
 * ~215 bytes seen with shared memory and TCP). */
#define WORKER_UCX_ADDR_MAX 8192

/* Polls that parked (had nothing to answer yet) and polls' reads of the
 * store, for /metrics: a parked poll reads again only when store_poll_gen
 * moved, so reads stay near parks plus deliveries while reports stream. */
static _Atomic uint64_t poll_parks, poll_reads;

/* Report requests and the report items in them (one for the single-report
 * route): their ratio is how well workers batch. */
static _Atomic uint64_t report_requests, report_items;

void api_worker_report_counts(uint64_t *requests, uint64_t *items)
{
    *requests = atomic_load(&report_requests);
    *items = atomic_load(&report_items);
}

/* What the last read of each worker's tasks answered: the generation
 * noted before that read and the lease id of an answer that named no
 * stale attempt (store_worker_poll's quiet). The poll that acknowledges
 * that lease, its worker's generation unchanged, would read nothing new:
 * it parks without a read (the worker's poll right after each answer, half
 * of a tiny job's poll reads). A slot per worker id modulo
 * POLL_MEMO_SLOTS, tagged with the id: a collision costs a read, never an
 * answer. */
#define POLL_MEMO_SLOTS 4096
typedef struct poll_memo {
    int64_t worker;             /* 0: empty */
    uint64_t gen;
    int64_t lease;
} poll_memo_t;
static poll_memo_t poll_memo[POLL_MEMO_SLOTS];     /* guarded by poll_memo_mu */
static pthread_mutex_t poll_memo_mu = PTHREAD_MUTEX_INITIALIZER;

static void poll_memo_set(int64_t worker, uint64_t gen, int64_t lease)
{
    pthread_mutex_lock(&poll_memo_mu);
    poll_memo[worker % POLL_MEMO_SLOTS] = (poll_memo_t){worker, gen, lease};
    pthread_mutex_unlock(&poll_memo_mu);
}

/* Whether a poll of worker acknowledging ack would read nothing new; its
 * generation in *gen then. */
static int poll_memo_quiet(int64_t worker, int64_t ack, uint64_t *gen)
{
    pthread_mutex_lock(&poll_memo_mu);
    poll_memo_t m = poll_memo[worker % POLL_MEMO_SLOTS];
    pthread_mutex_unlock(&poll_memo_mu);
    *gen = m.gen;
    return m.worker == worker && m.lease == ack && store_poll_gen(worker) == m.gen;
}

void api_worker_poll_counts(uint64_t *parks, uint64_t *reads)
{
    *parks = atomic_load(&poll_parks);
    *reads = atomic_load(&poll_reads);
}

/* ---- credentials ---- */

/* The one place a worker secret is hashed into what the store keeps. */
static void worker_secret_hash(const char *secret, char hex[AUTH_HASH_HEX_LEN])
{
    auth_hash_token(secret, hex);
}

/* Equal hex hashes, in time independent of where they differ. */
static int hash_equal(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (size_t i = 0; i < AUTH_HASH_HEX_LEN - 1; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0 && strlen(a) == AUTH_HASH_HEX_LEN - 1;
}

/* With auth on, the admin token may remove any worker (operators' tool). */
static int caller_is_admin(const http_req_t *req)
{
    auth_who_t who;
    return auth_enabled() &&
           auth_identify(http_header(req, "Authorization"), NULL, NULL, &who) == 0 &&
           who.role == AUTH_ADMIN;
}

/* Checks the caller speaks for worker `id`. Returns 1 to go on (*live
 * set), 0 when answered: 401 no secret, 403 wrong secret, 404 a live worker
 * registered before credentials existed (it registers again). A gone or
 * unknown worker needs no secret: every handler refuses it anyway
 * (fencing), with the statuses it always had. */
static int worker_auth(http_req_t *req, http_resp_t *resp, store_t *st, int64_t id,
                       int admin_may, int *live)
{
    char stored[AUTH_HASH_HEX_LEN], given[AUTH_HASH_HEX_LEN];
    *live = 0;
    int rc = store_worker_secret(st, id, stored, live);
    if (rc == STORE_NOTFOUND)
        return 1;
    if (rc == STORE_OK && *live && !stored[0]) {
        http_problem(resp, 404, "id", "worker %ld is not registered", (long)id);
        return 0;
    }
    if (rc != STORE_OK) {
        http_problem(resp, 503, NULL, "worker could not be read; retry");
        return 0;
    }
    if (!*live || (admin_may && caller_is_admin(req)))
        return 1;
    const char *secret = http_header(req, WORKER_SECRET_HEADER);
    if (!secret || !*secret) {
        http_problem(resp, 401, WORKER_SECRET_HEADER, "calls about worker %ld need its "
                     "credential in " WORKER_SECRET_HEADER, (long)id);
        return 0;
    }
    worker_secret_hash(strlen(secret) <= AUTH_MAX_TOKEN ? secret : "", given);
    if (strlen(secret) > AUTH_MAX_TOKEN || !hash_equal(given, stored)) {
        http_problem(resp, 403, WORKER_SECRET_HEADER, "not the credential of worker %ld",
                     (long)id);
        return 0;
    }
    return 1;
}

/* ---- leases in memory ---- */

typedef struct lease_ent {
    int64_t id;
    int64_t heard_at;           /* unix us of the last call */
    int64_t written_at;         /* heard_at last written to the store */
    int has_stats, dirty;       /* ws holds figures; not yet written */
    worker_stats_t ws;
} lease_ent_t;

static pthread_mutex_t lease_mu = PTHREAD_MUTEX_INITIALIZER;
static lease_ent_t *lease_tab;      /* owned here; guarded by lease_mu */
static size_t lease_n, lease_cap;
static _Atomic int64_t lease_next_flush;

/* The entry of `id` (lease_mu held), appended when absent and add; NULL
 * when absent or out of memory. */
static lease_ent_t *lease_find(int64_t id, int add)
{
    for (size_t i = 0; i < lease_n; i++)
        if (lease_tab[i].id == id)
            return &lease_tab[i];
    if (!add)
        return NULL;
    if (lease_n == lease_cap) {
        size_t cap = lease_cap ? lease_cap * 2 : 64;
        lease_ent_t *t = realloc(lease_tab, cap * sizeof *t);
        if (!t)
            return NULL;
        lease_tab = t;
        lease_cap = cap;
    }
    lease_tab[lease_n] = (lease_ent_t){.id = id};
    return &lease_tab[lease_n++];
}

/* Records that worker `id` was heard now, with its figures when ws is not
 * NULL. 0, or -1 when the book cannot hold it (the caller writes). */
static int lease_note(int64_t id, const worker_stats_t *ws)
{
    pthread_mutex_lock(&lease_mu);
    lease_ent_t *e = lease_find(id, 1);
    if (e) {
        e->heard_at = util_wall_us();
        if (ws && (!e->has_stats || memcmp(&e->ws, ws, sizeof *ws) != 0)) {
            e->ws = *ws;
            e->has_stats = e->dirty = 1;
        }
    }
    pthread_mutex_unlock(&lease_mu);
    return e ? 0 : -1;
}

static void lease_forget(int64_t id)
{
    pthread_mutex_lock(&lease_mu);
    lease_ent_t *e = lease_find(id, 0);
    if (e)
        *e = lease_tab[--lease_n];
    pthread_mutex_unlock(&lease_mu);
}

/* What the book heard that the store lacks, into a new array (*n items;
 * NULL when none or out of memory). Drops entries silent for two leases
 * (their workers are gone). lease_mu held. */
static worker_renew_t *lease_collect(int64_t now, int *n)
{
    *n = 0;
    for (size_t i = 0; i < lease_n;) {
        if (lease_tab[i].heard_at < now - 2 * api_cfg.lease_us)
            lease_tab[i] = lease_tab[--lease_n];
        else
            i++;
    }
    worker_renew_t *b = lease_n ? malloc(lease_n * sizeof *b) : NULL;
    for (size_t i = 0; b && i < lease_n; i++) {
        lease_ent_t *e = &lease_tab[i];
        if (e->heard_at > e->written_at || e->dirty)
            b[(*n)++] = (worker_renew_t){e->id, e->heard_at, e->dirty, e->ws};
    }
    return b;
}

/* Writes the book at most once per lease/LEASE_FLUSHES_PER_LEASE (one
 * caller wins the turn). Cheap when not due: every worker call and the
 * front door's tick (api_worker_tick) call it. The tick is what keeps the
 * stored heartbeats within a flush period of what was heard when calls
 * are few: parked polls are not run again until their worker has work. */
static void lease_flush(store_t *st)
{
    int64_t now = util_wall_us(), due = atomic_load(&lease_next_flush);
    int64_t period = api_cfg.lease_us / LEASE_FLUSHES_PER_LEASE;
    if (now < due || !atomic_compare_exchange_strong(&lease_next_flush, &due, now + period))
        return;
    int n = 0;
    pthread_mutex_lock(&lease_mu);
    worker_renew_t *b = lease_collect(now, &n);
    pthread_mutex_unlock(&lease_mu);
    if (n > 0 && store_worker_renew(st, b, n) != STORE_OK) {
        log_warn("%d worker lease renewal(s) not stored; retrying", n);
        atomic_store(&lease_next_flush, now);
        n = 0;
    }
    pthread_mutex_lock(&lease_mu);
    for (int i = 0; i < n; i++) {
        lease_ent_t *e = lease_find(b[i].id, 0);
        if (!e)
            continue;
        if (b[i].heard_at > e->written_at)
            e->written_at = b[i].heard_at;
        if (b[i].has_stats && memcmp(&e->ws, &b[i].ws, sizeof e->ws) == 0)
            e->dirty = 0;
    }
    pthread_mutex_unlock(&lease_mu);
    free(b);
}

void api_worker_tick(void)
{
    store_t *st = store_thread();
    if (st)
        lease_flush(st);
}

/* A string field of at most max bytes; answers 400 naming it otherwise. */
static const char *str_field(json_t *body, const char *key, size_t max, int required,
                             http_resp_t *resp)
{
    json_t *v = json_object_get(body, key);
    if (!v && !required)
        return "";
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max) {
        http_problem(resp, 400, key, "%s must be a string of 1 to %zu characters", key, max);
        return NULL;
    }
    return json_string_value(v);
}

/* data_addr is "host:port" (what peers dial): host of [A-Za-z0-9.:_[]-]
 * (names, IPv4, bracketed IPv6), port 1..65535. Anything else would be
 * handed to every peer worker as an address it cannot connect to. */
static int data_addr_ok(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1] || strlen(colon + 1) > 5)
        return 0;
    for (const char *p = addr; p < colon; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']'))
            return 0;
    }
    long port = 0;
    for (const char *p = colon + 1; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        port = port * 10 + (*p - '0');
    }
    return port >= 1 && port <= 65535;
}

/* ucx_address (optional): base64 of 1..WORKER_UCX_ADDR_MAX bytes, handed
 * as is to the peers that ask for it (api_worker_peer); decoded here only
 * to refuse what no peer could use. *out: borrowed from body, NULL when
 * absent. 1 when acceptable, else 0 with a 400 in resp. */
static int ucx_address_ok(const json_t *body, const char **out, http_resp_t *resp)
{
    json_t *v = json_object_get(body, "ucx_address");
    *out = NULL;
    if (!v)
        return 1;
    size_t n = 0;
    void *raw = json_is_string(v) ? f32b64_bytes_decode(json_string_value(v),
                                                        json_string_length(v),
                                                        WORKER_UCX_ADDR_MAX, &n)
                                  : NULL;
    if (!raw) {
        http_problem(resp, 400, "ucx_address",
                     "ucx_address must be base64 (padded) of 1 to %d bytes", WORKER_UCX_ADDR_MAX);
        return 0;
    }
    free(raw);
    *out = json_string_value(v);
    return 1;
}

void api_worker_register(http_req_t *req, http_resp_t *resp)
{
    static const char *const allowed[] = {"island", "devices", "backend", "data_addr", "host",
                                          "pid", "ucx_address", NULL};
    json_t *body = api_body_json(req, resp), *out = NULL;
    char secret[64] = "", secret_hash[AUTH_HASH_HEX_LEN];
    if (!body)
        return;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            ok |= strcmp(key, allowed[i]) == 0;
        if (!ok) {
            http_problem(resp, 400, key, "unknown field '%s'", key);
            goto cleanup;
        }
    }
    worker_reg_t reg = {0};
    json_t *nd = json_object_get(body, "devices"), *pid = json_object_get(body, "pid");
    if (!(reg.island = str_field(body, "island", NAME_MAX_LEN - 1, 1, resp)) ||
        !(reg.data_addr = str_field(body, "data_addr", 63, 1, resp)) ||
        !(reg.backend = str_field(body, "backend", 16, 0, resp)) ||
        !(reg.host = str_field(body, "host", 255, 0, resp)))
        goto cleanup;
    if (!data_addr_ok(reg.data_addr)) {
        http_problem(resp, 400, "data_addr", "data_addr must be host:port (port 1..65535)");
        goto cleanup;
    }
    if (!ucx_address_ok(body, &reg.ucx_address, resp))
        goto cleanup;
    if (!*reg.backend)
        reg.backend = "cpu";
    if (strcmp(reg.backend, "cpu") != 0 && strcmp(reg.backend, "sim") != 0) {
        http_problem(resp, 400, "backend", "backend must be cpu or sim");
        goto cleanup;
    }
    if (!json_is_integer(nd) || json_integer_value(nd) < 1 ||
        json_integer_value(nd) > WORKER_MAX_DEVICES) {
        http_problem(resp, 400, "devices", "devices must be an integer 1..%d", WORKER_MAX_DEVICES);
        goto cleanup;
    }
    if (pid && !json_is_integer(pid)) {
        http_problem(resp, 400, "pid", "pid must be an integer");
        goto cleanup;
    }
    reg.ndevices = (int)json_integer_value(nd);
    reg.pid = pid ? json_integer_value(pid) : 0;
    store_t *st = api_store(resp);
    if (!st)
        goto cleanup;
    if (auth_new_token(secret) != 0) {
        http_problem(resp, 503, NULL, "no credential could be made; retry");
        goto cleanup;
    }
    worker_secret_hash(secret, secret_hash);
    reg.secret_hash = secret_hash;
    int64_t holder = 0;
    int rc = store_worker_register(st, &reg, api_cfg.lease_us, &out, &holder);
    if (rc == STORE_CONFLICT)
        http_problem(resp, 409, "data_addr", "data_addr %s is held by live worker %lld (a "
                     "worker restarted there registers once that one left or its lease "
                     "expired)", reg.data_addr, (long long)holder);
    else if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "island", "no island named '%s'", reg.island);
    else if (rc == STORE_FULL)
        http_problem(resp, 409, "devices", "island %s has no free block of %d devices",
                     reg.island, reg.ndevices);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "registration could not be stored; retry");
    else {
        log_info("worker %ld registered on %s (%d devices, data %s)",
                 (long)json_integer_value(json_object_get(out, "id")), reg.island, reg.ndevices,
                 reg.data_addr);
        api_sched_notify();
        json_object_set_new(out, "secret", json_string(secret));
        /* Reports are batched by the worker to fit this cap. */
        json_object_set_new(out, "max_body", json_integer((json_int_t)http_max_body()));
        http_json(resp, 201, out);
    }
cleanup:
    memset(secret, 0, sizeof secret);
    json_decref(body);
}

static int64_t worker_param(http_req_t *req, http_resp_t *resp)
{
    int64_t id = api_parse_id(req->params[0]);
    if (id < 1)
        http_problem(resp, 404, "id", "no worker '%.32s'", req->params[0]);
    return id;
}

int api_worker_gate(http_req_t *req, http_resp_t *resp)
{
    /* The handler checks it all again (worker_auth reads a cached hash):
     * this only spares receiving the body of a request it would refuse. */
    int live = 0;
    store_t *st;
    int64_t id = worker_param(req, resp);
    if (id < 1 || !(st = api_store(resp)) || !worker_auth(req, resp, st, id, 1, &live))
        return -1;
    return 0;
}

int64_t api_worker_caller(http_req_t *req, http_resp_t *resp, store_t **st)
{
    int64_t id = worker_param(req, resp);
    int live = 0;
    if (id < 1 || !(*st = api_store(resp)) || !worker_auth(req, resp, *st, id, 0, &live))
        return 0;
    if (!live) {
        http_problem(resp, 409, "id", "worker %lld is gone", (long long)id);
        return 0;
    }
    return id;
}

/* The heartbeat body's figures: each group an optional object of
 * integers 0..HB_FIGURE_MAX (an absent member is 0), members named below
 * and no others. */
typedef struct hb_group {
    const char *name;               /* "store" */
    const char *members[6];         /* NULL-terminated */
    size_t offsets[6];              /* of each member's field in worker_stats_t */
} hb_group_t;

/* A figure at most: exact in a double (JSON readers, Prometheus), and the
 * dplane figures of every worker ever registered are summed for /metrics
 * (store_dplane_totals), where one worker's INT64_MAX overflowed the sum
 * and blanked every total. */
#define HB_FIGURE_MAX (((int64_t)1 << 53) - 1)

#define HB_OFF(f) offsetof(worker_stats_t, f)
static const hb_group_t hb_groups[] = {
    {"store", {"objects", "bytes", "cap_bytes", NULL},
     {HB_OFF(objects), HB_OFF(bytes), HB_OFF(cap_bytes)}},
    {"dplane", {"dropped", "dropped_bytes", "refused", "bad_frames", "bad_key", NULL},
     {HB_OFF(dp_dropped), HB_OFF(dp_dropped_bytes), HB_OFF(dp_refused), HB_OFF(dp_bad_frames),
      HB_OFF(dp_bad_key)}},
};
#define HB_NGROUPS (sizeof hb_groups / sizeof hb_groups[0])

/* Reads one group into ws. 0, or -1 with a 400 answered naming the field
 * ("store", "store.a"); ws is the caller's scratch, written to the store
 * only when the whole body passed. */
static int heartbeat_group(const hb_group_t *g, json_t *obj, http_resp_t *resp,
                           worker_stats_t *ws)
{
    char field[64];
    if (!json_is_object(obj)) {
        http_problem(resp, 400, g->name, "%s must be an object of counters", g->name);
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        size_t i = 0;
        while (g->members[i] && strcmp(key, g->members[i]) != 0)
            i++;
        snprintf(field, sizeof field, "%s.%.40s", g->name, key);
        if (!g->members[i]) {
            http_problem(resp, 400, field, "unknown field '%s'", field);
            return -1;
        }
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > HB_FIGURE_MAX) {
            http_problem(resp, 400, field, "%s must be an integer 0..%lld", field,
                         (long long)HB_FIGURE_MAX);
            return -1;
        }
    }
    for (size_t i = 0; g->members[i]; i++) {
        json_t *m = json_object_get(obj, g->members[i]);
        *(int64_t *)((char *)ws + g->offsets[i]) = m ? json_integer_value(m) : 0;
    }
    return 0;
}

/* The optional heartbeat body {"store": {objects, bytes, cap_bytes},
 * "dplane": {dropped, dropped_bytes, refused, bad_frames, bad_key}}. 1 when it
 * carries figures, 0 when not, -1 with a 400 answered. */
static int heartbeat_stats(http_req_t *req, http_resp_t *resp, worker_stats_t *ws)
{
    if (req->body_len == 0)
        return 0;
    json_t *body = api_body_json(req, resp);
    if (!body)
        return -1;
    int rc = -1, any = 0;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        size_t g = 0;
        while (g < HB_NGROUPS && strcmp(key, hb_groups[g].name) != 0)
            g++;
        if (g == HB_NGROUPS) {
            http_problem(resp, 400, key, "unknown field '%s'", key);
            goto cleanup;
        }
        if (heartbeat_group(&hb_groups[g], v, resp, ws) != 0)
            goto cleanup;
        any = 1;
    }
    rc = any;
cleanup:
    json_decref(body);
    return rc;
}

/* The lease renewal of a call by a live worker: in the book, or straight
 * to the store when the book cannot take it. */
static int lease_renew(store_t *st, int64_t id, const worker_stats_t *ws)
{
    int rc = STORE_OK;
    if (lease_note(id, ws) != 0) {
        rc = store_worker_heartbeat(st, id);
        if (rc == STORE_OK && ws)
            rc = store_worker_set_stats(st, id, ws);
    }
    lease_flush(st);
    return rc;
}

void api_worker_heartbeat(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    store_t *st;
    int live = 0;
    if (id < 1 || !(st = api_store(resp)) || !worker_auth(req, resp, st, id, 0, &live))
        return;
    worker_stats_t ws = {0};
    int has_stats = heartbeat_stats(req, resp, &ws);
    if (has_stats < 0)
        return;
    int rc = live ? lease_renew(st, id, has_stats ? &ws : NULL) : STORE_NOTFOUND;
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "id", "worker %ld is not registered (lease expired?)", (long)id);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "heartbeat not stored; retry");
    else
        http_json(resp, 200, json_pack("{s:I}", "lease_ms", (json_int_t)(api_cfg.lease_us / 1000)));
}

/* Nothing that changes the poll's answer committed since req->user_gen:
 * it parks until that moves, or, its wait over, answers nothing new. No
 * SQL. */
static void poll_wait_on(http_req_t *req, http_resp_t *resp, int64_t id, int64_t ack,
                         int64_t until)
{
    if (util_mono_us() < until) {
        http_park_until(resp, store_poll_gen, id, req->user_gen, until);
        atomic_fetch_add(&poll_parks, 1);
    } else
        http_json(resp, 200, json_pack("{s:[], s:[], s:I}", "jobs", "cancel", "lease",
                                       (json_int_t)ack));
}

void api_worker_poll(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    if (id < 1)
        return;
    const char *w = http_query(req, "wait_ms");
    int64_t wait_ms = w ? api_parse_id(w) : 1000;
    if (w && strcmp(w, "0") == 0)
        wait_ms = 0;
    else if (wait_ms < 1 || wait_ms > POLL_WAIT_MAX_MS) {
        http_problem(resp, 400, "wait_ms", "wait_ms must be 0..%d", POLL_WAIT_MAX_MS);
        return;
    }
    /* ack: the "lease" of the last answer the worker received (0 before
     * any); the answer holds what was leased to it after that. */
    const char *a = http_query(req, "ack");
    int64_t ack = a ? api_parse_id(a) : 0;      /* api_parse_id: 0 when not digits */
    store_t *st = api_store(resp);
    int live = 0;
    int64_t until = req->first_us + wait_ms * 1000;    /* monotonic end of the long poll */
    if (!st)
        return;
    if (req->runs == 0) {
        if (!worker_auth(req, resp, st, id, 0, &live))
            return;
        /* After the credentials, and only for a live worker (an unknown one
         * is 404 below): a stranger learns nothing of the protocol. */
        if (live && (!a || (ack == 0 && strcmp(a, "0") != 0))) {
            http_problem(resp, 400, "ack", "ack must be a lease id (an integer >= 0)");
            return;
        }
        if (live && lease_renew(st, id, NULL) != STORE_OK) {
            http_problem(resp, 503, NULL, "lease not renewed; retry");
            return;
        }
        uint64_t gen;
        if (live && poll_memo_quiet(id, ack, &gen)) {
            req->user_gen = gen;    /* as if this poll had read at gen */
            poll_wait_on(req, resp, id, ack, until);
            return;
        }
    } else {
        lease_flush(st);
        if (store_poll_gen(id) == req->user_gen) {
            poll_wait_on(req, resp, id, ack, until);
            return;
        }
    }
    /* Noted before the read: a commit after this is seen next time. */
    req->user_gen = store_poll_gen(id);
    atomic_fetch_add(&poll_reads, 1);
    char *out = NULL;
    size_t len = 0;
    int any = 0;
    int64_t quiet = -1;
    int rc = store_worker_poll(st, id, ack, &out, &len, &any, &quiet);
    if (rc == STORE_OK && quiet >= 0)
        poll_memo_set(id, req->user_gen, quiet);
    if (rc == STORE_NOTFOUND) {
        /* The lease expired while this poll was parked: register again. */
        http_problem(resp, 404, "id", "worker %ld is not registered", (long)id);
        return;
    }
    if (rc != STORE_OK) {
        http_problem(resp, 503, NULL, "tasks could not be leased; retry");
        return;
    }
    if (!any && util_mono_us() < until) {
        free(out);
        /* Long poll: run again once a commit concerns this worker (its
         * generation moved) or the wait is over. */
        http_park_until(resp, store_poll_gen, id, req->user_gen, until);
        atomic_fetch_add(&poll_parks, 1);
        return;
    }
    http_json_text(resp, 200, out, len);
}

/* Whom a report's store effects (STORE_FX_*) wake: the scheduler (at
 * once, or only if a job waits for devices: with nothing queued, each
 * tiny job's success cost a pass of its own, 2.3 passes a job instead of
 * 1.0-1.5), and parked requests (pollers, the job's waiters). */
static void report_effects(int effects)
{
    if (effects & (STORE_FX_JOB_ENDED | STORE_FX_FEED))
        api_sched_notify();
    else if ((effects & STORE_FX_JOB_SUCCEEDED) && api_cfg.wake_scheduler_freed)
        api_cfg.wake_scheduler_freed();
    if (effects & (STORE_FX_TASKS_READY | STORE_FX_JOB_ENDED | STORE_FX_JOB_SUCCEEDED))
        http_wake();
}

/* The detail of a report refused because the task is not this worker's
 * (status 404: no such task; 409: not leased to it), for both report
 * routes; into buf. */
static const char *report_refusal(int status, int64_t task, int64_t worker, char *buf,
                                  size_t cap)
{
    if (status == 404)
        snprintf(buf, cap, "no task %lld", (long long)task);
    else
        snprintf(buf, cap, "task %lld is not leased to worker %lld (already reported or "
                 "reassigned)", (long long)task, (long long)worker);
    return buf;
}

/* The batch's answer {"results": [{"task", "status", "detail"?}, ...]}
 * as text, written piece by piece (a tree of 64 items cost more than
 * their SQL). Every refused item gets a "detail": the store answers a
 * task that is not the worker's (404, 409) by its status alone, and the
 * protocol promises every refusal one. NULL on OOM. */
static char *report_results_text(const store_report_result_t *res, size_t n, int64_t worker,
                                 size_t *len)
{
    jtext_w_t w = {0};
    char why[160];
    JTEXT_LIT(&w, "{\"results\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            JTEXT_LIT(&w, ",");
        JTEXT_LIT(&w, "{\"task\":");
        jtext_int(&w, res[i].task);
        JTEXT_LIT(&w, ",\"status\":");
        jtext_int(&w, res[i].status);
        if (res[i].status != 200) {
            const char *d = res[i].detail;
            if (!d && (res[i].status == 404 || res[i].status == 409)) {
                d = report_refusal(res[i].status, res[i].task, worker, why, sizeof why);
            } else if (!d) {
                snprintf(why, sizeof why, "refused (%d)", res[i].status);
                d = why;
            }
            JTEXT_LIT(&w, ",\"detail\":");
            jtext_str(&w, d);
        }
        JTEXT_LIT(&w, "}");
    }
    JTEXT_LIT(&w, "]}");
    return jtext_take(&w, len);
}

/* POST /v1/workers/:id/tasks/:task, one report. The worker is
 * authenticated before its body is read: nobody else's text costs the
 * controller a decode. */
void api_worker_report(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    int64_t task = api_parse_id(req->params[1]);
    if (id < 1)
        return;
    if (task < 1) {
        http_problem(resp, 404, "task", "no task '%.32s'", req->params[1]);
        return;
    }
    store_t *st;
    int live = 0;
    if (!api_body_type_ok(req, resp) || !(st = api_store(resp)) ||
        !worker_auth(req, resp, st, id, 0, &live))
        return;
    report_prep_t p;
    err_t e = {0};
    int effects = 0;
    if (report_parse_one(req->body, req->body_len, task, &p) != 0) {
        http_problem(resp, p.e.status, p.e.field, "%s", p.e.detail);
        goto cleanup;
    }
    atomic_fetch_add(&report_requests, 1);
    atomic_fetch_add(&report_items, 1);
    int rc = store_worker_report(st, id, &p, &effects, &e);
    char why[160];
    if (rc == STORE_NOTFOUND || rc == STORE_CONFLICT)
        http_problem(resp, rc == STORE_NOTFOUND ? 404 : 409, "task", "%s",
                     report_refusal(rc == STORE_NOTFOUND ? 404 : 409, task, id, why, sizeof why));
    else if (rc != STORE_OK && e.status >= 400 && e.status < 500)
        http_problem(resp, e.status, e.field, "%s", e.detail);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "report could not be stored; retry");
    else {
        report_effects(effects);
        http_json(resp, 200, json_pack("{s:b}", "accepted", 1));
    }
cleanup:
    report_prep_clear(&p);
}

/* POST /v1/workers/:id/reports {"reports": [{"task": N, ...report}, ...]}:
 * many reports in one request and one transaction, answered per item (a
 * malformed report is that item's 400; the others apply). A worker sends
 * whatever its queue holds, so its host tasks that ended together cost one
 * round trip. The body is read (report_parse_batch) once the worker is
 * authenticated, on this thread: the applier's turn is SQL alone. */
void api_worker_report_batch(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    store_t *st;
    int live = 0;
    if (id < 1 || !api_body_type_ok(req, resp) || !(st = api_store(resp)) ||
        !worker_auth(req, resp, st, id, 0, &live))
        return;
    report_prep_t *preps = NULL;
    size_t n = 0;
    err_t e = {0};
    if (report_parse_batch(req->body, req->body_len, &preps, &n, &e) != 0) {
        http_problem(resp, e.status, e.field, "%s", e.detail);
        return;
    }
    store_report_result_t *results = malloc(sizeof *results * (n ? n : 1));  /* the store zeroes */
    int effects = 0;
    atomic_fetch_add(&report_requests, 1);
    atomic_fetch_add(&report_items, n);
    if (!results) {
        http_problem(resp, 503, NULL, "out of memory; retry");
    } else if (store_worker_report_batch(st, id, preps, n, results, &effects) != STORE_OK) {
        http_problem(resp, 503, NULL, "reports could not be stored; retry");
    } else {
        report_effects(effects);
        size_t len;
        char *text = report_results_text(results, n, id, &len);
        if (text)
            http_json_text(resp, 200, text, len);
        else
            http_problem(resp, 503, NULL, "out of memory; the reports were stored");
        store_report_results_clear(results, n);
    }
    free(results);
    for (size_t i = 0; i < n; i++)
        report_prep_clear(&preps[i]);
    free(preps);
}

/* GET /v1/workers/{id}/peers?addr=HOST:PORT: the data-plane directory. A
 * worker about to send to a peer it has no endpoint for asks here for the
 * UCX address the peer registered (the placement names peers by data_addr
 * only). Any live worker may ask: the same bytes are no secret (UCX
 * exchanges them in its own wire-up), and no job or tenant is named. */
void api_worker_peer(http_req_t *req, http_resp_t *resp)
{
    store_t *st;
    const char *addr = http_query(req, "addr");
    char *ucx = NULL;
    int64_t peer = 0;
    if (!api_worker_caller(req, resp, &st))
        return;
    if (!addr || strlen(addr) > 63 || !data_addr_ok(addr)) {
        http_problem(resp, 400, "addr", "addr must be a data_addr (host:port)");
        return;
    }
    int rc = store_worker_peer(st, addr, &peer, &ucx);
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "addr", "no live worker with a UCX address at %.64s", addr);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "directory not readable; retry");
    else
        http_json(resp, 200, json_pack("{s:s,s:I,s:s}", "addr", addr, "worker", (json_int_t)peer,
                                       "ucx_address", ucx));
    free(ucx);
}

void api_worker_leave(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    store_t *st;
    int live = 0;
    if (id < 1 || !(st = api_store(resp)) || !worker_auth(req, resp, st, id, 1, &live))
        return;
    int rc = store_worker_leave(st, id);
    lease_forget(id);
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "id", "worker %ld is not registered", (long)id);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "could not record the departure; retry");
    else {
        api_sched_notify();
        http_wake();
        http_json(resp, 200, json_pack("{s:b}", "left", 1));
    }
}
