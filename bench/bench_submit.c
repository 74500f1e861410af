/* bench_submit.c - POST /v1/jobs throughput by durability mode (issue 9:
 * group commit).
 *
 *   bench_submit [SECONDS]        (per run, default 3, at most 20)
 *
 * Runs the binaries of $ATOLL_BIN_DIR (default build/bin). For each of
 * atolld's --durability modes (none: no fsync before the 201, the old
 * behaviour; commit: synchronous=FULL, an fsync inside every commit;
 * group: the default, an fdatasync of the WAL shared by concurrent
 * submitters) it starts a fresh atolld with one island that has no worker
 * (jobs stay queued: this measures acceptance, not execution), then submits
 * tiny jobs for SECONDS on 1 keep-alive connection, then on 8 at once.
 * In group mode a third run submits on 1 connection that pipelines
 * (SUBMIT_PIPE_DEPTH requests in flight, raw HTTP/1.1).
 * Prints `name value` lines: accepted jobs/s per mode and connection count,
 * fdatasync rounds and jobs per round (from /metrics), the ratios against
 * `none`, and this disk's own fdatasync latency (the floor of one
 * connection's fsync'd submit: requests on one connection are sequential).
 * In group mode, where one connection's time goes: a request's time on
 * the connection (1 / its rate), the mean fdatasync of atolld's rounds
 * (atoll_store_sync_seconds) and the mean wait of an acknowledgement for
 * its round (atoll_http_durable_wait_seconds), measured in atolld.
 * Exits 1 when a submit was not answered 201. */
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_clients.h"
#include "bench_pipe.h"
#include "support_harness.h"

#define SUBMIT_MAX_CONNS 8
#define SUBMIT_FSYNC_PROBES 200
#define SUBMIT_PIPE_DEPTH 4       /* submissions in flight on the pipelining connection */

static const char doc_q[] =
    "{'name':'s','slices':{'s':{'shape':[1,1],'island':'cold'}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";
static const char *const modes[] = {"none", "commit", "group"};

/* One step of a client: a submission answered 201. */
static int submit_one(hx_client_t *cl, const char *doc)
{
    hx_resp_t r;
    int rc = hx_request(cl, "POST", "/v1/jobs", doc, strlen(doc), &r) == 0 && r.status == 201
                 ? 0 : -1;
    hx_resp_clear(&r);
    return rc;
}

/* nconns submitters for secs seconds; jobs accepted per second. */
static double submit_rate(const char *url, const char *doc, int nconns, int secs, long *errors)
{
    bench_client_t subs[SUBMIT_MAX_CONNS];
    int64_t t0 = hx_now_ms();
    int started = bench_clients_start(subs, nconns, url, doc, submit_one, t0 + secs * 1000);
    long acc, err;
    bench_clients_join(subs, nconns, started, &acc, &err);
    *errors += err;
    return (double)acc * 1000.0 / (double)(hx_now_ms() - t0);
}

/* pipe_window's answer: counts in *(long *)ctx the answers other than 201
 * (a failed connection, -1, among them: pipe_window stops there). */
static int count_refused(int status, const char *body, void *ctx)
{
    (void)body;
    *(long *)ctx += status != 201;
    return 0;
}

/* One connection keeping `depth` submissions in flight (HTTP/1.1
 * pipelining) for secs seconds: accepted jobs per second, or -1. The
 * server answers a connection's requests in order, one at a time; what
 * a client gains by pipelining is its own turn-around between an answer
 * and its next request. */
static double submit_pipelined(const char *url, const char *doc, int depth, int secs,
                               long *errors)
{
    static pipe_rd_t p;
    char req[8192];
    int n = pipe_post(req, sizeof req, "/v1/jobs", doc);
    if (n < 0 || (p.fd = raw_connect(raw_port(url))) < 0)
        return -1;
    p.len = 0;
    long refused = 0;
    int64_t t0 = raw_now_ms();
    long answered = pipe_window(&p, req, n, depth, LONG_MAX, t0 + secs * 1000, NULL, 0,
                                count_refused, &refused);
    int64_t ms = raw_now_ms() - t0;
    close(p.fd);
    *errors += refused;
    return (double)(answered - refused) * 1000.0 / (double)(ms > 0 ? ms : 1);
}

/* Group commit's figures in atolld's /metrics, from its two histograms:
 * rounds and their fdatasync time, acknowledgements and their waits (s);
 * -1 where missing. The counts equal atoll_store_sync_rounds_total and
 * atoll_store_sync_waits_total (test_durable checks it). */
typedef struct sync_snap {
    double rounds, sync_s, waits, wait_s;
} sync_snap_t;

static sync_snap_t sync_snap(hx_client_t *cl)
{
    sync_snap_t v = {-1, -1, -1, -1};
    hx_resp_t r = {0};
    if (hx_request(cl, "GET", "/metrics", NULL, 0, &r) == 0 && r.status == 200 && r.body)
        v = (sync_snap_t){hx_metric_in(r.body, "atoll_store_sync_seconds_count"),
                          hx_metric_in(r.body, "atoll_store_sync_seconds_sum"),
                          hx_metric_in(r.body, "atoll_http_durable_wait_seconds_count"),
                          hx_metric_in(r.body, "atoll_http_durable_wait_seconds_sum")};
    hx_resp_clear(&r);
    return v;
}

