/* test_front_headers.c - what every answer of the front door carries, and
 * what it refuses before routing (DESIGN.md Part E):
 *   - X-Content-Type-Options: nosniff on every response (JSON, problems,
 *     dashboard files, the SSE stream);
 *   - the dashboard's pages carry a Content-Security-Policy with
 *     frame-ancestors 'none' and scripts/styles from 'self' only;
 *   - a path holding %00 or another control character is 400 problem+json
 *     (old code: /v1/jobs/1%00junk answered job 1; finding 12);
 *   - ?access_token= is honoured on GET /v1/events/stream only (old code:
 *     on every route; finding 11);
 *   - a %00 in a query value is kept, not decoded to a NUL that cut the
 *     value (old code: ?view=summary%00junk answered the summary,
 *     ?limit=1%00abc listed one job): the parameter's check refuses it;
 *   - a 405 carries Allow (old code: none);
 *   - HEAD answers as GET without a body (old code: 405, and 404 on /),
 *     at once even with a wait; 405 on the stream, the worker poll and the
 *     backup (GET only);
 *   - a MULTIPART/... Content-Type is 415 like multipart/ (old code: read
 *     as JSON).
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
static int64_t job_id;      /* a queued job, submitted once */

/* Submits the test job the first time; its id. */
static int64_t queued_job(void)
{
    if (!job_id)
        job_id = itest_submit("{'name':'one','slices':{'s':{'shape':[1]}},'computations':["
                              "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],"
                              "'outputs':['i']}]}");
    return job_id;
}

/* Sends req (whole, raw) on a new connection; reads the answer until the
 * server closes it (req says Connection: close). Fills r's status and
 * head; *body_len: the bytes after the header block. */
static int whole_request(const char *req, raw_resp_t *r, size_t *body_len)
{
    static char buf[1 << 16];
    size_t len = 0;
    memset(r, 0, sizeof *r);
    *body_len = 0;
    int fd = raw_connect(port);
    if (fd < 0)
        return 0;
    if (raw_send_all(fd, req, strlen(req)) == 0) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;
        while (len < sizeof buf - 1 && poll(&p, 1, raw_timeout_ms) > 0 &&
               (n = recv(fd, buf + len, sizeof buf - 1 - len, 0)) > 0)
            len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    const char *end = strstr(buf, "\r\n\r\n");
    size_t hl = end ? (size_t)(end - buf) + 2 : len;
    snprintf(r->head, sizeof r->head, "%.*s", (int)(hl < sizeof r->head ? hl : sizeof r->head - 1),
             buf);
    if (end) {
        *body_len = len - (hl + 2);
        snprintf(r->body, sizeof r->body, "%s", end + 4);
    }
    if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1)
        r->status = 0;
    return r->status;
}

static int setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2"};
    static const char *const extra[] = {"--admin-token", ADMIN_TOKEN, "--read-token",
                                        READ_TOKEN, "--allow-run", NULL};
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
    /* the job exists (queued: no workers), so the old code answered it */
    int64_t id = queued_job();
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

/* A %00 in a query value used to reach the handler as a NUL (MHD's
 * unescaper), cutting the value there; it stays "%00" now and fails the
 * parameter's check. Other escapes decode as before. */
