/* test_worker_dplane.c - the data plane's frame codec and real UCX traffic
 * between dplane instances in this process: shared memory as UCX picks it
 * for same-host peers, UCX's TCP when forced, keys, the gate's parking of
 * frames without room, raw junk at the listener, peers that went away
 * (workers/dplane.c, dplane_rx.c and mbox.c compiled in, the other dplane
 * files linked); origin slots recycled once every one is taken;
 * sends from the shared-memory pool, read by the receiver in place. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../workers/dplane.c"
#include "../../workers/dplane_rx.c"
#include "../../workers/mbox.c"

static int64_t in_ms(int ms)
{
    return util_mono_us() + (int64_t)ms * 1000;
}

static tensor_t *iota(int rank, const int64_t *dims)
{
    shape_t s = {.rank = rank};
    for (int i = 0; i < rank; i++)
        s.dim[i] = dims[i];
    tensor_t *t = tensor_new(&s);
    assert_non_null(t);
    for (int64_t i = 0; i < shape_numel(&s); i++)
        t->data[i] = (float)i * 0.5f - 3.0f;
    return t;
}

static void test_hdr_roundtrip(void **state)
{
    (void)state;
    dplane_hdr_t h = {.tag = {.job = (int64_t)1 << 40, .attempt = 2, .comp = 3, .op = 4,
                              .src = 5, .dst = 6},
                      .shape = {.rank = 3, .dim = {2, 3, 4, 0}},
                      .nbytes = 24 * 4, .ready_unix_us = DPLANE_READY_MAX - 7,
                      .key = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}};
    uint8_t buf[DPLANE_HDR_SIZE];
    dplane_hdr_encode(&h, buf);
    /* Big-endian magic "ATDP" leads the frame. */
    assert_memory_equal(buf, "ATDP", 4);
    dplane_hdr_t d;
    assert_int_equal(dplane_hdr_decode(buf, &d), 0);
    assert_true(d.tag.job == h.tag.job);
    assert_int_equal(d.tag.attempt, 2);
    assert_int_equal(d.tag.comp, 3);
    assert_int_equal(d.tag.op, 4);
    assert_int_equal(d.tag.src, 5);
    assert_int_equal(d.tag.dst, 6);
    assert_true(shape_equal(&d.shape, &h.shape));
    assert_int_equal(d.nbytes, 96);
    assert_true(d.ready_unix_us == DPLANE_READY_MAX - 7);
    assert_memory_equal(d.key.b, h.key.b, MBOX_KEY_SIZE);

    dplane_hdr_t scalar = {.shape = {.rank = 0}, .nbytes = 4};
    dplane_hdr_encode(&scalar, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), 0);
    assert_int_equal(d.shape.rank, 0);
}

static void test_hdr_rejects_bad_frames(void **state)
{
    (void)state;
    dplane_hdr_t h = {.shape = {.rank = 2, .dim = {2, 2}}, .nbytes = 16};
    uint8_t good[DPLANE_HDR_SIZE], buf[DPLANE_HDR_SIZE];
    dplane_hdr_t d;
    dplane_hdr_encode(&h, good);
    assert_int_equal(dplane_hdr_decode(good, &d), 0);

    memcpy(buf, good, sizeof buf);
    buf[0] ^= 0xff;                                  /* magic */
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);

    h.nbytes = 12;                                   /* payload size vs shape */
    dplane_hdr_encode(&h, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);

    h = (dplane_hdr_t){.shape = {.rank = 2, .dim = {2, 0}}, .nbytes = 0};   /* zero dim */
    dplane_hdr_encode(&h, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);

    h = (dplane_hdr_t){.shape = {.rank = 1, .dim = {4, 9}}, .nbytes = 16};  /* dim past rank */
    dplane_hdr_encode(&h, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);

    h = (dplane_hdr_t){.shape = {.rank = 2, .dim = {1 << 13, 1 << 12}},    /* 32 Mi elements */
                       .nbytes = (uint64_t)1 << 27};
    dplane_hdr_encode(&h, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);

    /* ready past 2^52, or negative (a top bit set): what no clock says. */
    h = (dplane_hdr_t){.shape = {.rank = 2, .dim = {2, 2}}, .nbytes = 16,
                       .ready_unix_us = DPLANE_READY_MAX};
    dplane_hdr_encode(&h, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), 0);
    h.ready_unix_us = DPLANE_READY_MAX + 1;
    dplane_hdr_encode(&h, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);
    h.ready_unix_us = -1;
    dplane_hdr_encode(&h, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);

    memcpy(buf, good, sizeof buf);
    buf[7] = 5;                                      /* rank 5 */
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);

    /* Rank 5 over four dims that would all pass (1 element, 4 bytes):
     * refused for the rank alone (shape_t holds TENSOR_MAX_RANK dims). */
    h = (dplane_hdr_t){.shape = {.rank = 4, .dim = {1, 1, 1, 1}}, .nbytes = 4};
    dplane_hdr_encode(&h, buf);
    assert_int_equal(dplane_hdr_decode(buf, &d), 0);
    buf[7] = 5;
    assert_int_equal(dplane_hdr_decode(buf, &d), -1);
}

static void test_parse_addr(void **state)
{
    (void)state;
    char host[64];
    int port = -1;
    assert_int_equal(dplane_parse_addr("127.0.0.1:40123", host, sizeof host, &port), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 40123);
    assert_int_equal(dplane_parse_addr("worker-3:0", host, sizeof host, &port), 0);
    assert_int_equal(port, 0);
    assert_int_equal(dplane_parse_addr("127.0.0.1", host, sizeof host, &port), -1);
    assert_int_equal(dplane_parse_addr(":80", host, sizeof host, &port), -1);
    assert_int_equal(dplane_parse_addr("h:70000", host, sizeof host, &port), -1);
    assert_int_equal(dplane_parse_addr("h:8x", host, sizeof host, &port), -1);
}

static const mbox_key_t KEY = {{0xa7, 0x01, 0x42}};

typedef struct pair {
    mbox_t *mb_a, *mb_b;
    dplane_t *a, *b;
} pair_t;

static int pair_setup(void **state)
{
    pair_t *p = calloc(1, sizeof *p);
    p->mb_a = mbox_new();
    p->mb_b = mbox_new();
    p->a = dplane_start("127.0.0.1:0", NULL, p->mb_a, DPLANE_AUTO, NULL);
    p->b = dplane_start("127.0.0.1:0", NULL, p->mb_b, DPLANE_AUTO, NULL);
    if (!p->a || !p->b)
        return -1;
    *state = p;
    return 0;
}

