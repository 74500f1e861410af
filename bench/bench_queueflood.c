/* bench_queueflood.c - one tenant floods the queue; how long does another
 * tenant's tiny job take? (issue 16, finding 9)
 *
 *   bench_queueflood [A_JOBS [A_MAX_QUEUED]]     (defaults 5000, 1000)
 *
 * Runs the binaries of $ATOLL_BIN_DIR (default build/bin).
 * Starts its own cluster, auth on: west=2x4 (two workers of 4 devices) and
 * cold=4x4 (no worker: a job there stays queued). Tenant A (max_queued
 * A_MAX_QUEUED) submits A_JOBS jobs on cold, each accepted (201, queued) or
 * refused (429 with Retry-After). Then tenant B submits a tiny 1-device job
 * on west BENCH_B_RUNS times in a row, each waited for. Prints `name value`
 * lines: A's accepted/refused counts and submission rate, B's
 * submission-to-done latency (client side, and created-to-finished on the
 * server), the scheduler's round time (atoll_sched_round_seconds_* from
 * /metrics) and the size of the database's WAL. Target: B done <= 1 s. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "support_harness.h"

#define ADMIN_TOKEN "bench-admin-token-0123456789"
#define WORKER_TOKEN "bench-worker-token-0123456789"
#define BENCH_B_RUNS 5
#define BENCH_POLL_MS 5

static const char a_doc_q[] =
    "{'name':'flood','slices':{'s':{'shape':[1,1],'island':'cold'}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";
static const char b_doc_q[] =
    "{'name':'tiny','slices':{'s':{'shape':[1,1],'island':'west'}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";

/* Creates a tenant as the admin; copies its token into tok. 0 or -1. */
static int make_tenant(hx_client_t *admin, const char *body, char *tok, size_t cap)
{
    hx_resp_t r;
    if (hx_request(admin, "POST", "/v1/tenants", body, strlen(body), &r) != 0)
        return -1;
    const char *t = json_string_value(json_object_get(r.json, "token"));
    int ok = r.status == 201 && t && strlen(t) < cap;
    if (ok)
        snprintf(tok, cap, "%s", t);
    else
        fprintf(stderr, "tenant creation: %ld %s\n", r.status, r.body);
    hx_resp_clear(&r);
    return ok ? 0 : -1;
}

