/* bench_preempt.c - how fast a high-priority job gets an island that only
 * preemptible jobs hold (issue 11, DESIGN Part D).
 *
 *   bench_preempt [RUNS]     (default 20, at most 200)
 *
 * Island west=4x4 covered by 4 sim workers of 4 devices. Each run: a
 * preemptible priority-0 job takes the whole island (a 60 s `compute`),
 * and once it runs a priority-10 job needing the whole island is
 * submitted; its submission -> allocated and submission -> started times
 * (the server's own stamps) are recorded; the evicted job is cancelled.
 * The same high-priority job on an idle island (measured first) gives the
 * baseline in the same run. Prints p50 and p99 of each in milliseconds and the ratios.
 * Exits 1 on a job that does not behave. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_harness.h"

#define RUNS_MAX 200

static const char low_q[] =
    "{'name':'low','preemptible':true,'slices':{'s':{'shape':[4,4]}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'compute','out':'b','us':10000000},"
    "{'op':'compute','out':'b2','us':10000000},{'op':'compute','out':'b3','us':10000000},"
    "{'op':'compute','out':'b4','us':10000000},{'op':'compute','out':'b5','us':10000000},"
    "{'op':'compute','out':'b6','us':10000000}]}]}";
static const char high_q[] =
    "{'name':'high','priority':10,'slices':{'s':{'shape':[4,4]}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";

static double pct_ms(int64_t *v, int n, double p)
{
    qsort(v, (size_t)n, sizeof *v, hx_cmp_i64);
    int k = (int)(p * (n - 1) + 0.5);
    return (double)v[k] / 1000.0;
}

/* Submits doc and waits for success; stores created->allocated and
 * created->started (µs). 0 or -1. */
static int run_high(hx_client_t *cl, const char *doc, int64_t *alloc_us, int64_t *start_us)
{
    int64_t id;
    json_t *job = NULL;
    if (hx_job_submit(cl, doc, &id, NULL) != 201 || hx_job_wait(cl, id, 60000, 2, &job) != 0 ||
        strcmp(hx_job_state(job), "succeeded") != 0) {
        json_decref(job);
        return -1;
    }
    int64_t c = hx_job_time_us(job, "created");
    *alloc_us = hx_job_time_us(job, "allocated") - c;
    *start_us = hx_job_time_us(job, "started") - c;
    json_decref(job);
    return 0;
}

static int one_run(hx_client_t *cl, const char *low, const char *high, int64_t *a, int64_t *s)
{
    int64_t lid;
    json_t *lj = NULL;
    if (hx_job_submit(cl, low, &lid, NULL) != 201 ||
        hx_job_wait_leave(cl, lid, "queued", 30000, 2, &lj) != 0) {
        json_decref(lj);
        return -1;
    }
    json_decref(lj);
    int rc = run_high(cl, high, a, s);
    char path[64];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, lid);
    if (hx_request(cl, "DELETE", path, NULL, 0, &r) == 0)
        hx_resp_clear(&r);
    lj = hx_job_get(cl, lid);
    int preempted = json_integer_value(json_object_get(lj, "preemptions")) >= 1;
    json_decref(lj);
    return rc == 0 && preempted ? 0 : -1;
}

/* Waits (at most 30 s) until no worker holds a leased task: the last
 * cancelled job's tasks have stopped, so the workers exit at once. */
static void wait_idle(hx_client_t *cl)
{
    for (int64_t end = hx_now_ms() + 30000; hx_now_ms() < end; hx_sleep_ms(20)) {
        hx_resp_t r;
        int64_t leased = -1;
        if (hx_request(cl, "GET", "/v1/workers", NULL, 0, &r) == 0 && r.status == 200) {
            json_t *w;
            size_t i;
            leased = 0;
            json_array_foreach(json_object_get(r.json, "workers"), i, w)
                leased += json_integer_value(json_object_get(w, "tasks_leased"));
        }
        hx_resp_clear(&r);
        if (leased == 0)
            return;
    }
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 20;
    if (runs < 1 || runs > RUNS_MAX) {
        fprintf(stderr, "usage: bench_preempt [RUNS 1..%d]\n", RUNS_MAX);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const char *const islands[] = {"west=4x4"};
    static const char *const sim[] = {"--backend", "sim", NULL};
    hx_cluster_t c;
    hx_client_t cl;
    char *low = hx_text_q(low_q), *high = hx_text_q(high_q);
    int64_t pa[RUNS_MAX], ps[RUNS_MAX], ba[RUNS_MAX], bs[RUNS_MAX];
    int rc = !low || !high || hx_init() != 0 || hx_cluster_start(&c, islands, 1) != 0;
    for (int w = 0; !rc && w < 4; w++)
        rc = hx_worker_start_args(&c, "west", 4, sim, 15000, 0);
    if (!rc)
        rc = hx_client_init(&cl, c.url);
    /* The baseline first, on a truly idle island (an evicted job's tasks
     * take a moment to stop on the workers after its cancel). */
    for (int i = 0; !rc && i < runs; i++)
        rc = run_high(&cl, high, &ba[i], &bs[i]);
    for (int i = 0; !rc && i < runs; i++)
        rc = one_run(&cl, low, high, &pa[i], &ps[i]);
    if (rc) {
        fprintf(stderr, "bench_preempt: a job did not behave\n");
    } else {
        printf("runs %d\n", runs);
        printf("idle_submit_to_allocated_ms_p50 %.2f\n", pct_ms(ba, runs, 0.5));
        printf("idle_submit_to_started_ms_p50 %.2f\n", pct_ms(bs, runs, 0.5));
        printf("preempt_submit_to_allocated_ms_p50 %.2f\n", pct_ms(pa, runs, 0.5));
        printf("preempt_submit_to_allocated_ms_p99 %.2f\n", pct_ms(pa, runs, 0.99));
        printf("preempt_submit_to_started_ms_p50 %.2f\n", pct_ms(ps, runs, 0.5));
        printf("preempt_submit_to_started_ms_p99 %.2f\n", pct_ms(ps, runs, 0.99));
        printf("preempt_over_idle_started_p50 %.2f\n",
               pct_ms(ps, runs, 0.5) / (pct_ms(bs, runs, 0.5) > 0 ? pct_ms(bs, runs, 0.5) : 1));
    }
    if (!rc)
        wait_idle(&cl);
    hx_client_cleanup(&cl);
    hx_cluster_stop(&c);
    free(low);
    free(high);
    return rc ? 1 : 0;
}
