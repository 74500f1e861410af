/* bench_pathways.c - the Pathways micro-benchmark (Barham et al. 2022,
 * §5.1) on a real Atoll cluster, plus data-plane bandwidths.
 *
 * Workload: a "computation" is one scalar all_reduce (max) plus an add, on
 * a slice of D devices spread over P worker processes (D/P devices each;
 * one island per D, the slice is the whole island), in three modes:
 *   opbyop   one job per computation (OPBYOP_JOBS jobs submitted back to
 *            back; they serialize on the island, gang-allocated each time);
 *   chained  one job of N chained computations (edge c[k-1].x -> c[k]);
 *   fused    one computation of N steps.
 * each under parallel and sequential dispatch (one atolld per mode and P).
 * Throughput is computations/s from the server's timestamps (created to
 * finished), so client polling does not count. Every result is checked.
 *
 * Then, on the (16 devices, 4 processes) chained case: where the time per
 * computation goes (setup, worker step, hand-off, controller tail), and the
 * utilization curve at 0.1, 0.25, 0.5, 1, 2.3 (Pathways' parity point) and
 * 5 ms of `compute` a step, with the smallest that reaches 95 %
 * (sweep_utilization: over a chain of SWEEP_STEPS, and in steady state,
 * with the first computation's duration: what the workers' skewed starts
 * cost the whole figure), and
 * whether the cost of a computation grows with the chain's length (64
 * against LONG_STEPS computations: time, and atolld's and the workers'
 * CPU per computation, counted from submission to the checked result),
 * and issue 9's own figure under both dispatch modes: (T(200) - T(1)) / 199, T a
 * chained job's created -> finished time, with the CPU one more computation
 * costs atolld and the workers (chain_marginal); then the same figure on
 * `cpu` workers, as the issue states it (run_chain_cpu).
 * Last, same-host edge bandwidth (a 16 MiB tensor between computations on
 * two worker processes, from worker timestamps: the median over pairs of
 * a fill job and the edge job, paired_cost) against memcpy in this
 * process, and all-reduce bus bandwidth (the same way).
 *
 * Workers use the `sim` backend (devices are modelled streams: compute is
 * device time, not host CPU) so that D devices on a 2-core host do not
 * fight over the cores; data still moves for real.
 * Bounded by BENCH_BUDGET_MS: configurations past it are skipped and named.
 * Output: plain `name value` lines. `bench_pathways grid` or `bench_pathways
 * bandwidth` runs one section alone; `bench_pathways util` only the
 * (16 devices, 4 processes) chained case under both dispatch modes, with
 * its profile, marginal cost and (parallel) the utilization sweep, and the
 * marginal cost on `cpu` workers. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support_harness.h"

#define N_STEPS 64
#define OPBYOP_JOBS 32
#define SWEEP_STEPS 128         /* a training loop's steps, not its start */
#define LONG_STEPS 1000          /* chain_length; a job holds at most 1,024 */
#define BENCH_BUDGET_MS 150000
#define POLL_MS 10
#define JOB_TIMEOUT_MS 60000
#define EDGE_ELEMS (4 * 1024 * 1024)        /* 16 MiB of f32 */
#define AR_ELEMS (1024 * 1024)              /* 4 MiB of f32 per shard */
#define PAIRS 9                  /* paired_cost */
#define MARGINAL_LONG 200        /* chain_marginal: issue 9's (T(200) - T(1)) / 199 */
#define MARGINAL_RUNS 3

enum { M_OPBYOP, M_CHAINED, M_FUSED, M__N };
static const char *const mode_names[M__N] = {"opbyop", "chained", "fused"};
static const int grid_d[] = {4, 8, 16, 32};
static const char *const grid_shape[] = {"2x2", "2x4", "4x4", "4x8"};
static const char *const grid_shape_json[] = {"[2,2]", "[2,4]", "[4,4]", "[4,8]"};
static const int grid_p[] = {1, 2, 4, 8};
#define ND 4
#define NP 4

/* comps/s by [dispatch][mode][d][p]; 0 = not run. */
static double results[2][M__N][ND][NP];
static double marginal[2];       /* chain_marginal of (d16, p4), per dispatch mode */
static int64_t bench_t0;
static int only_util;           /* `bench_pathways util`: the profiled case alone */

static int over_budget(void)
{
    return hx_now_ms() - bench_t0 > BENCH_BUDGET_MS;
}

/* ---- documents (malloc'd text; NULL on OOM) ---- */

