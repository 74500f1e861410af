/* bench_passes.c - the scheduler's passes on a 2,048-device island, with
 * nothing else on the machine (issue 9: "scheduler pass p99 < 1 ms").
 *
 *   bench_passes [JOBS [PRIORITY]]      (defaults 1000, 0)
 *
 * Runs the atolld of $ATOLL_BIN_DIR (default build/bin) with island
 * big=32x64 and no worker process: this bench plays 512 workers of 4
 * devices over HTTP (registration, polls, batch reports; like
 * bench_reports), so what the pass histogram shows is the controller's own
 * work at that size. bench_scale runs the same island with 512 real
 * processes, whose wake-ups on 2 cores stretch every pass.
 * JOBS jobs (fill + all_reduce) cycling through slice sizes 1, 2, 4, ...,
 * 2,048 devices are submitted back to back; the bench follows the
 * allocated ones (GET /v1/jobs?state=allocated, then running), polls the workers that
 * hold their devices and reports each of their host tasks succeeded, until
 * every job has succeeded. Prints, as `name value` lines: the passes during
 * registration and during the jobs (count, mean, and the histogram buckets
 * that hold the 50th and 99th percentiles, from atoll_scheduler_pass_seconds
 * in /metrics; the same of their CPU time as *.cpu.*, from
 * atoll_scheduler_pass_cpu_seconds), the store's write lock during the
 * jobs (jobs.write_lock_wait.* and _hold.*: count, mean, p99 bucket, over 1
 * ms; when atolld exposes them), the jobs' rate, and the share of the
 * jobs' passes that took at most 1 ms (jobs.passes_le_1ms_share, and
 * .cpu.). With PRIORITY > 0 the whole run is repeated on a fresh atolld
 * started with --sched-priority PRIORITY (its scheduler thread SCHED_FIFO;
 * needs CAP_SYS_NICE, `rt.sched_priority` says whether it took), its
 * figures prefixed `rt.`, and rt_over_plain.jobs.passes_le_1ms_share
 * compares the two: the passes' wall time less the preemptions by the
 * controller's other threads and this bench. Exits 1 when a request or a
 * job fails.
 * To compare two builds, run it against each (ATOLL_BIN_DIR). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_harness.h"

#define WORKERS 512
#define DEVS 4
#define ROWS_LOG 5                  /* big = 32 x 64 */
#define COLS_LOG 6
#define DEADLINE_MS (10 * 60 * 1000)
#define NBUCKETS 15

/* atoll_scheduler_pass_seconds' bucket bounds as /metrics prints them. */
static const char *const bucket_le[NBUCKETS] = {
    "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01",
    "0.025", "0.05", "0.1", "0.25", "0.5", "1", "+Inf"};

typedef struct one_hist {
    double bucket[NBUCKETS];        /* cumulative, as exposed */
    double sum;
} one_hist_t;

/* The passes' wall time (atoll_scheduler_pass_seconds) and CPU time
 * (atoll_scheduler_pass_cpu_seconds): on 2 cores shared with this bench's
 * players a pass often waits for a CPU. */
typedef struct hist {
    one_hist_t wall, cpu;
} hist_t;

typedef struct played {
    int64_t id;
    int64_t ack;
    char hdr[160];                  /* X-Atoll-Worker-Secret: ... */
} played_t;

static played_t workers[WORKERS];
/* got_tasks[w * njobs + (job - first_job)]: worker w received a task of
 * that job (one poll answer may bring several jobs' tasks). */
static char *got_tasks;
static int64_t first_job;
static int njobs;

static char *got(int w, int64_t job)
{
    static char none;
    int64_t k = job - first_job;
    return k >= 0 && k < njobs ? &got_tasks[(size_t)w * (size_t)njobs + (size_t)k] : &none;
}

