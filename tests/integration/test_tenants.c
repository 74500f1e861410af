/* test_tenants.c - bearer tokens, tenants, quotas and fair share against a
 * real atolld started with --admin-token/--worker-token/--read-token:
 *   - who may call what (401 without or with a wrong token, 403 for a role
 *     that may not use the route, /healthz public);
 *   - workers join only with the worker token;
 *   - tenants created by the admin see and touch only their own jobs
 *     (another tenant's job is 404), Idempotency-Key is per tenant, a
 *     revoked token is 401, tokens never appear in GET /v1/tenants;
 *   - quotas: a job bigger than the quota is 422, a job that would go past
 *     it waits with a "quota" pending_reason;
 *   - fair share: among equal priorities the tenant using fewer devices is
 *     admitted first;
 *   - a token revoked while a job of its tenant waits for its sync round
 *     (stored, its 201 not sent yet) does not take the 201 back: atolld
 *     runs with tests/integration/shim_syncgate.c preloaded, which holds
 *     the round open while the test revokes.
 * Cluster: west=2x2 (two workers of 2 devices), east=2x4 (two of 4). The
 * tests run in order and share it; the workers are started by
 * test_worker_tokens, after checking that a worker without the token
 * cannot join. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "support_faults.h"

#define ADMIN_TOKEN "admin-token-0123456789abcdef"
#define WORKER_TOKEN "worker-token-0123456789abcdef"
#define READ_TOKEN "read-token-0123456789abcdef"
#define WRONG_TOKEN "wrong-token-0123456789abcdef"

/* Clients, one per identity; itest_client is the admin (so the shared
 * leftover-cancelling teardown sees every job). */
static hx_client_t anon_cl, read_cl, alice_cl, bob_cl, carol_cl, dave_cl;
static char alice_token[128], bob_token[128];
/* While this file exists, atolld's fdatasync waits (shim_syncgate.c). */
static char sync_gate[HX_PATH_MAX];

/* Fails the test, reporting `cl`'s last exchange and the logs. */
#define C_CHECK(cl, cond, ...)                                                          \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            hx_report_failure(&itest_cluster, (cl), __FILE__, __LINE__, __VA_ARGS__);  \
            fail_msg("%s", #cond);                                                      \
        }                                                                               \
    } while (0)

/* One request; fails unless the status is `want`. Returns the parsed body
 * (new reference, may be NULL). */
static json_t *call(hx_client_t *cl, const char *method, const char *path, const char *body,
                    const char *const *hdrs, long want)
{
    hx_resp_t r;
    int rc = hx_request_h(cl, method, path, body, body ? strlen(body) : 0, hdrs, &r);
    long got = rc == 0 ? r.status : 0;
    json_t *j = NULL;
    if (rc == 0 && got == want) {
        j = r.json;     /* ownership moves to the caller */
        r.json = NULL;
    }
    hx_resp_clear(&r);  /* before a failing check: it longjmps */
    C_CHECK(cl, got == want, "%s %s: status %ld, expected %ld", method, path, got, want);
    return j;
}

/* A job with one slice `shape` ("[2,2]") on `island` (NULL: any) that keeps
 * its devices busy `us` µs, then outputs its shard index. malloc'd text. */
static char *busy_doc(const char *name, const char *shape, const char *island, int64_t us)
{
    char isl[96] = "", buf[1024];
    if (island)
        snprintf(isl, sizeof isl, ",'island':'%s'", island);
    snprintf(buf, sizeof buf,
             "{'name':'%s','slices':{'s':{'shape':%s%s}},'computations':["
             "{'name':'c','slice':'s','ops':[{'op':'compute','out':'busy','us':%" PRId64 "},"
             "{'op':'shard_index','out':'i'}],'outputs':['i']}]}",
             name, shape, isl, us);
    char *doc = hx_text_q(buf);
    T_CHECK(doc != NULL, "out of memory");
    return doc;
}

/* Submits as `cl`; fails unless the status is `want`; returns the job id
 * (0 when want is not 201/200). */