/* Appends to a growing buffer; sets *fail on OOM. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int fail;
} sbuf_t;

static void sb_add(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_add(sbuf_t *b, const char *fmt, ...)
{
    if (b->fail)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->fail = 1;
            return;
        }
        if (b->p && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 1024) + (size_t)n;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->fail = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static char *sb_done(sbuf_t *b)
{
    if (b->fail) {
        free(b->p);
        return NULL;
    }
    return b->p;
}

/* One step: [compute us,] all_reduce max of `in`, plus one. */
static void step_ops(sbuf_t *b, const char *in, const char *out, int k, int us)
{
    if (us > 0)
        sb_add(b, "{\"op\":\"compute\",\"out\":\"w%d\",\"us\":%d},", k, us);
    sb_add(b, "{\"op\":\"all_reduce\",\"out\":\"m%d\",\"args\":[\"%s\"],\"reduce\":\"max\"},"
              "{\"op\":\"add\",\"out\":\"%s\",\"args\":[\"m%d\",\"one\"]}", k, in, out, k);
}

/* The job of `mode` with n computations (steps) on island dD. */
static char *mode_doc(int mode, int di, int n, int us)
{
    sbuf_t b = {0};
    sb_add(&b, "{\"name\":\"pw-%s\",\"slices\":{\"s\":{\"shape\":%s,\"island\":\"d%d\"}},"
               "\"computations\":[", mode_names[mode], grid_shape_json[di], grid_d[di]);
    if (mode == M_FUSED) {
        sb_add(&b, "{\"name\":\"f\",\"slice\":\"s\",\"ops\":[{\"op\":\"shard_index\",\"out\":\"x0\"},"
                   "{\"op\":\"fill\",\"out\":\"one\",\"shape\":[],\"value\":1.0},");
        for (int k = 1; k <= n; k++) {
            char in[16], out[16];
            snprintf(in, sizeof in, "x%d", k - 1);
            snprintf(out, sizeof out, "x%d", k);
            step_ops(&b, in, out, k, us);
            sb_add(&b, "%s", k < n ? "," : "");
        }
        sb_add(&b, "],\"outputs\":[\"x%d\"]}]}", n);
        return sb_done(&b);
    }
    int ncomps = mode == M_CHAINED ? n : 1;
    for (int c = 0; c < ncomps; c++) {
        sb_add(&b, "%s{\"name\":\"c%d\",\"slice\":\"s\",\"ops\":[", c ? "," : "", c);
        if (c == 0)
            sb_add(&b, "{\"op\":\"shard_index\",\"out\":\"p\"},");
        else
            sb_add(&b, "{\"op\":\"input\",\"out\":\"p\",\"from\":\"c%d.x\"},", c - 1);
        sb_add(&b, "{\"op\":\"fill\",\"out\":\"one\",\"shape\":[],\"value\":1.0},");
        step_ops(&b, "p", "x", 0, us);
        sb_add(&b, "],\"outputs\":[\"x\"]}");
    }
    sb_add(&b, "]}");
    return sb_done(&b);
}

/* ---- running jobs ---- */

static int submit(hx_client_t *cl, const char *doc, int64_t *id)
{
    int st = hx_job_submit(cl, doc, id, NULL);
    if (st != 201) {
        fprintf(stderr, "bench: submit answered %d\n", st);
        hx_client_print_last(cl);
        return -1;
    }
    return 0;
}

/* Waits for success; returns the job object (new ref) or NULL. */
static json_t *wait_ok(hx_client_t *cl, int64_t id)
{
    json_t *job = NULL;
    if (hx_job_wait(cl, id, JOB_TIMEOUT_MS, POLL_MS, &job) != 0 ||
        strcmp(hx_job_state(job), "succeeded") != 0) {
        const char *e = json_string_value(json_object_get(job, "error"));
        fprintf(stderr, "bench: job %" PRId64 " ended '%s' (%s)\n", id,
                job ? hx_job_state(job) : "?", e ? e : "");
        json_decref(job);
        return NULL;
    }
    return job;
}

/* Shard 0's first value of result key, or NaN-ish -1e30 when absent. */
static double result_value(hx_client_t *cl, int64_t id, const char *key)
{
    json_t *res = hx_job_result(cl, id);
    json_t *v = json_array_get(json_object_get(hx_result_shard(res, key, 0), "values"), 0);
    double x = json_is_number(v) ? json_number_value(v) : -1e30;
    json_decref(res);
    return x;
}

static int64_t cbusy_of(const json_t *job, int comp)
{
    json_t *c = json_array_get(json_object_get(job, "computations"), (size_t)comp);
    return json_integer_value(json_object_get(c, "busy_us"));
}