/* The value of one metric line "NAME VALUE" on /metrics, or -1. */
static double metric(hx_client_t *cl, const char *name)
{
    hx_resp_t r;
    double v = -1;
    if (hx_request(cl, "GET", "/metrics", NULL, 0, &r) != 0)
        return -1;
    size_t n = strlen(name);
    for (const char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            v = strtod(p + n + 1, NULL);
    hx_resp_clear(&r);
    return v;
}

/* Tenant A's flood: counts 201 and 429 (the rest are errors). */
static void flood(hx_client_t *a, const char *doc, int njobs, int *acc, int *ref, int *err)
{
    for (int i = 0; i < njobs; i++) {
        hx_resp_t r;
        long st = hx_request(a, "POST", "/v1/jobs", doc, strlen(doc), &r) == 0 ? r.status : 0;
        if (st == 201)
            (*acc)++;
        else if (st == 429)
            (*ref)++;
        else
            (*err)++;
        hx_resp_clear(&r);
    }
}

/* B's tiny job, BENCH_B_RUNS times: prints each latency; returns the worst
 * client-side one in ms, or -1 when a job failed or timed out. */
static double b_runs(hx_client_t *b, const char *doc)
{
    double worst = 0;
    for (int k = 0; k < BENCH_B_RUNS; k++) {
        int64_t id = 0, t0 = hx_now_ms();
        json_t *job = NULL;
        if (hx_job_submit(b, doc, &id, NULL) != 201 ||
            hx_job_wait(b, id, 120000, BENCH_POLL_MS, &job) != 0 ||
            strcmp(hx_job_state(job), "succeeded") != 0) {
            json_decref(job);
            return -1;
        }
        double ms = (double)(hx_now_ms() - t0);
        int64_t created = hx_job_time_us(job, "created");
        int64_t fin = hx_job_time_us(job, "finished");
        printf("b_run_%d_submit_to_done_ms %.0f\n", k, ms);
        printf("b_run_%d_created_to_finished_ms %.1f\n", k, (double)(fin - created) / 1000.0);
        json_decref(job);
        if (ms > worst)
            worst = ms;
    }
    return worst;
}

int main(int argc, char **argv)
{
    int njobs = argc > 1 ? atoi(argv[1]) : 5000;
    int maxq = argc > 2 ? atoi(argv[2]) : 1000;
    const char *islands[] = {"west=2x4", "cold=4x4"};
    const char *extra[] = {"--admin-token", ADMIN_TOKEN, "--worker-token", WORKER_TOKEN, NULL};
    const char *wextra[] = {"--token", WORKER_TOKEN, NULL};
    hx_cluster_t c;
    hx_client_t admin = {0}, a = {0}, b = {0};
    char ta[128], tb[128], body[160];
    char *adoc = hx_text_q(a_doc_q), *bdoc = hx_text_q(b_doc_q);
    int rc = 1, acc = 0, ref = 0, err = 0;
    if (!adoc || !bdoc || hx_init() != 0 || hx_cluster_start_args(&c, islands, 2, extra) != 0)
        return 1;
    /* A_MAX_QUEUED 0: the field is left out (to run against an atolld
     * without tenant limits). */
    if (maxq > 0)
        snprintf(body, sizeof body, "{\"name\":\"a\",\"max_queued\":%d}", maxq);
    else
        snprintf(body, sizeof body, "{\"name\":\"a\"}");
    if (hx_worker_start_args(&c, "west", 4, wextra, 15000, 0) != 0 ||
        hx_worker_start_args(&c, "west", 4, wextra, 15000, 0) != 0 ||
        hx_client_init(&admin, c.url) != 0 || hx_client_init(&a, c.url) != 0 ||
        hx_client_init(&b, c.url) != 0 || hx_client_set_auth(&admin, ADMIN_TOKEN, NULL) != 0 ||
        make_tenant(&admin, body, ta, sizeof ta) != 0 ||
        make_tenant(&admin, "{\"name\":\"b\"}", tb, sizeof tb) != 0 ||
        hx_client_set_auth(&a, ta, NULL) != 0 || hx_client_set_auth(&b, tb, NULL) != 0)
        goto cleanup;
    int64_t t0 = hx_now_ms();
    flood(&a, adoc, njobs, &acc, &ref, &err);
    double secs = (double)(hx_now_ms() - t0) / 1000.0;
    printf("a_jobs_submitted %d\na_accepted %d\na_refused_429 %d\na_errors %d\n", njobs, acc,
           ref, err);
    printf("a_submit_rate_per_s %.0f\n", secs > 0 ? njobs / secs : 0.0);
    double worst = b_runs(&b, bdoc);
    printf("b_worst_submit_to_done_ms %.0f\n", worst);
    printf("b_target_met %s\n", worst >= 0 && worst <= 1000 ? "yes" : "no");
    double rounds = metric(&admin, "atoll_sched_rounds_total");
    double sum = metric(&admin, "atoll_sched_round_seconds_sum");
    printf("sched_rounds %.0f\n", rounds);
    printf("sched_round_mean_ms %.3f\n", rounds > 0 ? sum * 1000.0 / rounds : -1.0);
    printf("sched_round_max_ms %.3f\n", metric(&admin, "atoll_sched_round_seconds_max") * 1e3);
    char wal[HX_PATH_MAX];
    struct stat sb;
    snprintf(wal, sizeof wal, "%.400s/atoll.db-wal", c.dir);
    printf("wal_bytes %lld\n", stat(wal, &sb) == 0 ? (long long)sb.st_size : -1LL);
    rc = worst >= 0 && err == 0 ? 0 : 1;
cleanup:
    hx_client_cleanup(&admin);
    hx_client_cleanup(&a);
    hx_client_cleanup(&b);
    hx_cluster_stop(&c);
    free(adoc);
    free(bdoc);
    return rc;
}