static int one_read(hx_client_t *cl, const char *family, one_hist_t *h)
{
    char name[96];
    for (int b = 0; b < NBUCKETS; b++) {
        snprintf(name, sizeof name, "%s_bucket{le=\"%s\"}", family, bucket_le[b]);
        if ((h->bucket[b] = hx_metric(cl, name)) < 0)
            return -1;
    }
    snprintf(name, sizeof name, "%s_sum", family);
    h->sum = hx_metric(cl, name);
    return h->sum < 0 ? -1 : 0;
}

static int hist_read(hx_client_t *cl, hist_t *h)
{
    return one_read(cl, "atoll_scheduler_pass_seconds", &h->wall) != 0 ||
                   one_read(cl, "atoll_scheduler_pass_cpu_seconds", &h->cpu) != 0
               ? -1 : 0;
}

/* The passes between two readings: count, mean, p50 and p99 buckets. */
static void one_print(const char *tag, const one_hist_t *a, const one_hist_t *b)
{
    double n = b->bucket[NBUCKETS - 1] - a->bucket[NBUCKETS - 1];
    printf("%s.passes %.0f\n", tag, n);
    if (n <= 0)
        return;
    printf("%s.pass_mean_us %.0f\n", tag, (b->sum - a->sum) * 1e6 / n);
    static const double q[] = {0.5, 0.99};
    static const char *const qn[] = {"p50", "p99"};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < NBUCKETS; i++)
            if (b->bucket[i] - a->bucket[i] >= q[k] * n) {
                printf("%s.pass_%s_le_s %s\n", tag, qn[k], bucket_le[i]);
                break;
            }
    for (int i = 0; i < NBUCKETS; i++)
        printf("%s.passes_le_%s %.0f\n", tag, bucket_le[i], b->bucket[i] - a->bucket[i]);
}

/* Wall time as `tag.*`, CPU time as `tag.cpu.*`. */
static void hist_print(const char *tag, const hist_t *a, const hist_t *b)
{
    char cpu[32];
    one_print(tag, &a->wall, &b->wall);
    snprintf(cpu, sizeof cpu, "%s.cpu", tag);
    one_print(cpu, &a->cpu, &b->cpu);
}

/* The store's write-lock histograms (atoll_store_write_lock_wait_seconds,
 * _hold_seconds) as /metrics prints their buckets: the passes' wall time
 * includes waits for the lock, and a long holder delays every writer. */
#define LOCK_NBUCKETS 13
static const char *const lock_le[LOCK_NBUCKETS] = {
    "1e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01",
    "0.025", "0.1", "1", "+Inf"};
#define LOCK_LE_1MS 5                   /* lock_le[LOCK_LE_1MS] is "0.001" */

typedef struct lock_hists {
    double bucket[2][LOCK_NBUCKETS];    /* wait, hold; cumulative */
    double sum[2];
    int ok;                             /* atolld exposes them (older builds do not) */
} lock_hists_t;

static void lock_read(hx_client_t *cl, lock_hists_t *h)
{
    static const char *const fam[2] = {"atoll_store_write_lock_wait_seconds",
                                       "atoll_store_write_lock_hold_seconds"};
    char name[96];
    h->ok = 1;
    for (int f = 0; f < 2 && h->ok; f++) {
        for (int b = 0; b < LOCK_NBUCKETS; b++) {
            snprintf(name, sizeof name, "%s_bucket{le=\"%s\"}", fam[f], lock_le[b]);
            h->ok &= (h->bucket[f][b] = hx_metric(cl, name)) >= 0;
        }
        snprintf(name, sizeof name, "%s_sum", fam[f]);
        h->ok &= (h->sum[f] = hx_metric(cl, name)) >= 0;
    }
}

/* Between two readings, for waits and holds: count, mean, the p99 bucket
 * and how many took over 1 ms. */
