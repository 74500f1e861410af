/* bench_scale.c - a 2,048-device island on this one machine (issue 9's
 * scale run; tests/integration/test_scale.c is its small version).
 *
 *   bench_scale [WORKERS [JOBS]]     (defaults 512 and 1000)
 *
 * Runs the binaries of $ATOLL_BIN_DIR (default build/bin). WORKERS (a power
 * of two, 4..512) sim workers of 4 devices cover one island `big` (32x64
 * for 512). Phases, each printed as `name value` lines:
 *   1. registration: all workers spawned at once; seconds until the island
 *      shows every device free; atolld's RSS then;
 *   2. chained: one job of CHAIN computations (scalar all_reduce + add,
 *      each consuming the previous) on the whole island; microseconds per
 *      computation from the server's started/finished stamps, and where
 *      they went (chain_profile);
 *   3. mixed: JOBS jobs (fill + all_reduce sum) cycling through slice sizes
 *      1, 2, 4, ... devices up to the whole island, submitted back to back
 *      and all checked exactly (every shard's sum); jobs/s from the first
 *      creation to the last finish;
 *   4. the scheduler-pass histogram's p99 bucket and count, and atolld's RSS
 *      at the end.
 * atolld runs with --lease-ms 30000 and workers with --peer-timeout-ms
 * 600000: 512 processes on 2 cores can stall a heartbeat for seconds, and
 * the members of a 512-process gang start their host tasks up to a minute
 * apart (each must be scheduled to fetch its group); this run measures
 * scale, not liveness. Workers run at nice 10 (see spawn_workers). Bounded: every wait has a deadline (BENCH_DEADLINE_MS in all).
 * Exits 1 on any failed or wrong job. */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "support_harness.h"

#define DEVS_PER_WORKER 4
#define MAX_WORKERS 512
#define CHAIN 16
#define BENCH_DEADLINE_MS (20 * 60 * 1000)
#define REGISTER_TIMEOUT_MS (5 * 60 * 1000)
#define JOB_TIMEOUT_MS (5 * 60 * 1000)

static hx_proc_t workers[MAX_WORKERS];
static int64_t bench_deadline;

/* Free devices of island `big`, or -1. */
static long island_free(hx_client_t *cl)
{
    json_t *isl = NULL;
    hx_resp_t r;
    if (hx_request(cl, "GET", "/v1/islands/big", NULL, 0, &r) == 0 && r.status == 200)
        isl = r.json;
    long n = isl ? (long)json_integer_value(json_object_get(isl, "free")) : -1;
    hx_resp_clear(&r);
    return n;
}

static int spawn_workers(hx_cluster_t *c, int n)
{
    char bin[HX_PATH_MAX], devs[8];
    snprintf(bin, sizeof bin, "%s/atoll-worker", hx_bin_dir());
    snprintf(devs, sizeof devs, "%d", DEVS_PER_WORKER);
    for (int i = 0; i < n; i++) {
        char *argv[] = {bin, "--controller", c->url, "--island", "big", "--devices", devs,
                        "--backend", "sim", "--peer-timeout-ms", "600000", NULL};
        snprintf(workers[i].name, sizeof workers[i].name, "w%03d", i);
        snprintf(workers[i].log_path, sizeof workers[i].log_path, "%s/w%03d.log", c->dir, i);
        if (hx_proc_spawn(&workers[i], argv, 0) != 0)
            return -1;
        /* The controller of a real cluster has its own host; here it shares
         * 2 cores with every worker. Workers run at nice 10 so atolld's few
         * threads are not one in hundreds of runnable ones. */
        setpriority(PRIO_PROCESS, (id_t)workers[i].pid, 10);
    }
    return 0;
}

static void stop_workers(int n)
{
    for (int i = 0; i < n; i++)
        if (workers[i].pid > 0)
            kill(workers[i].pid, SIGTERM);
    for (int i = 0; i < n; i++)
        if (workers[i].pid > 0)
            hx_proc_stop(&workers[i], 0, 10000);
}