static int pair_teardown(void **state)
{
    pair_t *p = *state;
    dplane_stop(p->a);
    dplane_stop(p->b);
    mbox_free(p->mb_a);
    mbox_free(p->mb_b);
    free(p);
    return 0;
}

static void assert_same_tensor(const tensor_t *x, const tensor_t *y)
{
    assert_true(shape_equal(&x->shape, &y->shape));
    assert_memory_equal(x->data, y->data, (size_t)shape_numel(&x->shape) * sizeof(float));
}

static void send_take(dplane_t *from, dplane_t *to, mbox_t *to_mb, const mbox_tag_t *tag,
                      const tensor_t *t)
{
    assert_int_equal(dplane_send(from, dplane_addr(to), tag, &KEY, t), 0);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(to_mb, tag, in_ms(10000), &got), MBOX_OK);
    assert_same_tensor(got, t);
    tensor_free(got);
}

/* One active message of id from a to b as the bytes given, as a rogue
 * peer's UCX would send it (a reply endpoint, so b knows the origin). */
static void raw_am_send(pair_t *p, unsigned id, const void *hdr, size_t hdr_len,
                        const void *payload, size_t len)
{
    ucp_ep_h ep = peer_ep(p->a, dplane_addr(p->b));
    assert_non_null(ep);
    send_wait_t *w = send_wait_new(p->a);
    assert_non_null(w);
    ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                               UCP_OP_ATTR_FIELD_USER_DATA |
                                               UCP_OP_ATTR_FIELD_FLAGS,
                               .flags = UCP_AM_SEND_FLAG_REPLY, .cb.send = send_done,
                               .user_data = w};
    void *r = ucp_am_send_nbx(ep, id, hdr, hdr_len, payload, len, &prm);
    assert_false(UCS_PTR_IS_ERR(r));
    if (r) {
        dp_wake(p->a);
        int abandoned = 0;
        int64_t deadline = util_mono_us() + DPLANE_SEND_TIMEOUT_US;
        assert_int_equal(send_wait(p->a, w, dplane_addr(p->b), ep, deadline, &abandoned), UCS_OK);
        ucp_request_free(r);
    }
    send_wait_free(w);
}

/* Sends forged under the wrong key, then t under KEY, with the same tag
 * (a task of b declared under KEY): b takes exactly t, and counts one
 * frame dropped for its key. */
static void send_forged_then_real(pair_t *p, const mbox_tag_t *tag, const mbox_key_t *wrong,
                                  const tensor_t *forged, const tensor_t *t)
{
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), tag, wrong, forged), 0);
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), tag, &KEY, t), 0);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(p->mb_b, tag, in_ms(10000), &got), MBOX_OK);
    assert_same_tensor(got, t);
    tensor_free(got);
    dplane_guard_stats_t g;
    dplane_guard_stats(p->b, &g);
    assert_int_equal(g.mb.bad_key, 1);
}

/* Frames cross UCX and keep their tags, shapes and bytes: small (eager),
 * 4 MiB (rendezvous) and scalar, both ways. */
static void test_loopback_send(void **state)
{
    pair_t *p = *state;
    assert_string_not_equal(dplane_addr(p->a), dplane_addr(p->b));
    assert_int_equal(strncmp(dplane_addr(p->a), "127.0.0.1:", 10), 0);
    int64_t small_dims[2] = {2, 3}, big_dims[2] = {1024, 1024};
    tensor_t *small = iota(2, small_dims), *big = iota(2, big_dims), *sc = iota(0, NULL);
    mbox_tag_t t1 = {.job = 1, .comp = 0, .op = 3, .src = 0, .dst = 1};
    mbox_tag_t t2 = t1, t3 = t1;
    t2.src = 2;
    t3.op = 9;
    send_take(p->a, p->b, p->mb_b, &t1, small);
    send_take(p->a, p->b, p->mb_b, &t2, big);
    send_take(p->a, p->b, p->mb_b, &t3, sc);
    assert_int_equal(mbox_count(p->mb_a), 0);   /* nothing went to the sender */
    send_take(p->b, p->a, p->mb_a, &t1, small);
    tensor_free(small);
    tensor_free(big);
    tensor_free(sc);
}

typedef struct echo {
    pair_t *p;
    int n, rc;
} echo_t;

/* b's side of a ping-pong: takes ping i, sends it back as pong i, until
 * b's mailbox is shut down. */
static void *echo_main(void *arg)
{
    echo_t *e = arg;
    for (int i = 0; i < e->n && e->rc == 0; i++) {
        mbox_tag_t ping = {.job = 21, .op = i, .dst = 1}, pong = {.job = 22, .op = i};
        tensor_t *got = NULL;
        mbox_status_t st = mbox_take(e->p->mb_b, &ping, in_ms(20000), &got);
        if (st != MBOX_OK || dplane_send(e->p->b, dplane_addr(e->p->a), &pong, &KEY, got) != 0)
            e->rc = st == MBOX_STOPPED ? 1 : -1;
        tensor_free(got);
    }
    return NULL;
}

static pthread_t counted_thread;
static atomic_int puts_in_thread;

/* Accounting hook: runs in the thread that puts (the one that progressed
 * UCX and so ran the handler). */
static void count_puts(void *ctx, int64_t dobjects, int64_t dbytes)
{
    (void)ctx;
    (void)dbytes;
    if (dobjects > 0 && pthread_equal(pthread_self(), counted_thread))
        atomic_fetch_add(&puts_in_thread, 1);
}

/* Up to `rounds` pings from a to b's echo, each pong taken (and checked)
 * by this thread; with until_put, only until one pong was put in this
 * thread (puts_in_thread). Stops the echo. Whether every round went. */
static int ping_pong(pair_t *p, int rounds, int until_put)
{
    echo_t e = {.p = p, .n = rounds};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, echo_main, &e), 0);
    int ok = 1;
    for (int i = 0; ok && i < rounds && !(until_put && atomic_load(&puts_in_thread) > 0); i++) {
        int64_t dims[1] = {3};
        tensor_t *t = iota(1, dims), *got = NULL;
        t->data[0] = (float)i;
        mbox_tag_t ping = {.job = 21, .op = i, .dst = 1}, pong = {.job = 22, .op = i};
        ok = dplane_send(p->a, dplane_addr(p->b), &ping, &KEY, t) == 0 &&
             mbox_take(p->mb_a, &pong, in_ms(20000), &got) == MBOX_OK;
        if (ok)
            assert_same_tensor(got, t);
        tensor_free(t);
        tensor_free(got);
    }
    mbox_shutdown(p->mb_b);        /* the echo's next take ends */
    pthread_join(th, NULL);
    return ok;
}

