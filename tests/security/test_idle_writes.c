/* test_idle_writes.c - an idle cluster does not write (issue 16, finding
 * 10): parked long polls and heartbeats must not cost SQLite write
 * transactions, and a job submitted after the idle period still reaches a
 * parked worker at once (the wake-up works without a re-query per tick).
 *
 * 8 workers of 1 device: 4 on island w polling with the default wait
 * (1 s: a new poll, and a lease renewal, every second each), 4 on island
 * p with --poll-ms 30000 (one poll parked for the whole idle period). The
 * rate of atoll_store_write_transactions_total over 5 idle seconds must be
 * below IDLE_MAX_PER_S in all; then a job on p must start on its worker
 * within WAKE_MAX_MS of its allocation (the allocation's server stamp, the
 * computation's worker stamp; one host): only the wake-up, not the 30 s
 * poll, can deliver it that fast.
 *
 * Fails on the old code: there is no atoll_store_write_transactions_total,
 * and counted by it the old parked polls wrote about 10 transactions per
 * second per worker (BEGIN IMMEDIATE every 100 ms tick), 80/s here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"

#define IDLE_WORKERS_PER_ISLAND 4
#define IDLE_WINDOW_MS 5000
/* Lease 5 s: the lease book is written every second (1/s) and the sampler's
 * rows every second (1/s). Slack for the occasional burst: up to 7 write
 * transactions in one second were seen on a loaded 2-core machine (ctest
 * -j2), 5.2/s over a window, on binaries that idle at 2/s. The old code,
 * which this guards against: ~80/s. */
#define IDLE_MAX_PER_S 10.0
#define WAKE_MAX_MS 1000

/* atoll_store_write_transactions_total from /metrics, or -1. */
static double write_txns(void)
{
    hx_resp_t r;
    if (hx_request(&itest_client, "GET", "/metrics", NULL, 0, &r) != 0)
        return -1;
    double v = -1;
    const char *p = r.status == 200 ? strstr(r.body, "\natoll_store_write_transactions_total ")
                                    : NULL;
    if (p)
        v = strtod(p + strlen("\natoll_store_write_transactions_total "), NULL);
    hx_resp_clear(&r);
    return v;
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"w=1x4", "p=1x4"};
    static const char *const slow_poll[] = {"--poll-ms", "30000", NULL};
    if (hx_init() != 0 || hx_cluster_start(&itest_cluster, islands, 2) != 0)
        return -1;
    for (int i = 0; i < IDLE_WORKERS_PER_ISLAND; i++)
        if (hx_worker_start(&itest_cluster, "w", 1) != 0 ||
            hx_worker_start_args(&itest_cluster, "p", 1, slow_poll, 15000, 0) != 0)
            goto fail;
    if (hx_client_init(&itest_client, itest_cluster.url) != 0)
        goto fail;
    return 0;
fail:
    hx_cluster_stop(&itest_cluster);
    return -1;
}

/* How many live workers have had their first heartbeat with store figures
 * applied (store.cap_bytes > 0 in GET /v1/workers), or -1. */
static int workers_reported(void)
{
    hx_resp_t r;
    if (hx_request(&itest_client, "GET", "/v1/workers", NULL, 0, &r) != 0 || r.status != 200) {
        hx_resp_clear(&r);
        return -1;
    }
    int n = 0;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(r.json, "workers"), i, w) {
        const char *st = json_string_value(json_object_get(w, "state"));
        json_t *cap = json_object_get(json_object_get(w, "store"), "cap_bytes");
        n += st && strcmp(st, "live") == 0 && json_integer_value(cap) > 0;
    }
    hx_resp_clear(&r);
    return n;
}

static void test_idle_rate_then_wake(void **state)
{
    (void)state;
    /* Let start-up settle before the window opens: every worker's first
     * heartbeat carries its store figures, each a write (8 of them, in two
     * bursts a second apart: a quiet second between them fooled a wait for
     * one quiet second); then wait (up to 30 s) for a second in which the
     * cluster wrote under the bound, the state the window then measures. */
    int reported = 0;
    for (int i = 0; i < 300 && reported < 2 * IDLE_WORKERS_PER_ISLAND; i++) {
        reported = workers_reported();
        if (reported < 2 * IDLE_WORKERS_PER_ISLAND)
            hx_sleep_ms(100);   /* polling a condition, with a 30 s deadline */
    }
    T_CHECK(reported == 2 * IDLE_WORKERS_PER_ISLAND,
            "%d of %d workers reported their store figures", reported,
            2 * IDLE_WORKERS_PER_ISLAND);
    double prev = write_txns();
    for (int i = 0; i < 30 && prev >= 0; i++) {
        hx_sleep_ms(1000);      /* a sampling period, not a synchronisation */
        double now = write_txns();
        int quiet = now >= 0 && now - prev < IDLE_MAX_PER_S;
        prev = now;
        if (quiet)
            break;
    }
    double a = write_txns();
    T_CHECK(a >= 0, "/metrics has no atoll_store_write_transactions_total");
    int64_t t0 = hx_now_ms();
    hx_sleep_ms(IDLE_WINDOW_MS);    /* the measurement window, not a synchronisation */
    double b = write_txns();
    double rate = (b - a) * 1000.0 / (double)(hx_now_ms() - t0);
    print_message("idle: %.2f write transactions/s with %d parked workers\n", rate,
                  2 * IDLE_WORKERS_PER_ISLAND);
    T_CHECK(rate < IDLE_MAX_PER_S, "idle cluster: %.2f write transactions/s, want < %.1f", rate,
            IDLE_MAX_PER_S);

    int64_t id = itest_submit("{'name':'wake','slices':{'s':{'shape':[4],'island':'p'}},"
                              "'computations':[{'name':'c','slice':'s','ops':["
                              "{'op':'shard_index','out':'i'}],'outputs':['i']}]}");
    json_t *job = itest_wait_state(id, "succeeded");
    /* The computation's start is the worker's own stamp of its first op:
     * the job's "started" is its dispatch, before any worker heard of it. */
    const json_t *ct = json_object_get(json_array_get(json_object_get(job, "computations"), 0),
                                       "times_us");
    int64_t alloc = hx_job_time_us(job, "allocated");
    int64_t started = json_integer_value(json_object_get(ct, "started"));
    json_decref(job);
    T_CHECK(alloc > 0 && started > 0, "job %" PRId64 " lacks its times", id);
    T_CHECK(started - alloc < WAKE_MAX_MS * 1000, "job %" PRId64 " started %" PRId64 " ms after"
            " its allocation: the parked polls were not woken", id, (started - alloc) / 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_idle_rate_then_wake)};
    return cmocka_run_group_tests_name("idle writes", tests, group_setup, itest_group_teardown);
}
