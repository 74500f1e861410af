/* test_shutdown.c - graceful shutdown (SIGTERM) of atolld and of a worker.
 *
 *  - atolld: SIGTERM while a shard runs: admission stops, but atolld keeps
 *    serving until the running shard has reported, then exits 0. A new
 *    atolld on the same database finds the job succeeded on its first
 *    attempt (had the report been lost, recovery would have requeued it).
 *  - worker: SIGTERM while its shard runs: the worker finishes the shard,
 *    reports, leaves and exits 0; the job succeeded without a retry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support_faults.h"
#include "support_harness.h"

#define LONG_JOB \
    "{'slices':{'a':{'shape':[2,2]}},'computations':[{'name':'c','slice':'a','ops':[" \
    "{'op':'compute','out':'t','us':1500000},{'op':'shard_index','out':'i'}]," \
    "'outputs':['i']}]}"

static char dir[HX_DIR_MAX];
static const char *const islands[] = {"west=2x2"};

/* Submits LONG_JOB and waits until it runs; returns its id or -1. */
static int64_t submit_running(const char *url)
{
    hx_client_t cl;
    int64_t id = -1;
    json_t *job = NULL;
    char *doc = hx_text_q(LONG_JOB);
    if (!doc || hx_client_init(&cl, url) != 0) {
        free(doc);
        return -1;
    }
    if (hx_job_submit(&cl, doc, &id, NULL) != 201 ||
        hx_job_wait_leave(&cl, id, "queued", 10000, 20, NULL) != 0 ||
        hx_job_wait_leave(&cl, id, "allocated", 10000, 20, &job) != 0 ||
        strcmp(hx_job_state(job), "running") != 0)
        id = -1;
    json_decref(job);
    hx_client_cleanup(&cl);
    free(doc);
    return id;
}

/* GET the job from a (possibly new) atolld; new reference or NULL. */
static json_t *job_after(const char *url, int64_t id)
{
    hx_client_t cl;
    json_t *job = NULL;
    if (hx_client_init(&cl, url) != 0)
        return NULL;
    hx_job_wait(&cl, id, 15000, 20, &job);
    hx_client_cleanup(&cl);
    return job;
}

/* A cluster (atolld + one worker covering west) running LONG_JOB; logs are
 * named after `tag`. Returns the job id (asserts on failure). */
static int64_t start_with_running_job(hx_proc_t *atolld, hx_proc_t *worker, const char *tag,
                                      char url[HX_URL_MAX], int *port)
{
    char name[32];
    snprintf(name, sizeof name, "atolld%s", tag);
    assert_int_equal(fx_atolld_start(atolld, dir, name, 0, 5000, islands, 1, url, HX_URL_MAX,
                                     port), 0);
    snprintf(name, sizeof name, "worker%s", tag);
    assert_int_equal(fx_worker_start(worker, dir, name, url, "west", 4, 15000), 0);
    int64_t id = submit_running(url);
    assert_true(id > 0);
    return id;
}

static void test_atolld_drains(void **state)
{
    (void)state;
    hx_proc_t atolld = {0}, worker = {0};
    char url[HX_URL_MAX];
    int port = 0;
    int64_t id = start_with_running_job(&atolld, &worker, "1", url, &port);

    /* SIGTERM mid-shard: atolld must exit 0, after the shard reported. */
    assert_int_equal(fx_term(&atolld, 40000), 1);
    assert_int_equal(fx_atolld_start(&atolld, dir, "atolld1", port, 5000, islands, 1, url,
                                     sizeof url, &port), 0);
    json_t *job = job_after(url, id);
    assert_non_null(job);
    assert_string_equal(hx_job_state(job), "succeeded");
    assert_int_equal(json_integer_value(json_object_get(job, "attempt")), 0);
    assert_int_equal(json_integer_value(json_object_get(job, "restarts")), 0);
    json_decref(job);
    fx_term(&worker, 15000);
    fx_term(&atolld, 15000);
}

static void test_worker_finishes_its_shards(void **state)
{
    (void)state;
    hx_proc_t atolld = {0}, worker = {0};
    char url[HX_URL_MAX];
    int port = 0;
    int64_t id = start_with_running_job(&atolld, &worker, "2", url, &port);

    /* SIGTERM mid-shard: the worker finishes, reports, leaves, exits 0. */
    assert_int_equal(fx_term(&worker, 40000), 1);
    json_t *job = job_after(url, id);
    assert_non_null(job);
    assert_string_equal(hx_job_state(job), "succeeded");
    assert_int_equal(json_integer_value(json_object_get(job, "attempt")), 0);
    assert_int_equal(json_integer_value(json_object_get(job, "retries")), 0);
    json_decref(job);
    assert_int_equal(fx_term(&atolld, 15000), 1);
}

static int setup(void **state)
{
    (void)state;
    /* Generous drains so that a loaded machine (ctest -j, ASan) still lets
     * the shard finish inside them; `sim` devices sleep instead of
     * spinning, so the 1.5 s shard takes 1.5 s however busy the cores are.
     * Both programs read these variables. */
    setenv("ATOLL_DRAIN_MS", "30000", 1);
    setenv("ATOLL_BACKEND", "sim", 1);
    snprintf(dir, sizeof dir, "/tmp/atoll-shutdown-XXXXXX");
    return hx_init() == 0 && mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[HX_DIR_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_atolld_drains),
        cmocka_unit_test(test_worker_finishes_its_shards),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
