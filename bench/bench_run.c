/* bench_run.c - users' programs (issue 17, DESIGN Part F): how fast a gang
 * starts, ends and is heard.
 *
 *   bench_run [ROUNDS]        (default 20)
 *
 * Island west=2x4 covered by two workers of 4 devices; atolld --allow-run
 * (workers --run-as nobody under root). The user's program is this binary
 * itself (`bench_run --stamp` prints CLOCK_REALTIME in µs and exits), so
 * "running" means the program's own first instruction ran, not a state row.
 *
 *  1. Gang start: ROUNDS jobs of one 8-process run computation on the idle
 *     island: submission -> the last of the 8 programs running (its stamp),
 *     p50/p90/max. Side by side, when Slurm answers here (bench/slurm.sh
 *     starts a one-node Slurm), `srun -n 8 bench_run --stamp` the same way.
 *  2. Cancel: 8 processes holding; DELETE -> none of them left (/proc scan
 *     for ATOLL_JOB_ID), ROUNDS/4 times.
 *  3. Failure: rank 3 of 8 stamps and exits 1; its stamp -> the job's
 *     finished time, ROUNDS/4 times.
 *  4. Log streaming: one process writes 256 MiB to stdout as fast as it
 *     can, under Atoll (captured, streamed to atolld) and, in the same run,
 *     into a pipe this bench drains: the program's own write rate in each.
 * Exits 1 when a step fails. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support_harness.h"

#define STREAM_BYTES (256ll << 20)
#define WAIT_MS 120000

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---------------------------------------------------------------- */
/* The user's program (modes of this binary). */

static int prog_main(int argc, char **argv)
{
    if (strcmp(argv[1], "--stamp") == 0) {
        printf("stamp %" PRId64 "\n", now_us());
        return 0;
    }
    if (strcmp(argv[1], "--hold") == 0) {      /* until killed */
        for (;;)
            pause();
    }
    if (strcmp(argv[1], "--fail-rank") == 0 && argc > 2) {
        const char *rank = getenv("RANK");
        if (!rank || strcmp(rank, argv[2]) != 0)
            for (;;)
                pause();
        printf("stamp %" PRId64 "\n", now_us());
        fflush(stdout);
        return 1;
    }
    if (strcmp(argv[1], "--stream") == 0) {    /* STREAM_BYTES to stdout; rate on stderr */
        static char buf[1 << 16];
        memset(buf, 'x', sizeof buf);
        for (size_t i = 63; i < sizeof buf; i += 64)
            buf[i] = '\n';
        int64_t t0 = now_us();
        for (long long done = 0; done < STREAM_BYTES;) {
            ssize_t n = write(1, buf, sizeof buf);
            if (n <= 0)
                return 2;
            done += n;
        }
        double s = (double)(now_us() - t0) / 1e6;
        fprintf(stderr, "\nrate %.1f MB/s\n", (double)STREAM_BYTES / 1e6 / s);
        return 0;
    }
    fprintf(stderr, "bench_run: unknown mode %s\n", argv[1]);
    return 2;
}

/* ---------------------------------------------------------------- */
/* Helpers. */

static hx_cluster_t cluster;
static hx_client_t cl;
static char self[HX_PATH_MAX];

static void print_dist(const char *what, int64_t *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, hx_cmp_i64);
    printf("%-44s p50 %8.2f ms   p90 %8.2f ms   max %8.2f ms   (n=%d)\n", what,
           (double)v[n / 2] / 1000, (double)v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1] / 1000,
           (double)v[n - 1] / 1000, n);
}

/* Submits a one-computation run job of 8 processes on the whole island;
 * the command is this binary with `mode` (and `arg`). 0 with *id, or -1. */
static int submit_run(const char *mode, const char *arg, int64_t *id)
{
    json_t *cmd = json_pack("[s, s]", self, mode);
    if (arg)
        json_array_append_new(cmd, json_string(arg));
    json_t *doc = json_pack("{s:s, s:i, s:{s:{s:[i,i]}}, s:[{s:s, s:s, s:{s:o}}]}", "name",
                            "bench-run", "max_retries", 0, "slices", "s", "shape", 2, 4,
                            "computations", "name", "r", "slice", "s", "run", "command", cmd);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    hx_resp_t r;
    int rc = text && hx_job_submit(&cl, text, id, &r) == 201 ? 0 : -1;
    if (rc != 0)
        fprintf(stderr, "submit failed: %ld %s\n", r.status, r.body ? r.body : "");
    hx_resp_clear(&r);
    free(text);
    return rc;
}