static void lock_print(const char *tag, const lock_hists_t *a, const lock_hists_t *b)
{
    static const char *const what[2] = {"wait", "hold"};
    if (!a->ok || !b->ok)
        return;
    for (int f = 0; f < 2; f++) {
        double n = b->bucket[f][LOCK_NBUCKETS - 1] - a->bucket[f][LOCK_NBUCKETS - 1];
        if (n <= 0)
            continue;
        printf("%s.write_lock_%s.count %.0f\n", tag, what[f], n);
        printf("%s.write_lock_%s.mean_us %.0f\n", tag, what[f], (b->sum[f] - a->sum[f]) * 1e6 / n);
        for (int i = 0; i < LOCK_NBUCKETS; i++)
            if (b->bucket[f][i] - a->bucket[f][i] >= 0.99 * n) {
                printf("%s.write_lock_%s.p99_le_s %s\n", tag, what[f], lock_le[i]);
                break;
            }
        printf("%s.write_lock_%s.over_1ms %.0f\n", tag, what[f],
               n - (b->bucket[f][LOCK_LE_1MS] - a->bucket[f][LOCK_LE_1MS]));
    }
}

static int play_register(hx_client_t *cl, int i)
{
    char body[160];
    snprintf(body, sizeof body, "{\"island\":\"big\",\"devices\":%d,\"data_addr\":"
             "\"127.0.0.1:%d\"}", DEVS, 20000 + i);
    hx_resp_t r;
    int ok = hx_request(cl, "POST", "/v1/workers", body, strlen(body), &r) == 0 &&
             r.status == 201;
    const char *secret = ok ? json_string_value(json_object_get(r.json, "secret")) : NULL;
    json_t *devs = ok ? json_object_get(r.json, "devices") : NULL;
    /* Blocks are given lowest first: worker i holds devices 4i..4i+3. */
    ok = secret && json_integer_value(json_object_get(json_array_get(devs, 0), "index")) ==
                   (json_int_t)i * DEVS;
    if (ok) {
        workers[i].id = json_integer_value(json_object_get(r.json, "id"));
        snprintf(workers[i].hdr, sizeof workers[i].hdr, "X-Atoll-Worker-Secret: %s", secret);
    }
    hx_resp_clear(&r);
    return ok ? 0 : -1;
}

/* Appends the report of one host task (every shard: output z, 4 zeros). */
static int report_add(char **body, size_t *len, size_t *cap, int64_t task, int64_t comp,
                      size_t nshards)
{
    size_t need = 160 + nshards * 64;
    if (*len + need > *cap) {
        size_t ncap = (*len + need) * 2;
        char *p = realloc(*body, ncap);
        if (!p)
            return -1;
        *body = p;
        *cap = ncap;
    }
    *len += (size_t)snprintf(*body + *len, *cap - *len,
                             "%s{\"task\":%" PRId64 ",\"comp\":%" PRId64 ",\"state\":"
                             "\"succeeded\",\"started_us\":1,\"inputs_ready_us\":2,"
                             "\"finished_us\":3,\"outputs\":{\"z\":[",
                             *len > 12 ? "," : "", task, comp);
    for (size_t s = 0; s < nshards; s++)
        *len += (size_t)snprintf(*body + *len, *cap - *len, "%s{\"shape\":[4],\"sum\":0,"
                                 "\"values_f32\":\"AAAAAAAAAAAAAAAAAAAAAA==\"}", s ? "," : "");
    *len += (size_t)snprintf(*body + *len, *cap - *len, "]}}");
    return 0;
}

/* Polls worker w until an answer holds a task of `job`, reporting every
 * task each answer brings (other jobs' too: they are as real). 0 or -1. */
