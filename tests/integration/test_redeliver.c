/* test_redeliver.c - a poll answer lost on the way does not lose its tasks.
 *
 * Dispatch leases host tasks and polls deliver them. Before, an answer
 * that timed out in the worker's client (or broke on the wire) left its
 * tasks leased to a worker that never saw them: the job hung, holding its
 * devices (found with 512 sim workers on 2 cores, bench_scale). Now the worker sends `ack`, the
 * "lease" of the last answer it took in, and tasks leased in a later
 * answer come again. The test plays the worker over HTTP: it polls, drops
 * the answer, polls again with the old ack and gets the same task; with
 * the new ack it gets nothing; a cancelled job's task is not redelivered
 * (its attempt is named in "cancel" instead), unless the worker never
 * acknowledged it: then it is settled and not named; a poll without `ack`
 * or with a bad one is 400 naming `ack`.
 *
 * Parked polls: a long poll parked with nothing to lease answers as soon
 * as a task is dispatched to its worker, and as soon as a job it holds a
 * task of is cancelled, not when its wait ends. Parked polls re-read the
 * store only when a commit moved store_poll_gen (store.c's watch
 * triggers); without the watch these answers come empty after the wait.
 *
 * A poll that acknowledges the last answer, when nothing concerning its
 * worker committed since, parks without reading the store (the poll a
 * worker sends right after each answer); an older ack, or a commit that
 * concerns the worker (its job cancelled), makes it read.
 *
 * Cluster: solo=1x1, park=1x1 and quiet=1x1, no real worker; atolld with a
 * long lease so the played workers are not lost while the test thinks. */
#include <pthread.h>
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
    static const char *const islands[] = {"solo=1x1", "park=1x1", "quiet=1x1"};
    /* The played worker never reports: no drain at SIGTERM (atolld would
     * wait its default 5 s for those tasks, as long as the harness waits
     * before it kills). */
    static const char *const extra[] = {"--lease-ms", "600000", "--drain-ms", "0", NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 3, extra) != 0)
        return -1;
    return hx_client_init(&itest_client, itest_cluster.url);
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

/* Whether the answer's "cancel" names job. */
static int names_job(const json_t *ans, int64_t job)
{
    size_t i;
    const json_t *c;
    json_array_foreach(json_object_get(ans, "cancel"), i, c)
        if (json_integer_value(json_object_get(c, "job")) == job)
            return 1;
    return 0;
}

/* Registers a played worker of one device on `island` (data address
 * `addr`, never dialled) and makes it the one secret_hdr speaks for. */
static int64_t play_worker(const char *island, const char *addr)
{
    hx_resp_t r;
    char reg[160];
    snprintf(reg, sizeof reg, "{\"island\":\"%s\",\"devices\":1,\"data_addr\":\"%s\"}", island,
             addr);
    T_CHECK(hx_request(&itest_client, "POST", "/v1/workers", reg, strlen(reg), &r) == 0 &&
                r.status == 201, "registration answered %ld", r.status);
    int64_t wid = json_integer_value(json_object_get(r.json, "id"));
    const char *secret = json_string_value(json_object_get(r.json, "secret"));
    T_CHECK(secret != NULL, "registration answer without a secret");
    snprintf(secret_hdr, sizeof secret_hdr, "X-Atoll-Worker-Secret: %s", secret);
    hx_resp_clear(&r);
    return wid;
}

/* Polls worker wid (ack=0) until its answer has a task; that task's id,
 * the answer's lease in *lease. */
static int64_t first_task(int64_t wid, int64_t job, int64_t *lease)
{
    json_t *a = NULL;
    int64_t deadline = hx_now_ms() + ITEST_JOB_TIMEOUT_MS, t = 0;
    while (!t && hx_now_ms() < deadline) {
        json_decref(a);
        T_CHECK(poll(wid, "&ack=0", &a) == 200, "poll");
        if (!(t = only_task(a)))
            hx_sleep_ms(ITEST_POLL_MS);
    }
    T_CHECK(t > 0, "job %" PRId64 " never reached the worker", job);
    *lease = json_integer_value(json_object_get(a, "lease"));
    json_decref(a);
    return t;
}