static int wait_state(int64_t id, const char *want, json_t **job)
{
    json_t *j = NULL;
    int rc = hx_job_wait(&cl, id, WAIT_MS, 10, &j);
    if (rc != 0 || strcmp(hx_job_state(j), want) != 0) {
        fprintf(stderr, "job %" PRId64 " ended %s, want %s\n", id, j ? hx_job_state(j) : "?",
                want);
        json_decref(j);
        return -1;
    }
    if (job)
        *job = j;
    else
        json_decref(j);
    return 0;
}

/* The largest "stamp N" in process k's output, for k < n. */
static int64_t latest_stamp(int64_t id, int n)
{
    int64_t best = -1;
    for (int k = 0; k < n; k++) {
        char path[96];
        hx_resp_t r;
        snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "/logs?process=%d", id, k);
        if (hx_request(&cl, "GET", path, NULL, 0, &r) != 0 || r.status != 200 || !r.body) {
            hx_resp_clear(&r);
            return -1;
        }
        const char *s = strstr(r.body, "stamp ");
        int64_t t = s ? strtoll(s + 6, NULL, 10) : -1;
        hx_resp_clear(&r);
        if (t < 0)
            return -1;
        best = t > best ? t : best;
    }
    return best;
}

/* ---------------------------------------------------------------- */
/* The four measurements. */

static int bench_start(int rounds)
{
    int64_t *lat = calloc((size_t)rounds, sizeof *lat);
    int n = 0;
    for (int i = 0; lat && i < rounds; i++) {
        int64_t id, t0 = now_us();
        if (submit_run("--stamp", NULL, &id) != 0 || wait_state(id, "succeeded", NULL) != 0)
            break;
        int64_t t = latest_stamp(id, 8);
        if (t < 0)
            break;
        lat[n++] = t - t0;
    }
    if (n == rounds)
        print_dist("gang start, Atoll (submit -> 8 running)", lat, n);
    free(lat);
    return n == rounds ? 0 : -1;
}

/* srun -n 8 of the stamp program: start -> the latest stamp. */
static int bench_srun(int rounds)
{
    if (system("timeout 10 srun -n 1 true >/dev/null 2>&1") != 0) {
        printf("%-44s not measured: no Slurm answers here (bench/slurm.sh starts one)\n",
               "gang start, Slurm srun -n 8");
        return 0;
    }
    int64_t *lat = calloc((size_t)rounds, sizeof *lat);
    int n = 0;
    char cmd[HX_PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "srun -n 8 %s --stamp", self);
    for (int i = 0; lat && i < rounds; i++) {
        int64_t t0 = now_us(), best = -1;
        FILE *p = popen(cmd, "r");
        char line[128];
        while (p && fgets(line, sizeof line, p))
            if (strncmp(line, "stamp ", 6) == 0) {
                int64_t t = strtoll(line + 6, NULL, 10);
                best = t > best ? t : best;
            }
        if (!p || pclose(p) != 0 || best < 0)
            break;
        lat[n++] = best - t0;
    }
    if (n == rounds)
        print_dist("gang start, Slurm srun -n 8", lat, n);
    free(lat);
    return n == rounds ? 0 : -1;
}

/* Waits until the job's 8 programs run (seen in /proc). */
static int wait_holding(int64_t id)
{
    int64_t end = hx_now_ms() + WAIT_MS;
    while (hx_job_processes(id) < 8)
        if (hx_now_ms() > end)
            return -1;
        else
            hx_sleep_ms(5);
    return 0;
}

static int bench_cancel(int rounds)
{
    int64_t lat[64];
    int n = 0;
    for (int i = 0; i < rounds && i < 64; i++) {
        int64_t id;
        char path[64];
        hx_resp_t r;
        if (submit_run("--hold", NULL, &id) != 0 || wait_holding(id) != 0)
            break;
        snprintf(path, sizeof path, "/v1/jobs/%" PRId64, id);
        int64_t t0 = now_us();
        if (hx_request(&cl, "DELETE", path, NULL, 0, &r) != 0 || r.status != 200) {
            hx_resp_clear(&r);
            break;
        }
        hx_resp_clear(&r);
        int64_t end = hx_now_ms() + 30000;
        while (hx_job_processes(id) > 0 && hx_now_ms() < end)
            ;                           /* a /proc scan per turn: ~1 ms */
        if (hx_job_processes(id) > 0)
            break;
        lat[n++] = now_us() - t0;
    }
    if (n > 0 && n == (rounds < 64 ? rounds : 64))
        print_dist("cancel -> every process gone", lat, n);
    return n == (rounds < 64 ? rounds : 64) ? 0 : -1;
}

