/* test_front_framing.c - request smuggling at the front door (RFC 9112
 * §6.1, §6.3): a request whose body length is ambiguous is refused before
 * any of its body is read, and its connection is closed after the answer,
 * so bytes sent after it never run as a request of their own.
 *
 * Each case sends one request with a second one (GET /healthz, public:
 * answered 200 whoever asks) hidden where the other reading of the framing
 * puts it, on the same connection, and reads everything the server sends
 * until it closes. Old code went by the first Content-Length (and by
 * Transfer-Encoding over Content-Length): the first request got a 400 from
 * the handler and the hidden one its 200 on the still-open connection.
 * Sound framing (one Content-Length, chunked alone) keeps the connection
 * and its pipelined requests working, accepted submissions too (each
 * parked for its durability round). Auth on; west=2x2, no workers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"
#include "test_front_raw.h"

#define ADMIN_TOKEN "admin-token-0123456789abcdef"
#define HIDDEN "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
#define LAST "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
#define EXCHANGE_MS 3000        /* a kept-alive connection: read this long, then give up */

static int port;

static int setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2"};
    static const char *const extra[] = {"--admin-token", ADMIN_TOKEN, NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    if (hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    port = raw_port(itest_cluster.url);
    return 0;
}

/* Sends req on a new connection and reads every byte answered until the
 * server closes it (*closed = 1) or ms pass. NUL-terminated in out;
 * returns its length. */
static size_t exchange_ms(const char *req, char *out, size_t cap, int *closed, int ms)
{
    size_t len = 0;
    *closed = 0;
    out[0] = '\0';
    int fd = raw_connect(port);
    if (fd < 0 || raw_send_all(fd, req, strlen(req)) != 0) {
        if (fd >= 0)
            close(fd);
        return 0;
    }
    int64_t deadline = raw_now_ms() + ms;
    while (len < cap - 1) {
        int64_t left = deadline - raw_now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        ssize_t n = recv(fd, out + len, cap - 1 - len, 0);
        if (n <= 0) {
            *closed = 1;    /* EOF, or a reset: either way nothing more is read */
            break;
        }
        len += (size_t)n;
    }
    out[len] = '\0';
    close(fd);
    return len;
}

static size_t exchange(const char *req, char *out, size_t cap, int *closed)
{
    return exchange_ms(req, out, cap, closed, EXCHANGE_MS);
}

/* Number of responses (status lines) in text. */
static int count_responses(const char *text)
{
    int n = 0;
    for (const char *p = strstr(text, "HTTP/1.1 "); p; p = strstr(p + 1, "HTTP/1.1 "))
        n++;
    return n;
}

static void test_ambiguous_framing_refused_and_closed(void **state)
{
    (void)state;
    static const struct {
        const char *name, *req;
        int status;
        const char *field;
    } cases[] = {
        {"two Content-Length (the tester's repro)",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 36\r\n\r\n"
         "{}" HIDDEN, 400, "Content-Length"},
        {"two Content-Length, the longer first",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 36\r\ncontent-length: 2\r\n\r\n"
         "{}" HIDDEN, 400, "Content-Length"},
        {"two equal Content-Length",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n"
         "{}" HIDDEN, 400, "Content-Length"},
        {"Transfer-Encoding and Content-Length",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" HIDDEN, 400, "Transfer-Encoding"},
        {"Content-Length and Transfer-Encoding",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         "Content-Length: 42\r\n\r\n0\r\n\r\n" HIDDEN, 400, "Transfer-Encoding"},
        {"chunked not the last coding",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n"
         "2\r\n{}\r\n0\r\n\r\n" HIDDEN, 400, "Transfer-Encoding"},
        {"a transfer coding without chunked",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{}" HIDDEN, 400,
         "Transfer-Encoding"},
        {"a coding atolld does not implement before chunked",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
         "2\r\n{}\r\n0\r\n\r\n" HIDDEN, 501, "Transfer-Encoding"},
        {"two Transfer-Encoding lines",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n"
         "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" HIDDEN, 501,
         "Transfer-Encoding"},
        {"Transfer-Encoding in HTTP/1.0",
         "POST /v1/jobs HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n"
         "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n" HIDDEN, 400,
         "Transfer-Encoding"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[16384], want[96];
        int closed;
        exchange(cases[i].req, out, sizeof out, &closed);
        raw_resp_t r = {0};
        snprintf(r.head, sizeof r.head, "%.*s", (int)(sizeof r.head - 1), out);
        if (sscanf(out, "HTTP/1.%*d %d", &r.status) != 1)
            r.status = 0;
        char ct[96], conn[32];
        raw_header(&r, "Content-Type", ct, sizeof ct);
        raw_header(&r, "Connection", conn, sizeof conn);
        snprintf(want, sizeof want, "\"field\":\"%s\"", cases[i].field);
        T_CHECK(r.status == cases[i].status, "%s: status %d, expected %d\n%s", cases[i].name,
                r.status, cases[i].status, out);
        T_CHECK(strcmp(ct, "application/problem+json") == 0, "%s: Content-Type '%s'",
                cases[i].name, ct);
        T_CHECK(strstr(out, want) != NULL, "%s: no %s in\n%s", cases[i].name, want, out);
        T_CHECK(strcasecmp(conn, "close") == 0, "%s: Connection '%s'", cases[i].name, conn);
        T_CHECK(count_responses(out) == 1 && !strstr(out, "\"status\":\"ok\""),
                "%s: the hidden request was answered:\n%s", cases[i].name, out);
        T_CHECK(closed, "%s: the connection stayed open", cases[i].name);
    }
}

/* A Content-Length list ("2, 2") never reaches atolld's code: MHD 0.9.75
 * refuses it itself (its own text/html 400, the connection closed), and
 * hides nothing either. */
static void test_content_length_list_refused_and_closed(void **state)
{
    (void)state;
    char out[16384];
    int closed;
    exchange("POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2, 35\r\n\r\n{}" HIDDEN, out,
             sizeof out, &closed);
    T_CHECK(strncmp(out, "HTTP/1.1 400 ", 13) == 0, "Content-Length list:\n%s", out);
    T_CHECK(!strstr(out, " 200 OK") && !strstr(out, "\"status\":\"ok\""),
            "Content-Length list: the hidden request was answered:\n%s", out);
    T_CHECK(closed, "Content-Length list: the connection stayed open");
}

/* Sound framing: the connection is kept and the pipelined request after
 * the body is answered in its turn (it asks to close, ending the test). */
static void test_sound_framing_kept_alive(void **state)
{
    (void)state;
    static const struct { const char *name, *req; } cases[] = {
        {"one Content-Length",
         "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" LAST},
        {"chunked", "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "2\r\n{}\r\n0\r\n\r\n" LAST},
        {"CHUNKED", "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: CHUNKED\r\n\r\n"
                    "2\r\n{}\r\n0\r\n\r\n" LAST},
        {"no body", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" LAST},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[16384];
        int closed;
        exchange(cases[i].req, out, sizeof out, &closed);
        /* POST /v1/jobs without a token: 401, read after its whole body */
        const char *second = strstr(out + 1, "HTTP/1.1 ");
        T_CHECK(count_responses(out) == 2 && second && strncmp(second, "HTTP/1.1 200 ", 13) == 0,
                "%s: expected two answers, the second 200:\n%s", cases[i].name, out);
        T_CHECK(closed, "%s: the connection stayed open after Connection: close",
                cases[i].name);
    }
}

/* Submissions pipelined on one connection: each accepted one parks until
 * its group-commit round (store_sync.c) while the next one waits unread in
 * the connection's buffer. Every one is answered in the order sent: the
 * good ones 201, each naming its own job, stored once; the bad one (no
 * computations, BAD_ONE) 400 naming the field, stored never, and the ones
 * behind it still served. Nothing buffered behind a parked or refused
 * request is lost, run twice or answered out of turn. */
#define PIPELINED 8
#define BAD_ONE 3
static void test_pipelined_submissions_answered_in_order(void **state)
{
    (void)state;
    static char reqs[PIPELINED * 1024], out[PIPELINED * 8192];
    size_t len = 0;
    for (int k = 0; k < PIPELINED; k++) {
        char body[256];
        int bl = k == BAD_ONE
                     ? snprintf(body, sizeof body, "{\"name\":\"pipe-%d\",\"slices\":{}}", k)
                     : snprintf(body, sizeof body,
                                "{\"name\":\"pipe-%d\",\"slices\":{\"s\":{\"shape\":[1]}},"
                                "\"computations\":[{\"name\":\"c\",\"slice\":\"s\",\"ops\":["
                                "{\"op\":\"shard_index\",\"out\":\"i\"}],"
                                "\"outputs\":[\"i\"]}]}",
                                k);
        len += (size_t)snprintf(reqs + len, sizeof reqs - len,
                                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                                "Content-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s",
                                ADMIN_TOKEN, bl, k == PIPELINED - 1 ? "Connection: close\r\n" : "",
                                body);
    }
    int closed;
    size_t got = exchange_ms(reqs, out, sizeof out, &closed, 60000);
    T_CHECK(closed && count_responses(out) == PIPELINED, "%d answers expected, read %zu bytes:\n%s",
            PIPELINED, got, out);
    const char *p = out;
    size_t left = got;
    json_int_t prev = 0;
    for (int k = 0; k < PIPELINED; k++) {
        int status = 0;
        const char *body = NULL;
        size_t blen = 0;
        long n = raw_split_answer(p, left, &status, &body, &blen);
        T_CHECK(n > 0, "answer %d unreadable:\n%s", k, p);
        p += n;
        left -= (size_t)n;
        json_t *job = json_loadb(body, blen, 0, NULL);
        if (k == BAD_ONE) {
            const char *field = json_string_value(json_object_get(job, "field"));
            T_CHECK(status == 400 && field && strcmp(field, "computations") == 0,
                    "answer %d: status %d, field %s, expected 400 naming 'computations'", k,
                    status, field ? field : "none");
            json_decref(job);
            continue;
        }
        char want[32];
        snprintf(want, sizeof want, "pipe-%d", k);
        const char *name = json_string_value(json_object_get(job, "name"));
        json_int_t id = json_integer_value(json_object_get(job, "id"));
        T_CHECK(status == 201 && name && strcmp(name, want) == 0 && id > prev,
                "answer %d: status %d, job %s (id %lld after %lld), expected 201 for %s", k,
                status, name ? name : "?", (long long)id, (long long)prev, want);
        json_decref(job);
        prev = id;
    }
    T_CHECK(hx_client_set_auth(&itest_client, ADMIN_TOKEN, NULL) == 0, "client auth");
    hx_resp_t r = {0};
    T_CHECK(hx_request(&itest_client, "GET", "/v1/jobs?limit=100", NULL, 0, &r) == 0 &&
            r.status == 200, "GET /v1/jobs: %ld", r.status);
    size_t n = json_array_size(json_object_get(r.json, "jobs"));
    hx_resp_clear(&r);
    T_CHECK(n == PIPELINED - 1, "%zu jobs stored, expected %d (each good one once)", n,
            PIPELINED - 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ambiguous_framing_refused_and_closed),
        cmocka_unit_test(test_content_length_list_refused_and_closed),
        cmocka_unit_test(test_sound_framing_kept_alive),
        cmocka_unit_test(test_pipelined_submissions_answered_in_order),
    };
    return cmocka_run_group_tests(tests, setup, itest_group_teardown);
}