/* A taker waiting for a frame receives it itself (it progresses UCX while
 * it waits, mbox_set_poller): over a ping-pong, pongs are put into a's
 * mailbox by the taking thread, not only by a's progress thread; every
 * value comes back exact. */
static void test_taker_receives_itself(void **state)
{
    pair_t *p = *state;
    /* Rounds until one pong was received by the taker, at most ROUNDS:
     * most are on an idle host, and a take polls for DPLANE_POLL_US at
     * least before it sleeps, so even a loaded one gets some. */
    enum { ROUNDS = 5000 };
    counted_thread = pthread_self();
    atomic_store(&puts_in_thread, 0);
    mbox_set_accounting(p->mb_a, count_puts, NULL);
    assert_true(ping_pong(p, ROUNDS, 1));
    assert_true(atomic_load(&puts_in_thread) > 0);
    mbox_set_accounting(p->mb_a, NULL, NULL);
}

/* The polling budget: 200 us below 8 CPUs, 2 ms from 8; a dplane starts
 * with its host's. With it set to 0 a taker never polls: every message
 * reaches it through the progress thread (no put in the taker's thread),
 * and still arrives. */
static void test_poll_budget(void **state)
{
    pair_t *p = *state;
    assert_int_equal(dplane_poll_budget_us(1), DPLANE_POLL_US);
    assert_int_equal(dplane_poll_budget_us(DPLANE_SPIN_MIN_CPUS - 1), DPLANE_POLL_US);
    assert_int_equal(dplane_poll_budget_us(DPLANE_SPIN_MIN_CPUS), DPLANE_POLL_LARGE_US);
    assert_int_equal(dplane_poll_budget_us(64), DPLANE_POLL_LARGE_US);
    assert_int_equal(dplane_poll_us(p->a), dplane_poll_budget_us(util_cpu_count()));
    dplane_set_poll_us(p->a, 0);
    assert_int_equal(dplane_poll_us(p->a), 0);
    enum { ROUNDS = 200 };
    counted_thread = pthread_self();
    atomic_store(&puts_in_thread, 0);
    mbox_set_accounting(p->mb_a, count_puts, NULL);
    assert_true(ping_pong(p, ROUNDS, 0));
    assert_int_equal(atomic_load(&puts_in_thread), 0);
    mbox_set_accounting(p->mb_a, NULL, NULL);
    dplane_set_poll_us(p->a, 5000);
    assert_int_equal(dplane_poll_us(p->a), 5000);
    /* A poll says stop once its waiter has polled the budget. */
    dplane_set_poll_us(p->a, 300);
    assert_int_equal(dp_poll(p->a, 0), 1);
    assert_int_equal(dp_poll(p->a, 299), 1);
    assert_int_equal(dp_poll(p->a, 300), 0);
}

/* Rewrites a pressure file (cpupsi.h's format) with this total. */
static void pressure_write(const char *path, int64_t total)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "some avg10=0.00 avg60=0.00 avg300=0.00 total=%lld\n", (long long)total);
    fclose(f);
}

/* Waits (20 s at most) until a's waiters poll `want` us, feeding the
 * pressure file: with `stalled`, a total that grows with the clock (every
 * moment stalled), else one that stands still. */
static int pressure_reaches(dplane_t *a, const char *path, int stalled, int64_t want)
{
    int64_t t0 = util_mono_us(), end = t0 + 20000000;
    while (dplane_poll_now_us(a) != want) {
        if (util_mono_us() > end)
            return 0;
        pressure_write(path, stalled ? util_mono_us() - t0 : 1);
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return 1;
}

/* A budget longer than DPLANE_POLL_US falls back to it while the host's
 * CPUs are contended (the pressure file's total grows with the clock),
 * and comes back once they are free (it stands still); the budget set
 * stays what it was. */
static void test_poll_budget_under_pressure(void **state)
{
    pair_t *p = *state;
    char path[] = "/tmp/atoll-pressure-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    pressure_write(path, 1);
    dplane_set_pressure_file(p->a, path);
    dplane_set_poll_us(p->a, 2000);
    assert_true(pressure_reaches(p->a, path, 1, DPLANE_POLL_US));
    /* A total far ahead keeps every later sample contended meanwhile. */
    pressure_write(path, INT64_C(1) << 50);
    assert_int_equal(dplane_poll_us(p->a), 2000);
    assert_int_equal(dplane_poll_now_us(p->a), DPLANE_POLL_US);
    assert_int_equal(dp_poll(p->a, DPLANE_POLL_US), 0);
    assert_int_equal(dp_poll(p->a, 0), 1);
    assert_true(pressure_reaches(p->a, path, 0, 2000));
    dplane_set_pressure_file(p->a, NULL);
    unlink(path);
}

/* A send to one's own address is a mailbox put of a copy. */
static void test_self_send_is_local(void **state)
{
    pair_t *p = *state;
    int64_t dims[1] = {5};
    tensor_t *t = iota(1, dims);
    mbox_tag_t tag = {.job = 2, .src = 1, .dst = 1};
    assert_int_equal(dplane_send(p->a, dplane_addr(p->a), &tag, &KEY, t), 0);
    assert_int_equal(mbox_count(p->mb_a), 1);   /* already there on return */
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(p->mb_a, &tag, in_ms(0), &got), MBOX_OK);
    assert_ptr_not_equal(got, t);
    assert_same_tensor(got, t);
    tensor_free(got);
    tensor_free(t);
}

/* Raw bytes at the listener's TCP port (not UCX's wire-up): the worker
 * lives and real peers still get through. */
static void test_garbage_connection(void **state)
{
    pair_t *p = *state;
    struct sockaddr_in sa;
    assert_int_equal(resolve(dplane_addr(p->b), 0, &sa), 0);
    for (int i = 0; i < 8; i++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(fd >= 0);
        assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        uint8_t junk[4096];
        for (size_t k = 0; k < sizeof junk; k++)
            junk[k] = (uint8_t)(k * 131u + (unsigned)i * 7u);
        if (i % 2)
            memset(junk, 0xff, 64);                /* huge length fields */
        (void)!send(fd, junk, sizeof junk, MSG_NOSIGNAL);
        close(fd);
    }
    int64_t dims[1] = {3};
    tensor_t *t = iota(1, dims);
    mbox_tag_t tag = {.job = 3};
    send_take(p->a, p->b, p->mb_b, &tag, t);
    tensor_free(t);
}

