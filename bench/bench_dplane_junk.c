/* bench_dplane_junk.c - issue 16's data-plane target: junk at every
 * worker's data-plane ports (150 idle connections each at data_addr,
 * random bytes at every listening port, a rogue UCX sender with wrong-key
 * frames for a running job and unclaimed frames; test_dplane_junk.h) on a
 * west=2x2 island served by two workers. Prints crashes, each worker's RSS
 * growth, and whether jobs afterwards are right.
 * Usage: bench_dplane_junk [idle_per_worker] (default 150). */
#include <stdio.h>
#include <stdlib.h>

#include "../tests/security/test_dplane_junk.h"
#include "support_harness.h"

int main(int argc, char **argv)
{
    int nidle = argc > 1 ? atoi(argv[1]) : 150;
    static const char *const islands[] = {"west=2x2"};
    hx_cluster_t c;
    hx_client_t cl;
    if (hx_init() != 0 || hx_cluster_start(&c, islands, 1) != 0 ||
        hx_worker_start(&c, "west", 2) != 0 || hx_worker_start(&c, "west", 2) != 0 ||
        hx_client_init(&cl, c.url) != 0)
        return 1;
    int64_t id;
    char st[32];
    if (junk_submit(&cl, 0, &id) != 0 || junk_check(&cl, id, st, sizeof st) != 1) {
        fprintf(stderr, "baseline job not right: %s\n", st);
        return 1;
    }
    long rss0[2] = {hx_rss_kb(c.workers[0].pid), hx_rss_kb(c.workers[1].pid)};
    char addrs[2][64];
    if (junk_data_addrs(&cl, addrs, 2) != 2)
        return 1;
    int64_t victim = -1;
    junk_submit(&cl, 2000000, &victim);
    junk_t *j = calloc(1, sizeof *j);
    if (!j)
        return 1;
    unsigned seed = 16;
    int64_t t0 = hx_now_ms();
    pid_t pids[2] = {c.workers[0].pid, c.workers[1].pid};
    for (int w = 0; w < 2; w++)
        junk_attack(j, junk_pid_of(pids, 2, addrs[w]), addrs[w], nidle, victim, JUNK_AR_OP,
                    &seed);
    int vrc = junk_check(&cl, victim, st, sizeof st);
    printf("junk: %d connections held (%d per worker idle), %d other ports, %lld sends "
           "(%lld rogue frames undelivered), %lld ms\n",
           j->nfds, nidle, j->ports_attacked, (long long)j->frames_sent,
           (long long)j->rogue_failed, (long long)(hx_now_ms() - t0));
    printf("attacked job: %s%s\n", st, vrc < 0 ? " WITH WRONG VALUES" : "");
    int right = 0, total = 5;
    for (int k = 0; k < total; k++)
        right += junk_submit(&cl, 0, &id) == 0 && junk_check(&cl, id, st, sizeof st) == 1;
    int crashes = 0;
    for (int w = 0; w < 2; w++) {
        int alive = junk_alive(c.workers[w].pid);
        crashes += !alive;
        long rss = alive ? hx_rss_kb(c.workers[w].pid) : -1;
        printf("worker %d: %s, RSS %ld -> %ld KiB (growth %.1f MiB)\n", w,
               alive ? "alive" : "DEAD", rss0[w], rss, (double)(rss - rss0[w]) / 1024.0);
    }
    printf("crashes: %d\njobs afterwards right: %d/%d\n", crashes, right, total);
    junk_close(j);
    free(j);
    hx_client_cleanup(&cl);
    hx_cluster_stop(&c);
    return crashes == 0 && right == total && vrc >= 0 ? 0 : 1;
}
