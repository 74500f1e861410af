/* bench_share.c - Pathways' proportional-share experiment (issue 11,
 * DESIGN Part D).
 *
 *   bench_share [COMPUTE_US [WINDOW_S [CHAINS]]]   (defaults 2000, 3, 2)
 *
 * Island west=4x4 covered by 4 sim workers of 4 devices; atolld with
 * tokens. Four tenants of shares 1, 2, 4 and 8 each submit CHAINS shared
 * chains of 1,000 computations (COMPUTE_US of `compute` each, an edge to
 * the next) on the whole island, all at once. After a second of warm-up,
 * GET /v1/stats/tenants?seconds=WINDOW_S gives each tenant's device time in
 * a window where all are backlogged: printed with its ratio to tenant 1's
 * against the share ratio, and the devices' busy fraction (device time of
 * all over 16 devices x the window), and the island's lookahead budget the
 * feed settled on (/metrics). Then NEWCOMERS one-computation shared jobs
 * of the admin are submitted one after the other (each after the last
 * ended, 50 ms apart) while the chains run: their submission -> started
 * (first leased) and -> started on the devices, p50/p90/max, and the mean
 * of each step between. Everything is cancelled at the end. Exits 1 when a
 * request fails. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_harness.h"

#define ADMIN "admin-token-bench-share-0123456"
#define WORKER "worker-token-bench-share-012345"
#define CHAIN 1000
#define MAX_CHAINS 8         /* per tenant */
#define NEWCOMERS 12

static char *chain_doc(const char *name, int n, int64_t us)
{
    return hx_compute_chain_doc(name, n, us, 1, NULL, 4, 4);
}

/* Where an interactive job's wait went: its stamps in order (job:
 * created, allocated; its computation: dispatched; job: started = first
 * leased by a poll; computation: started and finished on the worker). 0,
 * or -1 when one is missing. */
#define STEPS 6
static int interactive_stamps(const json_t *job, int64_t t[STEPS])
{
    const json_t *ct = json_object_get(json_array_get(json_object_get(job, "computations"), 0),
                                       "times_us");
    t[0] = hx_job_time_us(job, "created");
    t[1] = hx_job_time_us(job, "allocated");
    t[2] = json_integer_value(json_object_get(ct, "dispatched"));
    t[3] = hx_job_time_us(job, "started");
    t[4] = json_integer_value(json_object_get(ct, "started"));
    t[5] = json_integer_value(json_object_get(ct, "finished"));
    for (int i = 0; i < STEPS; i++)
        if (t[i] <= 0)
            return -1;
    return 0;
}

/* p50, p90 and max (ms) of n durations (µs), which it sorts. */
static void print_spread(const char *name, int64_t *us, int n)
{
    qsort(us, (size_t)n, sizeof *us, hx_cmp_i64);
    printf("%s_ms p50 %.2f p90 %.2f max %.2f (%d jobs)\n", name, (double)us[n / 2] / 1e3,
           (double)us[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1] / 1e3, (double)us[n - 1] / 1e3,
           n);
}

/* NEWCOMERS tiny shared jobs of the admin, one at a time, among the
 * chains. Returns 0, or -1 when one failed. */
static int interactive(hx_client_t *admin)
{
    static const char *const names[] = {"created_to_allocated", "allocated_to_dispatched",
                                        "dispatched_to_leased", "leased_to_worker_start",
                                        "worker_start_to_finished"};
    char *tiny = chain_doc("tiny", 1, 100);
    int64_t started[NEWCOMERS], on_dev[NEWCOMERS], sum[STEPS - 1] = {0};
    int n = 0, rc = tiny ? 0 : -1;
    for (; !rc && n < NEWCOMERS; n++) {
        int64_t id, t[STEPS];
        json_t *tj = NULL;
        rc = hx_job_submit(admin, tiny, &id, NULL) == 201 &&
             hx_job_wait(admin, id, 30000, 2, &tj) == 0 && interactive_stamps(tj, t) == 0 ? 0 : -1;
        json_decref(tj);
        if (rc)
            break;
        started[n] = t[3] - t[0];
        on_dev[n] = t[4] - t[0];
        for (int i = 0; i < STEPS - 1; i++)
            sum[i] += t[i + 1] - t[i];
        hx_sleep_ms(50);
    }
    free(tiny);
    if (n == 0)
        return -1;
    for (int i = 0; i < STEPS - 1; i++)
        printf("interactive.%s_ms mean %.2f\n", names[i], (double)sum[i] / n / 1e3);
    print_spread("interactive_submit_to_started", started, n);
    print_spread("interactive_submit_to_device_start", on_dev, n);
    return rc;
}

static int make_tenant(hx_client_t *admin, const char *name, int share, hx_client_t *cl,
                       const char *url)
{
    char body[96];
    hx_resp_t r;
    snprintf(body, sizeof body, "{\"name\":\"%s\",\"share\":%d}", name, share);
    int ok = hx_request(admin, "POST", "/v1/tenants", body, strlen(body), &r) == 0 &&
             r.status == 201;
    const char *tok = json_string_value(json_object_get(r.json, "token"));
    ok = ok && tok && hx_client_init(cl, url) == 0 && hx_client_set_auth(cl, tok, NULL) == 0;
    hx_resp_clear(&r);
    return ok ? 0 : -1;
}

/* The scheduler's passes so far (admission and feed, woken by every
 * finished computation of a shared job), from one scrape: their mean and
 * how many took longer than 1, 2.5, 5, 10 and 25 ms. The long ones are
 * what starve the devices (and so grow the island's lookahead, which
 * newcomers wait behind). 0 or -1. */
