/* test_sched.c - scheduling and API behaviour on a small cluster (west=2x2,
 * two workers of two devices): queueing for the same devices, priorities,
 * cancellation, gang all-or-nothing, and the HTTP error contract.
 *
 * Ordering is observed, never assumed from sleeps: a job that must wait is
 * kept waiting by a `compute` blocker that runs long enough (hundreds of ms)
 * for the 20 ms polls to see it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <strings.h>

#include "itest.h"

/* A one-computation job on one slice `shape` (e.g. "[2,2]") that keeps its
 * devices busy for `us` µs, then outputs its shard index. */
static char *busy_doc(const char *name, const char *shape, int64_t us, int priority)
{
    char buf[1024];
    snprintf(buf, sizeof buf,
             "{'name':'%s','priority':%d,'slices':{'s':{'shape':%s}},'computations':["
             "{'name':'c','slice':'s','ops':[{'op':'compute','out':'busy','us':%" PRId64 "},"
             "{'op':'shard_index','out':'i'}],'outputs':['i']}]}",
             name, priority, shape, us);
    return strdup(buf);
}

static int64_t submit_busy(const char *name, const char *shape, int64_t us, int priority)
{
    char *doc = busy_doc(name, shape, us, priority);
    T_CHECK(doc != NULL, "out of memory");
    int64_t id = itest_submit(doc);
    free(doc);
    return id;
}

/* Polls until the job is past `queued` (allocated or running) and returns
 * its state; fails on a terminal state or a timeout. */
static void wait_admitted(int64_t id)
{
    json_t *job = NULL;
    int rc = hx_job_wait_leave(&itest_client, id, "queued", 10000, ITEST_POLL_MS, &job);
    const char *st = job ? hx_job_state(job) : "(none)";
    int ok = rc == 0 && !hx_state_terminal(st);
    json_decref(job);
    T_CHECK(ok, "job %" PRId64 " was not admitted within 10 s (state %s)", id, st);
}

static const char *state_now(int64_t id, char *buf, size_t cap)
{
    json_t *job = hx_job_get(&itest_client, id);
    T_CHECK(job != NULL, "GET job %" PRId64 " failed", id);
    snprintf(buf, cap, "%s", hx_job_state(job));
    json_decref(job);
    return buf;
}

/* ---- two whole-island jobs: the second waits for the first ---- */

#define FREED_WOKE "atoll_sched_freed_notices_total{woke=\"yes\"}"
#define FREED_SKIPPED "atoll_sched_freed_notices_total{woke=\"no\"}"

/* Whether job id, still queued, shows a pending_reason (a round saw it
 * wait) within 10 s; 0 once it left the queue without one. */
static int seen_waiting(int64_t id)
{
    int64_t deadline = hx_now_ms() + 10000;
    for (;;) {
        json_t *j = hx_job_get(&itest_client, id);
        T_CHECK(j != NULL, "GET job %" PRId64 " failed", id);
        int seen = json_is_string(json_object_get(j, "pending_reason"));
        int queued = strcmp(hx_job_state(j), "queued") == 0;
        json_decref(j);
        if (seen || !queued)
            return seen;
        T_CHECK(hx_now_ms() < deadline, "job %" PRId64 " queued 10 s without a reason", id);
        hx_sleep_ms(ITEST_POLL_MS);
    }
}

/* The second job waited in a round while the first held the island
 * (b_waited), so the first's success woke the scheduler
 * (sched_notify_freed); a success with nothing queued does not (the next
 * arrival will). Rounds racing a job's end may still count the job placed
 * last as waiting, so the skip is looked for over up to 10 lone jobs. */
