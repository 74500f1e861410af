/* test_tokens.c - every kind of bearer token against every route of
 * server/routes.def (plus a dashboard file and unknown paths), auth on.
 *
 * Contract (DESIGN.md Part E): any token on any route is answered
 * 200/401/403/404 (or the handler's own 4xx for the empty or dummy input
 * sent here); never a 5xx, never a crash. The expectation of each
 * (route, token) pair is computed from two tables below: what each kind of
 * token may reach (by the route's access class), and what the route's
 * handler answers to the dummy request when the caller is let in.
 *
 * Worker routes about one worker (/v1/workers/:id/...) may, with per-worker
 * credentials, refuse even the admin or the join token (401/403), or not
 * know the worker (404): for them any of 401/403/404 (and the handler's
 * answer for the admin and the worker token) is accepted.
 *
 * Fails on the old code: the first unknown 16..200-character token sent to
 * /healthz killed atolld (route_authorize passed a NULL store to
 * store_tenant_by_hash). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <sys/wait.h>

#include "itest.h"
#include "test_front_raw.h"

#define ADMIN_TOKEN "admin-token-0123456789abcdef"
#define WORKER_TOKEN "worker-token-0123456789abcdef"
#define READ_TOKEN "read-token-0123456789abcdef"

/* What a route needs (mirrors auth.h's classes). */
enum access { PUB, READ, SUBMIT, WORKER, ADMIN, NOWHERE };

/* Kinds of token. */
enum kind { K_NONE, K_SHORT, K_LONG, K_OVER, K_JUNK, K_NOTBEARER, K_REVOKED, K_TENANT, K_READ,
            K_WORKER, K_ADMIN, K_COUNT };

static const char *const kind_names[K_COUNT] = {
    "none", "unknown short", "unknown long", "over 200", "junk bytes", "not Bearer",
    "revoked tenant", "tenant", "read", "worker", "admin"};

static char tenant_tok[128], revoked_tok[128];
static char auth_value[K_COUNT][600];   /* the Authorization header per kind; "" = none */

/* A set of statuses, 0-terminated. */
#define S(...) {__VA_ARGS__, 0}

typedef struct route_case {
    const char *method, *target, *body;
    enum access access;
    int worker_about;           /* a /v1/workers/:id/... route (see the header comment) */
    int let_in[8];              /* the handler's answers to this dummy request */
} route_case_t;

/* Every row of server/routes.def, then a dashboard file and unknown paths.
 * Ids that do not exist (999999) and empty objects as bodies: the handler
 * answers 404 or its validation error, never 5xx. */
static const route_case_t cases[] = {
    {"POST", "/v1/jobs", "{}", SUBMIT, 0, S(400, 422)},
    {"GET", "/v1/jobs", NULL, READ, 0, S(200)},
    {"GET", "/v1/jobs/999999", NULL, READ, 0, S(404)},
    {"DELETE", "/v1/jobs/999999", NULL, SUBMIT, 0, S(404)},
    {"GET", "/v1/jobs/999999/result", NULL, READ, 0, S(404)},
    {"GET", "/v1/islands", NULL, READ, 0, S(200)},
    {"GET", "/v1/islands/west", NULL, READ, 0, S(200)},
    {"GET", "/v1/workers", NULL, READ, 0, S(200)},
    {"POST", "/v1/workers", "{}", WORKER, 0, S(400, 422)},
    {"POST", "/v1/workers/999999/heartbeat", "{}", WORKER, 1, S(400, 404, 409, 422)},
    {"GET", "/v1/workers/999999/tasks?wait_ms=0", NULL, WORKER, 1, S(400, 404, 409, 422)},
    {"POST", "/v1/workers/999999/tasks/1", "{}", WORKER, 1, S(400, 404, 409, 422)},
    {"POST", "/v1/workers/999999/reports", "{}", WORKER, 1, S(400, 404, 409, 422)},
    {"DELETE", "/v1/workers/999999", NULL, WORKER, 1, S(400, 404, 409, 422)},
    {"GET", "/healthz", NULL, PUB, 0, S(200)},
    {"GET", "/metrics", NULL, READ, 0, S(200)},
    {"GET", "/v1/events/stream", NULL, READ, 0, S(200)},
    {"GET", "/v1/stats/utilization", NULL, READ, 0, S(200)},
    {"POST", "/v1/tenants", "{}", ADMIN, 0, S(400, 422)},
    {"GET", "/v1/tenants", NULL, ADMIN, 0, S(200)},
    {"DELETE", "/v1/tenants/nosuchtenant", NULL, ADMIN, 0, S(404)},
    /* the dashboard */
    {"GET", "/", NULL, PUB, 0, S(200)},
    {"GET", "/index.html", NULL, PUB, 0, S(200)},
    {"GET", "/app.js", NULL, PUB, 0, S(200)},
    /* unknown: 404 before anyone is identified */
    {"GET", "/v1/nope", NULL, NOWHERE, 0, S(404)},
    {"GET", "/nope.txt", NULL, NOWHERE, 0, S(404)},
    {"POST", "/v1/nope", "{}", NOWHERE, 0, S(404)},
    /* a known path with another method */
    {"PUT", "/v1/jobs", "{}", NOWHERE, 0, S(405)},
};