static int64_t submit_as(hx_client_t *cl, const char *name, const char *shape,
                         const char *island, int64_t us, const char *const *hdrs, long want)
{
    char *doc = busy_doc(name, shape, island, us);
    hx_resp_t r;
    int rc = hx_request_h(cl, "POST", "/v1/jobs", doc, strlen(doc), hdrs, &r);
    free(doc);
    long got = rc == 0 ? r.status : 0;
    int64_t id = json_integer_value(json_object_get(r.json, "id"));
    hx_resp_clear(&r);
    C_CHECK(cl, got == want, "POST /v1/jobs (%s): status %ld, expected %ld", name, got, want);
    return id;
}

/* Waits for `id` to succeed (polling as cl); returns the job (caller frees). */
static json_t *wait_ok(hx_client_t *cl, int64_t id)
{
    json_t *job = NULL;
    int rc = hx_job_wait(cl, id, ITEST_JOB_TIMEOUT_MS, ITEST_POLL_MS, &job);
    int ok = rc == 0 && job && strcmp(hx_job_state(job), "succeeded") == 0;
    if (!ok) {
        json_decref(job);
        job = NULL;
    }
    C_CHECK(cl, ok, "job %" PRId64 " did not succeed", id);
    return job;
}

/* Waits until job `id` has left `queued`; fails on a timeout or a terminal
 * state. */
static void wait_admitted(hx_client_t *cl, int64_t id)
{
    json_t *job = NULL;
    int rc = hx_job_wait_leave(cl, id, "queued", 10000, ITEST_POLL_MS, &job);
    int ok = rc == 0 && job && !hx_state_terminal(hx_job_state(job));
    json_decref(job);
    C_CHECK(cl, ok, "job %" PRId64 " was not admitted within 10 s", id);
}

/* Does the jobs list `list` ({"jobs": [...]}) hold job `id`? */
static int list_has(const json_t *list, int64_t id)
{
    json_t *jobs = json_object_get(list, "jobs");
    for (size_t i = 0; i < json_array_size(jobs); i++)
        if (json_integer_value(json_object_get(json_array_get(jobs, i), "id")) == id)
            return 1;
    return 0;
}

static size_t workers_count(void)
{
    json_t *w = call(&itest_client, "GET", "/v1/workers", NULL, NULL, 200);
    size_t n = json_array_size(json_object_get(w, "workers"));
    json_decref(w);
    return n;
}

/* Creates a tenant as the admin; copies its token (shown once) into out. */
static void create_tenant(const char *body_q, char *out, size_t cap)
{
    char *body = hx_text_q(body_q);
    T_CHECK(body != NULL, "out of memory");
    hx_resp_t r;
    int rc = hx_request(&itest_client, "POST", "/v1/tenants", body, strlen(body), &r);
    free(body);
    const char *tok = json_string_value(json_object_get(r.json, "token"));
    int ok = rc == 0 && r.status == 201 && tok && strlen(tok) >= 16 && strlen(tok) < cap;
    if (ok)
        snprintf(out, cap, "%s", tok);
    hx_resp_clear(&r);
    T_CHECK(ok, "POST /v1/tenants %s: expected 201 with a token", body_q);
}

/* Creates a tenant as the admin and a client holding its token in cl. */
static void tenant_client(const char *body_q, hx_client_t *cl)
{
    char token[128];
    create_tenant(body_q, token, sizeof token);
    T_CHECK(hx_client_init(cl, itest_cluster.url) == 0 &&
                hx_client_set_auth(cl, token, NULL) == 0, "client");
}

