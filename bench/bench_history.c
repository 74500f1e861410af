/* bench_history.c - what a long history costs a running controller.
 *
 * By default atolld keeps every job it ever ran (--keep-jobs-s 0), so
 * whatever it counts every second, or on every scrape, must not read them
 * all. This makes a store (atolld started once and stopped), writes JOBS
 * ended jobs straight into its SQLite file (one transaction, as a long run
 * of tiny jobs would have left them: 90 % succeeded, 5 % failed, 5 %
 * cancelled, allocated 0-5 ms after submission; submitting a million jobs
 * through the API would take the bench a quarter of an hour; atolld owns
 * its file while it runs), starts atolld on it again with one worker of 4
 * devices (island w=2x2) and runs one real job, then measures:
 *   history.jobs                   ended jobs written
 *   history.start_ms               atolld's start on that store, to its
 *                                  ready line
 *   history.idle_cpu_pct           atolld's CPU over SECONDS with nothing
 *                                  submitted (percent of one core)
 *   history.sampler_cpu_ms_per_s   of which the sampler thread's (the
 *                                  dashboard's watch and the utilization
 *                                  sample: every second)
 *   history.metrics_ms             GET /metrics, the median of 11
 *   history.queue_page_ms          GET /v1/jobs?state=queued&limit=500 (what
 *                                  the dashboard asks on every refresh),
 *                                  the median of 11
 *   history.jobs_per_s.serial_1dev tiny 1-device jobs, one client, each
 *                                  waited to success, for 3 s
 *   history.job_p50_ms, job_p99_ms, job_max_ms
 *                                  a loop job's submission to success
 * Then retention is turned on for that history (atolld restarted with
 * ATOLL_KEEP_JOBS_S=1, a fresh worker), as an operator would on an old
 * store, and the same loop runs while the sampler deletes it:
 *   history.drain_s                until atoll_jobs_pruned_total counts
 *                                  every seeded job
 *   history.drain_jobs_per_s       jobs deleted a second
 *   history.drain.jobs_per_s.serial_1dev   the loop meanwhile
 *   history.drain.job_p50_ms, job_p99_ms, job_max_ms    the same
 * (the seeded jobs own no rows in other tables, so a real history's
 * deletes cost more a job: bench_retain measures those).
 * Compare two builds on the same history with bench/ab.sh, e.g.
 *   bench/ab.sh rev:HEAD~1 build/bin 3 bench_history 1000000
 *
 *   bench_history [JOBS [SECONDS]]     (default 1000000 and 10) */
#include <inttypes.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support_faults.h"
#include "support_harness.h"

#define BENCH_SCRAPES 11
#define BENCH_LOOP_MS 3000
#define BENCH_DRAIN_MAX_MS 600000
#define BENCH_LAT_MAX 200000

static const char one_doc_q[] =
    "{'name':'one','slices':{'s':{'shape':[1]}},'computations':[{'name':'c','slice':'s',"
    "'ops':[{'op':'fill','out':'x','shape':[1],'value':1.0},"
    "{'op':'all_reduce','out':'z','args':['x'],'reduce':'sum'}],'outputs':['z']}]}";

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The tiny-job loops' latencies: one buffer, reused by each loop in turn
 * (lat_reset); past BENCH_LAT_MAX jobs only the count grows. */
static int64_t lat_us[BENCH_LAT_MAX];
static long lat_n;

static void lat_reset(void) { lat_n = 0; }

/* Runs doc to success and records its submission-to-success time: 0, or
 * -1 (said on stderr). */
static int run_one(hx_client_t *cl, const char *doc)
{
    int64_t t0 = now_us();
    if (hx_job_run(cl, doc, 20000, 2) != 0)
        return -1;
    if (lat_n < BENCH_LAT_MAX)
        lat_us[lat_n] = now_us() - t0;
    lat_n++;
    return 0;
}

/* Writes n ended jobs into the store at db_path in one transaction. Their
 * created_at are in the past (before the real job's), so they sort as old
 * history. 0 or -1. */