static int bench_failure(int rounds)
{
    int64_t lat[64];
    int n = 0;
    for (int i = 0; i < rounds && i < 64; i++) {
        int64_t id;
        json_t *job = NULL;
        if (submit_run("--fail-rank", "3", &id) != 0 || wait_state(id, "failed", &job) != 0)
            break;
        int64_t fin = hx_job_time_us(job, "finished");
        json_decref(job);
        char path[96];
        hx_resp_t r;
        snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "/logs?process=3", id);
        int ok = hx_request(&cl, "GET", path, NULL, 0, &r) == 0 && r.body &&
                 strstr(r.body, "stamp ");
        int64_t t = ok ? strtoll(strstr(r.body, "stamp ") + 6, NULL, 10) : -1;
        hx_resp_clear(&r);
        if (t < 0 || fin < t)
            break;
        lat[n++] = fin - t;
    }
    if (n > 0 && n == (rounds < 64 ? rounds : 64))
        print_dist("rank 3 exits 1 -> job failed", lat, n);
    return n == (rounds < 64 ? rounds : 64) ? 0 : -1;
}

/* The stream program's own rate writing into a pipe this process drains. */
static double stream_baseline(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        close(fds[0]);
        close(fds[1]);
        execl(self, self, "--stream", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    static char buf[1 << 16];
    int64_t t0 = now_us();
    while (read(fds[0], buf, sizeof buf) > 0)
        ;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    return (double)STREAM_BYTES / 1e6 / ((double)(now_us() - t0) / 1e6);
}

static int bench_stream(void)
{
    json_t *doc = json_pack("{s:s, s:i, s:{s:{s:[i]}}, s:[{s:s, s:s, s:{s:[s,s]}}]}", "name",
                            "bench-stream", "max_retries", 0, "slices", "s", "shape", 1,
                            "computations", "name", "r", "slice", "s", "run", "command", self,
                            "--stream");
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    int64_t id;
    hx_resp_t r;
    int ok = text && hx_job_submit(&cl, text, &id, &r) == 201;
    hx_resp_clear(&r);
    free(text);
    if (!ok || wait_state(id, "succeeded", NULL) != 0)
        return -1;
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "/logs", id);
    if (hx_request(&cl, "GET", path, NULL, 0, &r) != 0 || r.status != 200 || !r.body)
        return -1;
    const char *s = strstr(r.body, "rate ");
    double rate = s ? strtod(s + 5, NULL) : -1;
    size_t kept = r.len;
    hx_resp_clear(&r);
    double base = stream_baseline();
    printf("%-44s %8.1f MB/s under Atoll, %8.1f MB/s into a bare pipe (%.2fx); "
           "%zu bytes kept of %lld\n", "log streaming (the writer's own rate)", rate, base,
           base > 0 ? rate / base : 0, kept, STREAM_BYTES);
    return rate > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strncmp(argv[1], "--", 2) == 0)
        return prog_main(argc, argv);
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    if (rounds < 4 || rounds > 1000 || !realpath("/proc/self/exe", self)) {
        fprintf(stderr, "usage: bench_run [ROUNDS 4..1000]\n");
        return 2;
    }
    static const char *const islands[] = {"west=2x4"};
    static const char *const extra[] = {"--allow-run", NULL};
    static const char *const wroot[] = {"--run-as", "nobody", NULL};
    const char *const *w = geteuid() == 0 ? wroot : NULL;
    if (hx_init() != 0 || hx_cluster_start_args(&cluster, islands, 1, extra) != 0)
        return 1;
    int rc = 1;
    if (hx_worker_start_args(&cluster, "west", 4, w, 15000, 0) != 0 ||
        hx_worker_start_args(&cluster, "west", 4, w, 15000, 0) != 0 ||
        hx_client_init(&cl, cluster.url) != 0)
        goto cleanup;
    printf("bench_run: island west=2x4, 2 workers x 4 devices, 8-process gangs, %d rounds\n",
           rounds);
    if (bench_start(rounds) != 0 || bench_srun(rounds) != 0 || bench_cancel(rounds / 4) != 0 ||
        bench_failure(rounds / 4) != 0 || bench_stream() != 0) {
        fprintf(stderr, "bench_run: a step failed\n");
        goto cleanup;
    }
    rc = 0;
cleanup:
    hx_client_cleanup(&cl);
    hx_cluster_stop(&cluster);
    return rc;
}