/* ---- setup: atolld with tokens, no workers yet ---- */

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2", "east=2x4"};
    static const char *const extra[] = {"--admin-token", ADMIN_TOKEN, "--worker-token",
                                        WORKER_TOKEN, "--read-token", READ_TOKEN, NULL};
    /* Only atolld gets the shim (support_faults.h). */
    snprintf(sync_gate, sizeof sync_gate, "/tmp/atoll-syncgate-%ld", (long)getpid());
    int started = hx_init() == 0 && fx_syncgate_env(1, sync_gate, NULL) == 0 &&
                  hx_cluster_start_args(&itest_cluster, islands, 2, extra) == 0;
    fx_syncgate_env(0, NULL, NULL);
    if (!started)
        return -1;
    hx_client_t *all[] = {&itest_client, &anon_cl, &read_cl, &alice_cl, &bob_cl, &carol_cl,
                          &dave_cl};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (hx_client_init(all[i], itest_cluster.url) != 0)
            goto fail;
    if (hx_client_set_auth(&itest_client, ADMIN_TOKEN, NULL) != 0 ||
        hx_client_set_auth(&read_cl, READ_TOKEN, NULL) != 0)
        goto fail;
    return 0;
fail:
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        hx_client_cleanup(all[i]);
    hx_cluster_stop(&itest_cluster);
    return -1;
}

static int group_teardown(void **state)
{
    (void)state;
    unlink(sync_gate);
    hx_client_t *others[] = {&anon_cl, &read_cl, &alice_cl, &bob_cl, &carol_cl, &dave_cl};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        hx_client_cleanup(others[i]);
    return itest_stop();
}

/* ---- who may call what ---- */

static void test_auth_roles(void **state)
{
    (void)state;
    json_decref(call(&anon_cl, "GET", "/healthz", NULL, NULL, 200));
    json_t *p = call(&anon_cl, "GET", "/v1/jobs", NULL, NULL, 401);
    C_CHECK(&anon_cl, json_integer_value(json_object_get(p, "status")) == 401,
            "401 without a problem+json body");
    json_decref(p);
    json_decref(call(&anon_cl, "GET", "/v1/islands", NULL, NULL, 401));
    json_decref(call(&anon_cl, "GET", "/metrics", NULL, NULL, 401));

    static const char *const wrong[] = {"Authorization: Bearer " WRONG_TOKEN, NULL};
    json_decref(call(&anon_cl, "GET", "/v1/jobs", NULL, wrong, 401));
    static const char *const not_bearer[] = {"Authorization: Basic " ADMIN_TOKEN, NULL};
    json_decref(call(&anon_cl, "GET", "/v1/jobs", NULL, not_bearer, 401));

    /* The read token reads everything but changes nothing. */
    json_decref(call(&read_cl, "GET", "/v1/jobs", NULL, NULL, 200));
    json_decref(call(&read_cl, "GET", "/v1/islands", NULL, NULL, 200));
    json_decref(call(&read_cl, "GET", "/v1/workers", NULL, NULL, 200));
    char *doc = busy_doc("nope", "[1]", NULL, 1000);
    hx_resp_t r;
    int rc = hx_request(&read_cl, "POST", "/v1/jobs", doc, strlen(doc), &r);
    free(doc);
    long got = rc == 0 ? r.status : 0;
    hx_resp_clear(&r);
    C_CHECK(&read_cl, got == 403, "read token POST /v1/jobs: %ld, expected 403", got);
    json_decref(call(&read_cl, "DELETE", "/v1/jobs/1", NULL, NULL, 403));
    json_decref(call(&read_cl, "GET", "/v1/tenants", NULL, NULL, 403));
    json_decref(call(&read_cl, "POST", "/v1/workers", "{}", NULL, 403));

    /* ?access_token= is only the event stream's (EventSource cannot set
     * headers; tests/security/test_front_headers.c checks the stream):
     * elsewhere it is ignored. */
    json_decref(call(&anon_cl, "GET", "/v1/jobs?access_token=" READ_TOKEN, NULL, NULL, 401));
    json_decref(call(&anon_cl, "GET", "/v1/jobs?access_token=" WRONG_TOKEN, NULL, NULL, 401));

    /* The worker token is for the worker protocol only. */
    static const char *const worker[] = {"Authorization: Bearer " WORKER_TOKEN, NULL};
    json_decref(call(&anon_cl, "GET", "/v1/jobs", NULL, worker, 403));
    json_decref(call(&anon_cl, "GET", "/v1/tenants", NULL, worker, 403));
}

