/* test_attempts.c - aborts name an attempt, not a job (docs/internals.md,
 * "Leases and fencing"; docs/worker-protocol.md, poll `cancel`).
 *
 * requeue_same_worker: atolld (--lease-ms 20000) with island w=1x2 and one
 * worker of two devices (sim backend). A job whose computation first
 * computes for COMPUTE_US, then all-reduces shard-dependent values, runs
 * attempt 0 on that worker. The worker is SIGSTOPped (so attempt 0 stays
 * leased and running there: it cannot report), atolld is killed with
 * SIGKILL and restarted on the same database: recovery requeues the job
 * as attempt 1 and keeps the worker live. Then:
 *   1. attempt 1 is admitted onto the same worker's devices at once, while
 *      attempt 0 is still leased to it (the worker is stopped). The old
 *      controller refused this until every old task was reported or, for a
 *      silent worker, abandoned a lease after the abort went out: this is
 *      the check that fails on the old code.
 *   2. SIGCONT: the worker's next poll brings attempt 1's tasks and the
 *      cancel entry {job, attempt 0} together. The worker aborts attempt 0
 *      only (its log says so) and attempt 1 runs undisturbed on the same
 *      devices: the job succeeds on attempt 1, well within one lease, with
 *      exact values, shards_done = shards_reported = shards_total, the
 *      same worker registration, and no stale task abandoned (the worker
 *      reported attempt 0 cancelled itself). An abort of the whole job
 *      would cancel attempt 1 as well and the job would not succeed.
 * Synchronisation is on conditions only (HTTP state, the worker's log);
 * the worker logs at debug level so that its start of each shard shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <signal.h>
#include <unistd.h>

#include "itest.h"
#include "support_faults.h"

#define LEASE_MS 20000
#define COMPUTE_US 4000000
#define WAIT_MS 15000

static struct {
    char dir[HX_DIR_MAX];
    char url[HX_URL_MAX];
    int port;
    hx_proc_t atolld, worker;
} at;

static const char *const at_islands[] = {"w=1x2"};

/* Starts atolld on at.port (0: any), retrying while the old socket of a
 * killed one lingers. 0 or -1. */
static int at_atolld_start(void)
{
    for (int tries = 0; tries < 40; tries++) {
        int port = 0;
        if (fx_atolld_start(&at.atolld, at.dir, "atolld", at.port, LEASE_MS, at_islands, 1,
                            at.url, sizeof at.url, &port) == 0) {
            at.port = port;
            return 0;
        }
        hx_sleep_ms(250);
    }
    return -1;
}

/* GET url+path; new reference or NULL. */
static json_t *at_get(const char *path)
{
    hx_resp_t r;
    if (hx_request(&itest_client, "GET", path, NULL, 0, &r) != 0)
        return NULL;
    json_t *j = r.status == 200 ? json_incref(r.json) : NULL;
    hx_resp_clear(&r);
    return j;
}

/* How many times needle occurs in the file at path (0 when unreadable). */
static int log_count(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

/* Waits until needle occurs at least `want` times in the log. 0 or -1. */
static int wait_log(const char *path, const char *needle, int want, int timeout_ms)
{
    int64_t deadline = hx_now_ms() + timeout_ms;
    while (log_count(path, needle) < want) {
        if (hx_now_ms() >= deadline)
            return -1;
        hx_sleep_ms(ITEST_POLL_MS);
    }
    return 0;
}

/* The single live worker's id, or -1 when there is not exactly one. */
static int64_t only_live_worker(void)
{
    json_t *w = at_get("/v1/workers");
    int64_t id = -1;
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(w, "workers"), i, v) {
        const char *state = json_string_value(json_object_get(v, "state"));
        if (state && strcmp(state, "live") == 0) {
            id = json_integer_value(json_object_get(v, "id"));
            n++;
        }
    }
    json_decref(w);
    return n == 1 ? id : -1;
}

