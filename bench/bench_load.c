/* bench_load.c - bounded load run against a real cluster.
 *
 * Starts its own cluster (west=4x4, 4 workers of 4 devices), then for
 * LOAD_SECONDS at the same time:
 *   - one `wrk` per read endpoint (GET /v1/islands, /v1/jobs?limit=20,
 *     /v1/jobs/{id}, /healthz), LOAD_WRK_CONNS connection(s) each, with
 *     --latency, so the read path is measured under write load;
 *   - LOAD_THREADS submitter threads, each submitting tiny [2,2] jobs and
 *     waiting for their success, timing the POST and submit-to-success.
 * Prints `name value` lines: requests/s, p50/p99 latency and errors per
 * endpoint, jobs submitted/succeeded, submission latencies, total errors.
 * Exits 1 when any error was seen (errors must be 0). Without wrk on PATH
 * the read part is skipped with a message (bench/load.sh installs it).
 * Bounded: the load phase lasts LOAD_SECONDS (10 by default, at most 30);
 * the whole run stays under a minute. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "support_harness.h"

#define LOAD_THREADS 4
#define LOAD_POLL_MS 5
#define LOAD_MAX_SAMPLES 100000   /* per thread and kind */
#define LOAD_NENDPOINTS 4

static const char tiny_doc_q[] =
    "{'name':'load','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
    "'ops':[{'op':'fill','out':'x','shape':[16],'value':1.0},"
    "{'op':'all_reduce','out':'z','args':['x'],'reduce':'sum'}],'outputs':['z']}]}";

static char *tiny_doc;
static const char *load_url;
static int64_t load_deadline_ms;

/* One submitter thread's figures; written by that thread only, read after
 * join. */
typedef struct submitter {
    pthread_t tid;
    int submitted, succeeded, errors;
    double *post_ms, *e2e_ms;       /* LOAD_MAX_SAMPLES each */
    int nsamples;
} submitter_t;

