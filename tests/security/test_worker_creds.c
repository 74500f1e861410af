/* test_worker_creds.c - per-worker credentials (DESIGN.md Part E, issue 16
 * finding 6), against a real atolld and a real atoll-worker, auth on and
 * auth off.
 *
 * The victim is a real worker on island w; the attacker registers on
 * island a with the join token (raw HTTP) and so holds a credential of its
 * own. Neither the join token alone nor the attacker's credential may
 * heartbeat, poll, report (single and batch) or remove the victim
 * (401/403), and the victim keeps running jobs right while the attacker
 * tries to lease its tasks and report 666 for them. With its own
 * credential the attacker's calls about itself work; registering again
 * rotates the credential (the old one is refused). The admin token may
 * remove a worker (auth on); with auth off nobody may without the secret.
 *
 * Fails on the old code: there the registration answer has no "secret"
 * and every refused call above answered 200 (heartbeat, poll, leave) or
 * 409 (reports), so each refusal check fails, the first being
 * test_join_token_alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"

#define ADMIN_TOKEN "admin-token-0123456789abcdef"
#define WORKER_TOKEN "worker-token-0123456789abcdef"
#define SECRET_HEADER "X-Atoll-Worker-Secret"

static int auth_on;
static hx_client_t join_cl;     /* the join token (auth on) or none */
static hx_client_t admin_cl;    /* the admin token (auth on) or none */

/* The attacker: a raw registration on island a. */
static int64_t att_id;
static char att_secret[256];

/* One request as a worker: join token, plus `secret` in SECRET_HEADER when
 * not NULL. Returns the status (0 on transport failure); *out gets the JSON
 * answer (new reference) when out is not NULL. */
static long wcall(const char *method, const char *path, const char *body, const char *secret,
                  json_t **out)
{
    return hx_worker_call(&join_cl, secret, method, path, body, body ? strlen(body) : 0, out);
}

/* Registers on island `island` (2 devices) with the join token; the id, and
 * the secret into secret[256]. Fails the test unless 201 with both. */
static int64_t register_raw(const char *island, char *secret)
{
    char doc[200];
    snprintf(doc, sizeof doc, "{\"island\":\"%s\",\"devices\":2,\"data_addr\":\"127.0.0.1:9\","
             "\"host\":\"attacker\"}", island);
    json_t *ans = NULL;
    long st = wcall("POST", "/v1/workers", doc, NULL, &ans);
    int64_t id = json_integer_value(json_object_get(ans, "id"));
    const char *s = json_string_value(json_object_get(ans, "secret"));
    snprintf(secret, 256, "%s", s ? s : "");
    json_decref(ans);
    T_CHECK(st == 201 && id > 0, "registration on %s answered %ld", island, st);
    T_CHECK(strlen(secret) >= 32, "the registration answer carries no credential (secret)");
    return id;
}

/* The live worker on island `island` (the real one), or -1. */
static int64_t live_worker_on(const char *island)
{
    hx_resp_t r;
    int64_t id = -1;
    T_CHECK(hx_request(&admin_cl, "GET", "/v1/workers", NULL, 0, &r) == 0 && r.status == 200,
            "GET /v1/workers");
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(r.json, "workers"), i, w) {
        const char *isl = json_string_value(json_object_get(w, "island"));
        const char *state = json_string_value(json_object_get(w, "state"));
        if (isl && state && strcmp(isl, island) == 0 && strcmp(state, "live") == 0)
            id = json_integer_value(json_object_get(w, "id"));
    }
    hx_resp_clear(&r);
    return id;
}

/* Every call about worker `id`, as `secret` (NULL: the join token alone);
 * each must be refused 401 or 403. */
static void expect_refused(int64_t id, const char *secret, const char *who)
{
    static const char *const calls[][3] = {
        {"POST", "/heartbeat", "{}"},
        {"GET", "/tasks?wait_ms=0", NULL},
        {"POST", "/tasks/1", "{\"state\":\"succeeded\",\"outputs\":{\"z\":[{\"shape\":[],"
                             "\"sum\":666,\"values\":[666]}]}}"},
        {"POST", "/tasks/2", "{\"state\":\"failed\",\"error\":\"forged\"}"},
        {"POST", "/reports", "{\"reports\":[{\"task\":1,\"state\":\"cancelled\"}]}"},
        /* Bodies are read only once the caller is the worker: a stranger's
         * malformed text is refused for who sent it, never decoded. */
        {"POST", "/tasks/3", "not JSON"},
        {"POST", "/reports", "{\"reports\":5}"},
        {"DELETE", "", NULL},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "/v1/workers/%" PRId64 "%s", id, calls[i][1]);
        long st = wcall(calls[i][0], path, calls[i][2], secret, NULL);
        T_CHECK(st == 401 || st == 403, "%s: %s %s answered %ld, want 401/403", who,
                calls[i][0], path, st);
    }
    T_CHECK(live_worker_on("w") == id, "worker %" PRId64 " is no longer live after %s's calls",
            id, who);
}