static void check_freed_notices(int b_waited, double woke0, double skipped0)
{
    if (b_waited)
        T_CHECK(hx_metric(&itest_client, FREED_WOKE) >= woke0 + 1,
                "the first job's success did not wake the scheduler for the waiting one");
    else
        print_message("the second job was placed before a round saw it wait (a slow machine)\n");
    for (int k = 0; k < 10 && hx_metric(&itest_client, FREED_SKIPPED) <= skipped0; k++)
        json_decref(itest_wait_state(submit_busy("lone", "[1]", 1000, 0), "succeeded"));
    T_CHECK(hx_metric(&itest_client, FREED_SKIPPED) > skipped0,
            "every success woke the scheduler although no job waited");
}

static void test_queue_same_devices(void **state)
{
    (void)state;
    char st[32];
    double woke0 = hx_metric(&itest_client, FREED_WOKE);
    double skipped0 = hx_metric(&itest_client, FREED_SKIPPED);
    T_CHECK(woke0 >= 0 && skipped0 >= 0, "no atoll_sched_freed_notices_total in /metrics");
    int64_t a = submit_busy("first", "[2,2]", 300000, 0);
    wait_admitted(a);
    int64_t b = submit_busy("second", "[2,2]", 1000, 0);
    T_CHECK(strcmp(state_now(b, st, sizeof st), "queued") == 0,
            "second whole-island job is %s while the first holds the island", st);
    int b_waited = seen_waiting(b);
    json_t *ja = itest_wait_state(a, "succeeded");
    json_t *jb = itest_wait_state(b, "succeeded");
    int64_t a_fin = hx_job_time_us(ja, "finished"), b_alloc = hx_job_time_us(jb, "allocated");
    json_decref(ja);
    json_decref(jb);
    T_CHECK(a_fin > 0 && b_alloc > 0, "times_us.finished/allocated missing");
    T_CHECK(b_alloc >= a_fin, "second allocated at %" PRId64 ", before the first finished at %"
            PRId64, b_alloc, a_fin);
    check_freed_notices(b_waited, woke0, skipped0);
}

/* ---- priorities: with the island busy, high (submitted last) goes first ---- */

static void test_priority(void **state)
{
    (void)state;
    int64_t blocker = submit_busy("blocker", "[2,2]", 300000, 0);
    wait_admitted(blocker);
    int64_t low = submit_busy("low", "[2,2]", 200000, 0);
    int64_t high = submit_busy("high", "[2,2]", 200000, 10);
    /* Whichever leaves `queued` first must be `high`; each runs 200 ms on
     * the whole island, so `low` cannot have left too by then. */
    json_t *jh = NULL;
    int rc = hx_job_wait_leave(&itest_client, high, "queued", 10000, ITEST_POLL_MS, &jh);
    json_decref(jh);
    T_CHECK(rc == 0, "high-priority job never admitted");
    char st[32];
    T_CHECK(strcmp(state_now(low, st, sizeof st), "queued") == 0,
            "low-priority job is %s when the high one was admitted", st);
    json_decref(itest_wait_state(blocker, "succeeded"));
    jh = itest_wait_state(high, "succeeded");
    json_t *jl = itest_wait_state(low, "succeeded");
    int64_t h = hx_job_time_us(jh, "started"), l = hx_job_time_us(jl, "started");
    json_decref(jh);
    json_decref(jl);
    T_CHECK(h > 0 && l > 0 && h < l, "started: high %" PRId64 ", low %" PRId64, h, l);
}

/* ---- islands ---- */

/* Counts west's devices by holder: held by `job`, and free (no holder). */
static void island_count(int64_t job, int *held, int *free_n)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/v1/islands/west", NULL, 0, &r) == 0 &&
                r.status == 200,
            "GET /v1/islands/west failed");
    json_t *devs = json_object_get(r.json, "devices");
    *held = 0;
    *free_n = 0;
    for (size_t i = 0; i < json_array_size(devs); i++) {
        json_t *d = json_array_get(devs, i);
        json_t *holder = json_object_get(d, "job");
        const char *s = json_string_value(json_object_get(d, "state"));
        if (json_is_integer(holder) && json_integer_value(holder) == job)
            (*held)++;
        if (s && strcmp(s, "free") == 0 && (!holder || json_is_null(holder)))
            (*free_n)++;
    }
    size_t n = json_array_size(devs);
    hx_resp_clear(&r);
    T_CHECK(n == 4, "island west lists %zu devices, expected 4", n);
}