/* May a token of `kind` use a route needing `access`? -1: nobody (401),
 * 0: known but not allowed (403), 1: let in. */
static int reach(enum kind k, enum access a)
{
    /* rows: kinds; columns: PUB READ SUBMIT WORKER ADMIN */
    static const signed char table[K_COUNT][5] = {
        [K_NONE] = {1, -1, -1, -1, -1},     [K_SHORT] = {1, -1, -1, -1, -1},
        [K_LONG] = {1, -1, -1, -1, -1},     [K_OVER] = {1, -1, -1, -1, -1},
        [K_JUNK] = {1, -1, -1, -1, -1},     [K_NOTBEARER] = {1, -1, -1, -1, -1},
        [K_REVOKED] = {1, -1, -1, -1, -1},  [K_TENANT] = {1, 1, 1, 0, 0},
        [K_READ] = {1, 1, 0, 0, 0},         [K_WORKER] = {1, 0, 0, 1, 0},
        [K_ADMIN] = {1, 1, 1, 1, 1},
    };
    return table[k][a];
}

static int in_set(const int *set, int st)
{
    for (int i = 0; set[i]; i++)
        if (set[i] == st)
            return 1;
    return 0;
}

/* The statuses accepted for (route, kind), 0-terminated, into out. */
static void expected(const route_case_t *rc, enum kind k, int out[16])
{
    int n = 0;
    if (rc->access == NOWHERE) {
        for (int i = 0; rc->let_in[i]; i++)
            out[n++] = rc->let_in[i];
    } else {
        int r = reach(k, rc->access);
        if (r == 1 || (rc->worker_about && (k == K_ADMIN || k == K_WORKER)))
            for (int i = 0; rc->let_in[i]; i++)
                out[n++] = rc->let_in[i];
        if (r == -1)
            out[n++] = 401;
        if (r == 0)
            out[n++] = 403;
        if (rc->worker_about) {   /* per-worker credentials: see the header comment */
            out[n++] = 401;
            out[n++] = 403;
            out[n++] = 404;
        }
    }
    out[n] = 0;
}

static void fmt_set(const int *set, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; set[i] && off < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%d", i ? "/" : "", set[i]);
}

static int atolld_alive(void)
{
    return itest_cluster.atolld.pid > 0 && kill(itest_cluster.atolld.pid, 0) == 0 &&
           waitpid(itest_cluster.atolld.pid, NULL, WNOHANG) == 0;
}

/* Creates tenant `name` as the admin; copies its token into out. */
static void make_tenant(const char *name, char *out, size_t cap)
{
    char body[128];
    snprintf(body, sizeof body, "{\"name\":\"%s\"}", name);
    hx_resp_t r;
    int rc = hx_request(&itest_client, "POST", "/v1/tenants", body, strlen(body), &r);
    const char *tok = json_string_value(json_object_get(r.json, "token"));
    int ok = rc == 0 && r.status == 201 && tok && strlen(tok) < cap;
    if (ok)
        snprintf(out, cap, "%s", tok);
    hx_resp_clear(&r);
    T_CHECK(ok, "POST /v1/tenants %s failed", name);
}

