/* bench_loop.c - end-to-end control-loop throughput of a real cluster.
 *
 * Starts its own cluster (west=4x4, 4 workers of 4 devices; idle=1, none)
 * and prints:
 *   loop.jobs_per_s.serial       tiny jobs submitted and waited to success
 *                                one after another by one client
 *   loop.jobs_per_s.clients8     the same with 8 concurrent clients
 *   loop.jobs_per_s.serial_1dev  one client's tiny jobs of one device (the
 *                                issue's "tiny 1-device jobs"): one worker,
 *                                one host task, one report per job
 *   loop.jobs_per_s.stream_1dev  the same jobs submitted back to back by
 *                                one client on one connection (each
 *                                submission fsync'd before its 201), then
 *                                waited: first creation to last end
 *   loop.jobs_per_s.stream_1dev_pipelined4
 *                                the same with 4 submissions in flight on
 *                                the connection (HTTP/1.1 pipelining)
 *   loop.jobs_per_s.*.stage.*    where a tiny job's time went, stage by
 *                                stage (print_stages)
 *   loop.jobs_per_s.*.cpu_us_per_job.{atolld,workers}
 *                                CPU time (user + system, /proc) per job of
 *                                atolld and of the four workers together:
 *                                on a machine with few cores the loop is
 *                                bound by their sum
 *   loop.chain64.comps_per_s     jobs of 64 chained computations, the median
 *                                of BENCH_CHAIN_RUNS (.min, .max beside it):
 *                                64 / (finished - created), server clocks
 * A tiny job is a [2,2] slice with fill + all_reduce. Clients follow a job
 * with GET /v1/jobs/{id}?wait_ms (answered when it ends); each phase has a
 * time budget so a run stays under a minute. Output lines are `name value`,
 * easy to grep and diff.
 *
 *   bench_loop [PARKED]
 *
 * With PARKED > 0, that many other connections each park a 30 s wait on a
 * job that does not end meanwhile (queued for island `idle`, which has no
 * worker) through all phases: what waiting clients cost the loop. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_pipe.h"
#include "support_harness.h"

#define BENCH_POLL_MS 2
#define BENCH_JOBS 1000           /* per phase, at most */
#define BENCH_PHASE_MS 8000       /* per phase, at most */
#define BENCH_CLIENTS 8
#define BENCH_CHAIN 64
#define BENCH_CHAIN_RUNS 7

static const char tiny_doc_q[] =
    "{'name':'tiny','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
    "'ops':[{'op':'fill','out':'x','shape':[1],'value':1.0},"
    "{'op':'all_reduce','out':'z','args':['x'],'reduce':'sum'}],'outputs':['z']}]}";
/* The same on one device: its all_reduce is the shard's own value. */
static const char one_doc_q[] =
    "{'name':'one','slices':{'s':{'shape':[1]}},'computations':[{'name':'c','slice':'s',"
    "'ops':[{'op':'fill','out':'x','shape':[1],'value':1.0},"
    "{'op':'all_reduce','out':'z','args':['x'],'reduce':'sum'}],'outputs':['z']}]}";

static char *tiny_doc, *one_doc;  /* hx_text_q of the above, set once in main */
static const char *bench_url;
static const hx_cluster_t *bench_cluster;

/* Runs one tiny job to success; *out_id its id. 0 or -1 (reason printed). */
static int bench_one(hx_client_t *cl, const char *doc, int64_t *out_id)
{
    int64_t id;
    int status = hx_job_submit(cl, doc, &id, NULL);
    if (status != 201) {
        fprintf(stderr, "bench: submit answered %d\n", status);
        hx_client_print_last(cl);
        return -1;
    }
    *out_id = id;
    json_t *job = NULL;
    int rc = hx_job_wait(cl, id, 20000, BENCH_POLL_MS, &job);
    if (rc != 0 || strcmp(hx_job_state(job), "succeeded") != 0) {
        fprintf(stderr, "bench: job %" PRId64 " ended '%s'\n", id, job ? hx_job_state(job) : "?");
        rc = -1;
    }
    json_decref(job);
    return rc;
}