/* ---- workers join only with the worker token ---- */

static void test_worker_tokens(void **state)
{
    (void)state;
    static const char *const none[] = {NULL};
    static const char *const wrong[] = {"--token", WRONG_TOKEN, NULL};
    static const char *const reader[] = {"--token", READ_TOKEN, NULL};
    const char *const *bad[] = {none, wrong, reader};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = hx_worker_start_args(&itest_cluster, "west", 2, bad[i], 3000, 1);
        int st = hx_worker_stop_last(&itest_cluster, 2000);
        T_CHECK(rc != 0, "a worker with bad token #%zu printed its ready line", i);
        /* A refused registration is fatal: the worker exits non-zero by
         * itself (st is then its own exit status, not our SIGTERM's). */
        T_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) != 0,
                "worker with bad token #%zu: wait status %d, expected a non-zero exit", i, st);
        T_CHECK(workers_count() == 0, "a worker without the worker token joined");
    }
    static const char *const good[] = {"--token", WORKER_TOKEN, NULL};
    T_CHECK(hx_worker_start_args(&itest_cluster, "west", 2, good, 15000, 0) == 0 &&
                hx_worker_start_args(&itest_cluster, "west", 2, good, 15000, 0) == 0 &&
                hx_worker_start_args(&itest_cluster, "east", 4, good, 15000, 0) == 0 &&
                hx_worker_start_args(&itest_cluster, "east", 4, good, 15000, 0) == 0,
            "a worker with the worker token did not get ready");
    T_CHECK(workers_count() == 4, "expected 4 registered workers");
    /* And the cluster works: the admin runs a job end to end. */
    int64_t id = submit_as(&itest_client, "admin-job", "[2,2]", "west", 1000, NULL, 201);
    json_decref(wait_ok(&itest_client, id));
}

/* ---- tenants: isolation, idempotency, revocation ---- */

