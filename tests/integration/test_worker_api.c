/* test_worker_api.c - what the worker protocol accepts from a worker,
 * played over raw HTTP against a real atolld (islands fake=4, spare=1,
 * lease LEASE_MS; no real worker):
 *
 * 1. data_addr: a registration naming a data_addr that a live worker holds
 *    is 409 (problem+json, field data_addr), on its island or another, so
 *    the data-plane directory cannot be pointed at a bogus UCX address; the
 *    address is free again once its holder left or its lease ran out.
 * 2. Heartbeat groups: a member `store` or `dplane` does not have is 400
 *    naming it (`store.a`), and nothing changes.
 * 3. Heartbeat figures are 0..2^53-1 (400 naming `dplane.FIELD` past
 *    that); and the /metrics totals of a database whose rows already hold
 *    INT64_MAX (written before the bound) read INT64_MAX, the other totals
 *    intact.
 * 4. Batch reports: a refused item (404 no such task, 409 not leased to
 *    the worker) carries a `detail`.
 *
 * Fails on the old code: the second registration at a held data_addr was
 * 201; {"store":{"a":1}} was 200 (and reset the store figures);
 * {"dplane":{"bad_key":INT64_MAX}} was 200 and blanked every
 * atoll_dplane_*_total to 0 (SQLite's SUM overflowed), as the poisoned
 * database still did; refused batch items had no detail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "../security/test_front_raw.h"
#include "itest.h"
#include "support_faults.h"

#define LEASE_MS 2000
#define SECRET_HEADER "X-Atoll-Worker-Secret"
/* The heartbeat book reaches the store within a fifth of a lease. */
#define FLUSH_WAIT_MS (LEASE_MS / 5 * 3)

static const char *const islands[] = {"fake=4", "spare=1"};
static int atolld_port;

static int group_setup(void **state)
{
    (void)state;
    if (hx_init() != 0)
        return -1;
    snprintf(itest_cluster.dir, sizeof itest_cluster.dir, "/tmp/atoll-wapi.XXXXXX");
    if (!mkdtemp(itest_cluster.dir) ||
        fx_atolld_start(&itest_cluster.atolld, itest_cluster.dir, "atolld", 0, LEASE_MS, islands,
                        2, itest_cluster.url, sizeof itest_cluster.url, &atolld_port) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

/* A played worker: its id and credential. */
typedef struct played {
    int64_t id;
    char secret[256];
} played_t;

/* One request; `secret` (may be NULL) in SECRET_HEADER. The status (0 on
 * transport failure); *out (may be NULL) the JSON answer, new reference. */
static long wcall(const char *method, const char *path, const char *body, const char *secret,
                  json_t **out)
{
    return hx_worker_call(&itest_client, secret, method, path, body, body ? strlen(body) : 0, out);
}

/* Registers a 1-device worker on island at data_addr addr; the status,
 * *w filled on 201, field (64 bytes) the problem's field ("" when none). */
static long reg(const char *island, const char *addr, played_t *w, char *field)
{
    char doc[200];
    snprintf(doc, sizeof doc, "{\"island\":\"%s\",\"devices\":1,\"data_addr\":\"%s\","
             "\"ucx_address\":\"QUJD\"}", island, addr);
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "POST", "/v1/workers", doc, strlen(doc), &r) == 0,
            "POST /v1/workers: no answer");
    long st = r.status;
    const char *f = json_string_value(json_object_get(r.json, "field"));
    snprintf(field, 64, "%s", f ? f : "");
    int problem = strcmp(r.ctype, "application/problem+json") == 0;
    if (st == 201) {
        const char *s = json_string_value(json_object_get(r.json, "secret"));
        w->id = json_integer_value(json_object_get(r.json, "id"));
        snprintf(w->secret, sizeof w->secret, "%s", s ? s : "");
    }
    hx_resp_clear(&r);
    T_CHECK(st == 201 || problem, "a %ld answer that is not problem+json", st);
    return st;
}

