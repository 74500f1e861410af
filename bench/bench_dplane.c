/* bench_dplane.c - the data plane between two dplane instances in this
 * process (two UCX workers; UCX cannot tell them from two processes):
 *   - 4 MiB tensors, same host (UCX's pick) and forced TCP, with memcpy of
 *     the same size in the same run as the ceiling; each figure is payload
 *     bytes delivered into the receiver's mailbox per second (sender,
 *     transport, receiver copy, mailbox hand-off);
 *   - small-message one-way latency: ping-pong of one float, RTT / 2,
 *     same host (before the receiver has a TCP peer, and again after),
 *     each side's taker waiting in its mailbox as an executor does;
 *   - idle CPU: process CPU time over an idle window with both planes
 *     connected, in % of one core.
 *
 * usage: bench_dplane [ROUNDS] [IDLE_S]   (defaults 200 tensors, 10 s)
 *        bench_dplane ping|echo LISTEN PEER N [tcp]   (two processes, e.g.
 *        in two containers: bench/dplane_containers.sh)
 *
 * The same source builds against the socket data plane it replaced
 * (bench/dplane_compare.sh builds both and prints them side by side). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../workers/dplane.c"
#include "../workers/mbox.c"
#include "../workers/wopts.h"
#if __has_include("../workers/shmring.c")
#include "../workers/shmring.c"
#endif

#define BENCH_ELEMS ((4 << 20) / 4)
/* Round trips at most (op tags are int32, and N + 200 must not overflow). */
#define BENCH_MAX_ROUNDS 10000000

#ifdef DPLANE_SPIN_US              /* the UCX data plane */
#define BENCH_IMPL "ucx"
#include "shmpool.h"
static const mbox_key_t bench_key = {{1}};
static shmpool_t *bench_pool;      /* the same-host planes' pool (a worker's) */
/* pool: the plane reads and sends large tensors through bench_pool. */
static dplane_t *bench_start_pool(mbox_t *mb, int tcp, int pool)
{
    return dplane_start("127.0.0.1:0", NULL, mb, tcp ? DPLANE_TCP : DPLANE_AUTO,
                        pool ? bench_pool : NULL);
}
static dplane_t *bench_start(mbox_t *mb, int tcp)
{
    return bench_start_pool(mb, tcp, !tcp);
}
static int bench_pool_on(void)
{
    bench_pool = dplane_pool_new(DPLANE_AUTO, (size_t)64 << 20);
    shmpool_install(bench_pool);
    return bench_pool ? 0 : -1;
}
static void bench_pool_off(void)
{
    shmpool_install(NULL);
    shmpool_free(bench_pool);
}
static int bench_send(dplane_t *dp, const char *addr, const mbox_tag_t *tag, const tensor_t *t)
{
    return dplane_send(dp, addr, tag, &bench_key, t);
}
#else                              /* the socket + memfd-ring data plane */
#define BENCH_IMPL "sockets"
static int bench_pool_on(void) { return 0; }
static void bench_pool_off(void) {}
static dplane_t *bench_start(mbox_t *mb, int tcp)
{
    dplane_t *dp = dplane_start("127.0.0.1:0", NULL, mb);
    if (dp && tcp)
        dplane_set_shm(dp, 0);
    return dp;
}
static int bench_send(dplane_t *dp, const char *addr, const mbox_tag_t *tag, const tensor_t *t)
{
    return dplane_send(dp, addr, tag, t);
}
#endif

static double now_s(void)
{
    return (double)util_mono_us() / 1e6;
}

/* Sends `rounds` tensors from a to b, taking each at b; returns bytes/s,
 * or -1 on a failure. */
static double run(dplane_t *a, dplane_t *b, mbox_t *mb_b, const tensor_t *t, int rounds)
{
    double t0 = now_s();
    for (int i = 0; i < rounds; i++) {
        mbox_tag_t tag = {.job = 1, .op = i};
        tensor_t *got = NULL;
        if (bench_send(a, dplane_addr(b), &tag, t) != 0 ||
            mbox_take(mb_b, &tag, util_mono_us() + 10000000, &got) != MBOX_OK)
            return -1;
        tensor_free(got);
    }
    double dt = now_s() - t0;
    return (double)rounds * (double)shape_numel(&t->shape) * 4 / dt;
}