/* Exact result and exact shard accounting of the succeeded job. */
static void check_result(const json_t *job, int64_t id)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(job, "computations"), i, c) {
        json_int_t total = json_integer_value(json_object_get(c, "shards_total"));
        json_int_t done = json_integer_value(json_object_get(c, "shards_done"));
        json_int_t rep = json_integer_value(json_object_get(c, "shards_reported"));
        T_CHECK(total == 2 && done == 2 && rep == 2,
                "comp %zu: total %lld done %lld reported %lld (attempt 0 must not count)", i,
                (long long)total, (long long)done, (long long)rep);
    }
    json_t *res = hx_job_result(&itest_client, id);
    T_CHECK(res != NULL, "no result for job %" PRId64, id);
    for (int k = 0; k < 2; k++) {
        /* z = all_reduce(3 * shard_index) = 3 * (0 + 1) on every shard. */
        json_t *z = hx_result_shard(res, "p.z", k), *idx = hx_result_shard(res, "p.i", k);
        json_t *zv = json_object_get(z, "values"), *iv = json_object_get(idx, "values");
        T_CHECK(json_array_size(zv) == 4 && json_array_size(iv) == 1, "shard %d: bad shapes", k);
        for (size_t m = 0; m < 4; m++)
            T_CHECK(json_number_value(json_array_get(zv, m)) == 3.0, "p.z[%d][%zu] = %g", k, m,
                    json_number_value(json_array_get(zv, m)));
        T_CHECK(json_number_value(json_array_get(iv, 0)) == (double)k, "p.i[%d] wrong", k);
    }
    json_decref(res);
}