static int play_worker(hx_client_t *cl, int w, int64_t job)
{
    played_t *p = &workers[w];
    const char *hdrs[] = {p->hdr, NULL};
    int64_t deadline = hx_now_ms() + 60000;
    while (!*got(w, job) && hx_now_ms() < deadline) {
        char path[128];
        snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=1000&ack=%" PRId64,
                 p->id, p->ack);
        hx_resp_t r;
        if (hx_request_h(cl, "GET", path, NULL, 0, hdrs, &r) != 0 || r.status != 200) {
            hx_resp_clear(&r);
            return -1;
        }
        p->ack = json_integer_value(json_object_get(r.json, "lease"));
        size_t cap = 4096, len = 0;
        char *body = malloc(cap);
        int rc = body ? 0 : -1;
        size_t i, k;
        json_t *g, *t;
        if (body)
            len = (size_t)snprintf(body, cap, "{\"reports\":[");
        json_array_foreach(json_object_get(r.json, "jobs"), i, g) {
            *got(w, json_integer_value(json_object_get(g, "job"))) = 1;
            json_array_foreach(json_object_get(g, "tasks"), k, t)
                rc |= report_add(&body, &len, &cap, json_integer_value(json_object_get(t, "task")),
                                 json_integer_value(json_object_get(t, "comp")),
                                 json_array_size(json_object_get(t, "shards")));
        }
        hx_resp_clear(&r);
        if (rc == 0 && len > 12) {
            snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/reports", p->id);
            len += (size_t)snprintf(body + len, cap - len, "]}");
            rc = hx_request_h(cl, "POST", path, body, len, hdrs, &r) != 0 || r.status != 200;
            hx_resp_clear(&r);
        }
        free(body);
        if (rc != 0)
            return -1;
    }
    return *got(w, job) ? 0 : -1;
}

/* Plays every worker holding a device of allocated job `id`. 0 or -1. */
static int play_job(hx_client_t *cl, int64_t id)
{
    json_t *job = hx_job_get(cl, id);
    json_t *devs = json_object_get(json_object_get(json_object_get(job, "slices"), "s"),
                                   "devices");
    static char held[WORKERS];
    memset(held, 0, sizeof held);
    size_t i;
    json_t *d;
    json_array_foreach(devs, i, d) {
        json_int_t idx = json_is_integer(d) ? json_integer_value(d)
                                            : json_integer_value(json_object_get(d, "index"));
        if (idx >= 0 && idx < WORKERS * DEVS)
            held[idx / DEVS] = 1;
    }
    int rc = json_array_size(devs) > 0 ? 0 : -1;
    if (rc != 0)
        fprintf(stderr, "bench: job %" PRId64 " shows no devices\n", id);
    json_decref(job);
    for (int w = 0; rc == 0 && w < WORKERS; w++)
        if (held[w])
            rc = play_worker(cl, w, id);
    return rc;
}

/* Plays the jobs of one page of GET /v1/jobs?state=STATE not played yet
 * (ids[0] ... ids[n-1], increasing). The number played, or -1. */
static int play_page(hx_client_t *cl, const char *state, const int64_t *ids, int n, char *played)
{
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs?state=%s&limit=100", state);
    hx_resp_t r;
    if (hx_request(cl, "GET", path, NULL, 0, &r) != 0 || r.status != 200) {
        hx_resp_clear(&r);
        return -1;
    }
    size_t i;
    json_t *j;
    int fresh = 0;
    json_array_foreach(json_object_get(r.json, "jobs"), i, j) {
        int64_t id = json_integer_value(json_object_get(j, "id"));
        int k = (int)(id - ids[0]);
        if (k < 0 || k >= n || played[k])
            continue;
        if (play_job(cl, id) != 0) {
            fresh = -1;
            break;
        }
        played[k] = 1;
        fresh++;
    }
    hx_resp_clear(&r);
    return fresh;
}

/* Whether a job of the bench is still queued, allocated or running (one
 * poll answer may bring tasks of jobs not played yet: those end without
 * being listed here). 1, 0, or -1. */
static int jobs_left(hx_client_t *cl)
{
    static const char *const states[] = {"queued", "allocated", "running"};
    for (int i = 0; i < 3; i++) {
        char path[64];
        snprintf(path, sizeof path, "/v1/jobs?state=%s&limit=1", states[i]);
        hx_resp_t r;
        int st = hx_request(cl, "GET", path, NULL, 0, &r) == 0 && r.status == 200;
        size_t n = json_array_size(json_object_get(r.json, "jobs"));
        hx_resp_clear(&r);
        if (!st)
            return -1;
        if (n > 0)
            return 1;
    }
    return 0;
}