/* Prints where a group-mode run's time went: label's per-connection
 * request time (conns connections at rate jobs/s), the mean round and the
 * mean acknowledgement's wait between snapshots a and b. */
static void print_sync_share(const char *label, int conns, double rate, sync_snap_t a,
                             sync_snap_t b)
{
    double rounds = b.rounds - a.rounds, waits = b.waits - a.waits;
    if (rate <= 0 || a.rounds < 0 || b.rounds < 0 || rounds <= 0 || waits <= 0)
        return;
    printf("%s_request_us %.0f fdatasync_mean_us %.0f ack_wait_mean_us %.0f\n", label,
           1e6 * conns / rate, 1e6 * (b.sync_s - a.sync_s) / rounds,
           1e6 * (b.wait_s - a.wait_s) / waits);
}

/* Median latency of pwrite(4 KiB) + fdatasync in dir, in microseconds. */
static double fdatasync_us(const char *dir)
{
    char path[HX_PATH_MAX];
    snprintf(path, sizeof path, "%s/fsync-probe", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    static char block[4096];
    double us[SUBMIT_FSYNC_PROBES];
    for (int i = 0; i < SUBMIT_FSYNC_PROBES; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        if (pwrite(fd, block, sizeof block, (off_t)(i % 16) * 4096) < 0 || fdatasync(fd) != 0) {
            close(fd);
            unlink(path);
            return -1;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        us[i] = (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
    }
    close(fd);
    unlink(path);
    for (int i = 1; i < SUBMIT_FSYNC_PROBES; i++)     /* insertion sort: 200 values */
        for (int j = i; j > 0 && us[j] < us[j - 1]; j--) {
            double t = us[j];
            us[j] = us[j - 1];
            us[j - 1] = t;
        }
    return us[SUBMIT_FSYNC_PROBES / 2];
}

int main(int argc, char **argv)
{
    int secs = argc > 1 ? atoi(argv[1]) : 3;
    if (secs < 1 || secs > 20) {
        fprintf(stderr, "usage: bench_submit [SECONDS 1..20]\n");
        return 2;
    }
    if (hx_init() != 0)
        return 1;
    char *doc = hx_text_q(doc_q);
    if (!doc)
        return 1;
    static const char *const islands[] = {"cold=4x4"};
    static const int conns[] = {1, SUBMIT_MAX_CONNS};
    double rate[3][2] = {{0}};
    long errors = 0;
    int rc = 0;
    for (int m = 0; m < 3 && rc == 0; m++) {
        hx_cluster_t c;
        const char *extra[] = {"--durability", modes[m], NULL};
        if (hx_cluster_start_args(&c, islands, 1, extra) != 0) {
            rc = 1;
            break;
        }
        if (m == 0)
            printf("fdatasync_p50_us %.0f\n", fdatasync_us(c.dir));
        hx_client_t cl;
        if (hx_client_init(&cl, c.url) != 0) {
            hx_cluster_stop(&c);
            rc = 1;
            break;
        }
        for (int k = 0; k < 2; k++) {
            sync_snap_t a = sync_snap(&cl);
            rate[m][k] = submit_rate(c.url, doc, conns[k], secs, &errors);
            sync_snap_t b = sync_snap(&cl);
            double rounds = b.rounds - a.rounds, waits = b.waits - a.waits;
            printf("submit_%s_conns%d_jobs_per_s %.0f\n", modes[m], conns[k], rate[m][k]);
            if (m == 2) {
                char label[64];
                snprintf(label, sizeof label, "submit_group_conns%d", conns[k]);
                printf("%s_syncs %.0f jobs_per_sync %.2f\n", label, rounds,
                       rounds > 0 ? waits / rounds : 0);
                print_sync_share(label, conns[k], rate[m][k], a, b);
            }
        }
        if (m == 2) {
            char label[64];
            snprintf(label, sizeof label, "submit_group_conns1_pipelined%d", SUBMIT_PIPE_DEPTH);
            sync_snap_t a = sync_snap(&cl);
            double r = submit_pipelined(c.url, doc, SUBMIT_PIPE_DEPTH, secs, &errors);
            sync_snap_t b = sync_snap(&cl);
            printf("%s_jobs_per_s %.0f\n", label, r);
            print_sync_share(label, 1, r, a, b);
        }
        hx_client_cleanup(&cl);
        if (hx_cluster_stop(&c) != 0)
            rc = 1;
    }
    for (int k = 0; k < 2 && rc == 0; k++)
        printf("ratio_conns%d_group_vs_none %.2f commit_vs_none %.2f\n", conns[k],
               rate[2][k] / rate[0][k], rate[1][k] / rate[0][k]);
    printf("errors %ld\n", errors);
    free(doc);
    return rc != 0 || errors ? 1 : 0;
}