static void test_tenant_isolation(void **state)
{
    (void)state;
    create_tenant("{'name':'alice','quota_devices':4}", alice_token, sizeof alice_token);
    create_tenant("{'name':'bob','share':1}", bob_token, sizeof bob_token);
    T_CHECK(strcmp(alice_token, bob_token) != 0, "two tenants got the same token");
    T_CHECK(hx_client_set_auth(&alice_cl, alice_token, NULL) == 0 &&
                hx_client_set_auth(&bob_cl, bob_token, NULL) == 0, "token too long");
    /* A name is unique; a tenant may not manage tenants. */
    json_decref(call(&itest_client, "POST", "/v1/tenants", "{\"name\":\"alice\"}", NULL, 409));
    json_decref(call(&alice_cl, "POST", "/v1/tenants", "{\"name\":\"eve\"}", NULL, 403));
    json_decref(call(&alice_cl, "GET", "/v1/tenants", NULL, NULL, 403));

    /* Tokens are shown once: never in the list (raw body searched). */
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/v1/tenants", NULL, 0, &r) == 0 &&
                r.status == 200, "GET /v1/tenants");
    int leaked = strstr(r.body, alice_token) || strstr(r.body, bob_token) ||
                 strstr(r.body, "token");
    json_t *tenants = json_object_get(r.json, "tenants");
    size_t ntenants = json_array_size(tenants);
    json_int_t alice_quota = -1;
    for (size_t i = 0; i < ntenants; i++) {
        json_t *t = json_array_get(tenants, i);
        const char *name = json_string_value(json_object_get(t, "name"));
        if (name && strcmp(name, "alice") == 0)
            alice_quota = json_integer_value(json_object_get(t, "quota_devices"));
    }
    hx_resp_clear(&r);
    T_CHECK(!leaked, "GET /v1/tenants shows a token");
    T_CHECK(ntenants == 2 && alice_quota == 4, "tenants list: %zu tenants, alice quota %lld",
            ntenants, (long long)alice_quota);

    /* Each submits; each lists only its own. */
    int64_t a = submit_as(&alice_cl, "alice-1", "[1]", "west", 1000, NULL, 201);
    int64_t b = submit_as(&bob_cl, "bob-1", "[1]", "west", 1000, NULL, 201);
    json_decref(wait_ok(&alice_cl, a));
    json_decref(wait_ok(&bob_cl, b));
    json_t *la = call(&alice_cl, "GET", "/v1/jobs", NULL, NULL, 200);
    json_t *lb = call(&bob_cl, "GET", "/v1/jobs", NULL, NULL, 200);
    json_t *ladm = call(&itest_client, "GET", "/v1/jobs", NULL, NULL, 200);
    int ok = list_has(la, a) && !list_has(la, b) && json_array_size(json_object_get(la, "jobs")) == 1 &&
             list_has(lb, b) && !list_has(lb, a) && json_array_size(json_object_get(lb, "jobs")) == 1 &&
             list_has(ladm, a) && list_has(ladm, b);
    json_decref(la);
    json_decref(lb);
    json_decref(ladm);
    T_CHECK(ok, "job lists not filtered by tenant (alice %" PRId64 ", bob %" PRId64 ")", a, b);
    /* The read token (the dashboard) sees every tenant's jobs. */
    json_t *lr = call(&read_cl, "GET", "/v1/jobs", NULL, NULL, 200);
    ok = list_has(lr, a) && list_has(lr, b);
    json_decref(lr);
    T_CHECK(ok, "the read token does not see every tenant's jobs");

    /* Another tenant's job does not exist for bob. */
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, a);
    json_decref(call(&bob_cl, "GET", path, NULL, NULL, 404));
    json_decref(call(&bob_cl, "DELETE", path, NULL, NULL, 404));
    json_decref(call(&alice_cl, "GET", path, NULL, NULL, 200));
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "/result", a);
    json_decref(call(&bob_cl, "GET", path, NULL, NULL, 404));
    json_decref(call(&alice_cl, "GET", path, NULL, NULL, 200));
    json_decref(call(&read_cl, "GET", path, NULL, NULL, 200));

    /* Idempotency-Key is per tenant: the same key makes two jobs, and a
     * retry by the same tenant answers its first job (200). */
    static const char *const key[] = {"Idempotency-Key: shared-key-42", NULL};
    int64_t ia = submit_as(&alice_cl, "alice-idem", "[1]", "west", 1000, key, 201);
    int64_t ib = submit_as(&bob_cl, "bob-idem", "[1]", "west", 1000, key, 201);
    int64_t ia2 = submit_as(&alice_cl, "alice-idem", "[1]", "west", 1000, key, 200);
    T_CHECK(ia > 0 && ib > 0 && ia != ib, "same key from two tenants: jobs %" PRId64
            " and %" PRId64 ", expected two different jobs", ia, ib);
    T_CHECK(ia2 == ia, "alice's retry gave job %" PRId64 ", expected %" PRId64, ia2, ia);
    json_decref(wait_ok(&alice_cl, ia));
    json_decref(wait_ok(&bob_cl, ib));

    /* Revocation: bob's token stops working at once; alice's does not. */
    json_t *rv = call(&itest_client, "DELETE", "/v1/tenants/bob", NULL, NULL, 200);
    json_decref(rv);
    json_decref(call(&bob_cl, "GET", "/v1/jobs", NULL, NULL, 401));
    submit_as(&bob_cl, "bob-late", "[1]", NULL, 1000, NULL, 401);
    json_decref(call(&alice_cl, "GET", "/v1/jobs", NULL, NULL, 200));
    json_decref(call(&itest_client, "DELETE", "/v1/tenants/bob", NULL, NULL, 404));
}

/* ---- quotas ---- */