/* A peer that went away: the send fails instead of hanging. */
static void test_unreachable_peer(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    dplane_t *gone = dplane_start("127.0.0.1:0", NULL, mb, DPLANE_AUTO, NULL);
    assert_non_null(gone);
    char addr[DPLANE_ADDR_MAX];
    snprintf(addr, sizeof addr, "%s", dplane_addr(gone));
    dplane_stop(gone);
    dplane_t *me = dplane_start("127.0.0.1:0", NULL, mb, DPLANE_AUTO, NULL);
    assert_non_null(me);
    int64_t dims[1] = {2};
    tensor_t *t = iota(1, dims);
    mbox_tag_t tag = {.job = 4};
    int64_t t0 = util_mono_us();
    assert_int_equal(dplane_send(me, addr, &tag, &KEY, t), -1);
    assert_true(util_mono_us() - t0 < 30 * 1000000);
    tensor_free(t);
    dplane_stop(me);
    mbox_free(mb);
}

/* Random floats (fixed seed): every bit pattern of the payload matters. */
static tensor_t *random_tensor(int64_t n, uint32_t seed)
{
    shape_t s = {.rank = 1, .dim = {n}};
    tensor_t *t = tensor_new(&s);
    assert_non_null(t);
    uint32_t x = seed;
    for (int64_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t->data[i] = (float)(x >> 8) / 65536.0f - 128.0f;
    }
    return t;
}

/* Same-host peers: UCX moves payloads through shared memory (no TCP lane
 * on the endpoint), bit-exact, repeatedly, both ways; a small frame right
 * behind a 4 MiB one arrives too. */
static void test_shm_4mib_integrity(void **state)
{
    pair_t *p = *state;
    const int64_t n = (4 << 20) / 4;
    for (int round = 0; round < 3; round++) {
        tensor_t *t = random_tensor(n, 7u + (uint32_t)round);
        mbox_tag_t tag = {.job = 10, .op = round, .src = 0, .dst = 1};
        mbox_tag_t tag2 = {.job = 10, .op = 100 + round};
        tensor_t *sc = iota(0, NULL);
        send_take(p->a, p->b, p->mb_b, &tag, t);
        send_take(p->a, p->b, p->mb_b, &tag2, sc);
        send_take(p->b, p->a, p->mb_a, &tag, t);
        tensor_free(sc);
        tensor_free(t);
    }
    char tr[128];
    assert_int_equal(dplane_transports(p->a, dplane_addr(p->b), tr, sizeof tr), 0);
    fprintf(stderr, "same-host transports: %s\n", tr);
    assert_non_null(strstr(tr, "posix"));
    assert_null(strstr(tr, "tcp"));
    /* One shared-memory FIFO transport: the dplane leaves sysv out
     * (dplane_progress.c, shm_settings) unless the operator's UCX_TLS
     * names the transports. */
    if (!getenv("UCX_TLS"))
        assert_null(strstr(tr, "sysv"));
}

/* ---- sends from the shared-memory pool (shmpool.h) ---- */

/* The pool send's header: round trip; a key length of 0 or over the
 * maximum, and a message longer or shorter than it says, are refused. */
static void test_rma_codec(void **state)
{
    (void)state;
    dplane_hdr_t h = {.tag = {.job = 5, .attempt = 1, .comp = 2, .op = 3, .src = 0, .dst = 1},
                      .shape = {.rank = 1, .dim = {1 << 18}}, .nbytes = (1 << 18) * 4,
                      .key = KEY}, h2;
    static dplane_rma_ref_t r = {.cookie = 0x0123456789abcdefULL, .raddr = 0x7f0000001000ULL,
                                 .block = 42, .host = 77, .rkey_len = 5,
                                 .rkey = {9, 8, 7, 6, 5}};
    static dplane_rma_ref_t r2;
    uint8_t buf[DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + DPLANE_RKEY_MAX];
    size_t len = dplane_rma_encode(&h, &r, buf, sizeof buf);
    assert_int_equal(len, DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + 5);
    assert_int_equal(dplane_rma_decode(buf, len, &h2, &r2), 0);
    assert_true(r2.cookie == r.cookie && r2.raddr == r.raddr && r2.block == 42 && r2.host == 77);
    assert_int_equal(r2.rkey_len, 5);
    assert_memory_equal(r2.rkey, r.rkey, 5);
    assert_int_equal(h2.nbytes, h.nbytes);
    assert_int_equal(dplane_rma_decode(buf, len - 1, &h2, &r2), -1);
    assert_int_equal(dplane_rma_decode(buf, len + 1, &h2, &r2), -1);
    assert_int_equal(dplane_rma_decode(buf, DPLANE_HDR_SIZE + 3, &h2, &r2), -1);
    buf[DPLANE_HDR_SIZE + 35] = 0;         /* key length 0 */
    assert_int_equal(dplane_rma_decode(buf, DPLANE_HDR_SIZE + DPLANE_RMA_FIXED, &h2, &r2), -1);
    r.rkey_len = DPLANE_RKEY_MAX + 1;
    assert_int_equal(dplane_rma_encode(&h, &r, buf, sizeof buf), 0);
    r.rkey_len = 5;
    assert_int_equal(dplane_rma_encode(&h, &r, buf, 10), 0);
}

typedef struct pool_pair {
    shmpool_t *pool;
    pair_t p;
} pool_pair_t;

static int pool_pair_setup(void **state)
{
    pool_pair_t *pp = calloc(1, sizeof *pp);
    if (!pp || !(pp->pool = dplane_pool_new(DPLANE_AUTO, (size_t)32 << 20)))
        return -1;
    shmpool_install(pp->pool);
    pp->p.mb_a = mbox_new();
    pp->p.mb_b = mbox_new();
    pp->p.a = dplane_start("127.0.0.1:0", NULL, pp->p.mb_a, DPLANE_AUTO, pp->pool);
    pp->p.b = dplane_start("127.0.0.1:0", NULL, pp->p.mb_b, DPLANE_AUTO, pp->pool);
    *state = pp;
    return pp->p.a && pp->p.b ? 0 : -1;
}

static int pool_pair_teardown(void **state)
{
    pool_pair_t *pp = *state;
    dplane_stop(pp->p.a);
    dplane_stop(pp->p.b);
    mbox_free(pp->p.mb_a);
    mbox_free(pp->p.mb_b);
    shmpool_install(NULL);
    shmpool_free(pp->pool);
    free(pp);
    return 0;
}

/* Blocks: sizes round up to the grain; a range inside an allocated block
 * is found, one past it or in a freed block is not; a freed block is
 * reused for the same size; free blocks beyond keep_bytes are unmapped;
 * below the minimum the pool declines. */