static int pass_figures(hx_client_t *admin)
{
    static const char *const le[] = {"0.001", "0.0025", "0.005", "0.01", "0.025"};
    hx_resp_t r;
    if (hx_request(admin, "GET", "/metrics", NULL, 0, &r) != 0 || r.status != 200 || !r.body) {
        hx_resp_clear(&r);
        return -1;
    }
    double passes = hx_metric_in(r.body, "atoll_scheduler_pass_seconds_count");
    double pass_s = hx_metric_in(r.body, "atoll_scheduler_pass_seconds_sum");
    if (passes > 0) {
        printf("scheduler.passes %.0f\nscheduler.mean_pass_us %.1f\nscheduler.passes_over_ms",
               passes, pass_s / passes * 1e6);
        for (size_t b = 0; b < sizeof le / sizeof le[0]; b++) {
            char name[96];
            snprintf(name, sizeof name, "atoll_scheduler_pass_seconds_bucket{le=\"%s\"}", le[b]);
            printf(" %g:%.0f", atof(le[b]) * 1e3, passes - hx_metric_in(r.body, name));
        }
        printf("\n");
    }
    hx_resp_clear(&r);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t us = argc > 1 ? atoll(argv[1]) : 2000;
    int window = argc > 2 ? atoi(argv[2]) : 3, chains = argc > 3 ? atoi(argv[3]) : 2;
    if (us < 100 || us > 100000 || window < 1 || window > 30 || chains < 1 ||
        chains > MAX_CHAINS) {
        fprintf(stderr, "usage: bench_share [COMPUTE_US 100..100000 [WINDOW_S 1..30 "
                        "[CHAINS 1..%d]]]\n", MAX_CHAINS);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const char *const islands[] = {"west=4x4"};
    static const char *const extra[] = {"--admin-token", ADMIN, "--worker-token", WORKER,
                                        "--max-body", "4194304", NULL};
    static const char *const wextra[] = {"--token", WORKER, "--backend", "sim", NULL};
    static const int shares[] = {1, 2, 4, 8};
    hx_cluster_t c;
    hx_client_t admin, t[4];
    int64_t ids[4 * MAX_CHAINS];
    int rc = hx_init() != 0 || hx_cluster_start_args(&c, islands, 1, extra) != 0;
    for (int w = 0; !rc && w < 4; w++)
        rc = hx_worker_start_args(&c, "west", 4, wextra, 15000, 0);
    rc = rc || hx_client_init(&admin, c.url) != 0 || hx_client_set_auth(&admin, ADMIN, NULL);
    for (int i = 0; !rc && i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "share%d", shares[i]);
        rc = make_tenant(&admin, name, shares[i], &t[i], c.url);
    }
    char *doc = rc ? NULL : chain_doc("chain", CHAIN, us);
    for (int k = 0; doc && !rc && k < 4 * chains; k++)
        rc = hx_job_submit(&t[k % 4], doc, &ids[k], NULL) != 201;
    free(doc);
    if (rc) {
        fprintf(stderr, "bench_share: setup failed\n");
        return 1;
    }
    hx_sleep_ms(1000 + window * 1000);      /* warm-up, then the window fills */
    char path[96];
    snprintf(path, sizeof path, "/v1/stats/tenants?seconds=%d", window);
    hx_resp_t r;
    double secs[4] = {0}, total = 0;
    rc = hx_request(&admin, "GET", path, NULL, 0, &r) != 0 || r.status != 200;
    json_t *row;
    size_t i;
    json_array_foreach(json_object_get(r.json, "tenants"), i, row)
        for (int k = 0; k < 4; k++) {
            char name[16];
            snprintf(name, sizeof name, "share%d", shares[k]);
            if (strcmp(json_string_value(json_object_get(row, "name")), name) == 0)
                secs[k] = json_number_value(json_object_get(row, "device_seconds"));
        }
    hx_resp_clear(&r);
    printf("compute_us %" PRId64 "\nwindow_s %d\n", us, window);
    for (int k = 0; k < 4; k++) {
        total += secs[k];
        printf("tenant_share%d_device_seconds %.3f\n", shares[k], secs[k]);
        printf("tenant_share%d_ratio_to_share1 %.2f (share ratio %d)\n", shares[k],
               secs[0] > 0 ? secs[k] / secs[0] : 0.0, shares[k]);
    }
    printf("devices_busy_fraction %.3f\n", total / (16.0 * window));
    /* The island's lookahead as the feed steered it (sched_feed.c). */
    printf("feed.budget_ms %.2f\nfeed.inflight_computations %.0f\n",
           hx_metric(&admin, "atoll_feed_budget_seconds{island=\"west\"}") * 1e3,
           hx_metric(&admin, "atoll_feed_inflight{island=\"west\"}"));
    /* Interactive latency: tiny shared jobs among the chains. */
    if (interactive(&admin) != 0)
        rc = 1;
    if (pass_figures(&admin) != 0)
        rc = 1;
    for (int k = 0; k < 4 * chains; k++) {
        snprintf(path, sizeof path, "/v1/jobs/%" PRId64, ids[k]);
        if (hx_request(&admin, "DELETE", path, NULL, 0, &r) == 0)
            hx_resp_clear(&r);
    }
    for (int k = 0; k < 4; k++)
        hx_client_cleanup(&t[k]);
    hx_client_cleanup(&admin);
    hx_cluster_stop(&c);
    return rc ? 1 : 0;
}
