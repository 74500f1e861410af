/* itest.h - cmocka-side helpers shared by the integration test programs
 * (never by bench: it uses cmocka). Each test program is one process with
 * one cluster and one client, hence the file-level statics. Include after
 * <cmocka.h>. */
#ifndef ATOLL_ITEST_H
#define ATOLL_ITEST_H

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "support_check.h"
#include "support_harness.h"

#define ITEST_POLL_MS 20
#define ITEST_JOB_TIMEOUT_MS 30000

static hx_cluster_t itest_cluster;
static hx_client_t itest_client;

/* Reports (request/response, logs) and fails the current cmocka test. */
#define T_CHECK(cond, ...)                                                              \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            hx_report_failure(&itest_cluster, &itest_client, __FILE__, __LINE__,        \
                              __VA_ARGS__);                                             \
            fail_msg("%s", #cond);                                                      \
        }                                                                               \
    } while (0)

/* One island spec and how its workers split it. */
typedef struct itest_island {
    const char *spec;           /* "west=4x4" */
    const char *name;           /* "west" */
    int workers, devices_each;
    const char *const *worker_args; /* appended to each worker's (NULL-terminated); NULL: none */
} itest_island_t;

/* Group setup body: cluster + client; 0 or -1 (cmocka then skips the group). */
static inline int itest_start(const itest_island_t *isl, int n)
{
    const char *specs[8];
    if (hx_init() != 0 || n > 8)
        return -1;
    for (int i = 0; i < n; i++)
        specs[i] = isl[i].spec;
    if (hx_cluster_start(&itest_cluster, specs, n) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        for (int w = 0; w < isl[i].workers; w++)
            if ((isl[i].worker_args
                     ? hx_worker_start_args(&itest_cluster, isl[i].name, isl[i].devices_each,
                                            isl[i].worker_args, 15000, 0)
                     : hx_worker_start(&itest_cluster, isl[i].name, isl[i].devices_each)) != 0)
                goto fail;
    if (hx_client_init(&itest_client, itest_cluster.url) != 0)
        goto fail;
    return 0;
fail:
    hx_cluster_stop(&itest_cluster);
    return -1;
}

/* Group teardown body: non-zero when a process did not exit 0 on SIGTERM. */
static inline int itest_stop(void)
{
    hx_client_cleanup(&itest_client);
    int unclean = hx_cluster_stop(&itest_cluster);
    if (unclean)
        fprintf(stderr, "itest: %d process(es) did not exit cleanly on SIGTERM\n", unclean);
    return unclean ? -1 : 0;
}

/* The group teardown of a suite whose cluster itest_stop() ends. */
static inline int itest_group_teardown(void **state)
{
    (void)state;
    return itest_stop();
}

/* One request run on a thread of its own (itest_call_start, then
 * itest_call_join), for a test that holds the request's answer back (a
 * sync round held open: support_faults.h's fx_syncgate_env) and looks at
 * the cluster meanwhile. cl, method, path and body are the caller's and
 * must outlive the call. */
typedef struct itest_call {
    hx_client_t *cl;
    const char *method, *path, *body;
    long status;                /* 0: no answer */
    int64_t id;                 /* the answer's "id", if any */
    atomic_int answered;        /* set once the request returned */
    int on;                     /* the thread runs (joined by itest_call_join) */
    pthread_t th;
} itest_call_t;

static inline void *itest_call_main(void *arg)
{
    itest_call_t *a = arg;
    hx_resp_t r;
    if (hx_request(a->cl, a->method, a->path, a->body, a->body ? strlen(a->body) : 0, &r) == 0) {
        a->status = r.status;
        a->id = json_integer_value(json_object_get(r.json, "id"));
        hx_resp_clear(&r);
    }
    atomic_store(&a->answered, 1);
    return NULL;
}

/* Starts a's request; 1 when its thread runs. */
static inline int itest_call_start(itest_call_t *a)
{
    a->on = pthread_create(&a->th, NULL, itest_call_main, a) == 0;
    return a->on;
}

static inline void itest_call_join(itest_call_t *a)
{
    if (a->on)
        pthread_join(a->th, NULL);
    a->on = 0;
}

/* Creates the file at path (a sync gate: fx_syncgate_env); 0 or -1. */
static inline int itest_touch(const char *path)
{
    int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

/* Waits (30 s at most) until the /metrics figure `name` is at least
 * `want`; 1, or 0 on time out. */
static inline int itest_metric_reach(const char *name, double want)
{
    struct timespec nap = {0, ITEST_POLL_MS * 1000000L};
    for (int i = 0; i < 30000 / ITEST_POLL_MS; i++) {
        if (hx_metric(&itest_client, name) >= want)
            return 1;
        nanosleep(&nap, NULL);
    }
    return 0;
}

/* The same for writes that waited for a sync round (each one is stored
 * by then). */
static inline int itest_sync_waits_reach(double want)
{
    return itest_metric_reach("atoll_store_sync_waits_total", want);
}

/* Submits a single-quoted JSON document; fails the test unless 201. */
static inline int64_t itest_submit(const char *doc_q)
{
    char *doc = hx_text_q(doc_q);
    T_CHECK(doc != NULL, "out of memory");
    int64_t id = -1;
    int status = hx_job_submit(&itest_client, doc, &id, NULL);
    free(doc);
    T_CHECK(status == 201, "submit returned %d, expected 201", status);
    return id;
}

/* Submits a single-quoted JSON document that must be refused: fails the
 * test unless the answer is 400 naming `field`. */
static inline void itest_submit_bad(const char *doc_q, const char *field)
{
    char *doc = hx_text_q(doc_q);
    hx_resp_t r;
    int sent = doc && hx_request(&itest_client, "POST", "/v1/jobs", doc, strlen(doc), &r) == 0;
    free(doc);
    T_CHECK(sent, "POST /v1/jobs failed");
    const char *got = json_string_value(json_object_get(r.json, "field"));
    char gotbuf[200];
    snprintf(gotbuf, sizeof gotbuf, "%s", got ? got : "(none)");
    int status = r.status;
    hx_resp_clear(&r);
    T_CHECK(status == 400 && strcmp(gotbuf, field) == 0,
            "want 400 at field %s, got %d at %s", field, status, gotbuf);
}

/* Waits for a terminal state and fails unless it is `want`. Returns the
 * final job object (caller decrefs). */
static inline json_t *itest_wait_state(int64_t id, const char *want)
{
    json_t *job = NULL;
    int rc = hx_job_wait(&itest_client, id, ITEST_JOB_TIMEOUT_MS, ITEST_POLL_MS, &job);
    char st[32], err[400];
    const char *e = json_string_value(json_object_get(job, "error"));
    snprintf(st, sizeof st, "%s", job ? hx_job_state(job) : "(no job object)");
    snprintf(err, sizeof err, "%s", e ? e : "none");
    if (rc != 0 || strcmp(st, want) != 0) {
        json_decref(job);   /* fail() longjmps: release first so ASan stays quiet */
        job = NULL;
    }
    T_CHECK(rc == 0, "job %" PRId64 " not terminal after %d ms (state %s)", id,
            ITEST_JOB_TIMEOUT_MS, st);
    T_CHECK(strcmp(st, want) == 0, "job %" PRId64 " ended %s, expected %s (error: %s)", id, st,
            want, err);
    return job;
}

/* Polls until the job is in state `want` (terminal or not) with attempt
 * `attempt` (-1: any); the job (caller decrefs), or NULL after timeout_ms. */
static inline json_t *itest_wait_in_state(int64_t id, const char *want, int attempt,
                                          int timeout_ms)
{
    int64_t deadline = hx_now_ms() + timeout_ms;
    for (;;) {
        json_t *job = hx_job_get(&itest_client, id);
        if (job && strcmp(hx_job_state(job), want) == 0 &&
            (attempt < 0 || json_integer_value(json_object_get(job, "attempt")) == attempt))
            return job;
        json_decref(job);
        if (hx_now_ms() >= deadline)
            return NULL;
        hx_sleep_ms(ITEST_POLL_MS);
    }
}

/* Polls until computation `comp` of the job is in state `want`; the job
 * (caller decrefs), or NULL after timeout_ms. */
static inline json_t *itest_wait_comp_state(int64_t id, int comp, const char *want,
                                            int timeout_ms)
{
    int64_t deadline = hx_now_ms() + timeout_ms;
    for (;;) {
        json_t *job = hx_job_get(&itest_client, id);
        json_t *c = json_array_get(json_object_get(job, "computations"), (size_t)comp);
        const char *st = json_string_value(json_object_get(c, "state"));
        if (st && strcmp(st, want) == 0)
            return job;
        json_decref(job);
        if (hx_now_ms() >= deadline)
            return NULL;
        hx_sleep_ms(ITEST_POLL_MS);
    }
}

/* DELETE /v1/jobs/{id}; fails the test unless it answered 2xx. */
static inline void itest_cancel(int64_t id)
{
    char path[64];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, id);
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0, "DELETE %s", path);
    int status = r.status;
    hx_resp_clear(&r);
    T_CHECK(status / 100 == 2, "DELETE %s answered %d", path, status);
}