static void test_lost_answer_redelivered(void **state)
{
    (void)state;
    hx_resp_t r;
    int64_t wid = play_worker("solo", "127.0.0.1:1");
    int64_t job = itest_submit(job_q);

    /* The first answer: leased, then "lost" (we act as if it never came).
     * The scheduler places the job asynchronously: poll until it is there. */
    int64_t lease = 0, t1 = first_task(wid, job, &lease);
    T_CHECK(lease > 0, "an answer with tasks carries its lease id");

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
    json_t *bad = NULL;
    T_CHECK(poll(wid, "", &bad) == 400, "a poll without ack is refused");
    T_CHECK(poll(wid, "&ack=soon", &bad) == 400, "a bad ack is refused");
    T_CHECK(poll(wid, "&ack=-3", &bad) == 400, "a negative ack is refused");

    /* Cancelled: not delivered again; its attempt is named for abort. */
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, job);
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0 && r.status == 200,
            "cancel answered %ld", r.status);
    hx_resp_clear(&r);
    json_t *a5 = NULL;
    T_CHECK(poll(wid, q, &a5) == 200 && only_task(a5) == 0,
            "a cancelled job's task was delivered again");
    T_CHECK(names_job(a5, job), "cancel does not name the job");
    json_decref(a5);

    /* A job cancelled before its worker acknowledged its task: the task
     * never reached the worker (everything it received is at or before
     * its ack), so it is settled, not named, and the worker is not asked
     * to abort what it never had. */
    int64_t job2 = itest_submit(job_q);
    json_t *j2 = itest_wait_in_state(job2, "running", -1, ITEST_JOB_TIMEOUT_MS);
    T_CHECK(j2 != NULL, "job %" PRId64 " was not dispatched", job2);  /* running: leased */
    json_decref(j2);
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, job2);
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0 && r.status == 200,
            "cancel answered %ld", r.status);
    hx_resp_clear(&r);
    json_t *a6 = NULL;
    T_CHECK(poll(wid, q, &a6) == 200 && only_task(a6) == 0 && !names_job(a6, job2),
            "job %" PRId64 "'s never-delivered task was named or delivered", job2);
    T_CHECK(names_job(a6, job), "job %" PRId64 " (received, unreported) is no longer named", job);
    json_decref(a6);
}

/* ---- parked polls ---- */

static const char job_park_q[] =
    "{'name':'p','slices':{'s':{'shape':[1,1],'island':'park'}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";

/* Long enough that an answer before it ends was woken, within the test
 * client's 20 s timeout. */
#define PARK_WAIT_MS 15000

typedef struct parked {
    char path[192];
    char hdr[160];
    long status;
    json_t *ans;            /* the answer, new reference (NULL if none) */
} parked_t;

/* One long poll on its own connection (the test thread goes on). */
static void *parked_main(void *arg)
{
    parked_t *p = arg;
    hx_client_t cl;
    hx_resp_t r;
    const char *hdrs[] = {p->hdr, NULL};
    if (hx_client_init(&cl, itest_cluster.url) != 0)
        return NULL;
    if (hx_request_h(&cl, "GET", p->path, NULL, 0, hdrs, &r) == 0) {
        p->status = r.status;
        p->ans = r.status == 200 ? json_incref(r.json) : NULL;
        hx_resp_clear(&r);
    }
    hx_client_cleanup(&cl);
    return NULL;
}

/* Starts a long poll of wid (ack `ack`) on thread *t and returns once it
 * parked (atoll_worker_poll_parks_total moved; no other worker polls
 * here): its first read is done and found nothing, so what the caller
 * changes next reaches it only by a wake-up. */