/* Runs one (mode, island) case; returns computations/s or -1. With
 * job_out, the chained/fused job object is handed back (new ref). */
static double run_case(hx_client_t *cl, int mode, int di, int n, int us, json_t **job_out)
{
    int D = grid_d[di];
    double rate = -1;
    char key[32];
    if (mode == M_OPBYOP) {
        char *doc = mode_doc(mode, di, 1, us);
        int64_t ids[OPBYOP_JOBS];
        int ok = doc != NULL;
        for (int j = 0; ok && j < OPBYOP_JOBS; j++)
            ok = submit(cl, doc, &ids[j]) == 0;
        free(doc);
        if (!ok)
            return -1;
        json_t *last = wait_ok(cl, ids[OPBYOP_JOBS - 1]);
        int64_t first_created = -1, last_finished = -1;
        for (int j = 0; last && j < OPBYOP_JOBS; j++) {
            json_t *job = j == OPBYOP_JOBS - 1 ? json_incref(last) : wait_ok(cl, ids[j]);
            if (!job) {
                ok = 0;
                break;
            }
            int64_t c = hx_job_time_us(job, "created"), f = hx_job_time_us(job, "finished");
            first_created = first_created < 0 || c < first_created ? c : first_created;
            last_finished = f > last_finished ? f : last_finished;
            json_decref(job);
        }
        json_decref(last);
        if (!last || !ok)
            return -1;
        if (result_value(cl, ids[0], "c0.x") != D) {
            fprintf(stderr, "bench: opbyop result wrong\n");
            return -1;
        }
        return OPBYOP_JOBS * 1e6 / (double)(last_finished - first_created);
    }
    char *doc = mode_doc(mode, di, n, us);
    int64_t id;
    if (!doc || submit(cl, doc, &id) != 0) {
        free(doc);
        return -1;
    }
    free(doc);
    json_t *job = wait_ok(cl, id);
    if (!job)
        return -1;
    if (mode == M_CHAINED)
        snprintf(key, sizeof key, "c%d.x", n - 1);
    else
        snprintf(key, sizeof key, "f.x%d", n);
    double want = mode == M_CHAINED ? D + n - 1 : D - 1 + n;
    double got = result_value(cl, id, key);
    if (got != want) {
        fprintf(stderr, "bench: %s result %s = %g, expected %g\n", mode_names[mode], key, got, want);
        json_decref(job);
        return -1;
    }
    int64_t c = hx_job_time_us(job, "created"), f = hx_job_time_us(job, "finished");
    rate = n * 1e6 / (double)(f - c);
    if (job_out)
        *job_out = job;
    else
        json_decref(job);
    return rate;
}

/* ---- clusters ---- */

/* One atolld with an island dD (shape per grid) for every D >= P that P
 * divides, each covered by P workers of D/P devices. 0 or -1. */
static int start_grid_cluster(hx_cluster_t *c, int pi, int sequential)
{
    const char *specs[ND];
    char bufs[ND][32];
    int n = 0;
    for (int di = 0; di < ND; di++) {
        if (grid_d[di] < grid_p[pi])
            continue;
        snprintf(bufs[n], sizeof bufs[n], "d%d=%s", grid_d[di], grid_shape[di]);
        specs[n] = bufs[n];
        n++;
    }
    setenv("ATOLL_DISPATCH", sequential ? "sequential" : "parallel", 1);
    int rc = hx_cluster_start(c, specs, n);
    unsetenv("ATOLL_DISPATCH");
    if (rc != 0)
        return -1;
    for (int di = 0; di < ND; di++) {
        if (grid_d[di] < grid_p[pi])
            continue;
        char isl[16];
        snprintf(isl, sizeof isl, "d%d", grid_d[di]);
        for (int w = 0; w < grid_p[pi]; w++)
            if (hx_worker_start(c, isl, grid_d[di] / grid_p[pi]) != 0)
                return -1;
    }
    return 0;
}