static int seed_history(const char *db_path, long n)
{
    static const char sql[] =
        "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)"
        " INSERT INTO jobs (name, state, priority, max_retries, comps_total, comps_done,"
        " created_at, allocated_at, started_at, finished_at)"
        " SELECT 'history', CASE WHEN i % 20 = 0 THEN 'failed' WHEN i % 20 = 1 THEN 'cancelled'"
        " ELSE 'succeeded' END, 0, 0, 1, 1, ?2 + i * 1000, ?2 + i * 1000 + (i * 7919) % 5000,"
        " ?2 + i * 1000 + 5000, ?2 + i * 1000 + 6000 FROM k";
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    int rc = -1;
    if (sqlite3_open(db_path, &db) != SQLITE_OK)
        goto cleanup;
    sqlite3_busy_timeout(db, 30000);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK)
        goto cleanup;
    sqlite3_bind_int64(s, 1, n);
    sqlite3_bind_int64(s, 2, (int64_t)1700000000 * 1000000);    /* 2023-11: long ago */
    if (sqlite3_step(s) != SQLITE_DONE || sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        goto cleanup;
    rc = 0;
cleanup:
    if (rc != 0)
        fprintf(stderr, "bench: seeding the history: %s\n", db ? sqlite3_errmsg(db) : "no memory");
    sqlite3_finalize(s);
    sqlite3_close(db);
    return rc;
}

/* Prints PREFIX.job_p50_ms, _p99_ms and _max_ms of the loop's recorded
 * latencies (sorting them). */
static void print_latencies(const char *prefix)
{
    size_t n = lat_n < BENCH_LAT_MAX ? (size_t)lat_n : BENCH_LAT_MAX;
    if (n == 0)
        return;
    qsort(lat_us, n, sizeof lat_us[0], hx_cmp_i64);
    printf("%s.job_p50_ms %.2f\n%s.job_p99_ms %.2f\n%s.job_max_ms %.2f\n", prefix,
           (double)lat_us[n / 2] / 1000.0, prefix, (double)lat_us[n * 99 / 100] / 1000.0,
           prefix, (double)lat_us[n - 1] / 1000.0);
}

/* The drain phase: atolld on the same store with retention on, a fresh
 * worker, and tiny jobs one by one until the seeded history is deleted.
 * atolld must be stopped on entry; on return *atolld and *worker may run
 * (the caller stops them). 0 or -1. */
static int drain_history(hx_proc_t *atolld, hx_proc_t *worker, const char *dir, long njobs,
                         const char *doc)
{
    static const char *const islands[] = {"w=2x2"};
    char url[128];
    int port = 0, rc = -1;
    hx_client_t cl = {0};
    if (setenv("ATOLL_KEEP_JOBS_S", "1", 1) != 0)
        return -1;
    int64_t t0 = now_us();
    int start_rc = fx_atolld_start(atolld, dir, "atolld-drain", 0, 5000, islands, 1, url,
                                   sizeof url, &port);
    unsetenv("ATOLL_KEEP_JOBS_S");
    if (start_rc != 0 || hx_client_init(&cl, url) != 0 ||
        fx_worker_start(worker, dir, "worker-drain", url, "w", 4, 15000) != 0)
        goto cleanup;
    double pruned = 0;
    int64_t deadline = t0 + (int64_t)BENCH_DRAIN_MAX_MS * 1000, t_end = 0, loop0 = now_us(),
            last_look = 0;
    lat_reset();
    while (now_us() < deadline) {
        if (run_one(&cl, doc) != 0)
            goto cleanup;
        if (now_us() - last_look < 100000)
            continue;       /* looked at /metrics less than 100 ms ago */
        last_look = now_us();
        if ((pruned = hx_metric(&cl, "atoll_jobs_pruned_total")) >= (double)njobs) {
            t_end = now_us();
            break;
        }
    }
    if (t_end == 0) {
        fprintf(stderr, "bench: the history was not deleted in %d s (%.0f of %ld)\n",
                BENCH_DRAIN_MAX_MS / 1000, pruned, njobs);
        goto cleanup;
    }
    double secs = (double)(t_end - t0) / 1e6;
    printf("history.drain_s %.1f\nhistory.drain_jobs_per_s %.0f\n"
           "history.drain.jobs_per_s.serial_1dev %.1f\n",
           secs, (double)njobs / secs, (double)lat_n * 1e6 / (double)(t_end - loop0));
    print_latencies("history.drain");
    rc = 0;
cleanup:
    hx_client_cleanup(&cl);
    return rc;
}

/* GET path BENCH_SCRAPES times; the median in ms, or -1. */
static double get_median_ms(hx_client_t *cl, const char *path)
{
    int64_t us[BENCH_SCRAPES];
    for (int i = 0; i < BENCH_SCRAPES; i++) {
        hx_resp_t r;
        int64_t t0 = now_us();
        int st = hx_request(cl, "GET", path, NULL, 0, &r) == 0 ? r.status : -1;
        us[i] = now_us() - t0;
        if (st == 200)
            hx_resp_clear(&r);
        else
            return -1;
    }
    qsort(us, BENCH_SCRAPES, sizeof us[0], hx_cmp_i64);
    return (double)us[BENCH_SCRAPES / 2] / 1000.0;
}