static void test_nul_in_query_value(void **state)
{
    (void)state;
    int64_t id = queued_job();
    static const struct { const char *target; const char *field; } bad[] = {
        {"/v1/jobs/%lld?view=summary%%00junk", "view"},
        {"/v1/jobs/%lld?view=summary%%00", "view"},
        {"/v1/jobs/%lld?wait_ms=1%%00000", "wait_ms"},
        {"/v1/jobs?state=succeeded%%00x", "state"},
        {"/v1/jobs?limit=1%%00abc", "limit"},
        {"/v1/jobs?before=%%00", "before"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char target[128], want[64];
        raw_resp_t r;
        snprintf(target, sizeof target, bad[i].target, (long long)id);
        snprintf(want, sizeof want, "\"field\":\"%s\"", bad[i].field);
        int st = raw_request(port, "GET", target, ADMIN_AUTH, NULL, &r);
        T_CHECK(st == 400 && strstr(r.body, want), "GET %s: %d %s, expected 400 naming %s",
                target, st, r.body, bad[i].field);
    }
    raw_resp_t r;
    /* the value as sent, not cut: the problem quotes it whole */
    T_CHECK(raw_request(port, "GET", "/v1/jobs?state=succeeded%00x", ADMIN_AUTH, NULL, &r) ==
                400 && strstr(r.body, "succeeded%00x"), "state=succeeded%%00x: %s", r.body);
    /* legitimate escapes still decode, in the query and in the path */
    char target[128];
    snprintf(target, sizeof target, "/v1/jobs/%lld?view=summ%%61ry", (long long)id);
    T_CHECK(raw_request(port, "GET", target, ADMIN_AUTH, NULL, &r) == 200, "GET %s: %d", target,
            r.status);
    snprintf(target, sizeof target, "/v1/jobs%%2F%lld", (long long)id);
    T_CHECK(raw_request(port, "GET", target, ADMIN_AUTH, NULL, &r) == 200, "GET %s: %d", target,
            r.status);
    T_CHECK(raw_request(port, "GET", "/v1/jobs?state=%71ueued&limit=%31", ADMIN_AUTH, NULL,
                        &r) == 200, "state=%%71ueued&limit=%%31: %d", r.status);
    T_CHECK(raw_request(port, "GET", "/v1/jobs?state=%20queued", ADMIN_AUTH, NULL, &r) == 400 &&
                strstr(r.body, "' queued'"), "state=%%20queued: %d %s", r.status, r.body);
}

/* A 405's Allow lists the path's methods, HEAD beside a GET that has it. */
static void test_405_allow(void **state)
{
    (void)state;
    char target[64];
    snprintf(target, sizeof target, "/v1/jobs/%lld", (long long)queued_job());
    static const struct { const char *method, *target, *allow; } cases[] = {
        {"PUT", "/v1/jobs", "POST, GET, HEAD"},
        {"DELETE", "/v1/jobs", "POST, GET, HEAD"},
        {"POST", NULL, "GET, HEAD, DELETE"},    /* NULL: the job's path */
        {"PATCH", "/healthz", "GET, HEAD"},
        {"GET", "/v1/tenants/someone", "DELETE"},
        {"DELETE", "/v1/workers", "GET, HEAD, POST"},
        {"POST", "/v1/events/stream", "GET"},
        {"HEAD", "/v1/events/stream", "GET"},
        {"HEAD", "/v1/workers/1/tasks?wait_ms=30000&ack=0", "GET"},
        {"HEAD", "/v1/admin/backup", "GET"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        raw_resp_t r;
        char allow[96];
        const char *t = cases[i].target ? cases[i].target : target;
        int st = raw_request(port, cases[i].method, t, ADMIN_AUTH, NULL, &r);
        raw_header(&r, "Allow", allow, sizeof allow);
        T_CHECK(st == 405 && strcmp(allow, cases[i].allow) == 0,
                "%s %s: %d, Allow '%s', expected 405 with '%s'", cases[i].method, t, st, allow,
                cases[i].allow);
    }
    /* answers other than 405 carry none */
    raw_resp_t r;
    char allow[96];
    raw_request(port, "GET", "/v1/jobs", ADMIN_AUTH, NULL, &r);
    T_CHECK(r.status == 200 && !*raw_header(&r, "Allow", allow, sizeof allow), "GET /v1/jobs: %d %s",
            r.status, allow);
}

/* HEAD: the GET's status and headers, no body; at once where the GET
 * would wait. */
static void test_head(void **state)
{
    (void)state;
    char job[64], wait[96];
    snprintf(job, sizeof job, "/v1/jobs/%lld", (long long)queued_job());
    snprintf(wait, sizeof wait, "%s?wait_ms=30000", job);
    static const struct { const char *target, *auth; int status; } cases[] = {
        {"/", NULL, 200},
        {"/index.html", NULL, 200},
        {"/app.js", NULL, 200},
        {"/healthz", NULL, 200},
        {"/v1/jobs", ADMIN_AUTH, 200},
        {NULL, ADMIN_AUTH, 200},            /* the job */
        {"/v1/islands", ADMIN_AUTH, 200},
        {"/metrics", ADMIN_AUTH, 200},
        {"/v1/jobs", NULL, 401},
        {"/v1/jobs/999999", ADMIN_AUTH, 404},
        {"/v1/nope", ADMIN_AUTH, 404},
        {"/nope.txt", NULL, 404},
        {"/v1/jobs?limit=0", ADMIN_AUTH, 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *t = cases[i].target ? cases[i].target : job;
        char req[512], ct_get[96], ct_head[96], len_get[32], len_head[32];
        raw_resp_t g, h;
        size_t gbody, hbody;
        const char *auth = cases[i].auth ? "Authorization: " ADMIN_AUTH "\r\n" : "";
        /* /metrics counts what happens meanwhile (requests, the store's
         * reads): its length may move by a digit between the two requests,
         * so a pair whose lengths differ is tried again, a few times. */
        for (int tries = 0; tries < 5; tries++) {
            snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n",
                     t, auth);
            whole_request(req, &g, &gbody);
            snprintf(req, sizeof req, "HEAD %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n",
                     t, auth);
            whole_request(req, &h, &hbody);
            raw_header(&g, "Content-Length", len_get, sizeof len_get);
            raw_header(&h, "Content-Length", len_head, sizeof len_head);
            if (strcmp(len_get, len_head) == 0 || strcmp(t, "/metrics") != 0)
                break;
        }
        raw_header(&g, "Content-Type", ct_get, sizeof ct_get);
        raw_header(&h, "Content-Type", ct_head, sizeof ct_head);
        T_CHECK(g.status == cases[i].status && h.status == cases[i].status,
                "GET %s: %d, HEAD: %d, expected %d", t, g.status, h.status, cases[i].status);
        T_CHECK(strcmp(ct_get, ct_head) == 0, "%s: Content-Type GET '%s' HEAD '%s'", t, ct_get,
                ct_head);
        T_CHECK(strcmp(len_get, len_head) == 0 && gbody == strtoul(len_get, NULL, 10),
                "%s: Content-Length GET '%s' (%zu bytes) HEAD '%s'", t, len_get, gbody, len_head);
        T_CHECK(hbody == 0, "HEAD %s: %zu body bytes", t, hbody);
    }
    /* a GET with a wait parks (the job stays queued: no workers); its HEAD
     * answers at once */
    raw_resp_t r;
    int64_t t0 = raw_now_ms();
    int st = raw_request(port, "HEAD", wait, ADMIN_AUTH, NULL, &r);
    int64_t took = raw_now_ms() - t0;
    T_CHECK(st == 200 && took < 5000, "HEAD %s: %d after %lld ms", wait, st, (long long)took);
    /* so does a HEAD of a log follow (a stream until the process ends: this
     * one never starts); the follow it opened is freed at once, or 300 of
     * them would use up the 256 allowed */
    int64_t run = itest_submit("{'name':'r','slices':{'s':{'shape':[1]}},'computations':["
                               "{'name':'c','slice':'s','run':{'command':['true']}}]}");
    char follow[96];
    snprintf(follow, sizeof follow, "/v1/jobs/%lld/logs?follow=1", (long long)run);
    for (int i = 0; i < 300; i++) {
        t0 = raw_now_ms();
        st = raw_request(port, "HEAD", follow, ADMIN_AUTH, NULL, &r);
        took = raw_now_ms() - t0;
        T_CHECK(st == 200 && strstr(r.head, "text/plain") && took < 5000,
                "HEAD %s #%d: %d after %lld ms", follow, i, st, (long long)took);
    }
}

static void test_multipart_any_case(void **state)
{
    (void)state;
    static const char *const types[] = {"multipart/form-data; boundary=x",
                                        "MULTIPART/form-data; boundary=x",
                                        "Multipart/Mixed; boundary=x"};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        char req[512];
        raw_resp_t r;
        size_t blen;
        snprintf(req, sizeof req,
                 "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: " ADMIN_AUTH "\r\n"
                 "Content-Type: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
                 types[i]);
        int st = whole_request(req, &r, &blen);
        T_CHECK(st == 415 && strstr(r.body, "\"field\":\"Content-Type\""),
                "Content-Type %s: %d %s, expected 415", types[i], st, r.body);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nosniff_everywhere),
        cmocka_unit_test(test_dashboard_csp),
        cmocka_unit_test(test_dashboard_has_no_inline_code),
        cmocka_unit_test(test_control_characters_in_path),
        cmocka_unit_test(test_access_token_only_on_stream),
        cmocka_unit_test(test_nul_in_query_value),
        cmocka_unit_test(test_405_allow),
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_multipart_any_case),
    };
    return cmocka_run_group_tests(tests, setup, itest_group_teardown);
}