/* Polls until all 4 west devices are free (release may trail the state). */
static void wait_island_free(void)
{
    int held, free_n = 0;
    int64_t deadline = hx_now_ms() + 3000;
    while (hx_now_ms() < deadline) {
        island_count(-1, &held, &free_n);
        if (free_n == 4)
            return;
        hx_sleep_ms(ITEST_POLL_MS);
    }
    T_CHECK(free_n == 4, "only %d of 4 west devices free 3 s after the jobs ended", free_n);
}

static int delete_job(int64_t id)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, id);
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0, "DELETE failed");
    int status = (int)r.status;
    hx_resp_clear(&r);
    return status;
}

/* ---- cancelling a running job frees its devices; a queued job then runs ---- */

static void test_cancel_running(void **state)
{
    (void)state;
    int64_t a = submit_busy("long", "[2,2]", 5000000, 0);
    wait_admitted(a);
    int64_t q = submit_busy("after", "[2,2]", 1000, 0);
    int status = delete_job(a);
    T_CHECK(status >= 200 && status < 300, "DELETE running job answered %d", status);
    json_decref(itest_wait_state(a, "cancelled"));
    int held, free_n;
    island_count(a, &held, &free_n);
    T_CHECK(held == 0, "cancelled job %" PRId64 " still holds %d devices", a, held);
    int64_t t0 = hx_now_ms();
    json_decref(itest_wait_state(q, "succeeded"));
    fprintf(stderr, "  (queued job finished %" PRId64 " ms after the cancel)\n",
            hx_now_ms() - t0);
    wait_island_free();
}

/* ---- cancelling a queued job ---- */

static void test_cancel_queued(void **state)
{
    (void)state;
    int64_t blocker = submit_busy("blocker", "[2,2]", 300000, 0);
    wait_admitted(blocker);
    int64_t q = submit_busy("doomed", "[2,2]", 1000, 0);
    int status = delete_job(q);
    T_CHECK(status >= 200 && status < 300, "DELETE queued job answered %d", status);
    json_decref(itest_wait_state(q, "cancelled"));
    json_decref(itest_wait_state(blocker, "succeeded"));
    char st[32];
    T_CHECK(strcmp(state_now(q, st, sizeof st), "cancelled") == 0,
            "cancelled job came back as %s", st);
    T_CHECK(delete_job(q) == 409, "DELETE of a cancelled job should be 409");
    wait_island_free();
}

/* ---- gang: two slices, only one fits now: wait holding nothing ---- */

static void test_gang_all_or_nothing(void **state)
{
    (void)state;
    int64_t blocker = submit_busy("half", "[2]", 600000, 0);
    wait_admitted(blocker);
    static const char gang[] =
        "{'name':'gang','slices':{'a':{'shape':[2]},'b':{'shape':[2]}},'computations':["
        "{'name':'ca','slice':'a','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']},"
        "{'name':'cb','slice':'b','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";
    int64_t g = itest_submit(gang);
    /* Observe for ~300 ms (still inside the blocker's 600 ms). */
    for (int i = 0; i < 15; i++) {
        char st[32];
        int held_b, held_g, free_n;
        T_CHECK(strcmp(state_now(g, st, sizeof st), "queued") == 0,
                "gang job is %s while only one of its slices fits", st);
        island_count(g, &held_g, &free_n);
        island_count(blocker, &held_b, &free_n);
        T_CHECK(held_g == 0 && held_b == 2 && free_n == 2,
                "while waiting: gang holds %d, blocker %d, free %d (want 0, 2, 2)", held_g,
                held_b, free_n);
        hx_sleep_ms(ITEST_POLL_MS);
    }
    json_decref(itest_wait_state(blocker, "succeeded"));
    json_t *jg = itest_wait_state(g, "succeeded");
    json_t *sa = json_object_get(json_object_get(jg, "slices"), "a");
    json_t *sb = json_object_get(json_object_get(jg, "slices"), "b");
    int disjoint = json_array_size(json_object_get(sa, "devices")) == 2 &&
                   json_array_size(json_object_get(sb, "devices")) == 2;
    for (size_t i = 0; disjoint && i < 2; i++)
        for (size_t j = 0; j < 2; j++)
            if (json_equal(json_object_get(json_array_get(json_object_get(sa, "devices"), i),
                                           "index"),
                           json_object_get(json_array_get(json_object_get(sb, "devices"), j),
                                           "index")))
                disjoint = 0;
    json_decref(jg);
    T_CHECK(disjoint, "gang slices a and b are not two disjoint pairs of devices");
    wait_island_free();
}