static void park_start(parked_t *p, pthread_t *t, int64_t wid, int64_t ack)
{
    snprintf(p->path, sizeof p->path, "/v1/workers/%" PRId64 "/tasks?wait_ms=%d&ack=%" PRId64,
             wid, PARK_WAIT_MS, ack);
    snprintf(p->hdr, sizeof p->hdr, "%s", secret_hdr);
    p->status = 0;
    p->ans = NULL;
    double parks = hx_metric(&itest_client, "atoll_worker_poll_parks_total");
    T_CHECK(parks >= 0, "no atoll_worker_poll_parks_total in /metrics");
    T_CHECK(pthread_create(t, NULL, parked_main, p) == 0, "thread");
    int64_t deadline = hx_now_ms() + PARK_WAIT_MS / 2;
    while (hx_metric(&itest_client, "atoll_worker_poll_parks_total") <= parks &&
           hx_now_ms() < deadline)
        hx_sleep_ms(ITEST_POLL_MS);
    T_CHECK(hx_metric(&itest_client, "atoll_worker_poll_parks_total") > parks,
            "the poll never parked");
}

static void test_parked_poll_wakes(void **state)
{
    (void)state;
    hx_resp_t r;
    int64_t wid = play_worker("park", "127.0.0.1:2");
    json_t *a0 = NULL;
    T_CHECK(poll(wid, "&ack=0", &a0) == 200 && only_task(a0) == 0, "nothing to lease yet");
    json_decref(a0);

    /* Parked with nothing to lease; the job comes after. */
    parked_t p;
    pthread_t t;
    int64_t t0 = hx_now_ms();
    park_start(&p, &t, wid, 0);
    int64_t job = itest_submit(job_park_q);
    pthread_join(t, NULL);
    T_CHECK(p.status == 200, "parked poll answered %ld", p.status);
    int64_t task = only_task(p.ans);
    T_CHECK(task > 0, "the parked poll answered without the job's task after %" PRId64 " ms",
            hx_now_ms() - t0);
    int64_t lease = json_integer_value(json_object_get(p.ans, "lease"));
    json_decref(p.ans);

    /* Parked holding the task (acknowledged); the job is cancelled. */
    park_start(&p, &t, wid, lease);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, job);
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0 && r.status == 200,
            "cancel answered %ld", r.status);
    hx_resp_clear(&r);
    pthread_join(t, NULL);
    T_CHECK(p.status == 200, "parked poll answered %ld", p.status);
    const json_t *c = json_array_get(json_object_get(p.ans, "cancel"), 0);
    T_CHECK(json_integer_value(json_object_get(c, "job")) == job,
            "the parked poll answered without cancelling job %" PRId64, job);
    json_decref(p.ans);
}

static double poll_reads(void)
{
    double n = hx_metric(&itest_client, "atoll_worker_poll_reads_total");
    T_CHECK(n >= 0, "no atoll_worker_poll_reads_total in /metrics");
    return n;
}

static void test_acknowledged_poll_reads_nothing(void **state)
{
    (void)state;
    static const char quiet_q[] =
        "{'name':'q','slices':{'s':{'shape':[1,1],'island':'quiet'}},'computations':["
        "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";
    int64_t wid = play_worker("quiet", "127.0.0.1:3");
    int64_t job = itest_submit(quiet_q), lease = 0;
    int64_t t1 = first_task(wid, job, &lease);
    char q[64];
    snprintf(q, sizeof q, "&ack=%" PRId64, lease);

    double reads = poll_reads();
    json_t *a = NULL;
    T_CHECK(poll(wid, q, &a) == 200 && only_task(a) == 0, "acknowledged, yet delivered again");
    json_decref(a);
    T_CHECK(poll_reads() == reads, "the poll acknowledging the last answer read the store");
    T_CHECK(poll(wid, "&ack=0", &a) == 200 && only_task(a) == t1,
            "an older ack did not get task %" PRId64 " again", t1);
    json_decref(a);
    T_CHECK(poll_reads() == reads + 1, "the poll with an older ack did not read");

    char path[64];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, job);
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0 && r.status == 200,
            "cancel answered %ld", r.status);
    hx_resp_clear(&r);
    T_CHECK(poll(wid, q, &a) == 200 && names_job(a, job),
            "after its job was cancelled, the acknowledged poll did not name it");
    json_decref(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lost_answer_redelivered),
        cmocka_unit_test(test_parked_poll_wakes),
        cmocka_unit_test(test_acknowledged_poll_reads_nothing),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
