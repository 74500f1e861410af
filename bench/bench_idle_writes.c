/* bench_idle_writes.c - what an idle controller writes (issue 16, finding
 * 10): atolld with island w=8x8 and 64 parked workers of one device (sim
 * backend, default poll wait and lease), idle for 10 s. Prints SQLite
 * write transactions per second in total and per worker, from
 * atoll_store_write_transactions_total (target: < 10/s in total).
 * usage: bench_idle_writes [WORKERS [SECONDS [POLL_MS]]] (ATOLL_BIN_DIR as
 * tests; WORKERS <= 64) */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_harness.h"

#define BENCH_MAX_WORKERS 64

/* atoll_store_write_transactions_total, or -1. */
static double write_txns(hx_client_t *cl)
{
    hx_resp_t r;
    if (hx_request(cl, "GET", "/metrics", NULL, 0, &r) != 0)
        return -1;
    const char *key = "\natoll_store_write_transactions_total ";
    const char *p = r.status == 200 ? strstr(r.body, key) : NULL;
    double v = p ? strtod(p + strlen(key), NULL) : -1;
    hx_resp_clear(&r);
    return v;
}

/* Starts worker i (one device on w) and waits for its ready line. */
static int start_worker(hx_cluster_t *c, hx_proc_t *p, int i, const char *poll_ms)
{
    char bin[HX_PATH_MAX], line[512];
    snprintf(p->name, sizeof p->name, "bench-worker-%d", i);
    snprintf(p->log_path, sizeof p->log_path, "%s/bench-worker-%d.log", c->dir, i);
    snprintf(bin, sizeof bin, "%s/atoll-worker", hx_bin_dir());
    char *argv[] = {bin, "--controller", c->url, "--island", "w", "--devices", "1",
                    "--backend", "sim", "--poll-ms", (char *)poll_ms, NULL};
    if (hx_proc_spawn(p, argv, 0) != 0)
        return -1;
    return hx_proc_read_line(p, line, sizeof line, 30000);
}

int main(int argc, char **argv)
{
    int nworkers = argc > 1 ? atoi(argv[1]) : 64, seconds = argc > 2 ? atoi(argv[2]) : 10;
    const char *poll_ms = argc > 3 ? argv[3] : "1000";
    if (nworkers < 1 || nworkers > BENCH_MAX_WORKERS || seconds < 1) {
        fprintf(stderr, "usage: bench_idle_writes [WORKERS<=64 [SECONDS [POLL_MS]]]\n");
        return 2;
    }
    static hx_cluster_t c;
    static hx_proc_t workers[BENCH_MAX_WORKERS];
    static const char *const islands[] = {"w=8x8"};
    hx_client_t cl;
    int rc = 1, started = 0;
    if (hx_init() != 0 || hx_cluster_start(&c, islands, 1) != 0)
        return 1;
    if (hx_client_init(&cl, c.url) != 0)
        goto cleanup;
    for (; started < nworkers; started++) {
        if (start_worker(&c, &workers[started], started, poll_ms) != 0) {
            fprintf(stderr, "worker %d did not get ready\n", started);
            goto cleanup;
        }
    }
    hx_sleep_ms(2000);      /* registrations and first polls settle */
    double a = write_txns(&cl);
    int64_t t0 = hx_now_ms();
    hx_sleep_ms(seconds * 1000);
    double b = write_txns(&cl);
    double dt = (double)(hx_now_ms() - t0) / 1000.0;
    if (a < 0 || b < 0) {
        fprintf(stderr, "/metrics lacks atoll_store_write_transactions_total\n");
        goto cleanup;
    }
    double rate = (b - a) / dt;
    printf("idle_writes.workers %d\nidle_writes.seconds %.1f\nidle_writes.poll_ms %s\n"
           "idle_writes.write_transactions %.0f\nidle_writes.per_second %.2f\n"
           "idle_writes.per_second_per_worker %.3f\nidle_writes.target_per_second 10\n",
           nworkers, dt, poll_ms, b - a, rate, rate / nworkers);
    rc = rate < 10 ? 0 : 3;
cleanup:
    for (int i = 0; i < started; i++)
        if (workers[i].pid > 0)
            hx_proc_stop(&workers[i], SIGTERM, 10000);
    hx_client_cleanup(&cl);
    hx_cluster_stop(&c);
    return rc;
}