static played_t reg_ok(const char *island, const char *addr)
{
    played_t w = {0};
    char field[64];
    long st = reg(island, addr, &w, field);
    T_CHECK(st == 201 && w.id > 0, "registration on %s at %s answered %ld (field %s)", island,
            addr, st, field);
    return w;
}

static void leave(const played_t *w)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/workers/%lld", (long long)w->id);
    T_CHECK(wcall("DELETE", path, NULL, w->secret, NULL) == 200, "worker %lld could not leave",
            (long long)w->id);
}

/* A heartbeat with body; the status, field (64 bytes) the problem's. */
static long heartbeat(const played_t *w, const char *body, char *field)
{
    char path[64];
    json_t *ans = NULL;
    snprintf(path, sizeof path, "/v1/workers/%lld/heartbeat", (long long)w->id);
    long st = wcall("POST", path, body, w->secret, &ans);
    const char *f = json_string_value(json_object_get(ans, "field"));
    snprintf(field, 64, "%s", f ? f : "");
    json_decref(ans);
    return st;
}

static void expect_refused(const char *island, const char *addr, const char *why)
{
    played_t w = {0};
    char field[64];
    long st = reg(island, addr, &w, field);
    T_CHECK(st == 409 && strcmp(field, "data_addr") == 0,
            "%s: registration on %s at %s answered %ld (field '%s'), want 409 data_addr", why,
            island, addr, st, field);
}

static void test_data_addr_held(void **state)
{
    (void)state;
    played_t a = reg_ok("fake", "127.0.0.1:1");
    expect_refused("spare", "127.0.0.1:1", "another island");
    expect_refused("fake", "127.0.0.1:1", "the same island");
    leave(&a);
    played_t b = reg_ok("spare", "127.0.0.1:1");        /* free once its holder left */
    leave(&b);
    /* A holder that stops calling: free once its lease ran out (and the
     * scheduler's expiry pass saw it), as for a worker restarted there. */
    played_t c = reg_ok("fake", "127.0.0.1:2");
    int64_t t0 = hx_now_ms();
    long st = 0;
    char field[64] = "";
    played_t d = {0};
    while (hx_now_ms() - t0 < 3 * LEASE_MS && (st = reg("spare", "127.0.0.1:2", &d, field)) != 201)
        hx_sleep_ms(100);
    T_CHECK(st == 201, "127.0.0.1:2 still refused (%ld, %s) %lld ms after its holder's last call",
            st, field, (long long)(hx_now_ms() - t0));
    T_CHECK(hx_now_ms() - t0 >= LEASE_MS - 100, "taken %lld ms after the holder registered",
            (long long)(hx_now_ms() - t0));
    (void)c;
    leave(&d);
}

/* The figures of worker id in GET /v1/workers ("store" object member). */
static int64_t store_figure(int64_t id, const char *name)
{
    json_t *ans = NULL;
    T_CHECK(wcall("GET", "/v1/workers", NULL, NULL, &ans) == 200, "GET /v1/workers");
    int64_t v = -1;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(ans, "workers"), i, w) {
        if (json_integer_value(json_object_get(w, "id")) == id)
            v = json_integer_value(json_object_get(json_object_get(w, "store"), name));
    }
    json_decref(ans);
    return v;
}

