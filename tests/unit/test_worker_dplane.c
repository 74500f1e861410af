/* test_worker_dplane.c - the data plane's frame codec, real loopback TCP and
 * the same-host shared-memory transport between two dplane instances in
 * this process (workers/dplane.c and
 * mbox.c compiled in: unit tests link only atoll_common). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../workers/dplane.c"
#include "../../workers/shmring.c"
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
                      .nbytes = 24 * 4};
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

    memcpy(buf, good, sizeof buf);
    buf[7] = 5;                                      /* rank 5 */
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

typedef struct pair {
    mbox_t *mb_a, *mb_b;
    dplane_t *a, *b;
} pair_t;

static int pair_setup(void **state)
{
    pair_t *p = calloc(1, sizeof *p);
    p->mb_a = mbox_new();
    p->mb_b = mbox_new();
    p->a = dplane_start("127.0.0.1:0", NULL, p->mb_a);
    p->b = dplane_start("127.0.0.1:0", NULL, p->mb_b);
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

/* Frames cross a real socket, keep their tags, shapes and bytes, in order. */
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
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &t1, small), 0);
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &t2, big), 0);
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &t3, sc), 0);

    tensor_t *got = NULL;
    assert_int_equal(mbox_take(p->mb_b, &t2, in_ms(5000), &got), MBOX_OK);
    assert_same_tensor(got, big);
    tensor_free(got);
    assert_int_equal(mbox_take(p->mb_b, &t1, in_ms(5000), &got), MBOX_OK);
    assert_same_tensor(got, small);
    tensor_free(got);
    assert_int_equal(mbox_take(p->mb_b, &t3, in_ms(5000), &got), MBOX_OK);
    assert_same_tensor(got, sc);
    tensor_free(got);
    assert_int_equal(mbox_count(p->mb_a), 0);   /* nothing went to the sender */

    /* And back the other way on B's own outgoing connection. */
    assert_int_equal(dplane_send(p->b, dplane_addr(p->a), &t1, small), 0);
    assert_int_equal(mbox_take(p->mb_a, &t1, in_ms(5000), &got), MBOX_OK);
    assert_same_tensor(got, small);
    tensor_free(got);
    tensor_free(small);
    tensor_free(big);
    tensor_free(sc);
}

/* A send to one's own address is a mailbox put of a copy. */
static void test_self_send_is_local(void **state)
{
    pair_t *p = *state;
    int64_t dims[1] = {5};
    tensor_t *t = iota(1, dims);
    mbox_tag_t tag = {.job = 2, .src = 1, .dst = 1};
    assert_int_equal(dplane_send(p->a, dplane_addr(p->a), &tag, t), 0);
    /* Already there on return: no socket round trip. */
    assert_int_equal(mbox_count(p->mb_a), 1);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(p->mb_a, &tag, in_ms(0), &got), MBOX_OK);
    assert_ptr_not_equal(got, t);
    assert_same_tensor(got, t);
    tensor_free(got);
    tensor_free(t);
}

/* Garbage closes that connection only; the listener keeps working. */
static void test_garbage_connection(void **state)
{
    pair_t *p = *state;
    struct sockaddr_in sa;
    assert_int_equal(resolve(dplane_addr(p->b), 0, &sa), 0);
    int fd = connect_once(&sa);
    assert_true(fd >= 0);
    uint8_t junk[DPLANE_HDR_SIZE];
    memset(junk, 0x5a, sizeof junk);
    assert_int_equal(write_full(fd, junk, sizeof junk), 0);
    char c;
    /* The reader closes the connection: we read EOF (or a reset). */
    assert_true(recv(fd, &c, 1, 0) <= 0);
    close(fd);

    int64_t dims[1] = {3};
    tensor_t *t = iota(1, dims);
    mbox_tag_t tag = {.job = 3};
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &tag, t), 0);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(p->mb_b, &tag, in_ms(5000), &got), MBOX_OK);
    assert_same_tensor(got, t);
    tensor_free(got);
    tensor_free(t);
}