/* Where a chained job's time went, from its recorded timestamps. */
static void profile_chained(const char *tag, const json_t *job, int n)
{
    int64_t created = hx_job_time_us(job, "created"), finished = hx_job_time_us(job, "finished");
    int64_t c0_disp = hx_comp_time_us(job, 0, "dispatched");
    int64_t c0_start = hx_comp_time_us(job, 0, "started");
    int64_t last_fin = hx_comp_time_us(job, n - 1, "finished");
    double exec = 0, handoff = 0, rep_to_disp = 0, disp_to_start = 0;
    for (int k = 0; k < n; k++) {
        exec += (double)(hx_comp_time_us(job, k, "finished") -
                         hx_comp_time_us(job, k, "inputs_ready"));
        if (k == 0)
            continue;
        int64_t prev_fin = hx_comp_time_us(job, k - 1, "finished");
        handoff += (double)(hx_comp_time_us(job, k, "inputs_ready") - prev_fin);
        int64_t d = hx_comp_time_us(job, k, "dispatched");
        if (d > prev_fin) {   /* sequential: the controller unblocked it */
            rep_to_disp += (double)(d - prev_fin);
            disp_to_start += (double)(hx_comp_time_us(job, k, "started") - d);
        }
    }
    printf("profile.%s.total_us_per_comp %.1f\n", tag, (double)(finished - created) / n);
    printf("profile.%s.submit_to_dispatch_us %" PRId64 "\n", tag, c0_disp - created);
    printf("profile.%s.dispatch_to_first_start_us %" PRId64 "\n", tag, c0_start - c0_disp);
    printf("profile.%s.chain_us_per_comp %.1f\n", tag,
           (double)(last_fin - c0_start) / n);
    printf("profile.%s.worker_step_us %.1f\n", tag, exec / n);
    printf("profile.%s.handoff_us %.1f\n", tag, handoff / (n - 1));
    if (rep_to_disp > 0) {
        printf("profile.%s.controller_unblock_us %.1f\n", tag, rep_to_disp / (n - 1));
        printf("profile.%s.poll_to_start_us %.1f\n", tag, disp_to_start / (n - 1));
    }
    printf("profile.%s.controller_tail_us %" PRId64 "\n", tag, finished - last_fin);
}

/* Chained d16 over 4 processes with a `compute` per step: utilization,
 * n * us over the chain's wall time (its first computation's start to its
 * last one's end, server stamps), and the same in steady state, from the
 * first computation's end: the first one also waits for the slowest
 * worker's first poll of the job. */
static void sweep_utilization(hx_client_t *cl, int di)
{
    /* The curve: 2.3 ms is Pathways' parity point with JAX. */
    static const int us_list[] = {100, 250, 500, 1000, 2300, 5000};
    int found = -1;
    for (size_t i = 0; i < sizeof us_list / sizeof us_list[0]; i++) {
        if (over_budget()) {
            printf("util.skipped_from_us %d\n", us_list[i]);
            break;
        }
        json_t *job = NULL;
        if (run_case(cl, M_CHAINED, di, SWEEP_STEPS, us_list[i], &job) < 0)
            return;
        int n = SWEEP_STEPS, D = grid_d[di];
        int64_t first_end = hx_comp_time_us(job, 0, "finished");
        int64_t last_end = hx_comp_time_us(job, n - 1, "finished");
        int64_t first_start = hx_comp_time_us(job, 0, "started");
        int64_t wall = last_end - first_start;
        int64_t busy = 0;
        for (int k = 0; k < n; k++)
            busy += cbusy_of(job, k);
        json_decref(job);
        double util = (double)n * us_list[i] / (double)wall;
        printf("util.chained.d%d.p4.compute_%dus %.3f\n", D, us_list[i], util);
        printf("util.chained.d%d.p4.compute_%dus.steady %.3f\n", D, us_list[i],
               (double)(n - 1) * us_list[i] / (double)(last_end - first_end));
        printf("util.chained.d%d.p4.compute_%dus.measured_busy %.3f\n", D, us_list[i],
               (double)busy / ((double)D * (double)wall));
        /* The whole figure's loss to the start: the first computation runs
         * from its first shard's start to its all_reduce, which waits for
         * the last worker to start. */
        printf("util.chained.d%d.p4.compute_%dus.first_comp_us %" PRId64 "\n", D, us_list[i],
               first_end - first_start);
        if (util >= 0.95 && found < 0)
            found = us_list[i];
    }
    if (found > 0)
        printf("util.min_compute_us_for_95pct %d\n", found);
    else
        printf("util.min_compute_us_for_95pct none_up_to_5000\n");
}

/* Chained d16 over 4 processes, N_STEPS against LONG_STEPS computations:
 * per computation, the time (server stamps; the median over the short
 * jobs) and atolld's CPU (counted in clock ticks, so the short chain runs
 * LONG_STEPS / N_STEPS times), and their ratios, long over short (1.0:
 * the cost does not grow with the chain). */
/* The CPU time of every worker process of the cluster (µs; the idle ones
 * of other islands add their heartbeats only). */
static int64_t workers_cpu_us(const hx_cluster_t *c)
{
    int64_t us = 0;
    for (int k = 0; k < c->nworkers; k++)
        us += hx_cpu_us(c->workers[k].pid);
    return us;
}

