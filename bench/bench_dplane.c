/* bench_dplane.c - data-plane throughput between two dplane instances in
 * this process: 4 MiB tensors through shared memory (same-host transport)
 * and over loopback TCP (--data-transport tcp), with plain memcpy of the
 * same size in the same run as the ceiling. Each figure is the payload
 * bytes delivered into the receiver's mailbox (sender copy, transport,
 * receiver copy, mailbox hand-off) per second of wall time.
 *
 * usage: bench_dplane [ROUNDS]   (default 200 tensors per transport)
 *
 * The worker modules are compiled in, as in the unit tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../workers/dplane.c"
#include "../workers/mbox.c"
#include "../workers/shmring.c"

#define BENCH_ELEMS ((4 << 20) / 4)

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
        if (dplane_send(a, dplane_addr(b), &tag, t) != 0 ||
            mbox_take(mb_b, &tag, util_mono_us() + 10000000, &got) != MBOX_OK)
            return -1;
        tensor_free(got);
    }
    double dt = now_s() - t0;
    return (double)rounds * BENCH_ELEMS * 4 / dt;
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

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    if (rounds < 1)
        rounds = 200;
    log_setup("bench_dplane", LOG_WARN, 0);
    shape_t s = {.rank = 1, .dim = {BENCH_ELEMS}};
    tensor_t *t = tensor_new(&s);
    mbox_t *ma = mbox_new(), *mb = mbox_new();
    dplane_t *a = ma ? dplane_start("127.0.0.1:0", NULL, ma) : NULL;
    dplane_t *b = mb ? dplane_start("127.0.0.1:0", NULL, mb) : NULL;
    dplane_t *c = a ? dplane_start("127.0.0.1:0", NULL, ma) : NULL;  /* TCP-only sender */
    if (!t || !a || !b || !c) {
        fprintf(stderr, "bench_dplane: setup failed\n");
        return 1;
    }
    for (int64_t i = 0; i < BENCH_ELEMS; i++)
        t->data[i] = (float)i;
    dplane_set_shm(c, 0);
    /* Warm up both paths (connections, ring pages). */
    if (run(a, b, mb, t, 5) < 0 || run(c, b, mb, t, 5) < 0) {
        fprintf(stderr, "bench_dplane: warm-up failed\n");
        return 1;
    }
    double shm = run(a, b, mb, t, rounds);
    double tcp = run(c, b, mb, t, rounds);
    double mem = bench_memcpy(t, rounds);
    int64_t fs, ft;
    dplane_counts(a, &fs, &ft);
    printf("bench_dplane: %d x 4 MiB tensors, one sender, one receiver, same process\n", rounds);
    printf("  shared memory : %8.2f GB/s  (%lld frames via shm, %lld via tcp)\n", shm / 1e9,
           (long long)fs, (long long)ft);
    dplane_counts(c, &fs, &ft);
    printf("  loopback TCP  : %8.2f GB/s  (%lld frames via shm, %lld via tcp)\n", tcp / 1e9,
           (long long)fs, (long long)ft);
    printf("  memcpy        : %8.2f GB/s  (one copy, the ceiling for one copy)\n", mem / 1e9);
    printf("  shm / tcp     : %8.2fx\n", shm / tcp);
    dplane_stop(c);
    dplane_stop(a);
    dplane_stop(b);
    mbox_free(ma);
    mbox_free(mb);
    tensor_free(t);
    return 0;
}