static double bench_memcpy(const tensor_t *t, int rounds)
{
    float *dst = malloc((size_t)BENCH_ELEMS * 4);
    if (!dst)
        return -1;
    memset(dst, 1, (size_t)BENCH_ELEMS * 4);     /* fault the pages in first */
    double t0 = now_s();
    for (int i = 0; i < rounds; i++) {
        memcpy(dst, t->data, (size_t)BENCH_ELEMS * 4);
        __asm__ volatile("" : : "r"(dst) : "memory");  /* keep every copy */
    }
    double dt = now_s() - t0;
    free(dst);
    return (double)rounds * BENCH_ELEMS * 4 / dt;
}

typedef struct echo {
    dplane_t *me;
    const char *peer;              /* the pinging plane's address */
    mbox_t *mb;
    int n;
    int rc;
} echo_t;

/* The echo side of the ping-pong: takes ping i, sends pong i. */
static void *echo_main(void *arg)
{
    echo_t *e = arg;
    for (int i = 0; i < e->n; i++) {
        mbox_tag_t ping = {.job = 2, .op = i}, pong = {.job = 3, .op = i};
        tensor_t *got = NULL;
        if (mbox_take(e->mb, &ping, util_mono_us() + 10000000, &got) != MBOX_OK ||
            bench_send(e->me, e->peer, &pong, got) != 0) {
            tensor_free(got);
            e->rc = -1;
            return NULL;
        }
        tensor_free(got);
    }
    return NULL;
}

/* The pinging side: pings first..first+n-1 of one float to `to`, each
 * waiting for its pong in ma. One-way latency in microseconds (RTT / 2),
 * or -1. */
static double pings(dplane_t *a, mbox_t *ma, const char *to, int first, int n)
{
    shape_t s = {.rank = 0};
    tensor_t *one = tensor_new(&s);
    if (!one)
        return -1;
    double t0 = now_s();
    int ok = 1;
    for (int i = first; ok && i < first + n; i++) {
        mbox_tag_t ping = {.job = 2, .op = i}, pong = {.job = 3, .op = i};
        tensor_t *got = NULL;
        ok = bench_send(a, to, &ping, one) == 0 &&
             mbox_take(ma, &pong, util_mono_us() + 10000000, &got) == MBOX_OK;
        tensor_free(got);
    }
    double dt = now_s() - t0;
    tensor_free(one);
    return ok ? dt / n / 2 * 1e6 : -1;
}

/* One-way latency between two planes of this process, or -1. */
static double pingpong(dplane_t *a, mbox_t *ma, dplane_t *b, mbox_t *mb, int n)
{
    echo_t e = {.me = b, .peer = dplane_addr(a), .mb = mb, .n = n};
    pthread_t th;
    if (pthread_create(&th, NULL, echo_main, &e) != 0)
        return -1;
    double lat = pings(a, ma, dplane_addr(b), 0, n);
    if (lat < 0)
        mbox_shutdown(mb);         /* ends the echo thread's wait */
    pthread_join(th, NULL);
    return lat >= 0 && e.rc == 0 ? lat : -1;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec / 1e6;
}

#ifdef DPLANE_SPIN_US
/* ---- two processes (bench/dplane_containers.sh runs them in two
 * containers): `bench_dplane ping|echo LISTEN PEER N [tcp]`. The echo side
 * answers N + 200 pings, then takes BW_ROUNDS 4 MiB tensors and answers
 * the last, twice; the pinging side prints the one-way latency over N round
 * trips (after 200 for warm-up) and the 4 MiB bandwidth to its peer of the
 * second round (the first maps the pool's blocks in the peer). */

#define BW_ROUNDS 50
#define HELLO_WAIT_US 30000000     /* the peer may start up to 30 s later */

/* The first exchange, retried until the peer's plane answers: a send
 * fails while nobody listens at its address. */
static int hello(dplane_t *dp, mbox_t *mb, const char *peer, int pinger)
{
    shape_t s = {.rank = 0};
    tensor_t *one = tensor_new(&s), *got = NULL;
    mbox_tag_t hi = {.job = 4, .op = pinger ? 0 : 1}, back = {.job = 4, .op = pinger ? 1 : 0};
    int64_t end = util_mono_us() + HELLO_WAIT_US;
    int rc = -1;
    if (!one)
        return -1;
    if (pinger) {
        while (rc != 0 && util_mono_us() < end) {
            if (bench_send(dp, peer, &hi, one) == 0 &&
                mbox_take(mb, &back, util_mono_us() + 1000000, &got) == MBOX_OK)
                rc = 0;
            else
                usleep(100000);
        }
    } else if (mbox_take(mb, &back, end, &got) == MBOX_OK) {
        rc = bench_send(dp, peer, &hi, one);
    }
    tensor_free(got);
    tensor_free(one);
    return rc;
}