static void chain_length(hx_cluster_t *c, hx_client_t *cl, int di)
{
    enum { SHORT_RUNS = LONG_STEPS / N_STEPS };
    static const int lens[2] = {N_STEPS, LONG_STEPS}, runs[2] = {SHORT_RUNS, 1};
    double us[2], cpu[2];
    for (int i = 0; i < 2; i++) {
        int64_t t[SHORT_RUNS];      /* ns per computation */
        int64_t c0 = hx_cpu_us(c->atolld.pid), w0 = workers_cpu_us(c);
        for (int k = 0; k < runs[i]; k++) {
            double r = over_budget() ? -1 : run_case(cl, M_CHAINED, di, lens[i], 0, NULL);
            if (r <= 0) {
                printf("pw.skipped chain_length\n");
                return;
            }
            t[k] = (int64_t)(1e9 / r);
        }
        qsort(t, (size_t)runs[i], sizeof t[0], hx_cmp_i64);
        us[i] = (double)t[runs[i] / 2] / 1000.0;
        cpu[i] = (double)(hx_cpu_us(c->atolld.pid) - c0) / (lens[i] * runs[i]);
        printf("pw.chained.d%d.p4.steps_%d.us_per_comp %.1f\n", grid_d[di], lens[i], us[i]);
        printf("pw.chained.d%d.p4.steps_%d.atolld_cpu_us_per_comp %.1f\n", grid_d[di], lens[i],
               cpu[i]);
        printf("pw.chained.d%d.p4.steps_%d.workers_cpu_us_per_comp %.1f\n", grid_d[di], lens[i],
               (double)(workers_cpu_us(c) - w0) / (lens[i] * runs[i]));
    }
    printf("pw.chained.d%d.p4.long_over_short.us_per_comp %.2f\n", grid_d[di], us[1] / us[0]);
    printf("pw.chained.d%d.p4.long_over_short.atolld_cpu_per_comp %.2f\n", grid_d[di],
           cpu[1] / cpu[0]);
}

/* The CPU time (hx_sched_cpu_us) of atolld, [0], and of every worker of
 * the cluster, [1], in µs; -1 when a process's could not be read. */
static int cluster_cpu_us(const hx_cluster_t *c, int64_t out[2])
{
    out[0] = hx_sched_cpu_us(c->atolld.pid);
    out[1] = 0;
    for (int k = 0; k < c->nworkers && out[1] >= 0; k++) {
        int64_t w = hx_sched_cpu_us(c->workers[k].pid);
        out[1] = w < 0 ? -1 : out[1] + w;
    }
    return out[0] < 0 || out[1] < 0 ? -1 : 0;
}

/* Issue 9's own figure: per computation, (T(MARGINAL_LONG) - T(1)) /
 * (MARGINAL_LONG - 1), T a chained job's created -> finished time, each
 * the median of MARGINAL_RUNS jobs. The difference leaves out what every
 * job pays once (submission, allocation, the last reports), so it is the
 * marginal cost of one more computation in a chain. With it, the CPU that
 * one more computation costs atolld and the workers, the same way (each
 * length's runs together, to the nanosecond; reading each finished job and
 * its result back, as run_case checks it, included), and how many of the
 * machine's cores that keeps busy. Returns the time in us, or -1 (printed
 * as skipped). */
static double chain_marginal(const hx_cluster_t *c, hx_client_t *cl, int di, const char *tag)
{
    static const int lens[2] = {1, MARGINAL_LONG};
    double t[2], cpu[2][2];
    int cpu_ok = 1;
    for (int i = 0; i < 2; i++) {
        int64_t runs[MARGINAL_RUNS], c0[2], c1[2];
        cpu_ok &= cluster_cpu_us(c, c0) == 0;
        for (int k = 0; k < MARGINAL_RUNS; k++) {
            double r = over_budget() ? -1 : run_case(cl, M_CHAINED, di, lens[i], 0, NULL);
            if (r <= 0) {
                printf("pw.skipped %s.marginal\n", tag);
                return -1;
            }
            runs[k] = (int64_t)(lens[i] * 1e6 / r);     /* us, created -> finished */
        }
        cpu_ok &= cluster_cpu_us(c, c1) == 0;
        for (int p = 0; p < 2; p++)
            cpu[i][p] = (double)(c1[p] - c0[p]) / MARGINAL_RUNS;
        qsort(runs, MARGINAL_RUNS, sizeof runs[0], hx_cmp_i64);
        t[i] = (double)runs[MARGINAL_RUNS / 2];
    }
    double us = (t[1] - t[0]) / (MARGINAL_LONG - 1);
    double ca = (cpu[1][0] - cpu[0][0]) / (MARGINAL_LONG - 1);
    double cw = (cpu[1][1] - cpu[0][1]) / (MARGINAL_LONG - 1);
    printf("pw.%s.job_of_1_us %.0f\n", tag, t[0]);
    printf("pw.%s.job_of_%d_us %.0f\n", tag, MARGINAL_LONG, t[1]);
    printf("pw.%s.marginal_us_per_comp %.1f\n", tag, us);
    if (!cpu_ok) {
        printf("pw.%s.marginal_cpu_us_per_comp skipped\n", tag);   /* a /proc read failed */
        return us;
    }
    printf("pw.%s.marginal_cpu_us_per_comp.atolld %.1f\n", tag, ca);
    printf("pw.%s.marginal_cpu_us_per_comp.workers %.1f\n", tag, cw);
    if (us > 0)
        printf("pw.%s.marginal_cores_busy %.2f\n", tag, (ca + cw) / us);
    return us;
}