static void test_quota_refused(void **state)
{
    (void)state;
    /* 6 devices fit east (2x4) but not alice's quota of 4: never admissible. */
    char *doc = busy_doc("too-big", "[2,3]", "east", 1000);
    hx_resp_t r;
    int rc = hx_request(&alice_cl, "POST", "/v1/jobs", doc, strlen(doc), &r);
    free(doc);
    long got = rc == 0 ? r.status : 0;
    const char *detail = json_string_value(json_object_get(r.json, "detail"));
    int names_quota = detail && strstr(detail, "quota");
    hx_resp_clear(&r);
    C_CHECK(&alice_cl, got == 422, "a job over alice's quota: %ld, expected 422", got);
    C_CHECK(&alice_cl, names_quota, "the 422 does not name the quota");
    /* The admin has no quota: the same job is accepted. */
    int64_t id = submit_as(&itest_client, "admin-big", "[2,3]", "east", 1000, NULL, 201);
    json_decref(wait_ok(&itest_client, id));
}

static void test_quota_waits(void **state)
{
    (void)state;
    /* east has 8 free devices: both 2x2 jobs would fit at once, but alice's
     * quota of 4 lets only one run. */
    int64_t j1 = submit_as(&alice_cl, "alice-q1", "[2,2]", "east", 300000, NULL, 201);
    wait_admitted(&alice_cl, j1);
    int64_t j2 = submit_as(&alice_cl, "alice-q2", "[2,2]", "east", 1000, NULL, 201);
    /* While j1 holds alice's 4 devices, j2 must sit queued naming the
     * quota (the reason appears at the scheduler's next round). */
    int saw_reason = 0;
    char last_state[32] = "", reason[200] = "";
    int64_t deadline = hx_now_ms() + 10000;
    while (!saw_reason && hx_now_ms() < deadline) {
        json_t *g1 = hx_job_get(&alice_cl, j1), *g2 = hx_job_get(&alice_cl, j2);
        const char *s1 = g1 ? hx_job_state(g1) : "", *s2 = g2 ? hx_job_state(g2) : "";
        const char *why = json_string_value(json_object_get(g2, "pending_reason"));
        snprintf(last_state, sizeof last_state, "%s/%s", s1, s2);
        snprintf(reason, sizeof reason, "%s", why ? why : "(none)");
        int j1_live = strcmp(s1, "allocated") == 0 || strcmp(s1, "running") == 0;
        int j2_queued = strcmp(s2, "queued") == 0;
        saw_reason = j1_live && j2_queued && why && strstr(why, "quota");
        json_decref(g1);
        json_decref(g2);
        if (!j1_live || !j2_queued)
            break;
        if (!saw_reason)
            hx_sleep_ms(ITEST_POLL_MS);
    }
    T_CHECK(saw_reason, "second job never seen waiting on the quota (states %s, reason %s)",
            last_state, reason);
    json_t *a = wait_ok(&alice_cl, j1), *b = wait_ok(&alice_cl, j2);
    int64_t a_fin = hx_job_time_us(a, "finished"), b_alloc = hx_job_time_us(b, "allocated");
    json_decref(a);
    json_decref(b);
    T_CHECK(a_fin > 0 && b_alloc >= a_fin, "second job allocated at %" PRId64
            " before the first finished at %" PRId64, b_alloc, a_fin);
}

/* ---- fair share ---- */