static int group_setup(int on)
{
    static const char *const islands[] = {"w=1x2", "a=1x2"};
    static const char *const extra_on[] = {"--admin-token", ADMIN_TOKEN, "--worker-token",
                                           WORKER_TOKEN, NULL};
    static const char *const wextra_on[] = {"--token", WORKER_TOKEN, NULL};
    auth_on = on;
    if (hx_init() != 0 ||
        hx_cluster_start_args(&itest_cluster, islands, 2, on ? extra_on : NULL) != 0)
        return -1;
    if (hx_worker_start_args(&itest_cluster, "w", 2, on ? wextra_on : NULL, 15000, 0) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0 ||
        hx_client_init(&join_cl, itest_cluster.url) != 0 ||
        hx_client_init(&admin_cl, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    if (on && (hx_client_set_auth(&itest_client, ADMIN_TOKEN, NULL) != 0 ||
               hx_client_set_auth(&join_cl, WORKER_TOKEN, NULL) != 0 ||
               hx_client_set_auth(&admin_cl, ADMIN_TOKEN, NULL) != 0))
        return -1;
    return 0;
}

static int setup_on(void **state) { (void)state; return group_setup(1); }
static int setup_off(void **state) { (void)state; return group_setup(0); }

static int group_teardown(void **state)
{
    (void)state;
    hx_client_cleanup(&join_cl);
    hx_client_cleanup(&admin_cl);
    return itest_stop();
}

/* The attacker registers and gets a credential of its own. */
static void test_register_gives_secret(void **state)
{
    (void)state;
    att_id = register_raw("a", att_secret);
    T_CHECK(live_worker_on("w") > 0, "the real worker is not live");
}

/* The join token alone, a junk secret, and the attacker's own credential:
 * none may act for the victim. */
static void test_join_token_alone(void **state)
{
    (void)state;
    int64_t victim = live_worker_on("w");
    T_CHECK(victim > 0, "the real worker is not live");
    expect_refused(victim, NULL, "the join token alone");
    expect_refused(victim, "atl_0000000000000000000000000000000000000000000000000", "a junk secret");
    expect_refused(victim, att_secret, "another worker's credential");
    if (auth_on) {
        /* The admin token is no worker credential either (but may DELETE). */
        char path[96];
        hx_resp_t r;
        snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", victim);
        T_CHECK(hx_request(&admin_cl, "POST", path, "{}", 2, &r) == 0 &&
                    (r.status == 401 || r.status == 403),
                "the admin token heartbeats worker %" PRId64, victim);
        hx_resp_clear(&r);
    }
}

/* While the attacker polls the victim's tasks and reports 666 for them (all
 * refused), the real worker runs a job to the right result. */
static void test_victim_runs_jobs_right(void **state)
{
    (void)state;
    int64_t victim = live_worker_on("w");
    int64_t job = itest_submit("{'name':'victim','slices':{'s':{'shape':[2],'island':'w'}},"
                               "'computations':[{'name':'c','slice':'s','ops':["
                               "{'op':'compute','out':'b','us':300000},"
                               "{'op':'shard_index','out':'i'},"
                               "{'op':'all_reduce','out':'z','args':['i'],'reduce':'sum'}],"
                               "'outputs':['z']}]}");
    int64_t t0 = hx_now_ms();
    int tries = 0;
    json_t *j = NULL;
    while (hx_now_ms() - t0 < ITEST_JOB_TIMEOUT_MS) {
        char path[128];
        snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=0", victim);
        long st = wcall("GET", path, NULL, att_secret, NULL);
        T_CHECK(st == 401 || st == 403, "the attacker polled the victim's tasks: %ld", st);
        for (int task = 1; task <= 8; task++) {
            snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks/%d", victim, task);
            st = wcall("POST", path, "{\"state\":\"succeeded\",\"outputs\":{\"z\":[{\"shape\":[],"
                       "\"sum\":666,\"values\":[666]},{\"shape\":[],\"sum\":666,"
                       "\"values\":[666]}]}}", att_secret, NULL);
            T_CHECK(st == 401 || st == 403, "the attacker reported task %d: %ld", task, st);
        }
        tries++;
        j = hx_job_get(&itest_client, job);
        const char *s = j ? hx_job_state(j) : "";
        if (!strcmp(s, "succeeded") || !strcmp(s, "failed") || !strcmp(s, "cancelled"))
            break;
        json_decref(j);
        j = NULL;
        hx_sleep_ms(ITEST_POLL_MS);
    }
    json_decref(j);
    json_decref(itest_wait_state(job, "succeeded"));
    json_t *res = hx_job_result(&itest_client, job);
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(hx_result_shard(res, "c.z", k), "values");
        double got = json_number_value(json_array_get(v, 0));
        if (got != 1.0)
            json_decref(res);
        T_CHECK(got == 1.0, "shard %d of z is %g, want 1 (0+1)", k, got);
    }
    json_decref(res);
    T_CHECK(tries > 0, "no attack was tried");
}

/* With its own credential the attacker's calls about itself work. */
static void test_own_secret_works(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", att_id);
    T_CHECK(wcall("POST", path, "{}", att_secret, NULL) == 200, "own heartbeat refused");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=0&ack=0", att_id);
    T_CHECK(wcall("GET", path, NULL, att_secret, NULL) == 200, "own poll refused");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks/99999999", att_id);
    T_CHECK(wcall("POST", path, "{\"state\":\"cancelled\"}", att_secret, NULL) == 404,
            "own report of an unknown task: want 404");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/reports", att_id);
    json_t *ans = NULL;
    long st = wcall("POST", path, "{\"reports\":[{\"task\":99999999,\"state\":\"cancelled\"}]}",
                    att_secret, &ans);
    json_int_t item = json_integer_value(
        json_object_get(json_array_get(json_object_get(ans, "results"), 0), "status"));
    json_decref(ans);
    T_CHECK(st == 200 && item == 404, "own batch: %ld (item %lld), want 200 (item 404)", st,
            (long long)item);
}

/* Leaving and registering again: a new id and a new credential; the old
 * credential is worth nothing on the new id. */
static void test_reregistration_rotates(void **state)
{
    (void)state;
    char path[128], fresh[256];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64, att_id);
    T_CHECK(wcall("DELETE", path, NULL, att_secret, NULL) == 200, "own DELETE refused");
    int64_t old = att_id;
    att_id = register_raw("a", fresh);
    T_CHECK(att_id != old && strcmp(fresh, att_secret) != 0, "credential not rotated");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", att_id);
    long st = wcall("POST", path, "{}", att_secret, NULL);
    T_CHECK(st == 403, "the old credential on the new id answered %ld, want 403", st);
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", old);
    st = wcall("POST", path, "{}", att_secret, NULL);
    T_CHECK(st == 404, "the old id answered %ld, want 404", st);
    /* Gone is gone at once, whatever credential comes: the controller's
     * cache of the old id's credential (read by the DELETE) went with the
     * DELETE's commit, or this would ask for the secret (403). */
    st = wcall("POST", path, "{}", "not-its-secret", NULL);
    T_CHECK(st == 404, "the old id with a wrong credential answered %ld, want 404", st);
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", att_id);
    T_CHECK(wcall("POST", path, "{}", fresh, NULL) == 200, "the new credential refused");
    snprintf(att_secret, sizeof att_secret, "%s", fresh);
}

