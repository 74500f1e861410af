/* test_front_headers.c - what every answer of the front door carries, and
 * what it refuses before routing (DESIGN.md Part E):
 *   - X-Content-Type-Options: nosniff on every response (JSON, problems,
 *     dashboard files, the SSE stream);
 *   - the dashboard's pages carry a Content-Security-Policy with
 *     frame-ancestors 'none' and scripts/styles from 'self' only;
 *   - a path holding %00 or another control character is 400 problem+json
 *     (old code: /v1/jobs/1%00junk answered job 1; finding 12);
 *   - ?access_token= is honoured on GET /v1/events/stream only (old code:
 *     on every route; finding 11).
 * Auth on; west=2x2 without workers (a queued job is enough). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"
#include "test_front_raw.h"

#define ADMIN_TOKEN "admin-token-0123456789abcdef"
#define READ_TOKEN "read-token-0123456789abcdef"
#define ADMIN_AUTH "Bearer " ADMIN_TOKEN

static int port;

static int setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2"};
    static const char *const extra[] = {"--admin-token", ADMIN_TOKEN, "--read-token",
                                        READ_TOKEN, NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    if (hx_client_init(&itest_client, itest_cluster.url) != 0 ||
        hx_client_set_auth(&itest_client, ADMIN_TOKEN, NULL) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    port = raw_port(itest_cluster.url);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return itest_stop();
}

static void test_nosniff_everywhere(void **state)
{
    (void)state;
    static const struct { const char *method, *target, *auth; int status; } cases[] = {
        {"GET", "/healthz", NULL, 200},
        {"GET", "/v1/jobs", NULL, 401},
        {"GET", "/v1/tenants", "Bearer " READ_TOKEN, 403},
        {"GET", "/v1/admin/backup", "Bearer " READ_TOKEN, 403},
        {"GET", "/v1/jobs/999999", ADMIN_AUTH, 404},
        {"PUT", "/v1/jobs", ADMIN_AUTH, 405},
        {"GET", "/v1/jobs/%01", ADMIN_AUTH, 400},
        {"GET", "/", NULL, 200},
        {"GET", "/app.js", NULL, 200},
        {"GET", "/style.css", NULL, 200},
        {"GET", "/nope.txt", NULL, 404},
        {"GET", "/v1/events/stream", ADMIN_AUTH, 200},
        {"GET", "/metrics", ADMIN_AUTH, 200},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        raw_resp_t r;
        char v[128];
        int st = raw_request(port, cases[i].method, cases[i].target, cases[i].auth, NULL, &r);
        T_CHECK(st == cases[i].status, "%s %s: %d, expected %d", cases[i].method,
                cases[i].target, st, cases[i].status);
        T_CHECK(strcmp(raw_header(&r, "X-Content-Type-Options", v, sizeof v), "nosniff") == 0,
                "%s %s: X-Content-Type-Options '%s'", cases[i].method, cases[i].target, v);
    }
}

static void test_dashboard_csp(void **state)
{
    (void)state;
    static const char *const pages[] = {"/", "/index.html"};
    for (size_t i = 0; i < 2; i++) {
        raw_resp_t r;
        char csp[1024];
        T_CHECK(raw_request(port, "GET", pages[i], NULL, NULL, &r) == 200, "GET %s: %d",
                pages[i], r.status);
        raw_header(&r, "Content-Security-Policy", csp, sizeof csp);
        T_CHECK(strstr(csp, "frame-ancestors 'none'") != NULL, "%s: CSP '%s'", pages[i], csp);
        T_CHECK(strstr(csp, "script-src 'self'") != NULL, "%s: CSP '%s'", pages[i], csp);
        T_CHECK(strstr(csp, "style-src 'self'") != NULL, "%s: CSP '%s'", pages[i], csp);
        T_CHECK(strstr(csp, "unsafe-inline") == NULL && strstr(csp, "unsafe-eval") == NULL,
                "%s: CSP allows inline code: '%s'", pages[i], csp);
    }
}

/* The dashboard itself must work under its CSP: no inline script or
 * style in index.html (the browser suite runs the scripts for real). */
