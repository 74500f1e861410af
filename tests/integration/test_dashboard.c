/* test_dashboard.c - the server side of the dashboard on a real cluster
 * (west=2x2, one worker of four devices): the event stream
 * (GET /v1/events/stream), the utilization series (GET
 * /v1/stats/utilization) and the job object's `document`.
 *
 * Streams are read over raw sockets so the test sees exactly the bytes a
 * browser's EventSource gets. Waits are bounded polls, never timings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "itest.h"

#define STREAMS_MANY 24          /* more than atolld's 8 HTTP threads */

static int group_setup(void **state)
{
    (void)state;
    static const itest_island_t isl[] = {{"west=2x2", "west", 1, 4, NULL}};
    return itest_start(isl, 1);
}

/* A stream connection and everything read from it so far. */
typedef struct sse {
    int fd;
    char buf[16384];
    size_t len;
} sse_t;

static int sse_open(sse_t *s)
{
    memset(s, 0, sizeof *s);
    const char *colon = strrchr(itest_cluster.url, ':');
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)atoi(colon + 1));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->fd < 0 || connect(s->fd, (struct sockaddr *)&a, sizeof a) != 0)
        return -1;
    static const char req[] = "GET /v1/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Accept: text/event-stream\r\n\r\n";
    return write(s->fd, req, sizeof req - 1) == (ssize_t)(sizeof req - 1) ? 0 : -1;
}

/* Reads until `needle` occurs after offset `from` or timeout_ms passed;
 * returns the offset just past it, or -1. */
static long sse_wait_for(sse_t *s, size_t from, const char *needle, int timeout_ms)
{
    int64_t deadline = hx_now_ms() + timeout_ms;
    for (;;) {
        char *hit = from < s->len ? strstr(s->buf + from, needle) : NULL;
        if (hit)
            return (long)(hit - s->buf + (long)strlen(needle));
        int64_t left = deadline - hx_now_ms();
        if (left <= 0 || s->len + 1 >= sizeof s->buf)
            return -1;
        struct pollfd p = {s->fd, POLLIN, 0};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        ssize_t n = read(s->fd, s->buf + s->len, sizeof s->buf - 1 - s->len);
        if (n <= 0)
            return -1;
        s->len += (size_t)n;
        s->buf[s->len] = '\0';
    }
}

static void sse_close(sse_t *s)
{
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

static const char JOB_Q[] =
    "{'name':'dash','slices':{'a':{'shape':[2,2]}},'computations':["
    "{'name':'p','slice':'a','ops':[{'op':'shard_index','out':'i'},"
    "{'op':'compute','out':'c','us':300000}],'outputs':['i']},"
    "{'name':'q','slice':'a','ops':[{'op':'input','out':'i','from':'p.i'},"
    "{'op':'scale','out':'w','args':['i'],'factor':2}],'outputs':['w']}]}";

/* hello first, then a change for a submission and for the job's end. */
static void test_stream_pushes_changes(void **state)
{
    (void)state;
    sse_t s;
    T_CHECK(sse_open(&s) == 0, "cannot connect to atolld");
    long at = sse_wait_for(&s, 0, "event: hello\n", 5000);
    T_CHECK(at > 0, "no hello event: %.300s", s.buf);
    T_CHECK(strstr(s.buf, "text/event-stream") != NULL, "wrong content type: %.300s", s.buf);
    int64_t id = itest_submit(JOB_Q);
    long ch = sse_wait_for(&s, (size_t)at, "event: change\n", 5000);
    T_CHECK(ch > 0, "no change event within 5 s of a submission: %.600s", s.buf + at);
    json_decref(itest_wait_state(id, "succeeded"));
    /* The job's end is a change too, after the ones seen so far. */
    long end = sse_wait_for(&s, (size_t)ch, "event: change\n", 5000);
    T_CHECK(end > 0, "no change event after the job ended: %.600s", s.buf + ch);
    long smp = sse_wait_for(&s, 0, "event: sample\n", 5000);
    T_CHECK(smp > 0, "no sample event within 5 s");
    sse_close(&s);
}

/* Idle streams hold no HTTP thread: with more streams open than threads,
 * every stream still gets its hello and the API still answers. */
static void test_many_streams_hold_no_thread(void **state)
{
    (void)state;
    static sse_t s[STREAMS_MANY];
    for (int i = 0; i < STREAMS_MANY; i++)
        T_CHECK(sse_open(&s[i]) == 0, "cannot open stream %d", i);
    for (int i = 0; i < STREAMS_MANY; i++)
        T_CHECK(sse_wait_for(&s[i], 0, "event: hello\n", 5000) > 0, "stream %d got no hello", i);
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/v1/islands/west", NULL, 0, &r) == 0 && r.status == 200,
            "the API did not answer with %d streams open", STREAMS_MANY);
    hx_resp_clear(&r);
    int64_t id = itest_submit(JOB_Q);
    for (int i = 0; i < STREAMS_MANY; i++)
        T_CHECK(sse_wait_for(&s[i], 0, "event: change\n", 5000) > 0, "stream %d got no change", i);
    json_decref(itest_wait_state(id, "succeeded"));
    for (int i = 0; i < STREAMS_MANY; i++)
        sse_close(&s[i]);
}