/* Removing a worker: the admin token may (auth on); nobody else without
 * the worker's credential. */
static void test_admin_may_remove(void **state)
{
    (void)state;
    char path[96];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64, att_id);
    hx_resp_t r;
    T_CHECK(hx_request(&admin_cl, "DELETE", path, NULL, 0, &r) == 0, "DELETE transport");
    long st = r.status;
    hx_resp_clear(&r);
    if (auth_on) {
        T_CHECK(st == 200, "the admin token could not remove worker %" PRId64 ": %ld", att_id,
                st);
    } else {
        T_CHECK(st == 401, "auth off: DELETE without the credential answered %ld, want 401", st);
        T_CHECK(wcall("DELETE", path, NULL, att_secret, NULL) == 200, "own DELETE refused");
    }
    /* The real worker is untouched and still runs jobs. */
    json_decref(itest_run_ok("{'name':'after','slices':{'s':{'shape':[2],'island':'w'}},"
                             "'computations':[{'name':'c','slice':'s','ops':["
                             "{'op':'shard_index','out':'i'}],'outputs':['i']}]}", NULL));
}

#define CREDS_TESTS                                         \
    cmocka_unit_test(test_register_gives_secret),           \
    cmocka_unit_test(test_join_token_alone),                \
    cmocka_unit_test(test_victim_runs_jobs_right),          \
    cmocka_unit_test(test_own_secret_works),                \
    cmocka_unit_test(test_reregistration_rotates),          \
    cmocka_unit_test(test_admin_may_remove)

int main(void)
{
    const struct CMUnitTest tests[] = {CREDS_TESTS};
    int failed = cmocka_run_group_tests_name("worker credentials, auth on", tests, setup_on,
                                             group_teardown);
    failed += cmocka_run_group_tests_name("worker credentials, auth off", tests, setup_off,
                                          group_teardown);
    return failed ? 1 : 0;
}