static void test_heartbeat_unknown_member(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"{\"store\":{\"a\":1}}", "store.a"},
        {"{\"store\":{\"objects\":1,\"bytes\":1,\"cap_bytes\":1,\"a\":1}}", "store.a"},
        {"{\"dplane\":{\"dropped\":1,\"zz\":2}}", "dplane.zz"},
        {"{\"store\":{\"objects\":1},\"dplane\":{\"bad_keys\":1}}", "dplane.bad_keys"},
    };
    char field[64];
    played_t w = reg_ok("fake", "127.0.0.1:3");
    T_CHECK(heartbeat(&w, "{\"store\":{\"objects\":3,\"bytes\":4,\"cap_bytes\":5}}", field) == 200,
            "a good heartbeat refused");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long st = heartbeat(&w, bad[i][0], field);
        T_CHECK(st == 400 && strcmp(field, bad[i][1]) == 0,
                "heartbeat %s answered %ld (field '%s'), want 400 %s", bad[i][0], st, field,
                bad[i][1]);
    }
    T_CHECK(heartbeat(&w, "{}", field) == 200, "an empty heartbeat refused");
    /* Figures reach the store when the lease book is written (at most a
     * fifth of a lease after a call): not before FLUSH_WAIT_MS, then as
     * soon as they read so, on a slow machine too. */
    int64_t objects = -1, bytes = -1, cap = -1, t0 = hx_now_ms();
    hx_sleep_ms(FLUSH_WAIT_MS);
    for (;;) {
        objects = store_figure(w.id, "objects");
        bytes = store_figure(w.id, "bytes");
        cap = store_figure(w.id, "cap_bytes");
        if ((objects == 3 && bytes == 4 && cap == 5) || hx_now_ms() - t0 >= 15000)
            break;
        hx_sleep_ms(100);
    }
    T_CHECK(objects == 3 && bytes == 4 && cap == 5,
            "the refused heartbeats changed the store figures: %lld %lld %lld, want 3 4 5",
            (long long)objects, (long long)bytes, (long long)cap);
    leave(&w);
}

/* The dplane totals figures of /metrics, read together. */
static void dplane_totals(double *dropped, double *refused, double *bad_key)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/metrics", NULL, 0, &r) == 0 && r.status == 200,
            "GET /metrics");
    *dropped = hx_metric_in(r.body, "atoll_dplane_dropped_frames_total");
    *refused = hx_metric_in(r.body, "atoll_dplane_refused_connections_total");
    *bad_key = hx_metric_in(r.body, "atoll_dplane_bad_key_frames_total");
    hx_resp_clear(&r);
}

static void test_heartbeat_figures_bounded(void **state)
{
    (void)state;
    static const char *const bad[][2] = {
        {"{\"dplane\":{\"bad_key\":9223372036854775807}}", "dplane.bad_key"},
        {"{\"dplane\":{\"dropped_bytes\":9007199254740992}}", "dplane.dropped_bytes"},
        {"{\"store\":{\"bytes\":9007199254740992}}", "store.bytes"},
        {"{\"dplane\":{\"refused\":-1}}", "dplane.refused"},
    };
    char field[64];
    played_t w = reg_ok("fake", "127.0.0.1:4");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long st = heartbeat(&w, bad[i][0], field);
        T_CHECK(st == 400 && strcmp(field, bad[i][1]) == 0,
                "heartbeat %s answered %ld (field '%s'), want 400 %s", bad[i][0], st, field,
                bad[i][1]);
    }
    T_CHECK(heartbeat(&w, "{\"dplane\":{\"dropped\":7,\"bad_key\":5,"
                          "\"refused\":9007199254740991}}", field) == 200,
            "figures within the bound refused (field %s)", field);
    /* As in test_heartbeat_unknown_member: not before the lease book's
     * write is due, then as soon as the totals read so. */
    double dropped, refused, bad_key;
    int64_t t0 = hx_now_ms();
    hx_sleep_ms(FLUSH_WAIT_MS);
    for (;;) {
        dplane_totals(&dropped, &refused, &bad_key);
        if ((dropped == 7 && bad_key == 5 && refused == 9007199254740991.0) ||
            hx_now_ms() - t0 >= 15000)
            break;
        hx_sleep_ms(100);
    }
    T_CHECK(dropped == 7 && bad_key == 5 && refused == 9007199254740991.0,
            "/metrics: dropped %.0f bad_key %.0f refused %.0f, want 7 5 2^53-1", dropped, bad_key,
            refused);
    /* The worker stays registered: its row keeps dropped = 7 for the
     * next test. */
}

/* Rows written before the bound existed: two workers with INT64_MAX. The
 * sum saturates; the other totals still read. */