static json_t *utilization(const char *query, long *status)
{
    char path[128];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/stats/utilization%s", query);
    if (hx_request(&itest_client, "GET", path, NULL, 0, &r) != 0)
        return NULL;
    *status = r.status;
    json_t *j = json_incref(r.json);
    hx_resp_clear(&r);
    return j;
}

/* Samples come once a second and see busy devices and job counts. */
static void test_utilization_series(void **state)
{
    (void)state;
    int64_t id = itest_submit("{'name':'hold','slices':{'a':{'shape':[2,2]}},'computations':["
                              "{'name':'c','slice':'a','ops':[{'op':'compute','out':'c','us':2500000}],"
                              "'outputs':['c']}]}");
    /* Wait for a sample that shows the 4 devices busy and the job running. */
    int seen_busy = 0;
    int64_t deadline = hx_now_ms() + 15000;
    while (!seen_busy && hx_now_ms() < deadline) {
        long st = 0;
        json_t *u = utilization("?minutes=1", &st);
        T_CHECK(u && st == 200, "utilization answered %ld", st);
        T_CHECK(json_integer_value(json_object_get(json_object_get(u, "islands"), "west")) == 4,
                "islands.west should be 4 devices");
        json_t *samples = json_object_get(u, "samples");
        for (size_t i = 0; i < json_array_size(samples); i++) {
            json_t *smp = json_array_get(samples, i);
            json_int_t busy = json_integer_value(json_object_get(json_object_get(smp, "busy"), "west"));
            json_t *jobs = json_object_get(smp, "jobs");
            json_int_t live = json_integer_value(json_object_get(jobs, "running")) +
                              json_integer_value(json_object_get(jobs, "allocated"));
            T_CHECK(json_object_get(smp, "t") && json_object_get(jobs, "succeeded"),
                    "a sample lacks t or jobs.succeeded");
            if (busy == 4 && live >= 1)
                seen_busy = 1;
        }
        json_decref(u);
        if (!seen_busy)
            hx_sleep_ms(200);
    }
    T_CHECK(seen_busy, "no sample showed west's 4 devices busy while job %" PRId64 " ran", id);
    json_decref(itest_wait_state(id, "succeeded"));
    /* since_us returns only newer samples. */
    long st = 0;
    json_t *u = utilization("?minutes=1", &st);
    json_t *samples = json_object_get(u, "samples");
    size_t n = json_array_size(samples);
    T_CHECK(n >= 2, "expected at least 2 samples, got %zu", n);
    json_int_t last = json_integer_value(json_object_get(json_array_get(samples, n - 1), "t"));
    json_int_t prev = json_integer_value(json_object_get(json_array_get(samples, n - 2), "t"));
    T_CHECK(last > prev, "samples must be oldest first");
    char q[96];
    snprintf(q, sizeof q, "?minutes=1&since_us=%lld", (long long)prev);
    json_decref(u);
    u = utilization(q, &st);
    samples = json_object_get(u, "samples");
    T_CHECK(st == 200 && json_array_size(samples) >= 1, "since_us should keep the newest sample");
    T_CHECK(json_integer_value(json_object_get(json_array_get(samples, 0), "t")) > prev,
            "since_us must drop samples at or before it");
    json_decref(u);
    static const char *const bad[] = {"?minutes=0", "?minutes=61", "?minutes=x", "?since_us=-5"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        u = utilization(bad[i], &st);
        json_decref(u);
        T_CHECK(st == 400, "%s should be 400, got %ld", bad[i], st);
    }
}

/* GET /v1/jobs/{id} carries the document as submitted (for the graph). */
static void test_job_has_document(void **state)
{
    (void)state;
    int64_t id = itest_submit(JOB_Q);
    json_t *job = hx_job_get(&itest_client, id);
    T_CHECK(job != NULL, "GET job failed");
    json_t *doc = json_object_get(job, "document");
    json_t *comps = json_object_get(doc, "computations");
    const char *from = json_string_value(
        json_object_get(json_array_get(json_object_get(json_array_get(comps, 1), "ops"), 0), "from"));
    int ok = json_is_object(doc) && json_array_size(comps) == 2 && from && strcmp(from, "p.i") == 0;
    json_decref(job);
    T_CHECK(ok, "document missing or not the submitted one");
    json_decref(itest_wait_state(id, "succeeded"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_stream_pushes_changes, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_many_streams_hold_no_thread, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_utilization_series, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_job_has_document, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