/* Plays allocated and running jobs until none is left. 0 or -1. */
static int play_jobs(hx_client_t *cl, const int64_t *ids, int n)
{
    char *played = calloc((size_t)n, 1);
    int done = 0, left = 1;
    int64_t deadline = hx_now_ms() + DEADLINE_MS;
    while (played && left > 0 && hx_now_ms() < deadline) {
        int a = play_page(cl, "allocated", ids, n, played);
        int b = a < 0 ? -1 : play_page(cl, "running", ids, n, played);
        if (a < 0 || b < 0)
            break;
        if ((done + a + b) / 100 > done / 100)
            fprintf(stderr, "bench: %d of %d jobs played\n", done + a + b, n);
        done += a + b;
        if (a + b == 0 && (left = jobs_left(cl)) > 0)
            hx_sleep_ms(1);
    }
    free(played);
    if (left != 0)
        fprintf(stderr, "bench: jobs left after %d of %d played\n", done, n);
    return left == 0 ? 0 : -1;
}

/* Share of the passes between two readings of one histogram that took at
 * most 1 ms (bucket_le[PASS_LE_1MS]); -1 when there were none. */
#define PASS_LE_1MS 4                   /* bucket_le[PASS_LE_1MS] is "0.001" */
static double share_le_1ms(const one_hist_t *a, const one_hist_t *b)
{
    double n = b->bucket[NBUCKETS - 1] - a->bucket[NBUCKETS - 1];
    return n > 0 ? (b->bucket[PASS_LE_1MS] - a->bucket[PASS_LE_1MS]) / n : -1;
}

/* What one cluster's jobs phase measured, for the comparison lines. */
typedef struct outcome {
    double wall_le_1ms, cpu_le_1ms;     /* shares of the passes */
} outcome_t;

/* One whole run on a fresh atolld: register the played workers, submit
 * and play the jobs, print the figures under `tag` ("" or "rt.") and fill
 * *out. `priority` > 0 starts atolld with --sched-priority. 0 or 1. */