static void *submitter_main(void *arg)
{
    submitter_t *s = arg;
    hx_client_t cl;
    if (hx_client_init(&cl, load_url) != 0) {
        s->errors++;
        return NULL;
    }
    while (hx_now_ms() < load_deadline_ms && s->nsamples < LOAD_MAX_SAMPLES) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        int64_t id = 0;
        int status = hx_job_submit(&cl, tiny_doc, &id, NULL);
        clock_gettime(CLOCK_MONOTONIC, &b);
        s->submitted++;
        if (status != 201) {
            fprintf(stderr, "bench_load: submit answered %d\n", status);
            hx_client_print_last(&cl);
            s->errors++;
            continue;
        }
        double post = (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
        json_t *job = NULL;
        /* Jobs submitted near the deadline still get to finish (20 s cap). */
        int rc = hx_job_wait(&cl, id, 20000, LOAD_POLL_MS, &job);
        clock_gettime(CLOCK_MONOTONIC, &b);
        if (rc != 0 || strcmp(hx_job_state(job), "succeeded") != 0) {
            fprintf(stderr, "bench_load: job %" PRId64 " ended '%s'\n", id,
                    job ? hx_job_state(job) : "?");
            s->errors++;
        } else {
            s->succeeded++;
            s->post_ms[s->nsamples] = post;
            s->e2e_ms[s->nsamples] =
                (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
            s->nsamples++;
        }
        json_decref(job);
    }
    hx_client_cleanup(&cl);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array; NAN when empty. */
static double percentile(const double *v, int n, double p)
{
    if (n <= 0)
        return NAN;
    int k = (int)ceil(p / 100.0 * n) - 1;
    return v[k < 0 ? 0 : (k >= n ? n - 1 : k)];
}

/* ---- wrk ---- */

typedef struct wrk_run {
    const char *name;               /* label in the output */
    char path[64];
    FILE *pipe;                     /* popen'd wrk, read once it ends */
    double rps, p50_ms, p99_ms;
    long requests, errors;
    int ok;                         /* its output was understood */
} wrk_run_t;

/* "1.23ms" / "850.00us" / "1.02s" -> milliseconds; NAN if not a latency. */
static double wrk_ms(const char *text)
{
    char *end;
    double v = strtod(text, &end);
    if (end == text)
        return NAN;
    if (strncmp(end, "us", 2) == 0)
        return v / 1e3;
    if (strncmp(end, "ms", 2) == 0)
        return v;
    if (strncmp(end, "s", 1) == 0)
        return v * 1e3;
    if (strncmp(end, "m", 1) == 0)
        return v * 60e3;
    return NAN;
}

/* Reads wrk's report to the end and parses what we print. wrk counts
 * non-2xx/3xx answers and socket errors separately: both are errors here. */
static void wrk_collect(wrk_run_t *w)
{
    char line[512];
    w->p50_ms = w->p99_ms = NAN;
    while (fgets(line, sizeof line, w->pipe)) {
        const char *p = line + strspn(line, " \t");
        long a, b, c, d;
        if (strncmp(p, "50%", 3) == 0)
            w->p50_ms = wrk_ms(p + 3 + strspn(p + 3, " \t"));
        else if (strncmp(p, "99%", 3) == 0)
            w->p99_ms = wrk_ms(p + 3 + strspn(p + 3, " \t"));
        else if (sscanf(p, "Requests/sec: %lf", &w->rps) == 1)
            w->ok = 1;
        else if (sscanf(p, "%ld requests in", &a) == 1)
            w->requests = a;
        else if (sscanf(p, "Non-2xx or 3xx responses: %ld", &a) == 1)
            w->errors += a;
        else if (sscanf(p, "Socket errors: connect %ld, read %ld, write %ld, timeout %ld", &a, &b,
                        &c, &d) == 4)
            w->errors += a + b + c + d;
    }
    int st = pclose(w->pipe);
    w->pipe = NULL;
    if (st != 0)
        w->ok = 0;
}

static int wrk_available(void)
{
    return system("command -v wrk >/dev/null 2>&1") == 0;
}

static int env_int(const char *name, int dflt, int lo, int hi)
{
    const char *v = getenv(name);
    int n = v ? atoi(v) : dflt;
    return n < lo ? lo : (n > hi ? hi : n);
}

/* One finished job, so GET /v1/jobs/{id} reads a real, complete job. Its
 * id in *first; 0 or -1. */
static int warm_up(hx_client_t *cl, int64_t *first)
{
    json_t *job = NULL;
    if (hx_job_submit(cl, tiny_doc, first, NULL) != 201 ||
        hx_job_wait(cl, *first, 20000, LOAD_POLL_MS, &job) != 0) {
        fprintf(stderr, "bench_load: the warm-up job did not finish\n");
        json_decref(job);
        return -1;
    }
    json_decref(job);
    return 0;
}

/* Starts one wrk per read endpoint (pipes in wrk[]); 0 or -1. */
static int wrk_start_all(wrk_run_t *wrk, const char *url, int64_t first, int conns, int seconds)
{
    static const char *const names[LOAD_NENDPOINTS] = {"islands", "jobs_list", "job_get",
                                                        "healthz"};
    snprintf(wrk[0].path, sizeof wrk[0].path, "/v1/islands");
    snprintf(wrk[1].path, sizeof wrk[1].path, "/v1/jobs?limit=20");
    snprintf(wrk[2].path, sizeof wrk[2].path, "/v1/jobs/%" PRId64, first);
    snprintf(wrk[3].path, sizeof wrk[3].path, "/healthz");
    for (int i = 0; i < LOAD_NENDPOINTS; i++) {
        char cmd[512];
        wrk[i].name = names[i];
        snprintf(cmd, sizeof cmd, "wrk -t1 -c%d -d%ds --timeout 5s --latency '%s%s' 2>&1", conns,
                 seconds, url, wrk[i].path);
        if (!(wrk[i].pipe = popen(cmd, "r"))) {
            fprintf(stderr, "bench_load: cannot start wrk\n");
            return -1;
        }
    }
    return 0;
}

/* Starts the submitter threads; how many started. */
static int submitters_start(submitter_t *subs)
{
    int n = 0;
    for (; n < LOAD_THREADS; n++) {
        submitter_t *s = &subs[n];
        s->post_ms = calloc(LOAD_MAX_SAMPLES, sizeof *s->post_ms);
        s->e2e_ms = calloc(LOAD_MAX_SAMPLES, sizeof *s->e2e_ms);
        if (!s->post_ms || !s->e2e_ms || pthread_create(&s->tid, NULL, submitter_main, s) != 0) {
            free(s->post_ms);
            free(s->e2e_ms);
            s->post_ms = s->e2e_ms = NULL;
            fprintf(stderr, "bench_load: cannot start submitter %d\n", n);
            break;
        }
    }
    return n;
}

/* Prints each wrk's figures; returns the errors seen. */
static long wrk_print(const wrk_run_t *wrk)
{
    long errors = 0;
    for (int i = 0; i < LOAD_NENDPOINTS; i++) {
        const wrk_run_t *w = &wrk[i];
        if (!w->ok) {
            fprintf(stderr, "bench_load: wrk on %s failed or printed no figures\n", w->path);
            errors++;
        }
        printf("load.%s.path %s\nload.%s.requests %ld\nload.%s.rps %.0f\n"
               "load.%s.p50_ms %.3f\nload.%s.p99_ms %.3f\nload.%s.errors %ld\n",
               w->name, w->path, w->name, w->requests, w->name, w->rps, w->name, w->p50_ms,
               w->name, w->p99_ms, w->name, w->errors);
        errors += w->errors;
    }
    return errors;
}

/* Prints the submitters' figures (latency percentiles over all their
 * samples); their errors in *errors, jobs succeeded in *succeeded. 0 or
 * -1 (out of memory). */
static int submits_print(const submitter_t *subs, int nsubs, int seconds, long *errors,
                         int *succeeded)
{
    int submitted = 0, sub_err = 0, n = 0;
    *succeeded = 0;
    for (int i = 0; i < nsubs; i++) {
        submitted += subs[i].submitted;
        *succeeded += subs[i].succeeded;
        sub_err += subs[i].errors;
        n += subs[i].nsamples;
    }
    double *post = calloc((size_t)(n ? n : 1), sizeof *post);
    double *e2e = calloc((size_t)(n ? n : 1), sizeof *e2e);
    if (!post || !e2e) {
        free(post);
        free(e2e);
        fprintf(stderr, "bench_load: out of memory\n");
        return -1;
    }
    for (int i = 0, k = 0; i < nsubs; i++)
        for (int j = 0; j < subs[i].nsamples; j++, k++) {
            post[k] = subs[i].post_ms[j];
            e2e[k] = subs[i].e2e_ms[j];
        }
    qsort(post, (size_t)n, sizeof *post, cmp_double);
    qsort(e2e, (size_t)n, sizeof *e2e, cmp_double);
    printf("load.submit.jobs_submitted %d\nload.submit.jobs_succeeded %d\n"
           "load.submit.jobs_per_s %.1f\nload.submit.post_p50_ms %.3f\n"
           "load.submit.post_p99_ms %.3f\nload.submit.to_success_p50_ms %.3f\n"
           "load.submit.to_success_p99_ms %.3f\nload.submit.errors %d\n",
           submitted, *succeeded, (double)*succeeded / seconds, percentile(post, n, 50),
           percentile(post, n, 99), percentile(e2e, n, 50), percentile(e2e, n, 99), sub_err);
    free(post);
    free(e2e);
    *errors += sub_err;
    return 0;
}

int main(void)
{
    int seconds = env_int("LOAD_SECONDS", 10, 1, 30);
    int conns = env_int("LOAD_WRK_CONNS", 1, 1, 16);
    static const char *const islands[] = {"west=4x4"};
    hx_cluster_t cluster;
    hx_client_t cl = {0};
    submitter_t subs[LOAD_THREADS];
    wrk_run_t wrk[LOAD_NENDPOINTS];
    int rc = 1, nsubs = 0, use_wrk = wrk_available(), succeeded = 0;
    int64_t first = 0;
    memset(subs, 0, sizeof subs);
    memset(wrk, 0, sizeof wrk);
    if (hx_init() != 0 || !(tiny_doc = hx_text_q(tiny_doc_q)))
        return 1;
    if (hx_cluster_start(&cluster, islands, 1) != 0) {
        free(tiny_doc);
        return 1;
    }
    for (int w = 0; w < 4; w++)
        if (hx_worker_start(&cluster, "west", 4) != 0)
            goto cleanup;
    if (hx_client_init(&cl, cluster.url) != 0 || warm_up(&cl, &first) != 0)
        goto cleanup;
    load_url = cluster.url;
    if (!use_wrk)
        printf("# wrk not found on PATH: read endpoints skipped (bench/load.sh installs it)\n");
    if (use_wrk && wrk_start_all(wrk, cluster.url, first, conns, seconds) != 0)
        goto cleanup;

    load_deadline_ms = hx_now_ms() + (int64_t)seconds * 1000;
    nsubs = submitters_start(subs);
    for (int i = 0; use_wrk && i < LOAD_NENDPOINTS; i++)
        if (wrk[i].pipe)
            wrk_collect(&wrk[i]);
    for (int i = 0; i < nsubs; i++)
        pthread_join(subs[i].tid, NULL);

    long errors = nsubs < LOAD_THREADS;
    printf("load.seconds %d\nload.wrk_connections_per_endpoint %d\nload.submit_threads %d\n",
           seconds, conns, nsubs);
    if (use_wrk)
        errors += wrk_print(wrk);
    if (submits_print(subs, nsubs, seconds, &errors, &succeeded) == 0) {
        printf("load.errors_total %ld\n", errors);
        rc = errors == 0 && succeeded > 0 ? 0 : 1;
    }
cleanup:
    for (int i = 0; i < nsubs; i++) {
        free(subs[i].post_ms);
        free(subs[i].e2e_ms);
    }
    for (int i = 0; i < LOAD_NENDPOINTS; i++)
        if (wrk[i].pipe)
            pclose(wrk[i].pipe);
    hx_client_cleanup(&cl);
    if (hx_cluster_stop(&cluster) != 0) {
        fprintf(stderr, "bench_load: a process did not exit cleanly on SIGTERM\n");
        rc = 1;
    }
    free(tiny_doc);
    return rc;
}