static void test_pool_blocks(void **state)
{
    pool_pair_t *pp = *state;      /* keeps 32 MiB of free blocks */
    shmpool_t *p = pp->pool;
    int n0;
    size_t free0;
    shmpool_stats(p, &n0, &free0);
    assert_null(shmpool_alloc(p, SHMPOOL_MIN_BYTES - 1));
    char *a = shmpool_alloc(p, (3 << 20) + 5);
    assert_non_null(a);
    shmpool_ref_t r;
    assert_int_equal(shmpool_find(p, a + 100, (3 << 20), &r), 0);
    assert_int_equal(r.base, (uint64_t)(uintptr_t)a);
    assert_true(r.rkey_len > 0);
    assert_int_equal(shmpool_find(p, a + 100, (4 << 20), &r), -1);    /* past its 4 MiB */
    assert_int_equal(shmpool_release(p, a + 1), -1);                     /* not a base */
    assert_int_equal(shmpool_release(p, a), 0);
    assert_int_equal(shmpool_find(p, a, 16, &r), -1);
    char *b = shmpool_alloc(p, 4 << 20);
    assert_ptr_equal(b, a);                                              /* reused */
    assert_int_equal(shmpool_release(p, b), 0);
    void *big[3];
    for (int i = 0; i < 3; i++)
        assert_non_null(big[i] = shmpool_alloc(p, 16 << 20));
    for (int i = 0; i < 3; i++)
        assert_int_equal(shmpool_release(p, big[i]), 0);
    int n;
    size_t fb;
    shmpool_stats(p, &n, &fb);
    assert_true(fb <= (size_t)32 << 20);
    assert_true(n < n0 + 4);                                             /* one went */
}

/* A 4 MiB tensor's data comes from the pool, and the receiver reads it
 * there (one RMA get), bit for bit, in both directions and again: the
 * freed blocks are reused and the receiver's cached keys still fit. A
 * small tensor and one outside the pool go the plain way. */
static void test_pool_send_exact(void **state)
{
    pool_pair_t *pp = *state;
    pair_t *p = &pp->p;
    const int64_t n = (4 << 20) / 4;
    for (int round = 0; round < 3; round++) {
        tensor_t *t = random_tensor(n, 17u + (uint32_t)round);
        shmpool_ref_t ref;
        assert_int_equal(shmpool_find(pp->pool, t->data, (size_t)n * 4, &ref), 0);
        mbox_tag_t tag = {.job = 20, .op = round}, back = {.job = 21, .op = round};
        send_take(p->a, p->b, p->mb_b, &tag, t);
        send_take(p->b, p->a, p->mb_a, &back, t);
        tensor_free(t);
    }
    assert_int_equal(atomic_load(&p->b->pool_reads), 3);
    assert_int_equal(atomic_load(&p->a->pool_reads), 3);
    /* Below the pool's minimum: malloc'd, sent plainly. */
    tensor_t *small = random_tensor(1000, 5);
    shmpool_ref_t ref;
    assert_int_equal(shmpool_find(pp->pool, small->data, 4000, &ref), -1);
    mbox_tag_t tag = {.job = 22};
    send_take(p->a, p->b, p->mb_b, &tag, small);
    assert_int_equal(atomic_load(&p->b->pool_reads), 3);
    tensor_free(small);
}

/* A 2 MiB pool tensor from a reaches `to` exact but not through the pool
 * (to read none of a's blocks), and a no longer offers `to` pool sends. */
static void assert_sent_plainly(dplane_t *a, dplane_t *to, mbox_t *to_mb, int job)
{
    tensor_t *t = random_tensor((2 << 20) / 4, (uint32_t)job);
    mbox_tag_t tag = {.job = job};
    int64_t reads = atomic_load(&to->pool_reads);
    send_take(a, to, to_mb, &tag, t);
    assert_int_equal(atomic_load(&to->pool_reads), reads);
    assert_false(peer_rma(a, dplane_addr(to), 0));
    tensor_free(t);
}

/* A receiver that cannot read our pool (UCX's TCP only) answers so, and
 * gets the same bytes plainly, then only plainly. */
static void test_pool_peer_without_rma(void **state)
{
    pool_pair_t *pp = *state;
    pair_t *p = &pp->p;
    mbox_t *mc = mbox_new();
    dplane_t *c = dplane_start("127.0.0.1:0", NULL, mc, DPLANE_TCP, NULL);
    assert_non_null(c);
    for (int i = 0; i < 2; i++)
        assert_sent_plainly(p->a, c, mc, 24 + i);
    dplane_stop(c);
    mbox_free(mc);
}

/* A receiver that sees other shared memory (another container or host:
 * another host id) never maps the sender's block, even though UCX would
 * let it: it answers so, and the bytes come plainly, exact. */
static void test_pool_other_host(void **state)
{
    pool_pair_t *pp = *state;
    pair_t *p = &pp->p;
    p->b->host_id ^= 1;
    assert_sent_plainly(p->a, p->b, p->mb_b, 28);
}

/* A pool send (right key, so admitted) whose address and size claim more
 * than its block holds is refused, not read past the mapping: nothing is
 * delivered, nothing faults, and the real frame behind it on the same
 * endpoint is taken. */
static void test_pool_read_past_block(void **state)
{
    pool_pair_t *pp = *state;
    pair_t *p = &pp->p;
    tensor_t *small = random_tensor((1 << 20) / 4, 31);     /* one 1 MiB block */
    shmpool_ref_t ref;
    assert_int_equal(shmpool_find(pp->pool, small->data, 1 << 20, &ref), 0);
    assert_int_equal(mbox_expect(p->mb_b, 30, 1, 0, 1, 4, &KEY), 0);
    mbox_tag_t tag = {.job = 30, .attempt = 1, .comp = 0, .src = 2, .dst = 1};
    dplane_hdr_t h = {.tag = tag, .shape = {.rank = 1, .dim = {4 << 20}},
                      .nbytes = (uint64_t)(4 << 20) * 4, .key = KEY};    /* 16 MiB claimed */
    static dplane_rma_ref_t r;
    r = (dplane_rma_ref_t){.cookie = 99, .raddr = ref.base + 4096, .block = ref.id,
                           .host = p->a->host_id, .rkey_len = (uint32_t)ref.rkey_len};
    memcpy(r.rkey, ref.rkey, ref.rkey_len);
    static uint8_t buf[DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + DPLANE_RKEY_MAX];
    size_t len = dplane_rma_encode(&h, &r, buf, sizeof buf);
    assert_true(len > 0);
    raw_am_send(p, DPLANE_AM_RMA_ID, buf, len, NULL, 0);
    int64_t dims[1] = {5};
    tensor_t *real = iota(1, dims), *got = NULL;
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &tag, &KEY, real), 0);
    assert_int_equal(mbox_take(p->mb_b, &tag, in_ms(10000), &got), MBOX_OK);
    assert_same_tensor(got, real);
    assert_int_equal(atomic_load(&p->b->pool_reads), 0);
    mbox_task_done(p->mb_b, 30, 1, 0, 1);
    tensor_free(got);
    tensor_free(real);
    tensor_free(small);
}

