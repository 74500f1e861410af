/* test_redeliver.c - a poll answer lost on the way does not lose its tasks.
 *
 * Polls lease host tasks. Before, an answer that timed out in the worker's
 * client (or broke on the wire) left its tasks leased to a worker that
 * never saw them: the job hung, holding its devices (found with 512 sim
 * workers on 2 cores, bench_scale). Now the worker sends `ack`, the
 * "lease" of the last answer it took in, and tasks leased in a later
 * answer come again. The test plays the worker over HTTP: it polls, drops
 * the answer, polls again with the old ack and gets the same task; with
 * the new ack it gets nothing; a cancelled job's task is not redelivered
 * (its attempt is named in "cancel" instead); without `ack` delivery stays
 * at most once; a bad ack is 400 naming `ack`.
 *
 * Cluster: solo=1x1, no real worker; atolld with a long lease so the
 * played worker is not lost while the test thinks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"

static const char job_q[] =
    "{'name':'r','slices':{'s':{'shape':[1,1],'island':'solo'}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";

static char secret_hdr[160];     /* X-Atoll-Worker-Secret of the played worker */

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"solo=1x1"};
    static const char *const extra[] = {"--lease-ms", "600000", NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    return hx_client_init(&itest_client, itest_cluster.url);
}

static int group_teardown(void **state)
{
    (void)state;
    return itest_stop();
}

/* GET the worker's tasks with `query` appended; returns the answer's
 * status and, on 200, its body in *out (caller frees). */
static long poll(int64_t wid, const char *query, json_t **out)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=0%s", wid, query);
    hx_resp_t r;
    const char *hdrs[] = {secret_hdr, NULL};
    T_CHECK(hx_request_h(&itest_client, "GET", path, NULL, 0, hdrs, &r) == 0, "GET %s", path);
    long st = r.status;
    *out = st == 200 ? json_incref(r.json) : NULL;
    if (st != 200)
        T_CHECK(strcmp(json_string_value(json_object_get(r.json, "field")) ?: "", "ack") == 0,
                "a refused poll must name ack: %s", r.body);
    hx_resp_clear(&r);
    return st;
}

/* The single task id of an answer (0 when it has no task). */
static int64_t only_task(const json_t *ans)
{
    const json_t *jobs = json_object_get(ans, "jobs");
    if (json_array_size(jobs) == 0)
        return 0;
    const json_t *tasks = json_object_get(json_array_get(jobs, 0), "tasks");
    T_CHECK(json_array_size(jobs) == 1 && json_array_size(tasks) == 1, "one task expected");
    return json_integer_value(json_object_get(json_array_get(tasks, 0), "task"));
}

static void test_lost_answer_redelivered(void **state)
{
    (void)state;
    hx_resp_t r;
    char *reg = hx_text_q("{'island':'solo','devices':1,'data_addr':'127.0.0.1:1'}");
    T_CHECK(hx_request(&itest_client, "POST", "/v1/workers", reg, strlen(reg), &r) == 0 &&
                r.status == 201, "registration answered %ld", r.status);
    free(reg);
    int64_t wid = json_integer_value(json_object_get(r.json, "id"));
    const char *secret = json_string_value(json_object_get(r.json, "secret"));
    T_CHECK(secret != NULL, "registration answer without a secret");
    snprintf(secret_hdr, sizeof secret_hdr, "X-Atoll-Worker-Secret: %s", secret);
    hx_resp_clear(&r);
    int64_t job = itest_submit(job_q);

    /* The first answer: leased, then "lost" (we act as if it never came).
     * The scheduler places the job asynchronously: poll until it is there. */
    json_t *a1 = NULL;
    int64_t deadline = hx_now_ms() + ITEST_JOB_TIMEOUT_MS, t1 = 0;
    while (!t1 && hx_now_ms() < deadline) {
        json_decref(a1);
        T_CHECK(poll(wid, "&ack=0", &a1) == 200, "poll");
        if (!(t1 = only_task(a1)))
            hx_sleep_ms(ITEST_POLL_MS);
    }
    T_CHECK(t1 > 0, "job %" PRId64 " never reached the worker", job);
    int64_t lease = json_integer_value(json_object_get(a1, "lease"));
    T_CHECK(lease > 0, "an answer with tasks carries its lease id");
    json_decref(a1);

    json_t *a2 = NULL;
    T_CHECK(poll(wid, "&ack=0", &a2) == 200 && only_task(a2) == t1,
            "the unacknowledged task %" PRId64 " was not delivered again", t1);
    T_CHECK(json_integer_value(json_object_get(a2, "lease")) == lease, "same lease id");
    json_decref(a2);

    char q[64];
    snprintf(q, sizeof q, "&ack=%" PRId64, lease);
    json_t *a3 = NULL;
    T_CHECK(poll(wid, q, &a3) == 200 && only_task(a3) == 0, "acknowledged, yet delivered again");
    json_decref(a3);
    json_t *a4 = NULL;
    T_CHECK(poll(wid, "", &a4) == 200 && only_task(a4) == 0, "no ack: at most once");
    json_decref(a4);
    json_t *bad = NULL;
    T_CHECK(poll(wid, "&ack=soon", &bad) == 400, "a bad ack is refused");
    T_CHECK(poll(wid, "&ack=-3", &bad) == 400, "a negative ack is refused");

    /* Cancelled: not delivered again; its attempt is named for abort. */
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, job);
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0 && r.status == 200,
            "cancel answered %ld", r.status);
    hx_resp_clear(&r);
    json_t *a5 = NULL;
    T_CHECK(poll(wid, "&ack=0", &a5) == 200 && only_task(a5) == 0,
            "a cancelled job's task was delivered again");
    const json_t *c = json_array_get(json_object_get(a5, "cancel"), 0);
    T_CHECK(json_integer_value(json_object_get(c, "job")) == job, "cancel does not name the job");
    json_decref(a5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_answer_redelivered),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