/* ---- error contract ---- */

/* POSTs raw text and checks status plus a problem+json body whose `field`
 * (or, failing that, detail) contains `names` (case-insensitive). */
static void expect_problem(const char *body, size_t len, int want, const char *names)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "POST", "/v1/jobs", body, len, &r) == 0,
            "POST failed at transport level (want %d)", want);
    long status = r.status;
    int ctype_ok = strncmp(r.ctype, "application/problem+json", 24) == 0;
    json_t *p = r.json;
    int shape_ok = json_is_string(json_object_get(p, "title")) &&
                   json_is_string(json_object_get(p, "detail")) &&
                   json_integer_value(json_object_get(p, "status")) == want;
    const char *field = json_string_value(json_object_get(p, "field"));
    const char *detail = json_string_value(json_object_get(p, "detail"));
    int named = !names || (field && strcasestr(field, names)) ||
                (detail && strcasestr(detail, names));
    hx_resp_clear(&r);
    T_CHECK(status == want, "status %ld, want %d", status, want);
    T_CHECK(ctype_ok, "Content-Type is not application/problem+json");
    T_CHECK(shape_ok, "problem body lacks title/detail/status=%d", want);
    T_CHECK(named, "problem does not name '%s'", names);
}

static void expect_problem_q(const char *doc_q, int want, const char *names)
{
    char *doc = hx_text_q(doc_q);
    T_CHECK(doc != NULL, "out of memory");
    expect_problem(doc, strlen(doc), want, names);
    free(doc);
}

#define ONE_COMP(OPS) \
    "{'name':'bad','slices':{'s':{'shape':[2]}},'computations':[{'name':'c','slice':'s'," \
    "'ops':[" OPS "],'outputs':['x']}]}"

static void test_bad_documents_400(void **state)
{
    (void)state;
    expect_problem_q("{'nmae':'typo','slices':{'s':{'shape':[2]}},'computations':[{'name':'c',"
                     "'slice':'s','ops':[{'op':'shard_index','out':'x'}],'outputs':['x']}]}",
                     400, "nmae");
    expect_problem_q(ONE_COMP("{'op':'shard_index','out':'i'},{'op':'frobnicate','out':'x'}"),
                     400, "ops[1]");
    expect_problem_q(ONE_COMP("{'op':'fill','out':'x','shape':[2],'valeu':1}"), 400, "valeu");
    expect_problem_q(ONE_COMP("{'op':'shard_index','out':'i'},"
                              "{'op':'add','out':'x','args':['i','nope']}"),
                     400, "ops[1].args");
    expect_problem_q(ONE_COMP("{'op':'iota','out':'t','shape':[2,3]},"
                              "{'op':'matmul','out':'x','args':['t','t']}"),
                     400, "ops[1]");
    expect_problem_q("{'name':'cyc','slices':{'s':{'shape':[2]}},'computations':["
                     "{'name':'c1','slice':'s','ops':[{'op':'input','out':'x','from':'c2.y'}],"
                     "'outputs':['x']},"
                     "{'name':'c2','slice':'s','ops':[{'op':'input','out':'y','from':'c1.x'}],"
                     "'outputs':['y']}]}",
                     400, "computations");
    static const char not_json[] = "{\"name\": ";
    expect_problem(not_json, sizeof not_json - 1, 400, NULL);
}