/* A pool send with the wrong key is dropped and counted like any frame,
 * and its sender is answered (it does not wait for the timeout); an ACK
 * nobody waits for changes nothing. */
static void test_pool_wrong_key(void **state)
{
    pool_pair_t *pp = *state;
    pair_t *p = &pp->p;
    assert_int_equal(mbox_expect(p->mb_b, 25, 1, 0, 1, 4, &KEY), 0);
    mbox_key_t wrong = KEY;
    wrong.b[0] ^= 0x80;
    tensor_t *forged = random_tensor((1 << 20) / 4, 26), *t = random_tensor((1 << 20) / 4, 27);
    mbox_tag_t tag = {.job = 25, .attempt = 1, .comp = 0, .src = 2, .dst = 1};
    int64_t t0 = util_mono_us();
    send_forged_then_real(p, &tag, &wrong, forged, t);
    assert_true(util_mono_us() - t0 < DPLANE_SEND_TIMEOUT_US);   /* answered, not timed out */
    assert_int_equal(atomic_load(&p->b->pool_reads), 1);
    mbox_task_done(p->mb_b, 25, 1, 0, 1);
    /* A stray ACK: no send waits for its cookie. */
    uint8_t ack[DPLANE_ACK_SIZE] = {0xde, 0xad};
    ucp_am_recv_param_t none = {0};
    assert_int_equal(dp_am_ack(p->a, ack, sizeof ack, NULL, 0, &none), UCS_OK);
    assert_int_equal(dp_am_ack(p->a, ack, 3, NULL, 0, &none), UCS_OK);
    tensor_free(forged);
    tensor_free(t);
}

/* --data-transport tcp: UCX's TCP transport only, same bytes. */
static void test_forced_tcp(void **state)
{
    pair_t *p = *state;
    mbox_t *mc = mbox_new();
    dplane_t *c = dplane_start("127.0.0.1:0", NULL, mc, DPLANE_TCP, NULL);
    assert_non_null(c);
    tensor_t *t = random_tensor(300000, 3), *sc = iota(0, NULL);
    mbox_tag_t tag = {.job = 11, .src = 0, .dst = 1}, tag2 = {.job = 11, .op = 1};
    send_take(c, p->b, p->mb_b, &tag, t);
    send_take(c, p->b, p->mb_b, &tag2, sc);
    char tr[128];
    assert_int_equal(dplane_transports(c, dplane_addr(p->b), tr, sizeof tr), 0);
    assert_string_equal(tr, "tcp");
    tensor_free(t);
    tensor_free(sc);
    dplane_stop(c);
    mbox_free(mc);
}

/* a's resolver: b's UCX address straight from b, without asking b's
 * port (b's progress thread, which answers it, may be held). */
static void *resolve_to(void *ctx, const char *addr, size_t *len)
{
    (void)addr;
    size_t n = 0;
    const void *ua = dplane_ucx_address(ctx, &n);
    void *copy = ua ? malloc(n) : NULL;
    if (copy)
        memcpy(copy, ua, n);
    *len = n;
    return copy;
}

/* Whether a still holds sends it gave up on (UCX has not completed
 * them); a's own lock. */
static int holds_abandoned(dplane_t *a)
{
    pthread_mutex_lock(&a->mu);
    int held = a->abandoned != NULL;
    pthread_mutex_unlock(&a->mu);
    return held;
}

/* A send given up while UCX still holds it: b's progress thread waits for
 * b's prog_mu (held here), so the endpoint's wire-up cannot finish and the
 * send stays queued behind it past its deadline. When b progresses again,
 * UCX either cancels it or packs and sends it then (a race with the
 * endpoint's close; UCX 1.13 does either), after dplane_send_until()
 * returned and its caller freed the buffer, as the worker's runner does.
 * UCX must never read the caller's memory then (the ASan build catches
 * the read: before send_once kept its own copy, 4 runs in 4 here and 3 in
 * 3 of test_dispatch's fault group), and a frame that arrives carries
 * exactly what was sent. */
static void test_given_up_send_keeps_its_payload(void **state)
{
    pair_t *p = *state;
    dplane_set_resolver(p->a, resolve_to, p->b);
    const int64_t dims[1] = {512};
    tensor_t *t = iota(1, dims), *sent = tensor_clone(t);
    assert_non_null(sent);
    mbox_tag_t tag = {.job = 77, .attempt = 0, .comp = 0, .op = -1, .src = 0, .dst = 1};
    pthread_mutex_lock(&p->b->prog_mu);
    int rc = dplane_send_until(p->a, dplane_addr(p->b), &tag, &KEY, t, in_ms(300));
    tensor_free(t);
    pthread_mutex_unlock(&p->b->prog_mu);
    assert_int_equal(rc, -1);
    int64_t end = in_ms(10000);
    while (holds_abandoned(p->a) && util_mono_us() < end)
        usleep(1000);
    assert_false(holds_abandoned(p->a));
    tensor_t *got = NULL;
    if (mbox_take(p->mb_b, &tag, in_ms(200), &got) == MBOX_OK) {
        assert_same_tensor(got, sent);
        tensor_free(got);
    }
    tensor_free(sent);
}

/* A receiver that goes away: the sender's next send fails, not hangs. */
static void test_receiver_gone(void **state)
{
    (void)state;
    mbox_t *ma = mbox_new(), *mb = mbox_new();
    dplane_t *a = dplane_start("127.0.0.1:0", NULL, ma, DPLANE_AUTO, NULL);
    dplane_t *b = dplane_start("127.0.0.1:0", NULL, mb, DPLANE_AUTO, NULL);
    assert_non_null(a);
    assert_non_null(b);
    char addr[DPLANE_ADDR_MAX];
    snprintf(addr, sizeof addr, "%s", dplane_addr(b));
    tensor_t *t = random_tensor(1 << 20, 5);
    mbox_tag_t tag = {.job = 12};
    assert_int_equal(dplane_send(a, addr, &tag, &KEY, t), 0);
    dplane_stop(b);
    int64_t t0 = util_mono_us();
    assert_int_equal(dplane_send(a, addr, &tag, &KEY, t), -1);
    assert_true(util_mono_us() - t0 < 30 * 1000000);
    tensor_free(t);
    dplane_stop(a);
    mbox_free(ma);
    mbox_free(mb);
}