/* A peer that went away: the send fails instead of hanging. */
static void test_unreachable_peer(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    dplane_t *gone = dplane_start("127.0.0.1:0", NULL, mb);
    assert_non_null(gone);
    char addr[DPLANE_ADDR_MAX];
    snprintf(addr, sizeof addr, "%s", dplane_addr(gone));
    dplane_stop(gone);
    dplane_t *me = dplane_start("127.0.0.1:0", NULL, mb);
    int64_t dims[1] = {2};
    tensor_t *t = iota(1, dims);
    mbox_tag_t tag = {.job = 4};
    int64_t t0 = util_mono_us();
    assert_int_equal(dplane_send(me, addr, &tag, t), -1);
    assert_true(util_mono_us() - t0 < 10 * 1000000);
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

/* Same-host peers move payloads through shared memory: a 4 MiB tensor
 * arrives bit-exact, repeatedly (the ring wraps), in both directions, and
 * the sender counted shm frames, not TCP ones. */
static void test_shm_4mib_integrity(void **state)
{
    pair_t *p = *state;
    assert_true(dplane_same_host(dplane_addr(p->a), dplane_addr(p->b)));
    assert_true(p->a->unix_fd >= 0 && p->b->unix_fd >= 0);
    const int64_t n = (4 << 20) / 4;
    for (int round = 0; round < 3; round++) {
        tensor_t *t = random_tensor(n, 7u + (uint32_t)round);
        mbox_tag_t tag = {.job = 10, .op = round, .src = 0, .dst = 1};
        assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &tag, t), 0);
        /* A small frame right behind it keeps its place in the stream. */
        tensor_t *sc = iota(0, NULL);
        mbox_tag_t tag2 = {.job = 10, .op = 100 + round};
        assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &tag2, sc), 0);
        tensor_t *got = NULL;
        assert_int_equal(mbox_take(p->mb_b, &tag, in_ms(10000), &got), MBOX_OK);
        assert_same_tensor(got, t);
        tensor_free(got);
        assert_int_equal(mbox_take(p->mb_b, &tag2, in_ms(10000), &got), MBOX_OK);
        assert_same_tensor(got, sc);
        tensor_free(got);
        tensor_free(sc);
        /* Back from B to A over B's own ring. */
        assert_int_equal(dplane_send(p->b, dplane_addr(p->a), &tag, t), 0);
        assert_int_equal(mbox_take(p->mb_a, &tag, in_ms(10000), &got), MBOX_OK);
        assert_same_tensor(got, t);
        tensor_free(got);
        tensor_free(t);
    }
    int64_t shm, tcp;
    dplane_counts(p->a, &shm, &tcp);
    assert_int_equal(shm, 6);
    assert_int_equal(tcp, 0);
}

/* --data-transport tcp: the same exchange goes over TCP. */
static void test_forced_tcp(void **state)
{
    pair_t *p = *state;
    dplane_set_shm(p->a, 0);
    tensor_t *t = random_tensor(300000, 3);
    mbox_tag_t tag = {.job = 11, .src = 0, .dst = 1};
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &tag, t), 0);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(p->mb_b, &tag, in_ms(10000), &got), MBOX_OK);
    assert_same_tensor(got, t);
    tensor_free(got);
    tensor_free(t);
    int64_t shm, tcp;
    dplane_counts(p->a, &shm, &tcp);
    assert_int_equal(shm, 0);
    assert_int_equal(tcp, 1);
}

/* A receiver that goes away mid-stream: the sender's next send reconnects
 * to nobody and fails instead of hanging on a full ring. */
static void test_shm_receiver_gone(void **state)
{
    (void)state;
    mbox_t *ma = mbox_new(), *mb = mbox_new();
    dplane_t *a = dplane_start("127.0.0.1:0", NULL, ma);
    dplane_t *b = dplane_start("127.0.0.1:0", NULL, mb);
    assert_non_null(a);
    assert_non_null(b);
    char addr[DPLANE_ADDR_MAX];
    snprintf(addr, sizeof addr, "%s", dplane_addr(b));
    tensor_t *t = random_tensor(1 << 20, 5);
    mbox_tag_t tag = {.job = 12};
    assert_int_equal(dplane_send(a, addr, &tag, t), 0);
    dplane_stop(b);
    int64_t t0 = util_mono_us();
    assert_int_equal(dplane_send(a, addr, &tag, t), -1);
    assert_true(util_mono_us() - t0 < 10 * 1000000);
    tensor_free(t);
    dplane_stop(a);
    mbox_free(ma);
    mbox_free(mb);
}

/* Host comparison used to pick the transport. */
static void test_same_host(void **state)
{
    (void)state;
    assert_true(dplane_same_host("127.0.0.1:1", "127.0.0.1:2"));
    assert_true(dplane_same_host("127.0.0.1:1", "localhost:2"));
    assert_true(dplane_same_host("10.0.0.5:1", "10.0.0.5:2"));
    assert_false(dplane_same_host("10.0.0.5:1", "10.0.0.6:1"));
    assert_false(dplane_same_host("10.0.0.5:1", "127.0.0.1:1"));
    assert_false(dplane_same_host("garbage", "127.0.0.1:1"));
}

/* Finding 5: a ring memfd that is not sealed is refused before it is
 * mapped, so shrinking it after the hello cannot SIGBUS the receiver (the
 * old receiver mapped it; the shrink and the frame below then killed it).
 * A sealed ring cannot be shrunk at all. */