static int run_cluster(const char *tag, int priority, outcome_t *out)
{
    static const char *const islands[] = {"big=32x64"};
    char prio[16], t_reg[32], t_jobs[32];
    snprintf(prio, sizeof prio, "%d", priority);
    snprintf(t_reg, sizeof t_reg, "%sregister", tag);
    snprintf(t_jobs, sizeof t_jobs, "%sjobs", tag);
    /* Without the flag when 0: an older atolld (ATOLL_BIN_DIR) lacks it. */
    const char *const extra[] = {"--lease-ms", "600000", priority > 0 ? "--sched-priority" : NULL,
                                 prio, NULL};
    hx_cluster_t c;
    hx_client_t cl;
    hist_t h0, h1, h2;
    lock_hists_t l1, l2;
    int64_t *ids = calloc((size_t)njobs, sizeof *ids);
    memset(workers, 0, sizeof workers);
    memset(got_tasks, 0, (size_t)njobs * WORKERS);
    if (!ids || hx_cluster_start_args(&c, islands, 1, extra) != 0) {
        free(ids);
        return 1;
    }
    int rc = hx_client_init(&cl, c.url) != 0 || hist_read(&cl, &h0) != 0;
    for (int i = 0; !rc && i < WORKERS; i++)
        rc = play_register(&cl, i);
    rc = rc || hist_read(&cl, &h1) != 0;
    if (rc) {
        fprintf(stderr, "bench: registration failed\n");
        goto out;
    }
    printf("%sisland big=32x64 devices %d played_workers %d\n", tag, WORKERS * DEVS, WORKERS);
    printf("%ssched_priority %.0f\n", tag, hx_metric(&cl, "atoll_scheduler_rt_priority"));
    hist_print(t_reg, &h0, &h1);
    lock_read(&cl, &l1);
    int64_t t0 = hx_now_ms();
    for (int j = 0; !rc && j < njobs; j++) {
        int sz = j % (ROWS_LOG + COLS_LOG + 1), rows = 1 << (sz / 2 < ROWS_LOG ? sz / 2 : ROWS_LOG);
        int cols = (1 << sz) / rows;
        char doc[512];
        snprintf(doc, sizeof doc,
                 "{\"name\":\"p%d\",\"slices\":{\"s\":{\"shape\":[%d,%d]}},\"computations\":"
                 "[{\"name\":\"c\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\","
                 "\"shape\":[4],\"value\":1},{\"op\":\"all_reduce\",\"out\":\"z\",\"args\":"
                 "[\"x\"],\"reduce\":\"sum\"}],\"outputs\":[\"z\"]}]}", j, rows, cols);
        rc = hx_job_submit(&cl, doc, &ids[j], NULL) != 201;
    }
    first_job = ids[0];
    rc = rc || play_jobs(&cl, ids, njobs) != 0;
    for (int j = 0; !rc && j < njobs; j++) {
        json_t *job = NULL;
        rc = hx_job_wait(&cl, ids[j], 60000, 5, &job) != 0 ||
             strcmp(hx_job_state(job), "succeeded") != 0;
        if (rc)
            fprintf(stderr, "bench: job %" PRId64 " is %s\n", ids[j], hx_job_state(job));
        json_decref(job);
    }
    int64_t ms = hx_now_ms() - t0;
    rc = rc || hist_read(&cl, &h2) != 0;
    lock_read(&cl, &l2);
    if (!rc) {
        printf("%sjobs %d\n%sjobs_slice_sizes 1..%d\n%sjobs_per_s %.1f\n", tag, njobs, tag,
               WORKERS * DEVS, tag, njobs * 1000.0 / (double)(ms > 0 ? ms : 1));
        hist_print(t_jobs, &h1, &h2);
        lock_print(t_jobs, &l1, &l2);
        printf("%sjobs.rt_rests %.0f\n", tag, hx_metric(&cl, "atoll_scheduler_rt_rests_total"));
        printf("%satolld_rss_mib %.1f\n", tag, (double)hx_rss_kb(c.atolld.pid) / 1024.0);
        *out = (outcome_t){share_le_1ms(&h1.wall, &h2.wall), share_le_1ms(&h1.cpu, &h2.cpu)};
        printf("%sjobs.passes_le_1ms_share %.4f\n%sjobs.cpu.passes_le_1ms_share %.4f\n", tag,
               out->wall_le_1ms, tag, out->cpu_le_1ms);
    }
out:
    if (rc)
        hx_cluster_dump_logs(&c, 3000);
    hx_client_cleanup(&cl);
    hx_cluster_stop(&c);
    free(ids);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    njobs = argc > 1 ? atoi(argv[1]) : 1000;
    int priority = argc > 2 ? atoi(argv[2]) : 0;
    if (njobs < 1 || njobs > 100000 || priority < 0 || priority > 99) {
        fprintf(stderr, "usage: bench_passes [JOBS (1..100000) [PRIORITY (0..99)]]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    got_tasks = calloc((size_t)njobs * WORKERS, 1);
    if (!got_tasks || hx_init() != 0)
        return 1;
    outcome_t plain = {-1, -1}, rt = {-1, -1};
    int rc = run_cluster("", 0, &plain);
    if (rc == 0 && priority > 0) {
        rc = run_cluster("rt.", priority, &rt);
        /* The same jobs with the scheduler thread real-time: how much of the
         * gap between wall and CPU time was preemption. */
        if (rc == 0 && plain.wall_le_1ms > 0)
            printf("rt_over_plain.jobs.passes_le_1ms_share %.3f\n",
                   rt.wall_le_1ms / plain.wall_le_1ms);
    }
    free(got_tasks);
    return rc;
}