/* The bandwidth half: BW_ROUNDS 4 MiB tensors, the last one answered. */
static double bw_send(dplane_t *dp, mbox_t *mb, const char *peer)
{
    shape_t s = {.rank = 1, .dim = {BENCH_ELEMS}};
    tensor_t *t = tensor_new(&s), *got = NULL;
    if (!t)
        return -1;
    double t0 = now_s();
    int ok = 1;
    for (int i = 0; ok && i < BW_ROUNDS; i++) {
        mbox_tag_t tag = {.job = 1, .op = i};
        ok = bench_send(dp, peer, &tag, t) == 0;
    }
    mbox_tag_t done = {.job = 5};
    ok = ok && mbox_take(mb, &done, util_mono_us() + 60000000, &got) == MBOX_OK;
    double dt = now_s() - t0;
    tensor_free(got);
    tensor_free(t);
    return ok ? (double)BW_ROUNDS * BENCH_ELEMS * 4 / dt : -1;
}

static int bw_take(dplane_t *dp, mbox_t *mb, const char *peer)
{
    tensor_t *got = NULL;
    for (int i = 0; i < BW_ROUNDS; i++) {
        mbox_tag_t tag = {.job = 1, .op = i};
        if (mbox_take(mb, &tag, util_mono_us() + 60000000, &got) != MBOX_OK)
            return -1;
        if (i + 1 < BW_ROUNDS)
            tensor_free(got);
    }
    mbox_tag_t done = {.job = 5};
    int rc = bench_send(dp, peer, &done, got);
    tensor_free(got);
    return rc;
}

static int two_procs(int argc, char **argv)
{
    if (argc < 5 || atoi(argv[4]) < 1 || atoi(argv[4]) > BENCH_MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_dplane ping|echo LISTEN PEER N [tcp] (N 1..%d)\n",
                BENCH_MAX_ROUNDS);
        return 2;
    }
    int pinger = strcmp(argv[1], "ping") == 0, n = atoi(argv[4]), rc = 1;
    log_setup("bench_dplane", LOG_ERROR, 0);
    const char *peer = argv[3];
    dplane_transport_t tr = argc > 5 && strcmp(argv[5], "tcp") == 0 ? DPLANE_TCP : DPLANE_AUTO;
    /* A pool, as a worker has (a same-host peer reads large tensors from
     * it; a peer in another container gets them sent plainly). */
    mbox_t *mb = tr == DPLANE_TCP || bench_pool_on() == 0 ? mbox_new() : NULL;
    dplane_t *dp = mb ? dplane_start(argv[2], NULL, mb, tr, bench_pool) : NULL;
    if (!dp || hello(dp, mb, peer, pinger) != 0) {
        fprintf(stderr, "bench_dplane %s: no peer at %s\n", argv[1], peer);
        goto cleanup;
    }
    if (!pinger) {
        echo_t e = {.me = dp, .peer = peer, .mb = mb, .n = n + 200};
        echo_main(&e);
        rc = e.rc == 0 && bw_take(dp, mb, peer) == 0 && bw_take(dp, mb, peer) == 0 ? 0 : 1;
        goto cleanup;
    }
    double lat = pings(dp, mb, peer, 0, 200) >= 0 ? pings(dp, mb, peer, 200, n) : -1;
    double bw = lat >= 0 && bw_send(dp, mb, peer) >= 0 ? bw_send(dp, mb, peer) : -1;
    if (bw < 0) {
        fprintf(stderr, "bench_dplane ping: the exchange with %s failed\n", peer);
        goto cleanup;
    }
    printf("  1 float one-way, to %s : %8.1f us  (ping-pong / 2, %d round trips)\n", peer, lat, n);
    printf("  4 MiB, to %s           : %8.2f GB/s  (%d tensors)\n", peer, bw / 1e9, BW_ROUNDS);
    rc = 0;
cleanup:
    if (dp)
        dplane_stop(dp);
    mbox_free(mb);
    bench_pool_off();
    return rc;
}
#endif