/* A resolver that always answers the UCX address in ctx (a stale
 * directory: it still names a process that died). */
typedef struct fixed_addr {
    void *ucx;
    size_t len;
} fixed_addr_t;

static void *resolve_fixed(void *ctx, const char *addr, size_t *len)
{
    (void)addr;
    const fixed_addr_t *f = ctx;
    void *copy = malloc(f->len);
    if (copy)
        memcpy(copy, f->ucx, f->len);
    *len = f->len;
    return copy;
}

/* b's dplane again on the same data address (a worker restarted on a
 * fixed --data-listen), taking into mb (fresh: a stopped dplane shut its
 * mailbox down). */
static dplane_t *restart_at(const char *addr, mbox_t *mb)
{
    dplane_t *d = dplane_start(addr, NULL, mb, DPLANE_AUTO, NULL);
    assert_non_null(d);
    assert_string_equal(dplane_addr(d), addr);
    return d;
}

/* A peer restarted on its data address, with a directory that still names
 * the dead process: a's endpoint to the old process (shared memory: an
 * eager send into the dead FIFO "completes") must not swallow messages.
 * Its port is asked before a send once the endpoint's address is older
 * than the recheck: while nobody listens the send fails (the directory's
 * stale answer is not believed), then the new process gets it. With no
 * recheck due, a send the new process cannot take (4 MiB: rendezvous) is
 * retried on a fresh endpoint once the port, asked after a second,
 * serves another address: well before the send's minute. Without the
 * checks, the small sends went into the dead FIFO and the big one waited
 * its 60 s. */
static void test_peer_restarted_on_its_port(void **state)
{
    (void)state;
    mbox_t *ma = mbox_new(), *mb[3] = {mbox_new(), mbox_new(), mbox_new()};
    dplane_t *a = dplane_start("127.0.0.1:0", NULL, ma, DPLANE_AUTO, NULL);
    dplane_t *b = dplane_start("127.0.0.1:0", NULL, mb[0], DPLANE_AUTO, NULL);
    assert_non_null(a);
    assert_non_null(b);
    char addr[DPLANE_ADDR_MAX];
    snprintf(addr, sizeof addr, "%s", dplane_addr(b));
    fixed_addr_t stale = {.ucx = resolve_to(b, addr, &stale.len)};
    assert_non_null(stale.ucx);
    dplane_set_resolver(a, resolve_fixed, &stale);
    int64_t small_dims[1] = {4};
    tensor_t *small = iota(1, small_dims), *big = random_tensor(1 << 20, 11), *got = NULL;
    mbox_tag_t tag = {.job = 31, .dst = 1};
    send_take(a, b, mb[0], &tag, small);

    dplane_stop(b);
    dplane_set_recheck(a, 1);              /* every send asks the port first */
    assert_int_equal(dplane_send_until(a, addr, &tag, &KEY, small, in_ms(5000)), -1);
    b = restart_at(addr, mb[1]);
    tag.job = 32;
    assert_int_equal(dplane_send_until(a, addr, &tag, &KEY, small, in_ms(5000)), 0);
    assert_int_equal(mbox_take(mb[1], &tag, in_ms(5000), &got), MBOX_OK);
    assert_same_tensor(got, small);
    tensor_free(got);

    dplane_set_recheck(a, (int64_t)3600 * 1000000);
    dplane_stop(b);
    b = restart_at(addr, mb[2]);
    tag.job = 33;
    int64_t t0 = util_mono_us();
    assert_int_equal(dplane_send_until(a, addr, &tag, &KEY, big, in_ms(20000)), 0);
    assert_int_equal(mbox_take(mb[2], &tag, in_ms(5000), &got), MBOX_OK);
    assert_true(util_mono_us() - t0 < 10 * 1000000);
    assert_same_tensor(got, big);
    tensor_free(got);

    tensor_free(small);
    tensor_free(big);
    dplane_stop(b);
    dplane_stop(a);
    free(stale.ucx);
    mbox_free(ma);
    for (int i = 0; i < 3; i++)
        mbox_free(mb[i]);
}

/* Keys (issue 12): with the task declared under KEY, a well-formed frame
 * with another key is dropped and counted; the same tag with KEY gets in. */
static void test_wrong_key_dropped(void **state)
{
    pair_t *p = *state;
    assert_int_equal(mbox_expect(p->mb_b, 13, 1, 0, 1, 4, &KEY), 0);
    mbox_key_t wrong = KEY;
    wrong.b[15] ^= 1;
    int64_t dims[1] = {4};
    tensor_t *t = iota(1, dims), *forged = random_tensor(4, 9);
    mbox_tag_t tag = {.job = 13, .attempt = 1, .comp = 0, .src = 2, .dst = 1};
    send_forged_then_real(p, &tag, &wrong, forged, t);
    assert_int_equal(mbox_count(p->mb_b), 0);
    mbox_task_done(p->mb_b, 13, 1, 0, 1);
    tensor_free(t);
    tensor_free(forged);
}

/* A message whose AM header is not a frame header (size, magic) is
 * dropped and counted; the endpoint keeps working. */
static void test_bad_header_counted(void **state)
{
    pair_t *p = *state;
    uint8_t junk[DPLANE_HDR_SIZE + 8];
    memset(junk, 0x5a, sizeof junk);
    float payload[4] = {1, 2, 3, 4};
    for (int i = 0; i < 2; i++)
        raw_am_send(p, DPLANE_AM_ID, junk, i ? sizeof junk : DPLANE_HDR_SIZE, payload,
                    sizeof payload);
    int64_t dims[1] = {3};
    tensor_t *t = iota(1, dims);
    mbox_tag_t tag = {.job = 14};
    send_take(p->a, p->b, p->mb_b, &tag, t);    /* in order behind the junk */
    dplane_guard_stats_t g;
    dplane_guard_stats(p->b, &g);
    assert_int_equal(g.bad_frames, 2);
    tensor_free(t);
}

typedef struct bg_send {
    dplane_t *from;
    const char *to;
    mbox_tag_t tag;
    tensor_t *t;
    int rc;
} bg_send_t;

static void *bg_send_main(void *arg)
{
    bg_send_t *b = arg;
    b->rc = dplane_send(b->from, b->to, &b->tag, &KEY, b->t);
    return NULL;
}