static void test_totals_saturate(void **state)
{
    (void)state;
    char db_path[HX_DIR_MAX + 16];
    snprintf(db_path, sizeof db_path, "%s/atoll.db", itest_cluster.dir);
    T_CHECK(fx_term(&itest_cluster.atolld, 10000), "atolld did not stop cleanly");
    sqlite3 *db = NULL;
    int rc = sqlite3_open(db_path, &db);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "UPDATE workers SET dplane_bad_key = 9223372036854775807", NULL,
                          NULL, NULL);
    int rows = rc == SQLITE_OK ? sqlite3_changes(db) : 0;
    sqlite3_close(db);
    T_CHECK(rc == SQLITE_OK && rows >= 2, "database not updated (%d, %d rows)", rc, rows);
    int port = 0;
    T_CHECK(fx_atolld_start(&itest_cluster.atolld, itest_cluster.dir, "atolld", atolld_port,
                            LEASE_MS, islands, 2, itest_cluster.url, sizeof itest_cluster.url,
                            &port) == 0 && port == atolld_port,
            "atolld did not restart on port %d", atolld_port);
    double dropped, refused, bad_key;
    dplane_totals(&dropped, &refused, &bad_key);
    T_CHECK(dropped == 7 && refused == 9007199254740991.0 && bad_key >= 9.2e18,
            "/metrics: dropped %.0f refused %.0f bad_key %.0f, want 7, 2^53-1, INT64_MAX",
            dropped, refused, bad_key);
}

/* The first task leased to w (polled up to 10 s). */
static int64_t poll_task(const played_t *w)
{
    char path[96];
    int64_t task = 0, t0 = hx_now_ms();
    snprintf(path, sizeof path, "/v1/workers/%lld/tasks?wait_ms=500&ack=0", (long long)w->id);
    while (task < 1 && hx_now_ms() - t0 < 10000) {
        json_t *ans = NULL;
        long st = wcall("GET", path, NULL, w->secret, &ans);
        json_t *group = json_array_get(json_object_get(ans, "jobs"), 0);
        task = json_integer_value(
            json_object_get(json_array_get(json_object_get(group, "tasks"), 0), "task"));
        json_decref(ans);
        T_CHECK(st == 200, "poll answered %ld", st);
    }
    T_CHECK(task > 0, "the played worker got no task within 10 s");
    return task;
}

/* POSTs the batch body; checks each item's status against want[] and that
 * every refused one has a non-empty detail. */
static void batch_expect(const played_t *w, const char *body, const int *want, size_t n)
{
    char path[64];
    json_t *ans = NULL;
    snprintf(path, sizeof path, "/v1/workers/%lld/reports", (long long)w->id);
    long st = wcall("POST", path, body, w->secret, &ans);
    json_t *results = json_object_get(ans, "results");
    int ok = st == 200 && json_array_size(results) == n;
    char text[400] = "";
    char *dump = json_dumps(ans, JSON_COMPACT);
    snprintf(text, sizeof text, "%s", dump ? dump : "(none)");
    free(dump);
    for (size_t i = 0; ok && i < n; i++) {
        json_t *r = json_array_get(results, i);
        const char *detail = json_string_value(json_object_get(r, "detail"));
        ok = json_integer_value(json_object_get(r, "status")) == want[i] &&
             (want[i] == 200 || (detail && *detail));
    }
    json_decref(ans);
    T_CHECK(ok, "batch %s answered %ld %s", body, st, text);
}

static void test_batch_refusals_detailed(void **state)
{
    (void)state;
    played_t w = reg_ok("spare", "127.0.0.1:5");
    int64_t job = itest_submit("{'name':'wapi','slices':{'s':{'shape':[1],'island':'spare'}},"
                               "'computations':[{'name':'c','slice':'s','ops':[{'op':"
                               "'shard_index','out':'i'}],'outputs':['i']}]}");
    int64_t task = poll_task(&w);
    char body[256];
    snprintf(body, sizeof body, "{\"reports\":[{\"task\":%lld,\"state\":\"failed\",\"error\":"
             "\"played\"},{\"task\":999999,\"state\":\"failed\",\"error\":\"x\"}]}",
             (long long)task);
    batch_expect(&w, body, (const int[]){200, 404}, 2);
    snprintf(body, sizeof body, "{\"reports\":[{\"task\":%lld,\"state\":\"failed\",\"error\":"
             "\"again\"}]}", (long long)task);
    batch_expect(&w, body, (const int[]){409}, 1);
    (void)job;
    leave(&w);
}