static void test_fair_share(void **state)
{
    (void)state;
    char carol_token[128], dave_token[128];
    create_tenant("{'name':'carol','share':1}", carol_token, sizeof carol_token);
    create_tenant("{'name':'dave','share':1}", dave_token, sizeof dave_token);
    T_CHECK(hx_client_set_auth(&carol_cl, carol_token, NULL) == 0 &&
                hx_client_set_auth(&dave_cl, dave_token, NULL) == 0, "token too long");
    /* carol fills west (2x2) with two half-island jobs: a long one and a
     * shorter one. When the shorter one ends, half the island frees while
     * carol still holds the other half, so carol uses 2 devices and dave
     * none: dave's job must be admitted before carol's, although carol's
     * was queued first. (With the island freed at once both would use 0
     * and age would decide, which tests nothing.) */
    int64_t hold = submit_as(&carol_cl, "carol-hold", "[1,2]", "west", 1500000, NULL, 201);
    int64_t brief = submit_as(&carol_cl, "carol-brief", "[1,2]", "west", 500000, NULL, 201);
    wait_admitted(&carol_cl, hold);
    wait_admitted(&carol_cl, brief);
    int64_t c2 = submit_as(&carol_cl, "carol-next", "[1,2]", "west", 100000, NULL, 201);
    int64_t d1 = submit_as(&dave_cl, "dave-first", "[1,2]", "west", 100000, NULL, 201);
    json_t *jc = wait_ok(&carol_cl, c2), *jd = wait_ok(&dave_cl, d1);
    int64_t c_alloc = hx_job_time_us(jc, "allocated"), d_alloc = hx_job_time_us(jd, "allocated");
    json_decref(jc);
    json_decref(jd);
    json_decref(wait_ok(&carol_cl, hold));
    json_decref(wait_ok(&carol_cl, brief));
    T_CHECK(c_alloc > 0 && d_alloc > 0 && d_alloc < c_alloc,
            "dave (0 devices in use) allocated at %" PRId64 ", carol (2 in use, queued first)"
            " at %" PRId64 ": expected dave first", d_alloc, c_alloc);
}

/* Device time by tenant (DESIGN Part D): GET /v1/stats/tenants and the
 * atoll_tenant_device_seconds_total counter come from the workers' busy
 * time, at least the `compute` time of every shard; a tenant sees itself. */
static double tenant_seconds(const json_t *stats, const char *name, int64_t *share, int *rows)
{
    json_t *arr = json_object_get(stats, "tenants"), *t;
    size_t i;
    double v = -1;
    *rows = (int)json_array_size(arr);
    json_array_foreach(arr, i, t)
        if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0) {
            v = json_number_value(json_object_get(t, "device_seconds"));
            *share = json_integer_value(json_object_get(t, "share"));
        }
    return v;
}

/* How many atoll_tenant_device_seconds_total series a /metrics text has. */
static int count_series(const char *text)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, "atoll_tenant_device_seconds_total{")); p++)
        n++;
    return n;
}

static void test_tenant_device_time(void **state)
{
    (void)state;
    hx_client_t erin_cl;
    tenant_client("{'name':'erin','share':4}", &erin_cl);
    int64_t id = submit_as(&erin_cl, "erin-busy", "[2,2]", "west", 300000, NULL, 201);
    json_decref(wait_ok(&erin_cl, id));
    json_t *all = call(&itest_client, "GET", "/v1/stats/tenants?seconds=600", NULL, NULL, 200);
    int64_t share = 0;
    int rows = 0;
    double secs = tenant_seconds(all, "erin", &share, &rows);
    int seen_all = rows >= 2;
    json_decref(all);
    json_t *mine = call(&erin_cl, "GET", "/v1/stats/tenants?seconds=600", NULL, NULL, 200);
    int64_t share2 = 0;
    int rows2 = 0;
    double secs2 = tenant_seconds(mine, "erin", &share2, &rows2);
    json_decref(mine);
    json_decref(call(&itest_client, "GET", "/v1/stats/tenants?seconds=0", NULL, NULL, 400));
    json_decref(call(&itest_client, "GET", "/v1/stats/tenants?seconds=3601", NULL, NULL, 400));
    hx_resp_t r;
    double metric = -1;
    if (hx_request(&itest_client, "GET", "/metrics", NULL, 0, &r) == 0 && r.body) {
        const char *line = strstr(r.body, "atoll_tenant_device_seconds_total{tenant=\"erin\"} ");
        if (line)
            metric = strtod(strchr(line, ' ') + 1, NULL);
    }
    int series_all = r.body ? count_series(r.body) : -1;
    hx_resp_clear(&r);
    /* Erin's /metrics: her own counter, no other tenant's. */
    int series_mine = -1, own = 0;
    if (hx_request(&erin_cl, "GET", "/metrics", NULL, 0, &r) == 0 && r.body) {
        series_mine = count_series(r.body);
        own = strstr(r.body, "atoll_tenant_device_seconds_total{tenant=\"erin\"} ") != NULL;
    }
    hx_resp_clear(&r);
    hx_client_cleanup(&erin_cl);
    T_CHECK(series_all >= 2 && series_mine == 1 && own,
            "/metrics tenant series: %d for the admin, %d (own %d) for erin: she must see her"
            " own only", series_all, series_mine, own);
    /* 4 devices x 0.3 s of compute at least; generous above (a loaded box). */
    T_CHECK(secs >= 1.2 && secs < 30 && share == 4 && seen_all,
            "erin's device time %.3f s (share %" PRId64 ", %d rows), expected >= 1.2 s",
            secs, share, rows);
    T_CHECK(rows2 == 1 && secs2 == secs, "erin should see only her own row (%d rows)", rows2);
    T_CHECK(metric >= 1.2, "atoll_tenant_device_seconds_total{tenant=\"erin\"} = %g", metric);
}