static void test_never_fits_422(void **state)
{
    (void)state;
    expect_problem_q("{'name':'big','slices':{'s':{'shape':[4,4]}},'computations':[{'name':'c',"
                     "'slice':'s','ops':[{'op':'shard_index','out':'x'}],'outputs':['x']}]}",
                     422, "slices");
    expect_problem_q("{'name':'odd','slices':{'s':{'shape':[3]}},'computations':[{'name':'c',"
                     "'slice':'s','ops':[{'op':'shard_index','out':'x'}],'outputs':['x']}]}",
                     422, "slices");
    /* Each slice fits alone; together they can never fit. */
    expect_problem_q("{'name':'pair','slices':{'a':{'shape':[2,2]},'b':{'shape':[2,2]}},"
                     "'computations':[{'name':'c','slice':'a','ops':[{'op':'shard_index',"
                     "'out':'x'}],'outputs':['x']},{'name':'d','slice':'b','ops':["
                     "{'op':'shard_index','out':'x'}],'outputs':['x']}]}",
                     422, NULL);
}

static void test_oversized_413(void **state)
{
    (void)state;
    /* A valid-looking document of 1.5 MiB (a long name): size alone decides. */
    size_t pad = 3 * 512 * 1024;
    static const char head[] = "{\"name\":\"", tail[] = "\",\"slices\":{},\"computations\":[]}";
    char *body = malloc(sizeof head + pad + sizeof tail);
    T_CHECK(body != NULL, "out of memory");
    memcpy(body, head, sizeof head - 1);
    memset(body + sizeof head - 1, 'a', pad);
    memcpy(body + sizeof head - 1 + pad, tail, sizeof tail);
    expect_problem(body, strlen(body), 413, NULL);
    free(body);
}

static void expect_status(const char *method, const char *path, int want)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, method, path, NULL, 0, &r) == 0, "%s %s failed", method,
            path);
    long status = r.status;
    int problem = strncmp(r.ctype, "application/problem+json", 24) == 0;
    hx_resp_clear(&r);
    T_CHECK(status == want, "%s %s: status %ld, want %d", method, path, status, want);
    T_CHECK(problem, "%s %s: not a problem+json body", method, path);
}

static void test_unknown_job_404(void **state)
{
    (void)state;
    expect_status("GET", "/v1/jobs/987654", 404);
    expect_status("DELETE", "/v1/jobs/987654", 404);
    expect_status("GET", "/v1/jobs/987654/result", 404);
    expect_status("GET", "/v1/islands/nowhere", 404);
}

static void test_result_409_before_success(void **state)
{
    (void)state;
    int64_t id = submit_busy("slow", "[2,2]", 300000, 0);
    char path[80];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "/result", id);
    expect_status("GET", path, 409);
    json_decref(itest_wait_state(id, "succeeded"));
    json_t *res = hx_job_result(&itest_client, id);
    json_t *shard3 = hx_result_shard(res, "c.i", 3);
    double v = json_number_value(json_array_get(json_object_get(shard3, "values"), 0));
    json_decref(res);
    T_CHECK(shard3 != NULL && v == 3.0, "result of c.i shard 3 is %g, expected 3", v);
}

static int group_setup(void **state)
{
    (void)state;
    static const itest_island_t isl[] = {{"west=2x2", "west", 2, 2, NULL}};
    return itest_start(isl, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_queue_same_devices, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_priority, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_cancel_running, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_cancel_queued, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_gang_all_or_nothing, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_bad_documents_400, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_never_fits_422, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_oversized_413, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_unknown_job_404, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_result_409_before_success, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