int main(int argc, char **argv)
{
    long njobs = argc > 1 ? atol(argv[1]) : 1000000;
    int seconds = argc > 2 ? atoi(argv[2]) : 10;
    if (njobs < 0 || njobs > 100000000 || seconds < 1 || seconds > 600) {
        fprintf(stderr, "usage: bench_history [JOBS (0..1e8) [SECONDS (1..600)]]\n");
        return 2;
    }
    static const char *const islands[] = {"w=2x2"};
    static hx_proc_t atolld, worker;
    hx_client_t cl = {0};
    char dir[64] = "/tmp/atoll-bench-XXXXXX", db_path[96], url[128];
    char *doc = NULL;
    int rc = 1, port = 0;
    if (hx_init() != 0 || !mkdtemp(dir))
        return 1;
    snprintf(db_path, sizeof db_path, "%s/atoll.db", dir);
    if (fx_atolld_start(&atolld, dir, "atolld", 0, 5000, islands, 1, url, sizeof url,
                        &port) != 0 || !fx_term(&atolld, 10000))
        goto cleanup;
    int64_t t0 = hx_now_ms();
    if (seed_history(db_path, njobs) != 0)
        goto cleanup;
    printf("history.jobs %ld\nhistory.seed_s %.1f\n", njobs,
           (double)(hx_now_ms() - t0) / 1000.0);
    t0 = now_us();
    if (fx_atolld_start(&atolld, dir, "atolld", 0, 5000, islands, 1, url, sizeof url,
                        &port) != 0)
        goto cleanup;
    printf("history.start_ms %.1f\n", (double)(now_us() - t0) / 1000.0);
    fflush(stdout);
    if (!(doc = hx_text_q(one_doc_q)) || hx_client_init(&cl, url) != 0 ||
        fx_worker_start(&worker, dir, "worker", url, "w", 4, 15000) != 0 ||
        run_one(&cl, doc) != 0)
        goto cleanup;
    hx_sleep_ms(2000);      /* the sampler's next rounds see the history */
    pid_t pid = atolld.pid;
    int64_t cpu0 = hx_cpu_us(pid), samp0 = hx_thread_cpu_us(pid, "atoll-sampler");
    int64_t w0 = now_us();
    hx_sleep_ms(seconds * 1000);
    int64_t cpu1 = hx_cpu_us(pid), samp1 = hx_thread_cpu_us(pid, "atoll-sampler");
    double wall_s = (double)(now_us() - w0) / 1e6;
    if (cpu0 < 0 || cpu1 < 0 || samp0 < 0 || samp1 < 0) {
        fprintf(stderr, "bench: atolld's CPU time unreadable\n");
        goto cleanup;
    }
    printf("history.idle_cpu_pct %.2f\nhistory.sampler_cpu_ms_per_s %.2f\n",
           (double)(cpu1 - cpu0) / 1e4 / wall_s, (double)(samp1 - samp0) / 1e3 / wall_s);
    double ms = get_median_ms(&cl, "/metrics"),
           queue_ms = get_median_ms(&cl, "/v1/jobs?state=queued&limit=500");
    if (ms < 0 || queue_ms < 0) {
        fprintf(stderr, "bench: a GET failed\n");
        goto cleanup;
    }
    printf("history.metrics_ms %.2f\nhistory.queue_page_ms %.2f\n", ms, queue_ms);
    int64_t start = hx_now_ms(), end = start + BENCH_LOOP_MS;
    lat_reset();
    while (hx_now_ms() < end)
        if (run_one(&cl, doc) != 0)
            goto cleanup;
    printf("history.jobs_per_s.serial_1dev %.1f\n",
           (double)lat_n * 1000.0 / (double)(hx_now_ms() - start));
    print_latencies("history");
    fflush(stdout);
    fx_term(&worker, 10000);
    if (!fx_term(&atolld, 10000) || njobs == 0 ||
        drain_history(&atolld, &worker, dir, njobs, doc) != 0)
        goto cleanup;
    rc = 0;
cleanup:
    free(doc);
    hx_client_cleanup(&cl);
    fx_term(&worker, 10000);
    if (!fx_term(&atolld, 10000) && rc == 0) {
        fprintf(stderr, "bench: atolld did not exit cleanly\n");
        rc = 1;
    }
    if (rc == 0 && !getenv("ATOLL_KEEP_RUN"))
        hx_remove_dir(dir);
    else
        fprintf(stderr, "bench: store and logs kept in %s\n", dir);
    return rc;
}