/* The chained figure as it states it, on `cpu` workers (the grid
 * above runs `sim` ones): d16 over 4 processes, parallel dispatch, its
 * marginal cost and CPU (chain_marginal). 0 or -1. */
static int run_chain_cpu(void)
{
    enum { DI = 2, PI = 2 };        /* d16 = 4x4, 4 processes */
    hx_cluster_t c;
    hx_client_t cl = {0};
    int rc = -1;
    setenv("ATOLL_BACKEND", "cpu", 1);
    if (start_grid_cluster(&c, PI, 0) == 0 && hx_client_init(&cl, c.url) == 0) {
        rc = 0;
        /* One chain first: the workers' data-plane endpoints are made. */
        if (run_case(&cl, M_CHAINED, DI, N_STEPS, 0, NULL) < 0 ||
            chain_marginal(&c, &cl, DI, "chained_cpu.d16.p4.parallel") < 0)
            rc = -1;
    }
    if (rc != 0)
        hx_cluster_dump_logs(&c, 3000);
    hx_client_cleanup(&cl);
    hx_cluster_stop(&c);
    setenv("ATOLL_BACKEND", "sim", 1);
    return rc;
}

/* ---- bandwidths ---- */

static double memcpy_gbps(void)
{
    size_t bytes = (size_t)EDGE_ELEMS * 4;
    char *a = malloc(bytes), *b = malloc(bytes);
    double best = 0;
    if (a && b) {
        memset(a, 1, bytes);
        memset(b, 2, bytes);
        for (int r = 0; r < 5; r++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            memcpy(b, a, bytes);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
            double gbps = (double)bytes / s / 1e9;
            best = gbps > best ? gbps : best;
            a[r] = (char)b[bytes - 1 - (size_t)r];   /* keep the copies observable */
        }
    }
    free(a);
    free(b);
    return best;
}

/* Runs doc once and returns f(job), or -1. */
static int64_t run_once(hx_client_t *cl, const char *doc, int64_t (*f)(const json_t *))
{
    int64_t id;
    json_t *job = submit(cl, doc, &id) == 0 ? wait_ok(cl, id) : NULL;
    int64_t v = job ? f(job) : -1;
    json_decref(job);
    return v;
}

/* What the op under test costs: PAIRS runs of the baseline job (base_q,
 * measured by fb) each followed at once by the job with the op (op_q, fo),
 * and the median of the pairs' differences (out[1]; out[0], out[2] the
 * smallest and largest), each at least 1 µs. Pairing and the median keep
 * the VM's drift and one slow run out: the difference of two best-of-N
 * figures moved 41 -> 96 % of memcpy between two runs of one tree. 0 or -1. */
static int paired_cost(hx_client_t *cl, const char *base_q, int64_t (*fb)(const json_t *),
                       const char *op_q, int64_t (*fo)(const json_t *), int64_t out[3])
{
    int64_t d[PAIRS];
    char *base = hx_text_q(base_q), *op = hx_text_q(op_q);
    int rc = base && op ? 0 : -1;
    for (int r = 0; rc == 0 && r < PAIRS; r++) {
        int64_t b = run_once(cl, base, fb), o = b < 0 ? -1 : run_once(cl, op, fo);
        if (o < 0)
            rc = -1;
        d[r] = o - b > 1 ? o - b : 1;
    }
    if (rc == 0) {
        qsort(d, PAIRS, sizeof d[0], hx_cmp_i64);
        out[0] = d[0];
        out[1] = d[PAIRS / 2];
        out[2] = d[PAIRS - 1];
    }
    free(base);
    free(op);
    return rc;
}