/* Shared by the client threads of one phase. */
typedef struct phase {
    const char *doc;              /* the jobs' document */
    atomic_int started;           /* jobs claimed so far */
    atomic_int done;              /* jobs that succeeded */
    atomic_int failed;
    int64_t deadline_ms;
    int64_t ids[BENCH_JOBS];      /* the jobs that succeeded, done of them */
} phase_t;

static void *bench_client(void *arg)
{
    phase_t *ph = arg;
    hx_client_t cl;
    if (hx_client_init(&cl, bench_url) != 0) {
        atomic_fetch_add(&ph->failed, 1);
        return NULL;
    }
    while (hx_now_ms() < ph->deadline_ms && atomic_fetch_add(&ph->started, 1) < BENCH_JOBS) {
        int64_t id = 0;
        if (bench_one(&cl, ph->doc, &id) != 0) {
            atomic_fetch_add(&ph->failed, 1);
            break;
        }
        ph->ids[atomic_fetch_add(&ph->done, 1)] = id;
    }
    hx_client_cleanup(&cl);
    return NULL;
}

/* Where a tiny job's time goes, from the server's and workers' stamps of
 * each job (read after the phase, so the reads do not slow it): medians
 * and p90 in microseconds of each stage, printed as
 * loop.stage.NAME_us.p50 / .p90:
 *   allocated   submission (created) -> allocated (the scheduler's pass)
 *   dispatched  allocated -> its computation dispatched (host tasks written)
 *   started     dispatched -> its first shard started on a worker (the
 *               parked poll woken, its read, the answer, the compile)
 *   all_started first shard started -> the last one's inputs ready (the
 *               other worker's poll and start)
 *   ran         inputs ready -> the last shard finished (the collective)
 *   reported    last shard finished -> job finished (report and apply) */
enum { ST_ALLOC, ST_DISP, ST_START, ST_ALL, ST_RAN, ST_REP, ST__N };
static const char *const stage_names[ST__N] = {"allocated", "dispatched", "started",
                                               "all_started", "ran", "reported"};

static int64_t stamp(const json_t *times, const char *key)
{
    return json_integer_value(json_object_get(times, key));
}

/* The stages of job id into st[ST__N]; 0, or -1 when a stamp is missing. */
static int job_stages(hx_client_t *cl, int64_t id, int64_t st[ST__N])
{
    json_t *job = hx_job_get(cl, id);
    const json_t *jt = json_object_get(job, "times_us");
    const json_t *ct = json_object_get(json_array_get(json_object_get(job, "computations"), 0),
                                       "times_us");
    int64_t t[7] = {stamp(jt, "created"), stamp(jt, "allocated"), stamp(ct, "dispatched"),
                    stamp(ct, "started"), stamp(ct, "inputs_ready"), stamp(ct, "finished"),
                    stamp(jt, "finished")};
    json_decref(job);
    for (int i = 0; i < 7; i++)
        if (t[i] <= 0)
            return -1;
    for (int i = 0; i < ST__N; i++)
        st[i] = t[i + 1] - t[i];
    return 0;
}

static void print_stages(const char *name, const int64_t *ids, int n)
{
    hx_client_t cl;
    int64_t *v[ST__N] = {0};
    int k = 0, ok = hx_client_init(&cl, bench_url) == 0;
    for (int s = 0; ok && s < ST__N; s++)
        ok = (v[s] = malloc(sizeof *v[s] * (size_t)n)) != NULL;
    for (int i = 0; ok && i < n; i++) {
        int64_t st[ST__N];
        if (job_stages(&cl, ids[i], st) != 0)
            continue;
        for (int s = 0; s < ST__N; s++)
            v[s][k] = st[s];
        k++;
    }
    for (int s = 0; ok && k > 0 && s < ST__N; s++) {
        qsort(v[s], (size_t)k, sizeof *v[s], hx_cmp_i64);
        printf("%s.stage.%s_us.p50 %" PRId64 "\n", name, stage_names[s], v[s][k / 2]);
        printf("%s.stage.%s_us.p90 %" PRId64 "\n", name, stage_names[s], v[s][k * 9 / 10]);
    }
    if (ok)
        hx_client_cleanup(&cl);
    for (int s = 0; s < ST__N; s++)
        free(v[s]);
    fflush(stdout);
}