static int setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2"};
    static const char *const extra[] = {"--admin-token", ADMIN_TOKEN, "--worker-token",
                                        WORKER_TOKEN, "--read-token", READ_TOKEN, NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    if (hx_client_init(&itest_client, itest_cluster.url) != 0 ||
        hx_client_set_auth(&itest_client, ADMIN_TOKEN, NULL) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

static void build_tokens(void)
{
    make_tenant("alice", tenant_tok, sizeof tenant_tok);
    make_tenant("mallory", revoked_tok, sizeof revoked_tok);
    hx_resp_t r;
    int rc = hx_request(&itest_client, "DELETE", "/v1/tenants/mallory", NULL, 0, &r);
    long st = rc == 0 ? r.status : 0;
    hx_resp_clear(&r);
    T_CHECK(st == 200 || st == 204, "revoking mallory: %ld", st);

    char over[260];
    memset(over, 'o', 250);
    over[250] = '\0';
    auth_value[K_NONE][0] = '\0';
    snprintf(auth_value[K_SHORT], sizeof auth_value[0], "Bearer short");
    snprintf(auth_value[K_LONG], sizeof auth_value[0], "Bearer xxxxxxxxxxxxxxxxxxxxxxxxxxx");
    snprintf(auth_value[K_OVER], sizeof auth_value[0], "Bearer %s", over);
    /* non-ASCII and odd bytes (no CR/LF/NUL: they would end the header) */
    snprintf(auth_value[K_JUNK], sizeof auth_value[0],
             "Bearer \x80\xff\xfe\x01\x7f\"'<>%%00%%ff\xc3\x28\xe2\x82 junk junk junk");
    snprintf(auth_value[K_NOTBEARER], sizeof auth_value[0], "Basic %s", ADMIN_TOKEN);
    snprintf(auth_value[K_REVOKED], sizeof auth_value[0], "Bearer %s", revoked_tok);
    snprintf(auth_value[K_TENANT], sizeof auth_value[0], "Bearer %s", tenant_tok);
    snprintf(auth_value[K_READ], sizeof auth_value[0], "Bearer %s", READ_TOKEN);
    snprintf(auth_value[K_WORKER], sizeof auth_value[0], "Bearer %s", WORKER_TOKEN);
    snprintf(auth_value[K_ADMIN], sizeof auth_value[0], "Bearer %s", ADMIN_TOKEN);
}

/* Every token kind x every route: the status is one of the expected ones,
 * never 5xx, and atolld is alive after each request. */
static void test_tokens_x_routes(void **state)
{
    (void)state;
    build_tokens();
    int port = raw_port(itest_cluster.url), failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const route_case_t *rc = &cases[i];
        for (int k = 0; k < K_COUNT; k++) {
            int want[16];
            char wants[96];
            expected(rc, (enum kind)k, want);
            raw_resp_t r;
            int st = raw_request(port, rc->method, rc->target,
                                 auth_value[k][0] ? auth_value[k] : NULL, rc->body, &r);
            if (!in_set(want, st) || st >= 500) {
                fmt_set(want, wants, sizeof wants);
                fprintf(stderr, "FAIL %s %s with %s token: %d, expected %s\n  %.200s\n",
                        rc->method, rc->target, kind_names[k], st, wants, r.body);
                failures++;
            }
            T_CHECK(atolld_alive(), "atolld died on %s %s with a %s token", rc->method,
                    rc->target, kind_names[k]);
        }
    }
    T_CHECK(failures == 0, "%d (route, token) pairs answered unexpectedly", failures);
    raw_resp_t r;
    T_CHECK(raw_request(port, "GET", "/healthz", NULL, NULL, &r) == 200,
            "/healthz after the sweep: %d", r.status);
}

/* A tenant's token is a tenant everywhere it is let in: it sees its own
 * (empty) job list, not the admin's view. Guards the tenant lookup, which
 * public routes no longer make. */
static void test_tenant_token_identifies(void **state)
{
    (void)state;
    int port = raw_port(itest_cluster.url);
    raw_resp_t r;
    T_CHECK(raw_request(port, "GET", "/v1/jobs", auth_value[K_TENANT], NULL, &r) == 200,
            "tenant GET /v1/jobs: %d", r.status);
    T_CHECK(raw_request(port, "GET", "/v1/tenants", auth_value[K_TENANT], NULL, &r) == 403,
            "tenant GET /v1/tenants: %d", r.status);
    T_CHECK(raw_request(port, "GET", "/v1/jobs", auth_value[K_REVOKED], NULL, &r) == 401,
            "revoked GET /v1/jobs: %d", r.status);
    T_CHECK(atolld_alive(), "atolld died");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tokens_x_routes),
        cmocka_unit_test(test_tenant_token_identifies),
    };
    return cmocka_run_group_tests(tests, setup, itest_group_teardown);
}