static void test_unsealed_memfd_refused(void **state)
{
    pair_t *p = *state;
    assert_true(p->b->unix_fd >= 0);
    size_t size = 4096;
    int mfd = memfd_create("evil-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_true(mfd >= 0);
    assert_int_equal(ftruncate(mfd, (off_t)(SHMRING_CTRL + size)), 0);
    shmring_ctrl_t *ctl = mmap(NULL, SHMRING_CTRL, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    assert_true(ctl != MAP_FAILED);
    ctl->magic = SHMRING_MAGIC;       /* a well-formed ring, just not sealed */
    ctl->size = size;
    munmap(ctl, SHMRING_CTRL);
    assert_int_equal(shmring_check_fd(mfd, size), -1);

    struct sockaddr_un su;
    socklen_t len = unix_name(dplane_addr(p->b), &su);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&su, len), 0);
    uint8_t hello[DPLANE_HELLO_SIZE] = {0};
    put_u32(hello, DPLANE_HELLO_MAGIC);
    put_u64(hello + 8, size);
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof cbuf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &mfd, sizeof mfd);
    assert_int_equal(sendmsg(fd, &mh, MSG_NOSIGNAL), (ssize_t)sizeof hello);
    /* The receiver closes the connection (wait for it, up to 5 s). */
    struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
    int closed = poll(&pf, 1, 5000) == 1;
    if (!closed) {
        /* Old behaviour: it mapped the ring. Shrink it and send a frame. */
        assert_int_equal(ftruncate(mfd, 0), 0);
        dplane_hdr_t h = {.tag = {.job = 1}, .shape = {.rank = 1, .dim = {4}}, .nbytes = 16};
        uint8_t hb[DPLANE_HDR_SIZE];
        dplane_hdr_encode(&h, hb);
        assert_int_equal(write_full(fd, hb, sizeof hb), 0);
        closed = poll(&pf, 1, 5000) == 1;
    }
    assert_true(closed);
    close(fd);
    close(mfd);
    dplane_guard_stats_t g;
    dplane_guard_stats(p->b, &g);
    assert_true(g.bad_frames >= 1);

    /* A sealed ring cannot shrink or grow; the real path still works. */
    int rfd = -1;
    shmring_t *ring = shmring_create(size, &rfd);
    assert_non_null(ring);
    assert_int_equal(shmring_check_fd(rfd, size), 0);
    assert_int_equal(shmring_check_fd(rfd, size * 2), -1);    /* size must match the claim */
    assert_true(ftruncate(rfd, 0) != 0);
    assert_true(ftruncate(rfd, (off_t)(SHMRING_CTRL + 2 * size)) != 0);
    shmring_close(ring);
    close(rfd);
    int64_t dims[1] = {5};
    tensor_t *t = iota(1, dims);
    mbox_tag_t tag = {.job = 9};
    assert_int_equal(dplane_send(p->a, dplane_addr(p->b), &tag, t), 0);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(p->mb_b, &tag, in_ms(5000), &got), MBOX_OK);
    assert_same_tensor(got, t);
    tensor_free(got);
    tensor_free(t);
}

/* Finding 7: a header claiming a large payload for a task nobody runs is
 * not allocated: past the per-connection cap it waits, then is refused
 * and its payload skipped. Here the claim is 16 MiB (over the 8 MiB
 * per-connection cap) and no byte of payload is ever sent. */
static void test_huge_claim_not_allocated(void **state)
{
    pair_t *p = *state;
    struct sockaddr_in sa;
    assert_int_equal(resolve(dplane_addr(p->b), 0, &sa), 0);
    int fd = connect_once(&sa);
    assert_true(fd >= 0);
    dplane_hdr_t h = {.tag = {.job = 77, .attempt = 1},
                      .shape = {.rank = 2, .dim = {2048, 2048}}, .nbytes = 16u << 20};
    uint8_t hb[DPLANE_HDR_SIZE];
    dplane_hdr_encode(&h, hb);
    assert_int_equal(write_full(fd, hb, sizeof hb), 0);
    /* The reader waits in the gate: nothing kept, nothing reserved. */
    mbox_guard_stats_t g;
    mbox_guard_stats(p->mb_b, &g);
    assert_int_equal(g.unclaimed_bytes, 0);
    assert_int_equal(mbox_count(p->mb_b), 0);
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hdr_roundtrip),
        cmocka_unit_test(test_hdr_rejects_bad_frames),
        cmocka_unit_test(test_parse_addr),
        cmocka_unit_test_setup_teardown(test_loopback_send, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_self_send_is_local, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_garbage_connection, pair_setup, pair_teardown),
        cmocka_unit_test(test_unreachable_peer),
        cmocka_unit_test_setup_teardown(test_shm_4mib_integrity, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_forced_tcp, pair_setup, pair_teardown),
        cmocka_unit_test(test_shm_receiver_gone),
        cmocka_unit_test(test_same_host),
        cmocka_unit_test_setup_teardown(test_unsealed_memfd_refused, pair_setup, pair_teardown),
        cmocka_unit_test_setup_teardown(test_huge_claim_not_allocated, pair_setup,
                                        pair_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