/* A job of CHAIN computations on the whole island: c0 = shard_index,
 * c[k] = input(c[k-1].y); r = all_reduce max; y = r + r. Caller frees. */
static char *chain_doc(const char *shape)
{
    size_t cap = 64 * 1024, off = 0;
    char *d = malloc(cap);
    if (!d)
        return NULL;
    off += (size_t)snprintf(d + off, cap - off, "{\"name\":\"chain\",\"slices\":{\"s\":"
                            "{\"shape\":%s}},\"computations\":[", shape);
    for (int k = 0; k < CHAIN; k++) {
        char first[96];
        if (k == 0)
            snprintf(first, sizeof first, "{\"op\":\"shard_index\",\"out\":\"x\"}");
        else
            snprintf(first, sizeof first, "{\"op\":\"input\",\"out\":\"x\",\"from\":\"c%d.y\"}",
                     k - 1);
        off += (size_t)snprintf(d + off, cap - off,
                                "%s{\"name\":\"c%d\",\"slice\":\"s\",\"ops\":[%s,"
                                "{\"op\":\"all_reduce\",\"out\":\"r\",\"args\":[\"x\"],"
                                "\"reduce\":\"max\"},{\"op\":\"add\",\"out\":\"y\","
                                "\"args\":[\"r\",\"r\"]}],\"outputs\":[\"y\"]}",
                                k ? "," : "", k, first);
    }
    snprintf(d + off, cap - off, "]}");
    return d;
}

/* Waits for a job; 0 when it succeeded, with its server stamps (and the
 * job itself in *out, a new reference, when out is not NULL). */
static int job_done(hx_client_t *cl, int64_t id, int64_t *created, int64_t *started,
                    int64_t *finished, json_t **out)
{
    json_t *job = NULL;
    int rc = hx_job_wait(cl, id, JOB_TIMEOUT_MS, 20, &job);
    const char *st = job ? hx_job_state(job) : "?";
    if (rc != 0 || strcmp(st, "succeeded") != 0) {
        fprintf(stderr, "job %" PRId64 ": %s %s\n", id, st,
                job ? json_string_value(json_object_get(job, "error")) ?: "" : "");
        json_decref(job);
        return -1;
    }
    *created = hx_job_time_us(job, "created");
    *started = hx_job_time_us(job, "started");
    *finished = hx_job_time_us(job, "finished");
    if (out)
        *out = job;
    else
        json_decref(job);
    return 0;
}

/* Where the chain's time went (bench_pathways' profile, same names): the
 * first computation's start after the job's, the chain itself per
 * computation (first start to last finish: collectives and hand-offs,
 * which the workers drive) split into the first computation (which also
 * makes every data-plane endpoint: the root's to each process and back)
 * and the others, and the controller's tail after the last computation
 * finished (applying the workers' reports: CHAIN x workers of them). */
static void chain_profile(const json_t *job)
{
    int64_t c0_start = hx_comp_time_us(job, 0, "started");
    int64_t last_fin = hx_comp_time_us(job, CHAIN - 1, "finished");
    printf("chain_whole_island_start_to_first_comp_ms %.1f\n",
           (double)(c0_start - hx_job_time_us(job, "started")) / 1000.0);
    int64_t c0_fin = hx_comp_time_us(job, 0, "finished");
    printf("chain_whole_island_chain_us_per_comp %.0f\n", (double)(last_fin - c0_start) / CHAIN);
    printf("chain_whole_island_first_comp_ms %.1f\n", (double)(c0_fin - c0_start) / 1000.0);
    printf("chain_whole_island_later_us_per_comp %.0f\n",
           (double)(last_fin - c0_fin) / (CHAIN - 1));
    printf("chain_whole_island_controller_tail_ms %.1f\n",
           (double)(hx_job_time_us(job, "finished") - last_fin) / 1000.0);
}

