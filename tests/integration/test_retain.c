/* test_retain.c - job retention through a real atolld (--keep-jobs-s 1)
 * and a real worker: a job that succeeded more than a second ago goes
 * from GET /v1/jobs/{id}, its result and GET /v1/jobs, and /metrics
 * counts it (atoll_jobs_pruned_total, atoll_jobs by state); a queued job
 * and the job owning the newest host task stay; a job submitted after
 * the prune gets a new id. A bad --keep-jobs-s is refused.
 *
 * Cluster: west=2x2 (one worker of 4 devices) and cold=1x1 (no worker:
 * a job there stays queued). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/wait.h>

#include "itest.h"

#define RETAIN_DEADLINE_MS 60000

static const char tiny_q[] =
    "{'name':'tiny','slices':{'s':{'shape':[2,2],'island':'west'}},'computations':[{'name':'c',"
    "'slice':'s','ops':[{'op':'fill','out':'x','shape':[1],'value':1.0},"
    "{'op':'all_reduce','out':'z','args':['x'],'reduce':'sum'}],'outputs':['z']}]}";
static const char cold_q[] =
    "{'name':'cold','slices':{'s':{'shape':[1],'island':'cold'}},'computations':[{'name':'c',"
    "'slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x2", "cold=1x1"};
    static const char *const extra[] = {"--keep-jobs-s", "1", NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 2, extra) != 0)
        return -1;
    if (hx_worker_start(&itest_cluster, "west", 4) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

static int64_t submit(const char *doc_q)
{
    char *doc = hx_text_q(doc_q);
    int64_t id = 0;
    int st = doc ? hx_job_submit(&itest_client, doc, &id, NULL) : -1;
    free(doc);
    T_CHECK(st == 201, "submit answered %d", st);
    return id;
}

static void run_to_success(int64_t id)
{
    json_t *job = NULL;
    int rc = hx_job_wait(&itest_client, id, ITEST_JOB_TIMEOUT_MS, ITEST_POLL_MS, &job);
    int ok = rc == 0 && strcmp(hx_job_state(job), "succeeded") == 0;
    json_decref(job);
    T_CHECK(ok, "job %lld did not succeed", (long long)id);
}

static long status_of(const char *path)
{
    hx_resp_t r;
    long st = hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0 ? r.status : 0;
    hx_resp_clear(&r);
    return st;
}

static long job_status(int64_t id, const char *part)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/jobs/%lld%s", (long long)id, part);
    return status_of(path);
}

/* Whether GET /v1/jobs (one page of 500) lists job id. */
static int listed(int64_t id)
{
    hx_resp_t r;
    int found = 0;
    if (hx_request(&itest_client, "GET", "/v1/jobs?limit=500", NULL, 0, &r) == 0) {
        json_t *jobs = json_object_get(r.json, "jobs"), *j;
        size_t i;
        json_array_foreach(jobs, i, j)
            found |= json_integer_value(json_object_get(j, "id")) == id;
    }
    hx_resp_clear(&r);
    return found;
}

static void test_ended_job_goes_after_its_retention(void **state)
{
    (void)state;
    int64_t old = submit(tiny_q);
    run_to_success(old);
    int64_t kept = submit(tiny_q);         /* owns the newest host task: stays */
    run_to_success(kept);
    int64_t queued = submit(cold_q);       /* live, and the newest job */
    T_CHECK(listed(old), "job %lld not listed before its retention", (long long)old);
    int64_t deadline = hx_now_ms() + RETAIN_DEADLINE_MS;
    while (job_status(old, "") == 200 && hx_now_ms() < deadline)
        hx_sleep_ms(ITEST_POLL_MS);
    T_CHECK(job_status(old, "") == 404, "job %lld still there after %d ms", (long long)old,
            RETAIN_DEADLINE_MS);
    T_CHECK(job_status(old, "/result") == 404, "its result still answered");
    T_CHECK(!listed(old), "GET /v1/jobs still lists job %lld", (long long)old);
    T_CHECK(job_status(kept, "") == 200, "the newest host task's job %lld went",
            (long long)kept);
    json_t *q = hx_job_get(&itest_client, queued);
    int still_queued = q && strcmp(hx_job_state(q), "queued") == 0;
    json_decref(q);
    T_CHECK(still_queued, "queued job %lld not kept queued", (long long)queued);
    T_CHECK(hx_metric(&itest_client, "atoll_jobs_pruned_total") == 1,
            "atoll_jobs_pruned_total is not 1");
    int64_t next = submit(cold_q);
    T_CHECK(next > queued, "new job id %lld not above %lld", (long long)next,
            (long long)queued);
}

static void test_bad_keep_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {"-1", "x", "315360001"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char bin[HX_PATH_MAX], db[HX_PATH_MAX];
        snprintf(bin, sizeof bin, "%s/atolld", hx_bin_dir());
        snprintf(db, sizeof db, "%s/bad%zu.db", itest_cluster.dir, i);
        char *argv[] = {bin, "--keep-jobs-s", (char *)bad[i], "--db", db, "--listen",
                        "127.0.0.1:0", NULL};
        hx_proc_t p = {0};
        snprintf(p.name, sizeof p.name, "atolld-bad");
        snprintf(p.log_path, sizeof p.log_path, "%s/bad%zu.err", itest_cluster.dir, i);
        T_CHECK(hx_proc_spawn(&p, argv, 0) == 0, "cannot start %s", bin);
        int st = hx_proc_stop(&p, 0, 10000);
        T_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2,
                "--keep-jobs-s %s: exit status %d, expected 2", bad[i], st);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ended_job_goes_after_its_retention),
        cmocka_unit_test(test_bad_keep_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
