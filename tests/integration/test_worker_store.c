/* test_worker_store.c - the worker object store seen from outside: real
 * atolld and two workers on one host (so the data plane uses shared
 * memory) covering island west=2x4, a 32 MiB store cap given through ATOLL_STORE_CAP_MB.
 *
 * After a job succeeds (large all_reduce on the ring, an edge between the
 * workers), a job fails (a value larger than the store cap) and a job is
 * cancelled while it holds a value, every worker's heartbeat figures
 * (GET /v1/workers[].store) come back to zero objects and zero bytes, and
 * while the cancelled job ran they were not zero. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>

#include "itest.h"

#define STORE_CAP_MB 32
#define STORE_WAIT_MS 15000     /* heartbeats come every lease/3 */

static int group_setup(void **state)
{
    (void)state;
    /* Workers inherit the environment: every flag has an ATOLL_ variable. */
    setenv("ATOLL_STORE_CAP_MB", "32", 1);
    static const itest_island_t isl[] = {{"west=2x4", "west", 2, 4, NULL}};
    return itest_start(isl, 1);
}

/* Sums of store.objects and store.bytes over the live workers; -1 when a
 * worker has not reported figures yet (cap_bytes still 0). */
static int store_totals(int64_t *objects, int64_t *bytes)
{
    hx_resp_t r;
    if (hx_request(&itest_client, "GET", "/v1/workers", NULL, 0, &r) != 0)
        return -1;
    const json_t *ws = json_object_get(r.json, "workers");
    int rc = json_array_size(ws) > 0 ? 0 : -1;
    *objects = *bytes = 0;
    for (size_t i = 0; i < json_array_size(ws); i++) {
        const json_t *st = json_object_get(json_array_get(ws, i), "store");
        if (json_integer_value(json_object_get(st, "cap_bytes")) !=
            (json_int_t)STORE_CAP_MB << 20)
            rc = -1;
        *objects += json_integer_value(json_object_get(st, "objects"));
        *bytes += json_integer_value(json_object_get(st, "bytes"));
    }
    hx_resp_clear(&r);
    return rc;
}

/* Waits until every worker reported an empty store; fails otherwise. */
static void assert_stores_drain(const char *after)
{
    int64_t objects = -1, bytes = -1;
    int64_t deadline = hx_now_ms() + STORE_WAIT_MS;
    while (hx_now_ms() < deadline) {
        if (store_totals(&objects, &bytes) == 0 && objects == 0 && bytes == 0)
            return;
        hx_sleep_ms(100);
    }
    T_CHECK(0, "after %s the workers still report %lld object(s), %lld byte(s)", after,
            (long long)objects, (long long)bytes);
}

/* West is 2x4, one worker per row: a [2,2] slice spans both workers, so
 * the all_reduce (128 KiB per shard: the ring) and the ppermute cross
 * between the workers' processes. */
static const char *OK_JOB =
    "{'name': 'store-ok', 'slices': {'a': {'shape': [2, 2]}, 'b': {'shape': [2, 2]}},"
    " 'computations': ["
    "  {'name': 'p', 'slice': 'a', 'ops': ["
    "    {'op': 'shard_index', 'out': 'i'},"
    "    {'op': 'fill', 'out': 'x', 'shape': [32768], 'value': 1.0},"
    "    {'op': 'add', 'out': 'y', 'args': ['x', 'i']},"
    "    {'op': 'all_reduce', 'out': 'z', 'args': ['y'], 'reduce': 'sum'}],"
    "   'outputs': ['z']},"
    "  {'name': 'c', 'slice': 'b', 'ops': ["
    "    {'op': 'input', 'out': 'z', 'from': 'p.z'},"
    "    {'op': 'ppermute', 'out': 'w', 'args': ['z'], 'shift': 1}],"
    "   'outputs': ['w']}]}";

/* Runs doc to success and checks the sum of every shard k of `value` (4
 * shards) against sums[k]. */
static void run_and_check_sums(const char *doc, const char *value, const double sums[4])
{
    int64_t id;
    json_t *job = itest_run_ok(doc, &id);
    json_decref(job);
    json_t *res = hx_job_result(&itest_client, id);
    T_CHECK(res != NULL, "no result for job %lld", (long long)id);
    for (int k = 0; k < 4; k++) {
        const json_t *w = hx_result_shard(res, value, k);
        double sum = json_number_value(json_object_get(w, "sum"));
        T_CHECK(fabs(sum - sums[k]) < 1e-3, "%s shard %d sums to %.1f, not %.1f", value, k, sum,
                sums[k]);
    }
    json_decref(res);
}