/* A 16 MiB frame for a task nobody runs yet is over the per-connection
 * unclaimed cap (8 MiB): it is parked, nothing is allocated or reserved,
 * and its sender waits (back-pressure); once the task is declared the
 * frame is fetched and the sender completes. */
static void test_parked_until_claimed(void **state)
{
    pair_t *p = *state;
    bg_send_t b = {.from = p->a, .to = dplane_addr(p->b),
                   .tag = {.job = 77, .attempt = 1, .comp = 0, .src = 0, .dst = 0},
                   .t = random_tensor((int64_t)4 << 20, 11), .rc = -2};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, bg_send_main, &b), 0);
    while (p->b->nparked == 0)                     /* the frame's header arrived */
        usleep(1000);
    mbox_guard_stats_t g;
    mbox_guard_stats(p->mb_b, &g);
    assert_int_equal(g.unclaimed_bytes, 0);
    assert_int_equal(mbox_count(p->mb_b), 0);
    assert_int_equal(b.rc, -2);                    /* still sending */
    assert_int_equal(mbox_expect(p->mb_b, 77, 1, 0, 0, 1, &KEY), 0);
    pthread_join(th, NULL);
    assert_int_equal(b.rc, 0);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(p->mb_b, &b.tag, in_ms(10000), &got), MBOX_OK);
    assert_same_tensor(got, b.t);
    tensor_free(got);
    tensor_free(b.t);
    mbox_task_done(p->mb_b, 77, 1, 0, 0);
}

/* A sender's origin is its reply endpoint's slot. Every distinct endpoint
 * takes the next slot up to DPLANE_MAX_CONNS; one more recycles the least
 * recently used slot: the refusal is counted, the old sender's unclaimed
 * frames go (their bytes given back), and that sender, heard again, takes
 * a slot anew. The endpoints are never dereferenced (origin_of compares
 * them), so addresses in a local array stand in for UCX's. */
static void test_origin_slots_recycled(void **state)
{
    pair_t *p = *state;
    dplane_t *dp = p->b;
    static char eps[DPLANE_MAX_CONNS + 1];
    pthread_mutex_lock(&dp->prog_mu);          /* origin_of's context: the progress thread's */
    assert_int_equal(dp->norigins, 0);
    for (int i = 0; i < DPLANE_MAX_CONNS; i++)
        assert_int_equal(origin_of(dp, (ucp_ep_h)&eps[i]), i + 1);
    assert_int_equal(origin_of(dp, (ucp_ep_h)&eps[5]), 6);     /* known: its own slot */
    assert_int_equal(dp->norigins, DPLANE_MAX_CONNS);
    for (int i = 0; i < DPLANE_MAX_CONNS; i++)
        dp->origins[i].used_us = 1000 + i;
    dp->origins[7].used_us = 1;                 /* slot 7, origin 8: least recently used */

    /* An unclaimed frame from origin 8 and one from origin 9. */
    mbox_tag_t t8 = {.job = 90, .attempt = 0, .comp = 0}, t9 = {.job = 91, .attempt = 0};
    for (int o = 8; o <= 9; o++) {
        const mbox_tag_t *tag = o == 8 ? &t8 : &t9;
        assert_int_equal(mbox_admit(p->mb_b, tag, &KEY, o, 4, in_ms(10000)),
                         MBOX_ADMIT_UNCLAIMED);
        assert_int_equal(mbox_put_from(p->mb_b, tag, &KEY, iota(0, NULL), o,
                                       MBOX_ADMIT_UNCLAIMED), 0);
    }
    assert_int_equal(mbox_count(p->mb_b), 2);
    long long refused = atomic_load(&dp->refused);

    assert_int_equal(origin_of(dp, (ucp_ep_h)&eps[DPLANE_MAX_CONNS]), 8);
    assert_int_equal(dp->norigins, DPLANE_MAX_CONNS);
    assert_int_equal(atomic_load(&dp->refused), refused + 1);
    mbox_guard_stats_t g;
    mbox_guard_stats(p->mb_b, &g);
    assert_int_equal(mbox_count(p->mb_b), 1);  /* origin 9's frame stays */
    assert_int_equal(g.unclaimed_bytes, 4);
    /* The evicted sender is a stranger now: it takes the next LRU slot
     * (origin 1, used_us 1000), not its old one. */
    assert_int_equal(origin_of(dp, (ucp_ep_h)&eps[7]), 1);
    assert_int_equal(origin_of(dp, (ucp_ep_h)&eps[DPLANE_MAX_CONNS]), 8);
    pthread_mutex_unlock(&dp->prog_mu);
    mbox_drop_origin(p->mb_b, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_roundtrip),
        cmocka_unit_test(test_hdr_rejects_bad_frames),
        cmocka_unit_test(test_parse_addr),
        cmocka_unit_test_setup_teardown(test_loopback_send, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_self_send_is_local, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_poll_budget, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_poll_budget_under_pressure, pair_setup,
                                        pair_teardown),
        cmocka_unit_test_setup_teardown(test_taker_receives_itself, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_garbage_connection, pair_setup, pair_teardown),
        cmocka_unit_test(test_unreachable_peer),
        cmocka_unit_test_setup_teardown(test_shm_4mib_integrity, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_forced_tcp, pair_setup, pair_teardown),
        cmocka_unit_test(test_receiver_gone),
        cmocka_unit_test(test_peer_restarted_on_its_port),
        cmocka_unit_test_setup_teardown(test_given_up_send_keeps_its_payload, pair_setup,
                                        pair_teardown),
        cmocka_unit_test_setup_teardown(test_wrong_key_dropped, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_bad_header_counted, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_parked_until_claimed, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_origin_slots_recycled, pair_setup, pair_teardown),
        cmocka_unit_test(test_rma_codec),
        cmocka_unit_test_setup_teardown(test_pool_blocks, pool_pair_setup, pool_pair_teardown),
        cmocka_unit_test_setup_teardown(test_pool_send_exact, pool_pair_setup,
                                        pool_pair_teardown),
        cmocka_unit_test_setup_teardown(test_pool_peer_without_rma, pool_pair_setup,
                                        pool_pair_teardown),
        cmocka_unit_test_setup_teardown(test_pool_other_host, pool_pair_setup,
                                        pool_pair_teardown),
        cmocka_unit_test_setup_teardown(test_pool_read_past_block, pool_pair_setup,
                                        pool_pair_teardown),
        cmocka_unit_test_setup_teardown(test_pool_wrong_key, pool_pair_setup,
                                        pool_pair_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