static void test_requeue_same_worker(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    snprintf(at.dir, sizeof at.dir, "%s/atoll-attempts-XXXXXX",
             tmp && *tmp && strlen(tmp) < HX_DIR_MAX - 32 ? tmp : "/tmp");
    assert_non_null(mkdtemp(at.dir));
    /* The worker inherits these: sim compute sleeps in 1 ms steps (no core
     * spinning, and time spent stopped does not count), debug logs name
     * each shard it starts. */
    setenv("ATOLL_BACKEND", "sim", 1);
    setenv("ATOLL_LOG_LEVEL", "debug", 1);
    T_CHECK(at_atolld_start() == 0, "atolld did not start (logs in %s)", at.dir);
    T_CHECK(fx_worker_start(&at.worker, at.dir, "worker", at.url, "w", 2, WAIT_MS) == 0,
            "worker did not start (logs in %s)", at.dir);
    unsetenv("ATOLL_BACKEND");
    unsetenv("ATOLL_LOG_LEVEL");
    T_CHECK(hx_client_init(&itest_client, at.url) == 0, "no client");
    int64_t wid = only_live_worker();
    T_CHECK(wid > 0, "no single live worker");

    char doc[1024];
    snprintf(doc, sizeof doc,
             "{'name':'attempts','slices':{'a':{'shape':[1,2]}},'computations':[{'name':'p',"
             "'slice':'a','ops':[{'op':'compute','out':'c','us':%d},{'op':'shard_index','out':'i'},"
             "{'op':'fill','out':'x','shape':[4],'value':3},{'op':'mul','out':'y','args':['x','i']},"
             "{'op':'all_reduce','out':'z','args':['y'],'reduce':'sum'}],'outputs':['z','i']}]}",
             COMPUTE_US);
    int64_t id = itest_submit(doc);

    /* Attempt 0 runs on both devices of the worker (its log shows each
     * shard start), then the worker is frozen mid-compute. */
    char needle[64];
    snprintf(needle, sizeof needle, "(job %" PRId64 " comp 0 ", id);
    T_CHECK(wait_log(at.worker.log_path, needle, 2, WAIT_MS) == 0,
            "attempt 0 did not start on both devices (logs in %s)", at.dir);
    T_CHECK(kill(at.worker.pid, SIGSTOP) == 0, "SIGSTOP failed");
    json_t *job = hx_job_get(&itest_client, id);
    T_CHECK(job && strcmp(hx_job_state(job), "running") == 0 &&
                json_integer_value(json_object_get(job, "attempt")) == 0,
            "job %" PRId64 " is not running attempt 0", id);
    json_decref(job);

    /* The controller dies and comes back on the same database. */
    fx_kill(&at.atolld);
    int64_t t_restart = hx_now_ms();
    T_CHECK(at_atolld_start() == 0, "atolld did not restart (logs in %s)", at.dir);

    /* 1. Attempt 1 placed on the same (stopped) worker and dispatched to it
     * (running), attempt 0 still leased to it. Fails on the old code:
     * "queued", waiting for attempt 0. */
    job = itest_wait_in_state(id, "running", 1, WAIT_MS);
    int64_t t_alloc = hx_now_ms();
    if (!job) {
        json_t *now = hx_job_get(&itest_client, id);
        fprintf(stderr, "attempts: job is %s, pending_reason %s\n",
                now ? hx_job_state(now) : "?",
                now ? json_string_value(json_object_get(now, "pending_reason")) : "?");
        json_decref(now);
        kill(at.worker.pid, SIGCONT);
    }
    T_CHECK(job != NULL, "attempt 1 was not admitted while attempt 0 was still leased");
    T_CHECK(json_integer_value(json_object_get(job, "attempt")) == 1 &&
                json_integer_value(json_object_get(job, "restarts")) == 1,
            "expected attempt 1 after one restart");
    json_decref(job);
    T_CHECK(only_live_worker() == wid, "the worker was not kept live across the restart");

    /* 2. The worker resumes: attempt 0 aborted, attempt 1 runs. */
    int64_t t_cont = hx_now_ms();
    T_CHECK(kill(at.worker.pid, SIGCONT) == 0, "SIGCONT failed");
    job = itest_wait_in_state(id, "succeeded", -1, LEASE_MS);
    int64_t t_done = hx_now_ms();
    T_CHECK(job != NULL, "job %" PRId64 " did not succeed on attempt 1 (logs in %s)", id, at.dir);
    T_CHECK(json_integer_value(json_object_get(job, "attempt")) == 1, "not attempt 1");
    check_result(job, id);
    json_decref(job);
    snprintf(needle, sizeof needle, "job %" PRId64 " attempt 0 aborted", id);
    T_CHECK(log_count(at.worker.log_path, needle) == 1, "the worker did not abort attempt 0");
    snprintf(needle, sizeof needle, "job %" PRId64 " attempt 1 aborted", id);
    T_CHECK(log_count(at.worker.log_path, needle) == 0, "the worker aborted attempt 1");
    T_CHECK(log_count(at.atolld.log_path, "abandoned") == 0,
            "a stale task was abandoned instead of reported by the worker");
    T_CHECK(only_live_worker() == wid, "the worker registered again");
    printf("attempts.restart_to_allocated_ms %lld attempts.resume_to_succeeded_ms %lld"
           " (lease %d ms, compute %d ms)\n", (long long)(t_alloc - t_restart),
           (long long)(t_done - t_cont), LEASE_MS, COMPUTE_US / 1000);
    T_CHECK(t_done - t_cont < LEASE_MS / 2, "attempt 1 took %lld ms, half a lease is %d",
            (long long)(t_done - t_cont), LEASE_MS / 2);

    hx_client_cleanup(&itest_client);
    int clean = fx_term(&at.worker, 8000);
    clean &= fx_term(&at.atolld, 8000);
    T_CHECK(clean, "a process did not exit 0 on SIGTERM (logs in %s)", at.dir);
    char cmd[HX_DIR_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", at.dir);
    if (system(cmd) != 0)
        fprintf(stderr, "attempts: could not remove %s\n", at.dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_requeue_same_worker),
    };
    if (hx_init() != 0)
        return 1;
    return cmocka_run_group_tests_name("attempts", tests, NULL, NULL);
}