/* CPU time so far of atolld (cpu[0]) and of all workers (cpu[1]), µs. */
static void bench_cpu(int64_t cpu[2])
{
    cpu[0] = hx_cpu_us(bench_cluster->atolld.pid);
    cpu[1] = 0;
    for (int w = 0; w < bench_cluster->nworkers; w++)
        cpu[1] += hx_cpu_us(bench_cluster->workers[w].pid);
}

/* Runs a phase with n client threads; prints jobs/s under `name`, then
 * where the time went (print_stages). 0 or -1. */
static int bench_jobs_phase(const char *name, const char *doc, int n)
{
    static phase_t ph;            /* ids: too large for the stack */
    memset(&ph, 0, sizeof ph);
    ph.doc = doc;
    ph.deadline_ms = hx_now_ms() + BENCH_PHASE_MS;
    pthread_t th[BENCH_CLIENTS];
    int nthreads = 0;
    int64_t cpu0[2], cpu1[2];
    bench_cpu(cpu0);
    int64_t t0 = hx_now_ms();
    for (; nthreads < n; nthreads++)
        if (pthread_create(&th[nthreads], NULL, bench_client, &ph) != 0)
            break;
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    int64_t ms = hx_now_ms() - t0;
    bench_cpu(cpu1);
    int done = atomic_load(&ph.done);
    if (nthreads < n || atomic_load(&ph.failed) || done == 0) {
        fprintf(stderr, "bench: %s: %d threads of %d, %d failures, %d done\n", name, nthreads,
                n, atomic_load(&ph.failed), done);
        return -1;
    }
    printf("%s %.1f\n", name, done * 1000.0 / (double)(ms > 0 ? ms : 1));
    printf("%s.jobs %d\n", name, done);
    printf("%s.mean_latency_ms %.2f\n", name, (double)ms * n / done);
    printf("%s.cpu_us_per_job.atolld %.0f\n", name, (double)(cpu1[0] - cpu0[0]) / done);
    printf("%s.cpu_us_per_job.workers %.0f\n", name, (double)(cpu1[1] - cpu0[1]) / done);
    fflush(stdout);
    print_stages(name, ph.ids, done);
    return 0;
}

/* The ids of the jobs answered so far (pipe_window's ctx). */
typedef struct id_sink {
    int64_t *ids;
    int n;
} id_sink_t;

/* pipe_window's answer: takes the job id of a 201; stops at anything else. */
static int take_id(int status, const char *body, void *ctx)
{
    id_sink_t *k = ctx;
    json_t *job = status == 201 ? json_loads(body, 0, NULL) : NULL;
    json_int_t id = json_integer_value(json_object_get(job, "id"));
    json_decref(job);
    if (id < 1) {
        fprintf(stderr, "bench: pipelined submit %d: answered %d, no 201 naming a job\n", k->n,
                status);
        return -1;
    }
    k->ids[k->n++] = id;
    return 0;
}

/* Submits doc up to BENCH_JOBS times until deadline_ms (monotonic) on one
 * raw connection that keeps `depth` submissions in flight (HTTP/1.1
 * pipelining), the ids into ids. How many were accepted, or -1 when an
 * answer was not a 201 naming its job. */
static int bench_submit_pipelined(const char *doc, int depth, int64_t deadline_ms, int64_t *ids)
{
    static pipe_rd_t p;
    static char req[8192], body[16384];
    id_sink_t sink = {ids, 0};
    /* Only the id is read: the summary view (the default full object is
     * the job's parts too; hx_job_submit asks the same). */
    int len = pipe_post(req, sizeof req, "/v1/jobs?view=summary", doc);
    if (len < 0 || (p.fd = raw_connect(raw_port(bench_url))) < 0)
        return -1;
    p.len = 0;
    long answered = pipe_window(&p, req, len, depth, BENCH_JOBS, deadline_ms, body, sizeof body,
                                take_id, &sink);
    close(p.fd);
    return answered == sink.n ? sink.n : -1;
}