static int64_t comp0_span(const json_t *job)
{
    return hx_comp_time_us(job, 0, "finished") - hx_comp_time_us(job, 0, "started");
}

/* Edge: consumer's inputs ready minus producer start (paired_cost takes
 * the fill job's span off). */
static int64_t edge_span(const json_t *job)
{
    return hx_comp_time_us(job, 1, "inputs_ready") - hx_comp_time_us(job, 0, "started");
}

static int run_bandwidths(void)
{
    static const char *const islands[] = {"e=2", "ar=2x4"};
    hx_cluster_t c;
    hx_client_t cl = {0};
    int rc = -1;
    if (hx_cluster_start(&c, islands, 2) != 0)
        return -1;
    if (hx_client_init(&cl, c.url) != 0 || hx_worker_start(&c, "e", 1) != 0 ||
        hx_worker_start(&c, "e", 1) != 0)
        goto cleanup;
    for (int w = 0; w < 4; w++)
        if (hx_worker_start(&c, "ar", 2) != 0)
            goto cleanup;
    char fill_q[512], edge_q[1024], ar_q[512], base_q[512];
    snprintf(fill_q, sizeof fill_q,
             "{'name':'fill','slices':{'a':{'shape':[1],'island':'e'}},'computations':["
             "{'name':'a','slice':'a','ops':[{'op':'fill','out':'x','shape':[%d],'value':1.5},"
             "{'op':'fill','out':'y','shape':[],'value':0}],'outputs':['y']}]}", EDGE_ELEMS);
    snprintf(edge_q, sizeof edge_q,
             "{'name':'edge','slices':{'a':{'shape':[1],'island':'e'},'b':{'shape':[1],'island':'e'}},"
             "'computations':[{'name':'a','slice':'a','ops':[{'op':'fill','out':'x','shape':[%d],"
             "'value':1.5}],'outputs':['x']},{'name':'b','slice':'b','ops':[{'op':'input','out':'p',"
             "'from':'a.x'},{'op':'fill','out':'y','shape':[],'value':0}],'outputs':['y']}]}",
             EDGE_ELEMS);
    snprintf(ar_q, sizeof ar_q,
             "{'name':'ar','slices':{'s':{'shape':[2,4],'island':'ar'}},'computations':["
             "{'name':'c','slice':'s','ops':[{'op':'fill','out':'x','shape':[%d],'value':1},"
             "{'op':'all_reduce','out':'z','args':['x'],'reduce':'sum'},"
             "{'op':'fill','out':'y','shape':[],'value':0}],'outputs':['y']}]}", AR_ELEMS);
    snprintf(base_q, sizeof base_q,
             "{'name':'arbase','slices':{'s':{'shape':[2,4],'island':'ar'}},'computations':["
             "{'name':'c','slice':'s','ops':[{'op':'fill','out':'x','shape':[%d],'value':1},"
             "{'op':'fill','out':'y','shape':[],'value':0}],'outputs':['y']}]}", AR_ELEMS);
    int64_t xfer_us[3], ar_cost[3];
    if (paired_cost(&cl, fill_q, comp0_span, edge_q, edge_span, xfer_us) != 0 ||
        paired_cost(&cl, base_q, comp0_span, ar_q, comp0_span, ar_cost) != 0)
        goto cleanup;
    double bytes = (double)EDGE_ELEMS * 4, mc = memcpy_gbps();
    double edge_gbps = bytes / ((double)xfer_us[1] / 1e6) / 1e9;
    printf("edge.bytes %.0f\n", bytes);
    printf("edge.pairs %d\n", PAIRS);
    printf("edge.transfer_us %" PRId64 "\n", xfer_us[1]);
    printf("edge.transfer_us.min %" PRId64 "\nedge.transfer_us.max %" PRId64 "\n", xfer_us[0],
           xfer_us[2]);
    printf("edge.same_host_GBps %.3f\n", edge_gbps);
    printf("memcpy.GBps %.3f\n", mc);
    printf("edge.fraction_of_memcpy %.3f\n", mc > 0 ? edge_gbps / mc : 0);
    int64_t t_ar = ar_cost[1];
    double n = 8, arbytes = (double)AR_ELEMS * 4;
    printf("allreduce.shards 8\nallreduce.processes 4\nallreduce.bytes_per_shard %.0f\n", arbytes);
    printf("allreduce.us %" PRId64 "\n", t_ar);
    printf("allreduce.algbw_GBps %.3f\n", arbytes / ((double)t_ar / 1e6) / 1e9);
    printf("allreduce.busbw_GBps %.3f\n",
           2.0 * (n - 1) / n * arbytes / ((double)t_ar / 1e6) / 1e9);
    fflush(stdout);
    rc = 0;
cleanup:
    if (rc != 0)
        hx_cluster_dump_logs(&c, 3000);
    hx_client_cleanup(&cl);
    hx_cluster_stop(&c);
    return rc;
}