/* Submit + wait for success; returns the job object (caller decrefs). */
static inline json_t *itest_run_ok(const char *doc_q, int64_t *id_out)
{
    int64_t id = itest_submit(doc_q);
    if (id_out)
        *id_out = id;
    return itest_wait_state(id, "succeeded");
}

/* Per-test teardown: cancels every job a (failed) test left queued or
 * running, so the next test on the shared cluster starts on idle devices.
 * Always returns 0: leftovers are the failed test's fault, already reported. */
static inline int itest_cancel_leftovers(void **state)
{
    static const char *const live[] = {"queued", "allocated", "running"};
    (void)state;
    for (int s = 0; s < 3; s++) {
        char path[96];
        hx_resp_t r;
        snprintf(path, sizeof path, "/v1/jobs?state=%s&limit=100", live[s]);
        if (hx_request(&itest_client, "GET", path, NULL, 0, &r) != 0)
            continue;
        json_t *jobs = json_object_get(r.json, "jobs");
        for (size_t i = 0; i < json_array_size(jobs); i++) {
            json_int_t id = json_integer_value(json_object_get(json_array_get(jobs, i), "id"));
            hx_resp_t d;
            snprintf(path, sizeof path, "/v1/jobs/%lld", (long long)id);
            fprintf(stderr, "itest: cancelling leftover job %lld (%s)\n", (long long)id, live[s]);
            if (hx_request(&itest_client, "DELETE", path, NULL, 0, &d) == 0)
                hx_resp_clear(&d);
        }
        hx_resp_clear(&r);
    }
    return 0;
}

#endif
