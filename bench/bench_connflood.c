/* bench_connflood.c - the connection flood of issue 16, full size: a
 * cluster like scripts/run.sh's (west=4x4 with four workers, east=2x4 with
 * two, --lease-ms 3000), one client holding 2,000 idle and 300 slowloris
 * connections (a header line every 4 s, reopened whenever atolld closes
 * one) for 15 s, with atolld's default header deadline. Meanwhile /healthz
 * is asked from a new connection every 100 ms, and one job is submitted.
 * Prints /healthz latency (max, p99, failures), workers lost, the job's
 * result and how many connections atolld closed.
 * usage: bench_connflood [IDLE [SLOW [SECONDS]]] (ATOLL_BIN_DIR as tests) */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tests/security/test_front_flood.h"
#include "support_harness.h"

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Live workers (state "live") and all listed, or -1 when unanswered. */
static int live_workers(hx_client_t *cl, int *total)
{
    hx_resp_t r;
    int n = -1;
    *total = -1;
    if (hx_request(cl, "GET", "/v1/workers", NULL, 0, &r) == 0 && r.status == 200) {
        json_t *ws = json_object_get(r.json, "workers");
        *total = (int)json_array_size(ws);
        n = 0;
        for (size_t i = 0; i < json_array_size(ws); i++) {
            const char *st = json_string_value(json_object_get(json_array_get(ws, i), "state"));
            n += st && strcmp(st, "live") == 0;
        }
    }
    hx_resp_clear(&r);
    return n;
}

int main(int argc, char **argv)
{
    int nidle = argc > 1 ? atoi(argv[1]) : 2000, nslow = argc > 2 ? atoi(argv[2]) : 300;
    int secs = argc > 3 ? atoi(argv[3]) : 15;
    long nofile = raw_raise_nofile();
    if (nofile < nidle + nslow + 256) {
        fprintf(stderr, "bench_connflood: RLIMIT_NOFILE %ld is too low for %d connections\n",
                nofile, nidle + nslow);
        return 1;
    }
    static const char *const islands[] = {"west=4x4", "east=2x4"};
    static const char *const extra[] = {"--lease-ms", "3000", NULL};
    hx_cluster_t c;
    hx_client_t cl;
    if (hx_init() != 0 || hx_cluster_start_args(&c, islands, 2, extra) != 0)
        return 1;
    int ok = 1;
    for (int i = 0; i < 4 && ok; i++)
        ok = hx_worker_start(&c, "west", 4) == 0;
    for (int i = 0; i < 2 && ok; i++)
        ok = hx_worker_start(&c, "east", 4) == 0;
    if (!ok || hx_client_init(&cl, c.url) != 0) {
        hx_cluster_stop(&c);
        return 1;
    }
    int port = raw_port(c.url), total0;
    int live0 = live_workers(&cl, &total0);
    raw_timeout_ms = 5000;

    flood_t f;
    int64_t t_open = raw_now_ms();
    if (flood_start(&f, port, nidle, nslow, 4000) != 0) {
        fprintf(stderr, "bench_connflood: could not open %d connections\n", nidle + nslow);
        hx_cluster_stop(&c);
        return 1;
    }
    t_open = raw_now_ms() - t_open;
    static const char doc[] =
        "{\"name\":\"under-flood\",\"slices\":{\"a\":{\"shape\":[2,2]}},\"computations\":["
        "{\"name\":\"p\",\"slice\":\"a\",\"ops\":[{\"op\":\"compute\",\"out\":\"busy\","
        "\"us\":500000},{\"op\":\"shard_index\",\"out\":\"i\"},{\"op\":\"all_reduce\","
        "\"out\":\"x\",\"args\":[\"i\"],\"reduce\":\"sum\"}],\"outputs\":[\"x\"]}]}";
    int64_t id = 0;
    int sub = hx_job_submit(&cl, doc, &id, NULL);
    size_t cap = (size_t)secs * 20 + 16, n = 0;
    int64_t *lat = malloc(cap * sizeof *lat);
    int failed = 0;
    int64_t t0 = raw_now_ms();
    while (lat && raw_now_ms() - t0 < (int64_t)secs * 1000 && n < cap) {
        int64_t ms;
        if (flood_probe(port, &ms) != 200)
            failed++;
        lat[n++] = ms;
        usleep(100 * 1000);
    }
    int total1, live1 = live_workers(&cl, &total1);
    json_t *job = NULL;
    int done = sub == 201 && hx_job_wait(&cl, id, 30000, 50, &job) == 0;
    const char *state = job ? hx_job_state(job) : "?";
    json_t *res = done ? hx_job_result(&cl, id) : NULL;
    int right = done && strcmp(state, "succeeded") == 0;
    for (int k = 0; k < 4 && right; k++)
        right = json_number_value(json_array_get(
                    json_object_get(hx_result_shard(res, "p.x", k), "values"), 0)) == 6.0;
    long reopened = atomic_load(&f.reopened), cfail = atomic_load(&f.connect_failed);
    flood_stop(&f);
    qsort(lat, n, sizeof *lat, cmp64);
    printf("connection flood: %d idle + %d slowloris for %d s (opened in %" PRId64 " ms)\n",
           nidle, nslow, secs, t_open);
    printf("  /healthz from new connections: %zu probes, max %" PRId64 " ms, p99 %" PRId64
           " ms, p50 %" PRId64 " ms, %d failed\n", n, n ? lat[n - 1] : -1,
           n ? lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] : -1, n ? lat[n / 2] : -1,
           failed);
    printf("  workers: %d live of %d before, %d live of %d after: %d lost\n", live0, total0,
           live1, total1, live0 - live1 + (total1 - total0));
    printf("  job %" PRId64 ": %s, values %s\n", id, state, right ? "right" : "WRONG");
    printf("  connections closed by atolld and reopened: %ld; connects refused: %ld\n",
           reopened, cfail);
    json_decref(job);
    json_decref(res);
    free(lat);
    hx_client_cleanup(&cl);
    int unclean = hx_cluster_stop(&c);
    return right && failed == 0 && live1 == live0 && !unclean ? 0 : 1;
}