int main(int argc, char **argv)
{
#ifdef DPLANE_SPIN_US
    if (argc > 1 && (strcmp(argv[1], "ping") == 0 || strcmp(argv[1], "echo") == 0))
        return two_procs(argc, argv);
#endif
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    int idle_s = argc > 2 ? atoi(argv[2]) : 10;
    if (rounds < 1 || rounds > BENCH_MAX_ROUNDS / 50)
        rounds = 200;
    if (idle_s < 0)
        idle_s = 10;
    log_setup("bench_dplane", LOG_WARN, 0);
    /* As atoll-worker: large blocks from a heap that keeps them, not a
     * fresh mmap (and its page faults) per tensor or send. */
    util_malloc_keep(WORKER_MMAP_MIN, WORKER_TRIM_MIN);
    shape_t s = {.rank = 1, .dim = {BENCH_ELEMS}};
#ifdef DPLANE_SPIN_US
    /* Before the pool, in the same run: UCX's own protocols (CMA single
     * copy between processes) on planes without a pool, from malloc'd
     * memory. */
    tensor_t *plain = tensor_new(&s);
    mbox_t *md = mbox_new(), *me = mbox_new();
    dplane_t *d = md ? bench_start_pool(md, 0, 0) : NULL;
    dplane_t *e = me ? bench_start_pool(me, 0, 0) : NULL;
    if (!plain || !d || !e || run(d, e, me, plain, 5) < 0) {
        fprintf(stderr, "bench_dplane: setup without the pool failed\n");
        return 1;
    }
    double no_pool = run(d, e, me, plain, rounds);
    dplane_stop(d);
    dplane_stop(e);
    mbox_free(md);
    mbox_free(me);
    tensor_free(plain);
#endif
    if (bench_pool_on() != 0) {
        fprintf(stderr, "bench_dplane: no shared-memory pool\n");
        return 1;
    }
    tensor_t *t = tensor_new(&s);
    mbox_t *ma = mbox_new(), *mb = mbox_new(), *mc = mbox_new();
    dplane_t *a = ma ? bench_start(ma, 0) : NULL;
    dplane_t *b = mb ? bench_start(mb, 0) : NULL;
    dplane_t *c = mc ? bench_start(mc, 1) : NULL;    /* TCP-only sender */
    if (!t || !a || !b || !c) {
        fprintf(stderr, "bench_dplane: setup failed\n");
        return 1;
    }
    for (int64_t i = 0; i < BENCH_ELEMS; i++)
        t->data[i] = (float)i;
    /* Same host first, while b has no TCP peer: two workers of one host.
     * Then TCP (c), and the same-host latency again: now every progress
     * of b's UCX worker also polls its TCP interfaces (an epoll_wait per
     * interface in use), as in a worker with peers on other hosts. */
    int npp = rounds * 50;
    if (run(a, b, mb, t, 5) < 0) {
        fprintf(stderr, "bench_dplane: warm-up failed\n");
        return 1;
    }
    double shm = run(a, b, mb, t, rounds);
    pingpong(a, ma, b, mb, 200);
    double lat = pingpong(a, ma, b, mb, npp);
    if (run(c, b, mb, t, 5) < 0) {
        fprintf(stderr, "bench_dplane: TCP warm-up failed\n");
        return 1;
    }
    double tcp = run(c, b, mb, t, rounds);
    double mem = bench_memcpy(t, rounds);
    double lat_mixed = pingpong(a, ma, b, mb, npp);
    pingpong(c, mc, b, mb, 200);
    double lat_tcp = pingpong(c, mc, b, mb, npp);
    double c0 = cpu_s(), w0 = now_s();
    sleep((unsigned)idle_s);
    double idle = (cpu_s() - c0) / (now_s() - w0) * 100;
    printf("bench_dplane (%s): one sender, one receiver, two data planes in one process\n",
           BENCH_IMPL);
    printf("  4 MiB, same host  : %8.2f GB/s  (%.0f%% of memcpy)\n", shm / 1e9, shm / mem * 100);
#ifdef DPLANE_SPIN_US
    printf("  4 MiB, same host, no pool (UCX rendezvous, CMA) : %8.2f GB/s  (%.0f%% of memcpy;"
           " pool / no pool %.1fx)\n", no_pool / 1e9, no_pool / mem * 100, shm / no_pool);
#endif
    printf("  4 MiB, TCP        : %8.2f GB/s\n", tcp / 1e9);
    printf("  memcpy 4 MiB      : %8.2f GB/s  (one copy, the ceiling for one copy)\n", mem / 1e9);
    printf("  1 float one-way, same host : %8.1f us  (ping-pong / 2, %d round trips)\n", lat, npp);
    printf("  1 float one-way, same host, receiver also has a TCP peer : %8.1f us\n", lat_mixed);
    printf("  1 float one-way, TCP       : %8.1f us\n", lat_tcp);
    printf("  idle CPU (3 planes, %d s)   : %8.2f %% of one core\n", idle_s, idle);
    dplane_stop(c);
    dplane_stop(a);
    dplane_stop(b);
    mbox_free(ma);
    mbox_free(mb);
    mbox_free(mc);
    tensor_free(t);
    bench_pool_off();
    return 0;
}