static void test_store_empty_after_success(void **state)
{
    (void)state;
    /* (1+0) + (1+1) + (1+2) + (1+3) = 10 per element, 32768 elements. */
    static const double sums[4] = {327680.0, 327680.0, 327680.0, 327680.0};
    run_and_check_sums(OK_JOB, "c.w", sums);
    assert_stores_drain("a succeeded job");
}

/* Tensors of 1 MiB and more live in the workers' shared-memory pools and
 * cross to a peer on this host by the receiver reading the sender's block
 * (dplane.c, "Sends from the pool"). Slices [1,4] are rows of the island,
 * one worker each, so every edge of this job crosses processes with 2 MiB
 * per shard, twice (p -> c -> d): exact values, and the stores drain. */
static const char *POOL_JOB =
    "{'name': 'store-pool', 'slices': {'a': {'shape': [1, 4]}, 'b': {'shape': [1, 4]}},"
    " 'computations': ["
    "  {'name': 'p', 'slice': 'a', 'ops': ["
    "    {'op': 'shard_index', 'out': 'i'},"
    "    {'op': 'fill', 'out': 'x', 'shape': [524288], 'value': 1.0},"
    "    {'op': 'add', 'out': 'y', 'args': ['x', 'i']}],"
    "   'outputs': ['y']},"
    "  {'name': 'c', 'slice': 'b', 'ops': ["
    "    {'op': 'input', 'out': 'z', 'from': 'p.y'},"
    "    {'op': 'add', 'out': 'w', 'args': ['z', 'z']}],"
    "   'outputs': ['w']},"
    "  {'name': 'd', 'slice': 'a', 'ops': ["
    "    {'op': 'input', 'out': 'w', 'from': 'c.w'},"
    "    {'op': 'add', 'out': 'v', 'args': ['w', 'w']}],"
    "   'outputs': ['v']}]}";

static void test_pool_edges_exact(void **state)
{
    (void)state;
    /* Shard k: 524288 elements of 4 (1 + k), exact in floats. */
    static const double sums[4] = {524288.0 * 4, 524288.0 * 8, 524288.0 * 12, 524288.0 * 16};
    run_and_check_sums(POOL_JOB, "d.v", sums);
    assert_stores_drain("a job with 2 MiB edges");
}

static void test_store_empty_after_failure(void **state)
{
    (void)state;
    /* 16 Mi floats = 64 MiB, more than the 32 MiB cap: fails, no crash. */
    int64_t id = itest_submit(
        "{'name': 'store-big', 'slices': {'a': {'shape': [2]}},"
        " 'computations': [{'name': 'p', 'slice': 'a', 'ops': ["
        "   {'op': 'fill', 'out': 'x', 'shape': [16777216], 'value': 1.0}],"
        "  'outputs': ['x']}]}");
    json_t *job = itest_wait_state(id, "failed");
    const char *err = json_string_value(json_object_get(job, "error"));
    int names_cap = err && strstr(err, "object store cap");
    json_decref(job);
    T_CHECK(names_cap, "the failure does not name the store cap");
    assert_stores_drain("a failed job");
    /* The workers are alive and well: the next job runs. */
    job = itest_run_ok(OK_JOB, NULL);
    json_decref(job);
    assert_stores_drain("a job after the failure");
}

static void test_store_empty_after_cancel(void **state)
{
    (void)state;
    int64_t id = itest_submit(
        "{'name': 'store-cancel', 'slices': {'a': {'shape': [2, 2]}},"
        " 'computations': [{'name': 'p', 'slice': 'a', 'ops': ["
        "   {'op': 'fill', 'out': 'x', 'shape': [65536], 'value': 1.0},"
        "   {'op': 'compute', 'out': 'c', 'us': 10000000}],"
        "  'outputs': ['x']}]}");
    /* While it runs, each shard holds x (256 KiB) and the heartbeats say so. */
    int64_t objects = 0, bytes = 0;
    int64_t deadline = hx_now_ms() + STORE_WAIT_MS;
    while (hx_now_ms() < deadline &&
           !(store_totals(&objects, &bytes) == 0 && objects >= 4 && bytes >= 4 * 262144))
        hx_sleep_ms(100);
    T_CHECK(objects >= 4 && bytes >= 4 * 262144,
            "running job's values not reported: %lld object(s), %lld byte(s)",
            (long long)objects, (long long)bytes);
    hx_resp_t r;
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)id);
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0, "DELETE failed");
    hx_resp_clear(&r);
    json_t *job = itest_wait_state(id, "cancelled");
    json_decref(job);
    assert_stores_drain("a cancelled job");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_store_empty_after_success, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_pool_edges_exact, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_store_empty_after_failure, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_store_empty_after_cancel, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