/* ---- a revocation racing a stored job's acknowledgement ---- */

static void test_revoke_during_sync_keeps_the_201(void **state)
{
    (void)state;
    hx_client_t frank_cl;
    tenant_client("{'name':'frank'}", &frank_cl);
    double w0 = hx_metric(&itest_client, "atoll_store_sync_waits_total");
    T_CHECK(itest_touch(sync_gate) == 0 && w0 >= 0, "cannot create %s (or no sync counter)",
            sync_gate);
    /* frank's job is stored and waits for its round, held open... */
    char *doc = busy_doc("frank-job", "[1]", "west", 1000);
    itest_call_t submit = {.cl = &frank_cl, .method = "POST", .path = "/v1/jobs", .body = doc};
    itest_call_t revoke = {.method = "DELETE", .path = "/v1/tenants/frank"};
    hx_client_t admin2;
    int ok = hx_client_init(&admin2, itest_cluster.url) == 0 &&
             hx_client_set_auth(&admin2, ADMIN_TOKEN, NULL) == 0;
    revoke.cl = &admin2;
    int stored = ok && itest_call_start(&submit) && itest_sync_waits_reach(w0 + 1);
    /* ...while the admin revokes frank's token (stored too, then waiting). */
    int revoked = stored && itest_call_start(&revoke) && itest_sync_waits_reach(w0 + 2);
    int waits = (int)hx_metric(&itest_client, "atoll_store_sync_waits_total");
    int held = !atomic_load(&submit.answered);  /* the gate did hold its round */
    unlink(sync_gate);      /* the rounds finish */
    itest_call_join(&submit);
    itest_call_join(&revoke);
    free(doc);
    hx_client_cleanup(&admin2);
    /* After the rounds: frank's token is no more. */
    hx_resp_t r;
    long after = hx_request(&frank_cl, "GET", "/v1/jobs", NULL, 0, &r) == 0 ? r.status : 0;
    if (after)
        hx_resp_clear(&r);
    hx_client_cleanup(&frank_cl);
    T_CHECK(stored && revoked, "the submit (%d) or the revocation (%d) never waited for its"
            " round (%d waits since %.0f)", stored, revoked, waits, w0);
    T_CHECK(held, "the submit was answered before its round was let go: the sync gate"
            " (shim_syncgate.c, LD_PRELOAD) did not hold it");
    T_CHECK(submit.status == 201 && submit.id > 0,
            "a job stored before its token was revoked answered %ld, expected its 201",
            submit.status);
    T_CHECK(revoke.status == 200 && after == 401,
            "the revocation answered %ld, frank's token then %ld", revoke.status, after);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, submit.id);
    json_decref(call(&itest_client, "GET", path, NULL, NULL, 200));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_roles),
        cmocka_unit_test(test_worker_tokens),
        cmocka_unit_test_teardown(test_tenant_isolation, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_quota_refused, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_quota_waits, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_fair_share, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_tenant_device_time, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_revoke_during_sync_keeps_the_201, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