/* GET /v1/workers lists every live worker and the newest 128 gone ones,
 * saying how many it left out: a join token's register-and-leave loop
 * cannot grow the answer without end. 140 played workers come and go on
 * island spare, one live one stays on fake. */
static void test_gone_workers_bounded(void **state)
{
    (void)state;
    played_t live = reg_ok("fake", "127.0.0.1:7701");
    for (int i = 0; i < 140; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", 7800 + i);
        played_t w = reg_ok("spare", addr);
        leave(&w);
    }
    json_t *v = NULL;
    T_CHECK(wcall("GET", "/v1/workers", NULL, NULL, &v) == 200, "GET /v1/workers");
    json_t *arr = json_object_get(v, "workers"), *w;
    size_t i;
    int gone = 0, saw_live = 0;
    int64_t last_gone = 0;
    json_array_foreach(arr, i, w) {
        int64_t id = json_integer_value(json_object_get(w, "id"));
        if (strcmp(json_string_value(json_object_get(w, "state")), "live") == 0) {
            saw_live |= id == live.id;
        } else {
            gone++;
            last_gone = id > last_gone ? id : last_gone;
        }
    }
    int64_t omitted = json_integer_value(json_object_get(v, "gone_omitted"));
    json_decref(v);
    leave(&live);
    T_CHECK(saw_live && gone == 128 && omitted >= 12 && last_gone > live.id,
            "listed %d gone (the newest up to %lld), %lld omitted, live one %s: want the newest"
            " 128 gone, the rest counted, every live one", gone, (long long)last_gone,
            (long long)omitted, saw_live ? "listed" : "missing");
}

/* A call about a live worker that lacks its credential, asking leave to
 * send its body (Expect: 100-continue), is refused on its headers: 403 in
 * place of "100 Continue", so none of its 400 KB is sent to be thrown
 * away, and the connection closes. (Without Expect the body is on its way
 * unasked and the answer follows it.) Twice: another connection, the
 * same answer. */
static void test_refused_before_body(void **state)
{
    (void)state;
    played_t w = reg_ok("fake", "127.0.0.1:7702");
    static const char *const expect[] = {"Expect: 100-continue\r\n",
                                         "Expect: 100-Continue\r\n"};
    for (int i = 0; i < 2; i++) {
        int fd = raw_connect(atolld_port);
        T_CHECK(fd >= 0, "connect");
        char head[512];
        int n = snprintf(head, sizeof head, "POST /v1/workers/%lld/reports HTTP/1.1\r\n"
                         "Host: x\r\nContent-Type: application/json\r\n"
                         SECRET_HEADER ": atl_not-the-secret\r\n%s"
                         "Content-Length: 400000\r\n\r\n", (long long)w.id, expect[i]);
        T_CHECK(raw_send_all(fd, head, (size_t)n) == 0, "send the head");
        raw_resp_t r;
        int got = raw_read_head(fd, &r, 10000);
        char conn[64] = "";
        raw_header(&r, "Connection", conn, sizeof conn);
        close(fd);
        T_CHECK(got == 0 && r.status == 403 && strcasecmp(conn, "close") == 0,
                "a wrong credential with %s and no body sent yet: status %d, Connection '%s'"
                " (want 403 at once, closed)", expect[i], r.status, conn);
    }
    leave(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_addr_held),
        cmocka_unit_test(test_heartbeat_unknown_member),
        cmocka_unit_test_teardown(test_batch_refusals_detailed, itest_cancel_leftovers),
        cmocka_unit_test(test_heartbeat_figures_bounded),
        cmocka_unit_test(test_totals_saturate),
        cmocka_unit_test(test_gone_workers_bounded),
        cmocka_unit_test(test_refused_before_body),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