/* One client, one keep-alive connection, jobs submitted back to back
 * (each submission still waits for its fsync'd 201), then each waited to
 * success: the loop's throughput when the client does not wait for a job
 * before submitting the next. depth 1 submits through the harness's
 * libcurl client, one request after the other; a larger depth keeps that
 * many in flight (bench_submit_pipelined). Prints jobs/s from the first
 * job's creation to the last one's end (server stamps), the submissions'
 * own rate (client clock), and CPU per job. 0 or -1. */
static int bench_stream_phase(const char *name, const char *doc, int depth)
{
    static int64_t ids[BENCH_JOBS];
    hx_client_t cl;
    int n = 0, rc = -1;
    int64_t cpu0[2], cpu1[2], first_created = -1, last_finished = -1;
    if (hx_client_init(&cl, bench_url) != 0)
        return -1;
    bench_cpu(cpu0);
    int64_t t0 = hx_now_ms(), deadline = t0 + BENCH_PHASE_MS / 2;
    if (depth > 1 && (n = bench_submit_pipelined(doc, depth, deadline, ids)) < 0)
        goto cleanup;
    for (; depth <= 1 && n < BENCH_JOBS && hx_now_ms() < deadline; n++)
        if (hx_job_submit(&cl, doc, &ids[n], NULL) != 201) {
            fprintf(stderr, "bench: %s: submit %d refused\n", name, n);
            hx_client_print_last(&cl);
            goto cleanup;
        }
    int64_t submit_ms = hx_now_ms() - t0;
    for (int i = n - 1; i >= 0; i--) {   /* the last first: the others end before it */
        json_t *job = NULL;
        int ok = hx_job_wait(&cl, ids[i], 20000, BENCH_POLL_MS, &job) == 0 &&
                 strcmp(hx_job_state(job), "succeeded") == 0;
        int64_t c = ok ? hx_job_time_us(job, "created") : 0;
        int64_t f = ok ? hx_job_time_us(job, "finished") : 0;
        json_decref(job);
        if (!ok || c <= 0 || f < c) {
            fprintf(stderr, "bench: %s: job %" PRId64 " did not succeed\n", name, ids[i]);
            goto cleanup;
        }
        if (i == n - 1)
            bench_cpu(cpu1);
        first_created = first_created < 0 || c < first_created ? c : first_created;
        last_finished = f > last_finished ? f : last_finished;
    }
    if (n == 0 || last_finished <= first_created)
        goto cleanup;
    printf("%s %.1f\n", name, n * 1e6 / (double)(last_finished - first_created));
    printf("%s.jobs %d\n", name, n);
    printf("%s.submits_per_s %.1f\n", name, n * 1000.0 / (double)(submit_ms > 0 ? submit_ms : 1));
    printf("%s.cpu_us_per_job.atolld %.0f\n", name, (double)(cpu1[0] - cpu0[0]) / n);
    printf("%s.cpu_us_per_job.workers %.0f\n", name, (double)(cpu1[1] - cpu0[1]) / n);
    fflush(stdout);
    rc = 0;
cleanup:
    hx_client_cleanup(&cl);
    return rc;
}

/* The chained job: c0 fills ones; c_i = input(c_{i-1}.x) + 1. Returns a
 * malloc'd document or NULL. */
static char *bench_chain_doc(int k)
{
    size_t cap = 512 + (size_t)k * 320, len = 0;
    char *doc = malloc(cap);
    if (!doc)
        return NULL;
    len += (size_t)snprintf(doc + len, cap - len,
                            "{\"name\":\"chain\",\"slices\":{\"s\":{\"shape\":[2,2]}},"
                            "\"computations\":[{\"name\":\"c0\",\"slice\":\"s\",\"ops\":["
                            "{\"op\":\"fill\",\"out\":\"x\",\"shape\":[4],\"value\":1.0}],"
                            "\"outputs\":[\"x\"]}");
    for (int i = 1; i < k; i++)
        len += (size_t)snprintf(doc + len, cap - len,
                                ",{\"name\":\"c%d\",\"slice\":\"s\",\"ops\":["
                                "{\"op\":\"input\",\"out\":\"p\",\"from\":\"c%d.x\"},"
                                "{\"op\":\"fill\",\"out\":\"one\",\"shape\":[4],\"value\":1.0},"
                                "{\"op\":\"add\",\"out\":\"x\",\"args\":[\"p\",\"one\"]}],"
                                "\"outputs\":[\"x\"]}",
                                i, i - 1);
    snprintf(doc + len, cap - len, "]}");
    return doc;
}

