/* test_parked_waits.c - clients parked on GET /v1/jobs/{id}?wait_ms cost
 * atolld nothing while what they wait for does not change.
 *
 * A parked request is resumed (its handler run again: credentials, a read
 * of the job) only when its own job's generation moved or its time is up
 * (http.c park_ready, store.c's per-job generations). Otherwise any client
 * could hold a few hundred waits and make every job's end, every dispatch
 * and every 100 ms tick run all of them: with 2,000 such waits the first
 * version of the long poll cut bench_loop from ~200 to 29 jobs/s.
 *
 * Cluster: island w=1 with one worker, island idle=1 with none. WAITS raw
 * connections park a 30 s wait on a job queued for idle (priority -1, so
 * it holds nobody up); then JOBS tiny jobs run to success on w, within a
 * window of at least WINDOW_MS (ten park ticks). Parked resumes
 * (atoll_http_park_resumes_total) must not grow by a wait's worth per job
 * or per tick, and every wait is still parked afterwards. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"
#include "test_front_raw.h"

#define WAITS 200
#define JOBS 5
#define WINDOW_MS 1000      /* the measurement window, not a synchronisation */

static int fds[WAITS];

static int setup(void **state)
{
    (void)state;
    if (raw_raise_nofile() < WAITS + 256)
        return -1;
    static const char *const islands[] = {"w=1", "idle=1"};
    if (hx_init() != 0 || hx_cluster_start(&itest_cluster, islands, 2) != 0)
        return -1;
    if (hx_worker_start(&itest_cluster, "w", 1) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 0; i < WAITS; i++)
        if (fds[i] > 0)
            close(fds[i]);
    return itest_stop();
}

static void test_waits_cost_nothing(void **state)
{
    (void)state;
    int64_t never = itest_submit("{'name':'never','priority':-1,'slices':{'s':{'shape':[1],"
                                 "'island':'idle'}},'computations':[{'name':'c','slice':'s',"
                                 "'ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}");
    char req[160];
    int len = snprintf(req, sizeof req, "GET /v1/jobs/%" PRId64 "?view=summary&wait_ms=30000"
                       " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", never);
    double parked0 = hx_metric(&itest_client, "atoll_http_parked");
    T_CHECK(parked0 >= 0, "no atoll_http_parked in /metrics");
    int port = raw_port(itest_cluster.url);
    int64_t sent = hx_now_ms();
    for (int i = 0; i < WAITS; i++) {
        fds[i] = raw_connect(port);
        T_CHECK(fds[i] > 0 && raw_send_all(fds[i], req, (size_t)len) == 0,
                "wait %d could not be sent", i);
    }
    /* Every wait parked (the workers' own polls park too: at least WAITS more). */
    int64_t deadline = hx_now_ms() + 20000;
    while (hx_metric(&itest_client, "atoll_http_parked") < parked0 + WAITS &&
           hx_now_ms() < deadline)
        hx_sleep_ms(ITEST_POLL_MS);
    T_CHECK(hx_metric(&itest_client, "atoll_http_parked") >= parked0 + WAITS,
            "the %d waits never all parked", WAITS);

    int64_t t0 = hx_now_ms();
    double resumes0 = hx_metric(&itest_client, "atoll_http_park_resumes_total");
    for (int j = 0; j < JOBS; j++) {
        int64_t id = itest_submit("{'name':'tiny','slices':{'s':{'shape':[1],'island':'w'}},"
                                  "'computations':[{'name':'c','slice':'s','ops':["
                                  "{'op':'shard_index','out':'i'}],'outputs':['i']}]}");
        json_decref(itest_wait_state(id, "succeeded"));
    }
    /* The window spans park ticks (100 ms) too, not only the jobs' ends. */
    while (hx_now_ms() - t0 < WINDOW_MS)
        hx_sleep_ms(50);
    double resumed = hx_metric(&itest_client, "atoll_http_park_resumes_total") - resumes0;
    int64_t ms = hx_now_ms() - t0;
    print_message("%d jobs with %d parked waits: %.0f parked requests resumed in %" PRId64
                  " ms\n", JOBS, WAITS, resumed, ms);
    /* Each job wakes its own waiter (this test's) and the worker's poll a
     * few times; none of the WAITS. Ungated, a single tick resumes them all. */
    /* Past 30 s of waiting their time is up and they rightly run: only a
     * machine too slow for 5 tiny jobs in 25 s gets there. */
    T_CHECK(hx_now_ms() - sent > 25000 || resumed < WAITS / 2,
            "%.0f parked requests resumed while %d jobs ran: the waits on job %" PRId64
            " were run again", resumed, JOBS, never);
    /* Still parked: no byte of an answer on any of them, none closed. (Not
     * the atoll_http_parked gauge against its first reading: the worker's
     * poll counted in that one may be out of its park at this moment.) */
    for (int i = 0; i < WAITS; i++) {
        char b;
        ssize_t n = recv(fds[i], &b, 1, MSG_DONTWAIT);
        T_CHECK(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK),
                "wait %d on job %" PRId64 " did not stay parked (recv %zd)", i, never, n);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_waits_cost_nothing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