static int run_chain(hx_client_t *cl, const char *shape, long ndev)
{
    char *doc = chain_doc(shape);
    int64_t id = 0, c0, s0, f0;
    int st = doc ? hx_job_submit(cl, doc, &id, NULL) : -1;
    free(doc);
    json_t *job = NULL;
    if (st != 201 || job_done(cl, id, &c0, &s0, &f0, &job) != 0)
        return -1;
    json_t *res = hx_job_result(cl, id);
    char key[16];
    snprintf(key, sizeof key, "c%d.y", CHAIN - 1);
    json_t *last = res ? hx_result_shard(res, key, (int)ndev - 1) : NULL;
    double want = (double)(ndev - 1) * (double)(1 << CHAIN);
    double got = last ? json_number_value(json_object_get(last, "sum")) : -1;
    json_decref(res);
    printf("chain_whole_island_devices %ld\n", ndev);
    printf("chain_whole_island_us_per_computation %.0f\n", (double)(f0 - s0) / CHAIN);
    printf("chain_whole_island_submit_to_done_ms %.1f\n", (double)(f0 - c0) / 1000.0);
    chain_profile(job);
    json_decref(job);
    if (got != want) {
        fprintf(stderr, "chain: last shard holds %g, expected %g\n", got, want);
        return -1;
    }
    return 0;
}

/* The mixed run: job j on slice size 2^(j mod (log2(ndev) + 1)) devices. */
static int run_mixed(hx_client_t *cl, int njobs, int rows_log, int cols_log)
{
    int nsizes = rows_log + cols_log + 1, rc = 0;
    int64_t *ids = calloc((size_t)njobs, sizeof *ids);
    int *ndevs = calloc((size_t)njobs, sizeof *ndevs);
    if (!ids || !ndevs)
        return -1;
    int64_t t0 = hx_now_ms();
    for (int j = 0; j < njobs; j++) {
        int k = j % nsizes;                  /* 2^k devices: [2^(k/2), 2^(k - k/2)] */
        int r = k / 2 < rows_log ? k / 2 : rows_log, c = k - r;
        char doc[512];
        snprintf(doc, sizeof doc,
                 "{\"name\":\"mix%d\",\"slices\":{\"s\":{\"shape\":[%d,%d]}},\"computations\":"
                 "[{\"name\":\"c\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\","
                 "\"shape\":[4],\"value\":%d},{\"op\":\"all_reduce\",\"out\":\"z\",\"args\":"
                 "[\"x\"],\"reduce\":\"sum\"}],\"outputs\":[\"z\"]}]}",
                 j, 1 << r, 1 << c, j % 7 + 1);
        ndevs[j] = 1 << k;
        if (hx_job_submit(cl, doc, &ids[j], NULL) != 201) {
            fprintf(stderr, "mixed: job %d refused\n", j);
            rc = -1;
            goto cleanup;
        }
    }
    printf("mixed_submit_jobs_per_s %.0f\n", njobs * 1000.0 / (double)(hx_now_ms() - t0));
    int64_t first = INT64_MAX, last = 0;
    int wrong = 0;
    for (int j = 0; j < njobs && hx_now_ms() < bench_deadline; j++) {
        int64_t c0, s0, f0;
        if (job_done(cl, ids[j], &c0, &s0, &f0, NULL) != 0) {
            rc = -1;
            goto cleanup;
        }
        first = c0 < first ? c0 : first;
        last = f0 > last ? f0 : last;
        json_t *res = hx_job_result(cl, ids[j]);
        double want = 4.0 * (j % 7 + 1) * ndevs[j];
        for (int s = 0; s < ndevs[j]; s++) {
            json_t *sh = res ? hx_result_shard(res, "c.z", s) : NULL;
            wrong += !sh || json_number_value(json_object_get(sh, "sum")) != want;
        }
        json_decref(res);
    }
    printf("mixed_jobs %d\nmixed_slice_sizes 1..%d\nmixed_wrong_shards %d\n", njobs,
           1 << (nsizes - 1), wrong);
    printf("mixed_jobs_per_s %.1f\n", njobs * 1e6 / (double)(last - first));
    rc = wrong ? -1 : 0;
cleanup:
    free(ids);
    free(ndevs);
    return rc;
}