/* Checks the last link holds k everywhere (the chain really ran). */
static int bench_chain_verify(hx_client_t *cl, int64_t id, int k)
{
    json_t *res = hx_job_result(cl, id);
    char key[32];
    snprintf(key, sizeof key, "c%d.x", k - 1);
    json_t *sh = hx_result_shard(res, key, 3);
    double v = json_number_value(json_array_get(json_object_get(sh, "values"), 0));
    json_decref(res);
    if (v != (double)k) {
        fprintf(stderr, "bench: chain result %s = %g, expected %d\n", key, v, k);
        return -1;
    }
    return 0;
}

/* Runs one chain of k computations; its rate from the server's stamps
 * (created -> finished) and from the client's clock, computations/s. */
static int bench_chain_once(hx_client_t *cl, const char *doc, int k, double *server,
                            double *client)
{
    json_t *job = NULL;
    int rc = -1;
    int64_t id, t0 = hx_now_ms();
    int status = hx_job_submit(cl, doc, &id, NULL);
    if (status != 201) {
        fprintf(stderr, "bench: chain submit answered %d\n", status);
        hx_client_print_last(cl);
        goto cleanup;
    }
    if (hx_job_wait(cl, id, 30000, BENCH_POLL_MS, &job) != 0 ||
        strcmp(hx_job_state(job), "succeeded") != 0) {
        fprintf(stderr, "bench: chain job ended '%s'\n", job ? hx_job_state(job) : "?");
        goto cleanup;
    }
    int64_t client_ms = hx_now_ms() - t0;
    if (bench_chain_verify(cl, id, k) != 0)
        goto cleanup;
    int64_t created = hx_job_time_us(job, "created"), finished = hx_job_time_us(job, "finished");
    if (created <= 0 || finished <= created) {
        fprintf(stderr, "bench: job has no created/finished times\n");
        goto cleanup;
    }
    *server = k * 1e6 / (double)(finished - created);
    *client = k * 1000.0 / (double)(client_ms > 0 ? client_ms : 1);
    rc = 0;
cleanup:
    json_decref(job);
    return rc;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* BENCH_CHAIN_RUNS chains, one after another: one ~20 ms job swings by
 * +-30 % between runs on a 2-core VM, so the median is printed, with the
 * extremes. */
static int bench_chain(hx_client_t *cl, int k)
{
    char *doc = bench_chain_doc(k);
    double server[BENCH_CHAIN_RUNS], client[BENCH_CHAIN_RUNS];
    int rc = -1;
    if (!doc)
        goto cleanup;
    for (int i = 0; i < BENCH_CHAIN_RUNS; i++)
        if (bench_chain_once(cl, doc, k, &server[i], &client[i]) != 0)
            goto cleanup;
    qsort(server, BENCH_CHAIN_RUNS, sizeof server[0], cmp_double);
    qsort(client, BENCH_CHAIN_RUNS, sizeof client[0], cmp_double);
    printf("loop.chain%d.runs %d\n", k, BENCH_CHAIN_RUNS);
    printf("loop.chain%d.comps_per_s %.1f\n", k, server[BENCH_CHAIN_RUNS / 2]);
    printf("loop.chain%d.comps_per_s.min %.1f\n", k, server[0]);
    printf("loop.chain%d.comps_per_s.max %.1f\n", k, server[BENCH_CHAIN_RUNS - 1]);
    printf("loop.chain%d.client_comps_per_s %.1f\n", k, client[BENCH_CHAIN_RUNS / 2]);
    fflush(stdout);
    rc = 0;
cleanup:
    free(doc);
    return rc;
}

#define BENCH_PARKED_MAX 20000

/* Opens n connections to port, each sending a GET of job `id` with a 30 s
 * wait, into fds (closed by the caller). Returns how many were opened. */
static int bench_park(int port, int64_t id, int n, int *fds)
{
    char req[160];
    int len = snprintf(req, sizeof req, "GET /v1/jobs/%" PRId64 "?view=summary&wait_ms=30000"
                       " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", id);
    int k = 0;
    for (; k < n; k++) {
        fds[k] = raw_connect(port);
        if (fds[k] < 0)
            break;
        if (raw_send_all(fds[k], req, (size_t)len) != 0) {
            close(fds[k]);
            break;
        }
    }
    return k;
}

/* The job the parked connections wait on: one for island `idle`, which
 * has no worker, so it stays queued and no process runs it. Its priority
 * is below the loop's jobs: the scheduler does not let a job pass an older
 * one of the same priority, whatever their islands. */
static int64_t bench_park_job(hx_client_t *cl)
{
    static const char doc[] = "{\"name\":\"never\",\"priority\":-1,\"slices\":{\"s\":{\"shape\":[1],"
        "\"island\":\"idle\"}},\"computations\":[{\"name\":\"c\",\"slice\":\"s\",\"ops\":["
        "{\"op\":\"shard_index\",\"out\":\"b\"}],\"outputs\":[\"b\"]}]}";
    int64_t id = 0;
    return hx_job_submit(cl, doc, &id, NULL) == 201 ? id : -1;
}

int main(int argc, char **argv)
{
    static const char *const islands[] = {"west=4x4", "idle=1"};
    hx_cluster_t c;
    hx_client_t cl = {0};
    int rc = 1, parked = argc > 1 ? atoi(argv[1]) : 0, nfds = 0;
    static int fds[BENCH_PARKED_MAX];
    if (parked < 0 || parked > BENCH_PARKED_MAX) {
        fprintf(stderr, "usage: bench_loop [PARKED (0..%d)]\n", BENCH_PARKED_MAX);
        return 2;
    }
    struct rlimit rl;
    if (parked > 0 && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (hx_init() != 0 || hx_cluster_start(&c, islands, 2) != 0)
        return 1;
    tiny_doc = hx_text_q(tiny_doc_q);
    one_doc = hx_text_q(one_doc_q);
    if (!tiny_doc || !one_doc || hx_client_init(&cl, c.url) != 0)
        goto cleanup;
    for (int w = 0; w < 4; w++)
        if (hx_worker_start(&c, "west", 4) != 0)
            goto cleanup;
    bench_url = c.url;
    bench_cluster = &c;
    int64_t warm_id;
    if (bench_one(&cl, tiny_doc, &warm_id) != 0 ||   /* warm-up, and a check that it works */
        bench_one(&cl, one_doc, &warm_id) != 0)
        goto cleanup;
    if (parked > 0) {
        int64_t long_job = bench_park_job(&cl);
        if (long_job < 1 || (nfds = bench_park(raw_port(c.url), long_job, parked, fds)) < parked) {
            fprintf(stderr, "bench: %d of %d parked waits opened\n", nfds, parked);
            goto cleanup;
        }
        printf("loop.parked_waits %d\n", nfds);
    }
    if (bench_jobs_phase("loop.jobs_per_s.serial", tiny_doc, 1) != 0 ||
        bench_jobs_phase("loop.jobs_per_s.clients8", tiny_doc, BENCH_CLIENTS) != 0 ||
        bench_jobs_phase("loop.jobs_per_s.serial_1dev", one_doc, 1) != 0 ||
        bench_stream_phase("loop.jobs_per_s.stream_1dev", one_doc, 1) != 0 ||
        bench_stream_phase("loop.jobs_per_s.stream_1dev_pipelined4", one_doc, 4) != 0 ||
        bench_chain(&cl, BENCH_CHAIN) != 0)
        goto cleanup;
    rc = 0;
cleanup:
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    if (rc != 0)
        hx_cluster_dump_logs(&c, 3000);
    hx_client_cleanup(&cl);
    free(tiny_doc);
    free(one_doc);
    if (hx_cluster_stop(&c) != 0)
        fprintf(stderr, "bench: some process did not exit cleanly\n");
    return rc;
}