/* ---- main ---- */

/* Runs the grid for one P under one dispatch mode. 0 or -1. */
static int run_grid_p(int pi, int seq)
{
    hx_cluster_t c;
    hx_client_t cl = {0};
    int rc = -1;
    if (start_grid_cluster(&c, pi, seq) != 0 || hx_client_init(&cl, c.url) != 0)
        goto cleanup;
    for (int di = 0; di < ND; di++) {
        if (grid_d[di] < grid_p[pi])
            continue;
        for (int m = 0; m < M__N; m++) {
            char tag[64];
            snprintf(tag, sizeof tag, "%s.d%d.p%d.%s", mode_names[m], grid_d[di], grid_p[pi],
                     seq ? "sequential" : "parallel");
            if (over_budget()) {
                printf("pw.skipped %s\n", tag);
                continue;
            }
            int want_profile = m == M_CHAINED && grid_d[di] == 16 && grid_p[pi] == 4;
            if (only_util && !want_profile)
                continue;
            json_t *job = NULL;
            double r = run_case(&cl, m, di, N_STEPS, 0, want_profile ? &job : NULL);
            if (r < 0)
                goto cleanup;
            results[seq][m][di][pi] = r;
            printf("pw.%s.comps_per_s %.1f\n", tag, r);
            if (job) {
                printf("pw.%s.us_per_comp %.1f\n", tag, 1e6 / r);
                profile_chained(tag, job, N_STEPS);
                json_decref(job);
                marginal[seq] = chain_marginal(&c, &cl, di, tag);
                if (!seq) {
                    sweep_utilization(&cl, di);
                    chain_length(&c, &cl, di);
                }
            }
            fflush(stdout);
        }
    }
    rc = 0;
cleanup:
    if (rc != 0)
        hx_cluster_dump_logs(&c, 3000);
    hx_client_cleanup(&cl);
    hx_cluster_stop(&c);
    return rc;
}

/* Optional argument: "grid" or "bandwidth" runs that section alone. */
int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : "";
    if (*only && strcmp(only, "grid") != 0 && strcmp(only, "bandwidth") != 0 &&
        strcmp(only, "util") != 0) {
        fprintf(stderr, "usage: %s [grid|bandwidth|util]\n", argv[0]);
        return 2;
    }
    only_util = strcmp(only, "util") == 0;
    if (hx_init() != 0)
        return 1;
    bench_t0 = hx_now_ms();
    setenv("ATOLL_BACKEND", "sim", 1);    /* inherited by the workers */
    printf("bench.backend sim\nbench.chain_steps %d\nbench.opbyop_jobs %d\n", N_STEPS,
           OPBYOP_JOBS);
    fflush(stdout);
    int rc = 0;
    for (int seq = 0; seq < 2 && rc == 0 && strcmp(only, "bandwidth") != 0; seq++)
        for (int pi = 0; pi < NP && rc == 0; pi++)
            if (!only_util || grid_p[pi] == 4)
                rc = run_grid_p(pi, seq);
    for (int m = 0; m < M__N; m++)
        for (int di = 0; di < ND; di++)
            for (int pi = 0; pi < NP; pi++)
                if (results[0][m][di][pi] > 0 && results[1][m][di][pi] > 0)
                    printf("pw.%s.d%d.p%d.parallel_over_sequential %.2f\n", mode_names[m],
                           grid_d[di], grid_p[pi],
                           results[0][m][di][pi] / results[1][m][di][pi]);
    if (marginal[0] > 0 && marginal[1] > 0)
        printf("pw.chained.d16.p4.marginal.parallel_over_sequential %.2f\n",
               marginal[1] / marginal[0]);
    if (rc == 0 && (!*only || only_util) && !over_budget())
        rc = run_chain_cpu();
    unsetenv("ATOLL_BACKEND");
    if (rc == 0 && strcmp(only, "grid") != 0 && !only_util && run_bandwidths() != 0)
        rc = 1;
    printf("bench.wall_s %.1f\n", (double)(hx_now_ms() - bench_t0) / 1000.0);
    return rc ? 1 : 0;
}