static void test_dashboard_has_no_inline_code(void **state)
{
    (void)state;
    raw_resp_t r;
    int fd = raw_connect(port);
    T_CHECK(fd >= 0, "connect");
    static const char req[] = "GET /index.html HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    T_CHECK(raw_send_all(fd, req, sizeof req - 1) == 0, "send");
    /* read the whole page */
    static char page[1 << 20];
    size_t len = 0;
    ssize_t n;
    while (len < sizeof page - 1 && (n = recv(fd, page + len, sizeof page - 1 - len, 0)) > 0)
        len += (size_t)n;
    page[len] = '\0';
    close(fd);
    (void)r;
    const char *body = strstr(page, "\r\n\r\n");
    T_CHECK(body != NULL, "no body");
    T_CHECK(strstr(body, "<style") == NULL, "index.html has a <style> element");
    T_CHECK(strstr(body, " style=\"") == NULL, "index.html has a style attribute");
    for (const char *s = strstr(body, "<script"); s; s = strstr(s + 1, "<script")) {
        const char *gt = strchr(s, '>');
        T_CHECK(gt && memmem(s, (size_t)(gt - s), "src=", 4) != NULL,
                "index.html has an inline <script>");
    }
    T_CHECK(strstr(body, " onclick=") == NULL && strstr(body, " onload=") == NULL,
            "index.html has an inline event handler");
}

static void test_control_characters_in_path(void **state)
{
    (void)state;
    /* job 1 exists (queued: no workers), so the old code answered it */
    int64_t id = itest_submit("{'name':'one','slices':{'s':{'shape':[1]}},'computations':["
                              "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],"
                              "'outputs':['i']}]}");
    char target[64], ok[64];
    snprintf(ok, sizeof ok, "/v1/jobs/%" PRId64, id);
    raw_resp_t r;
    T_CHECK(raw_request(port, "GET", ok, ADMIN_AUTH, NULL, &r) == 200, "GET %s: %d", ok,
            r.status);
    static const char *const bad[] = {"%00junk", "%00", "%0a", "%0D%0A", "%1f", "%7f", "%7F"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char ct[96];
        snprintf(target, sizeof target, "/v1/jobs/%" PRId64 "%s", id, bad[i]);
        int st = raw_request(port, "GET", target, ADMIN_AUTH, NULL, &r);
        T_CHECK(st == 400, "GET %s: %d, expected 400", target, st);
        raw_header(&r, "Content-Type", ct, sizeof ct);
        T_CHECK(strcmp(ct, "application/problem+json") == 0, "GET %s: Content-Type %s", target,
                ct);
    }
    static const char *const bad_public[] = {"/healthz%00", "/index.html%00.png", "/%01",
                                             "/v1/nope%00", "/healthz%09"};
    for (size_t i = 0; i < sizeof bad_public / sizeof bad_public[0]; i++)
        T_CHECK(raw_request(port, "GET", bad_public[i], NULL, NULL, &r) == 400,
                "GET %s: %d, expected 400", bad_public[i], r.status);
    /* encoded printable characters and a %00 in the query are not the path */
    T_CHECK(raw_request(port, "GET", "/heal%74hz", NULL, NULL, &r) == 200, "%%74: %d",
            r.status);
    T_CHECK(raw_request(port, "GET", "/healthz?x=%00", NULL, NULL, &r) == 200,
            "query %%00: %d", r.status);
}

static void test_access_token_only_on_stream(void **state)
{
    (void)state;
    raw_resp_t r;
    static const char *const elsewhere[] = {"/v1/jobs", "/metrics", "/v1/workers",
                                            "/v1/islands", "/v1/stats/utilization",
                                            "/v1/tenants", "/v1/admin/backup"};
    for (size_t i = 0; i < sizeof elsewhere / sizeof elsewhere[0]; i++) {
        char target[128];
        snprintf(target, sizeof target, "%s?access_token=%s", elsewhere[i], ADMIN_TOKEN);
        T_CHECK(raw_request(port, "GET", target, NULL, NULL, &r) == 401,
                "GET %s: %d, expected 401", target, r.status);
    }
    T_CHECK(raw_request(port, "GET", "/v1/events/stream?access_token=" READ_TOKEN, NULL, NULL,
                        &r) == 200, "stream with the read token: %d", r.status);
    T_CHECK(strstr(r.head, "text/event-stream") != NULL, "stream: %s", r.head);
    T_CHECK(raw_request(port, "GET", "/v1/events/stream?access_token=" ADMIN_TOKEN, NULL, NULL,
                        &r) == 200, "stream with the admin token: %d", r.status);
    T_CHECK(raw_request(port, "GET", "/v1/events/stream?access_token=wrong-wrong-wrong-wrong",
                        NULL, NULL, &r) == 401, "stream with a wrong token: %d", r.status);
    T_CHECK(raw_request(port, "POST", "/v1/jobs?access_token=" ADMIN_TOKEN, NULL, "{}", &r) ==
                401, "POST /v1/jobs with ?access_token=: %d", r.status);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nosniff_everywhere),
        cmocka_unit_test(test_dashboard_csp),
        cmocka_unit_test(test_dashboard_has_no_inline_code),
        cmocka_unit_test(test_control_characters_in_path),
        cmocka_unit_test(test_access_token_only_on_stream),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