/* p99 of the scheduler-pass histogram: the smallest bucket bound holding
 * 99 % of the passes. */
static void print_sched_p99(hx_client_t *cl)
{
    hx_resp_t r;
    if (hx_request(cl, "GET", "/metrics", NULL, 0, &r) != 0)
        return;
    static const char pfx[] = "atoll_scheduler_pass_seconds_bucket{le=\"";
    double count = hx_metric(cl, "atoll_scheduler_pass_seconds_count"), p99 = -1;
    for (const char *p = r.body; p && (p = strstr(p, pfx)); p++) {
        double le = strncmp(p + strlen(pfx), "+Inf", 4) == 0 ? 1e9
                                                             : strtod(p + strlen(pfx), NULL);
        const char *v = strchr(p, ' ');
        if (v && p99 < 0 && strtod(v + 1, NULL) >= 0.99 * count)
            p99 = le;
    }
    hx_resp_clear(&r);
    printf("sched_passes %.0f\nsched_pass_p99_bucket_s %g\n", count, p99);
}

int main(int argc, char **argv)
{
    int nw = argc > 1 ? atoi(argv[1]) : MAX_WORKERS, njobs = argc > 2 ? atoi(argv[2]) : 1000;
    int lg = 0;
    while ((1 << lg) < nw * DEVS_PER_WORKER)
        lg++;
    if (nw < 4 || nw > MAX_WORKERS || (nw & (nw - 1)) || njobs < 1 || njobs > 100000) {
        fprintf(stderr, "usage: bench_scale [WORKERS: power of two 4..%d [JOBS]]\n",
                MAX_WORKERS);
        return 2;
    }
    if (hx_init() != 0)
        return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);      /* progress shows when redirected */
    int rows_log = lg / 2, cols_log = lg - lg / 2;
    char spec[64], shape[32];
    snprintf(spec, sizeof spec, "big=%dx%d", 1 << rows_log, 1 << cols_log);
    snprintf(shape, sizeof shape, "[%d,%d]", 1 << rows_log, 1 << cols_log);
    bench_deadline = hx_now_ms() + BENCH_DEADLINE_MS;
    hx_cluster_t c;
    static const char *const extra[] = {"--lease-ms", "30000", NULL};
    const char *islands[] = {spec};
    if (hx_cluster_start_args(&c, islands, 1, extra) != 0)
        return 1;
    hx_client_t cl = {0};
    int rc = 1;
    if (hx_client_init(&cl, c.url) != 0)
        goto stop;
    long ndev = (long)nw * DEVS_PER_WORKER;
    printf("island %s devices %ld workers %d\n", spec, ndev, nw);
    int64_t t0 = hx_now_ms();
    if (spawn_workers(&c, nw) != 0)
        goto stop;
    while (island_free(&cl) != ndev && hx_now_ms() - t0 < REGISTER_TIMEOUT_MS)
        hx_sleep_ms(100);
    if (island_free(&cl) != ndev) {
        fprintf(stderr, "only %ld of %ld devices registered\n", island_free(&cl), ndev);
        goto stop;
    }
    printf("register_all_s %.1f\n", (double)(hx_now_ms() - t0) / 1000.0);
    printf("atolld_rss_mib_registered %.1f\n", (double)hx_rss_kb(c.atolld.pid) / 1024.0);
    if (run_chain(&cl, shape, ndev) != 0 || run_mixed(&cl, njobs, rows_log, cols_log) != 0)
        goto stop;
    print_sched_p99(&cl);
    printf("atolld_rss_mib_end %.1f\n", (double)hx_rss_kb(c.atolld.pid) / 1024.0);
    printf("total_s %.1f\n", (double)(hx_now_ms() - t0) / 1000.0);
    rc = 0;
stop:
    if (rc != 0)
        c.keep_dir = 1;
    hx_client_cleanup(&cl);
    stop_workers(nw);
    hx_cluster_stop(&c);
    return rc;
}
