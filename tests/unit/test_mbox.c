/* test_mbox.c - the worker mailbox (workers/mbox.c, compiled in here
 * because unit tests link only atoll_common). Real threads, real waits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#include "../../workers/mbox.c"

static tensor_t *scalar(float v)
{
    shape_t s = {0};
    tensor_t *t = tensor_new(&s);
    assert_non_null(t);
    t->data[0] = v;
    return t;
}

static mbox_tag_t tag_of(int64_t job, int attempt, int op, int src, int dst)
{
    mbox_tag_t t = {.job = job, .attempt = attempt, .comp = 1, .op = op, .src = src, .dst = dst};
    return t;
}

static int64_t in_ms(int ms)
{
    return util_mono_us() + (int64_t)ms * 1000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A message that arrives before its taker is kept; tags must match exactly. */
static void test_put_then_take(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    assert_non_null(mb);
    mbox_tag_t a = tag_of(5, 0, 3, 0, 1);
    assert_int_equal(mbox_put(mb, &a, scalar(7.0f)), 0);
    assert_int_equal(mbox_count(mb), 1);

    tensor_t *got = NULL;
    mbox_tag_t other = tag_of(5, 0, 3, 1, 0);        /* src/dst swapped */
    assert_int_equal(mbox_take(mb, &other, in_ms(20), &got), MBOX_TIMEOUT);
    assert_null(got);
    mbox_tag_t other_attempt = tag_of(5, 1, 3, 0, 1);
    assert_int_equal(mbox_take(mb, &other_attempt, in_ms(0), &got), MBOX_TIMEOUT);

    assert_int_equal(mbox_take(mb, &a, in_ms(1000), &got), MBOX_OK);
    assert_non_null(got);
    assert_true(got->data[0] == 7.0f);
    tensor_free(got);
    assert_int_equal(mbox_count(mb), 0);
    mbox_free(mb);
}

static void test_timeout_waits_until_deadline(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    mbox_tag_t a = tag_of(1, 0, 0, 0, 0);
    tensor_t *got = NULL;
    int64_t t0 = util_mono_us();
    assert_int_equal(mbox_take(mb, &a, in_ms(80), &got), MBOX_TIMEOUT);
    int64_t waited = util_mono_us() - t0;
    assert_true(waited >= 75000);
    assert_true(waited < 2000000);
    mbox_free(mb);
}

typedef struct putter {
    mbox_t *mb;
    mbox_tag_t tag;
    int delay_ms;
    int what;           /* 0 put, 1 cancel job, 2 shutdown */
} putter_t;

static void *putter_main(void *arg)
{
    putter_t *p = arg;
    sleep_ms(p->delay_ms);
    if (p->what == 0)
        mbox_put(p->mb, &p->tag, scalar(42.0f));
    else if (p->what == 1)
        mbox_cancel_job(p->mb, p->tag.job, p->tag.attempt);
    else
        mbox_shutdown(p->mb);
    return NULL;
}

/* Runs a take while another thread acts after 50 ms; returns its status. */
static mbox_status_t take_while(mbox_t *mb, int what, const mbox_tag_t *tag, tensor_t **got)
{
    putter_t p = {.mb = mb, .tag = *tag, .delay_ms = 50, .what = what};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, putter_main, &p), 0);
    int64_t t0 = util_mono_us();
    mbox_status_t st = mbox_take(mb, tag, in_ms(5000), got);
    /* Woken by the event, well before the 5 s deadline. */
    assert_true(util_mono_us() - t0 < 3000000);
    pthread_join(th, NULL);
    return st;
}

static void test_taker_first_is_woken_by_put(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    mbox_tag_t a = tag_of(9, 2, 4, 3, 1);
    tensor_t *got = NULL;
    assert_int_equal(take_while(mb, 0, &a, &got), MBOX_OK);
    assert_non_null(got);
    assert_true(got->data[0] == 42.0f);
    tensor_free(got);
    mbox_free(mb);
}

static void test_cancel_wakes_and_drops(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    mbox_tag_t waiting = tag_of(3, 1, 0, 0, 1);
    mbox_tag_t kept = tag_of(3, 0, 2, 1, 0);
    mbox_put(mb, &kept, scalar(1.0f));
    tensor_t *got = NULL;
    assert_int_equal(take_while(mb, 1, &waiting, &got), MBOX_CANCELLED);
    assert_null(got);
    /* Cancel of attempts <= 1 freed the kept attempt-0 message. */
    assert_int_equal(mbox_count(mb), 0);
    assert_true(mbox_is_cancelled(mb, 3, 0));
    assert_true(mbox_is_cancelled(mb, 3, 1));
    assert_false(mbox_is_cancelled(mb, 3, 2));
    assert_false(mbox_is_cancelled(mb, 4, 0));
    /* Late puts for the cancelled attempt are dropped... */
    assert_int_equal(mbox_put(mb, &waiting, scalar(2.0f)), 1);
    assert_int_equal(mbox_count(mb), 0);
    /* ...but a retry (attempt 2) of the same job works. */
    mbox_tag_t retry = tag_of(3, 2, 0, 0, 1);
    assert_int_equal(mbox_put(mb, &retry, scalar(3.0f)), 0);
    assert_int_equal(mbox_take(mb, &retry, in_ms(100), &got), MBOX_OK);
    tensor_free(got);
    mbox_free(mb);
}

static void test_shutdown_wakes_waiters(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    mbox_tag_t a = tag_of(1, 0, 0, 0, 1);
    tensor_t *got = NULL;
    assert_int_equal(take_while(mb, 2, &a, &got), MBOX_STOPPED);
    assert_int_equal(mbox_put(mb, &a, scalar(1.0f)), 1);   /* dropped after shutdown */
    assert_int_equal(mbox_take(mb, &a, in_ms(1000), &got), MBOX_STOPPED);
    mbox_free(mb);
}

static void test_drop_job_is_selective(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    for (int op = 0; op < 10; op++) {
        mbox_tag_t a0 = tag_of(7, 0, op, 0, 0), a1 = tag_of(7, 1, op, 0, 0);
        mbox_tag_t other = tag_of(8, 0, op, 0, 0);
        mbox_put(mb, &a0, scalar((float)op));
        mbox_put(mb, &a1, scalar((float)op));
        mbox_put(mb, &other, scalar((float)op));
    }
    assert_int_equal(mbox_count(mb), 30);
    assert_int_equal(mbox_drop_job(mb, 7, 0), 10);
    assert_int_equal(mbox_count(mb), 20);
    tensor_t *got = NULL;
    mbox_tag_t a1 = tag_of(7, 1, 4, 0, 0);
    assert_int_equal(mbox_take(mb, &a1, in_ms(0), &got), MBOX_OK);
    assert_true(got->data[0] == 4.0f);
    tensor_free(got);
    assert_int_equal(mbox_drop_job(mb, 7, INT32_MAX), 9);
    assert_int_equal(mbox_count(mb), 10);   /* job 8 untouched; freed by mbox_free */
    mbox_free(mb);
}

/* Many messages (bucket chains) and duplicates taken in arrival order. */
static void test_many_and_duplicates(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    const int n = 5000;
    for (int i = 0; i < n; i++) {
        mbox_tag_t t = tag_of(i % 7, 0, i, i % 13, i % 5);
        mbox_put(mb, &t, scalar((float)i));
    }
    mbox_tag_t dup = tag_of(100, 0, 0, 0, 0);
    mbox_put(mb, &dup, scalar(1.0f));
    mbox_put(mb, &dup, scalar(2.0f));
    assert_int_equal(mbox_count(mb), n + 2);
    for (int i = n - 1; i >= 0; i--) {
        mbox_tag_t t = tag_of(i % 7, 0, i, i % 13, i % 5);
        tensor_t *got = NULL;
        assert_int_equal(mbox_take(mb, &t, in_ms(0), &got), MBOX_OK);
        assert_true(got->data[0] == (float)i);
        tensor_free(got);
    }
    tensor_t *first = NULL, *second = NULL;
    assert_int_equal(mbox_take(mb, &dup, in_ms(0), &first), MBOX_OK);
    assert_int_equal(mbox_take(mb, &dup, in_ms(0), &second), MBOX_OK);
    assert_true(first->data[0] == 1.0f && second->data[0] == 2.0f);
    tensor_free(first);
    tensor_free(second);
    assert_int_equal(mbox_count(mb), 0);
    mbox_free(mb);
}

/* Several takers at once, each woken by its own message. */
typedef struct taker {
    mbox_t *mb;
    mbox_tag_t tag;
    mbox_status_t st;
    float value;
} taker_t;

static void *taker_main(void *arg)
{
    taker_t *t = arg;
    tensor_t *got = NULL;
    t->st = mbox_take(t->mb, &t->tag, in_ms(20000), &got);
    t->value = got ? got->data[0] : -1.0f;
    tensor_free(got);
    return NULL;
}

static void test_concurrent_takers(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    enum { K = 8 };
    taker_t tk[K];
    pthread_t th[K];
    for (int i = 0; i < K; i++) {
        tk[i] = (taker_t){.mb = mb, .tag = tag_of(1, 0, 0, i, 0)};
        assert_int_equal(pthread_create(&th[i], NULL, taker_main, &tk[i]), 0);
    }
    sleep_ms(30);
    for (int i = K - 1; i >= 0; i--) {
        mbox_tag_t t = tag_of(1, 0, 0, i, 0);
        mbox_put(mb, &t, scalar((float)(i * 10)));
    }
    for (int i = 0; i < K; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(tk[i].st, MBOX_OK);
        assert_true(tk[i].value == (float)(i * 10));
    }
    assert_int_equal(mbox_count(mb), 0);
    mbox_free(mb);
}

/* Finding 4/7: frames from the network (origin > 0) for a task this
 * worker does not run are kept only as bounded "unclaimed" frames; a
 * declared task claims its own; a bad source, a cancelled attempt or an
 * ended task is dropped and counted; a closed connection frees its frames. */
static const mbox_key_t K = {{0x11, 0x22, 0x33}};

static void test_gate(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    mbox_tag_t early = tag_of(7, 1, 3, 0, 1), bad_src = tag_of(7, 1, 3, 9, 1);
    assert_int_equal(mbox_admit(mb, &early, &K, 1, 4, in_ms(10)), MBOX_ADMIT_UNCLAIMED);
    assert_int_equal(mbox_put_from(mb, &early, &K, scalar(1), 1, MBOX_ADMIT_UNCLAIMED), 0);
    assert_int_equal(mbox_admit(mb, &bad_src, &K, 1, 4, in_ms(10)), MBOX_ADMIT_UNCLAIMED);
    assert_int_equal(mbox_put_from(mb, &bad_src, &K, scalar(2), 1, MBOX_ADMIT_UNCLAIMED), 0);
    mbox_guard_stats_t g;
    mbox_guard_stats(mb, &g);
    assert_int_equal(g.unclaimed, 2);
    /* The task (job 7 attempt 1 comp 1 shard 1, 4 shards) claims the good
     * one and drops the one from a shard outside its slice. */
    assert_int_equal(mbox_expect(mb, 7, 1, 1, 1, 4, &K), 0);
    mbox_guard_stats(mb, &g);
    assert_int_equal(g.unclaimed, 0);
    assert_int_equal(g.dropped, 1);
    assert_int_equal(mbox_admit(mb, &bad_src, &K, 1, 4, in_ms(10)), MBOX_ADMIT_DROP);
    assert_int_equal(mbox_admit(mb, &early, &K, 1, 4, in_ms(10)), MBOX_ADMIT_TASK);
    tensor_t *t = NULL;
    assert_int_equal(mbox_take(mb, &early, in_ms(100), &t), MBOX_OK);
    assert_true(t->data[0] == 1.0f);
    tensor_free(t);
    /* Ended: a late frame for it is refused, a leftover freed. */
    mbox_tag_t dup = tag_of(7, 1, 4, 2, 1);
    assert_int_equal(mbox_put_from(mb, &dup, &K, scalar(3), 2, MBOX_ADMIT_TASK), 0);
    mbox_task_done(mb, 7, 1, 1, 1);
    assert_int_equal(mbox_count(mb), 0);
    assert_int_equal(mbox_admit(mb, &early, &K, 1, 4, in_ms(10)), MBOX_ADMIT_DROP);
    /* Caps: past MBOX_UNCLAIMED_ORIGIN_BYTES on one connection a frame is
     * refused before anything is allocated (after its short wait). */
    mbox_tag_t other = tag_of(8, 1, 0, 0, 0);
    assert_int_equal(mbox_admit(mb, &other, &K, 3, MBOX_UNCLAIMED_ORIGIN_BYTES + 4, in_ms(5000)),
                     MBOX_ADMIT_WAIT);     /* no room yet: never blocks, asked again */
    assert_int_equal(mbox_admit(mb, &other, &K, 3, MBOX_UNCLAIMED_ORIGIN_BYTES + 4, 0),
                     MBOX_ADMIT_DROP);
    assert_int_equal(mbox_admit(mb, &other, &K, 3, MBOX_UNCLAIMED_ORIGIN_BYTES, in_ms(20)),
                     MBOX_ADMIT_UNCLAIMED);
    assert_int_equal(mbox_admit(mb, &other, &K, 3, 4, 0), MBOX_ADMIT_DROP);
    mbox_unreserve(mb, 3, MBOX_UNCLAIMED_ORIGIN_BYTES);
    mbox_guard_stats(mb, &g);
    assert_int_equal(g.over_cap, 2);         /* the WAIT was not counted */
    assert_int_equal(g.unclaimed_bytes, 0);
    /* A closed connection's unclaimed frames go. */
    assert_int_equal(mbox_put_from(mb, &other, &K, scalar(4), 5, MBOX_ADMIT_UNCLAIMED), 0);
    mbox_drop_origin(mb, 5);
    assert_int_equal(mbox_count(mb), 0);
    mbox_free(mb);
}

/* The cap over all connections: four origins each at their own cap fill
 * MBOX_UNCLAIMED_TOTAL_BYTES, and a fifth, with nothing of its own yet,
 * is refused (over_cap) until one of them gives its room back. A frame
 * of a negative size is refused outright (it would reserve room back). */
static void test_total_cap(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    mbox_tag_t tag = tag_of(8, 1, 0, 0, 0);
    int full = (int)(MBOX_UNCLAIMED_TOTAL_BYTES / MBOX_UNCLAIMED_ORIGIN_BYTES);
    assert_true(full >= 2);
    for (int o = 1; o <= full; o++)
        assert_int_equal(mbox_admit(mb, &tag, &K, o, MBOX_UNCLAIMED_ORIGIN_BYTES, 0),
                         MBOX_ADMIT_UNCLAIMED);
    assert_int_equal(mbox_admit(mb, &tag, &K, full + 1, 4, 0), MBOX_ADMIT_DROP);
    mbox_guard_stats_t g;
    mbox_guard_stats(mb, &g);
    assert_int_equal(g.over_cap, 1);
    assert_int_equal(g.unclaimed_bytes, MBOX_UNCLAIMED_TOTAL_BYTES);
    assert_int_equal(mbox_admit(mb, &tag, &K, full + 1, -4, 0), MBOX_ADMIT_DROP);
    mbox_guard_stats(mb, &g);
    assert_int_equal(g.unclaimed_bytes, MBOX_UNCLAIMED_TOTAL_BYTES);
    mbox_unreserve(mb, 1, MBOX_UNCLAIMED_ORIGIN_BYTES);
    assert_int_equal(mbox_admit(mb, &tag, &K, full + 1, 4, 0), MBOX_ADMIT_UNCLAIMED);
    mbox_unreserve(mb, full + 1, 4);
    for (int o = 2; o <= full; o++)
        mbox_unreserve(mb, o, MBOX_UNCLAIMED_ORIGIN_BYTES);
    mbox_guard_stats(mb, &g);
    assert_int_equal(g.unclaimed_bytes, 0);
    mbox_free(mb);
}

/* Many tasks at once (a worker holds a whole job: 5,000 declared shards
 * for a 1,000-computation chain), so the gate finds them by hash: each is
 * its own, ending one forgets it, and the ended ring remembers exactly the
 * last MBOX_ENDED_MEMORY ended (an older one is forgotten, and so no longer
 * refused: a frame for it waits unclaimed). A task declared twice ends at
 * its second end. */
static mbox_tag_t comp_tag(int comp, int dst)
{
    mbox_tag_t t = {.job = 9, .attempt = 0, .comp = comp, .op = 1, .src = 1, .dst = dst};
    return t;
}

static void test_many_tasks_and_ended_ring(void **state)
{
    (void)state;
    enum { N = 5000 };
    mbox_t *mb = mbox_new();
    for (int c = 0; c < N; c++)
        assert_int_equal(mbox_expect(mb, 9, 0, c, c % 4, 4, &K), 0);
    assert_int_equal(mbox_expect(mb, 9, 0, 0, 0, 4, &K), 0);      /* twice */
    for (int c = 0; c < N; c++) {
        mbox_tag_t t = comp_tag(c, c % 4);
        assert_int_equal(mbox_admit(mb, &t, &K, 1, 4, 0), MBOX_ADMIT_TASK);
        mbox_tag_t other_shard = comp_tag(c, (c + 1) % 4);
        assert_int_equal(mbox_admit(mb, &other_shard, &K, 1, 4, 0), MBOX_ADMIT_UNCLAIMED);
        mbox_unreserve(mb, 1, 4);
    }
    for (int c = 0; c < N; c++)
        mbox_task_done(mb, 9, 0, c, c % 4);
    mbox_tag_t first = comp_tag(0, 0);
    assert_int_equal(mbox_admit(mb, &first, &K, 1, 4, 0), MBOX_ADMIT_TASK);  /* one ref left */
    mbox_task_done(mb, 9, 0, 0, 0);
    for (int c = 1; c < N; c++) {
        mbox_tag_t t = comp_tag(c, c % 4);
        mbox_admit_t want = c >= N - MBOX_ENDED_MEMORY + 1 ? MBOX_ADMIT_DROP : MBOX_ADMIT_UNCLAIMED;
        assert_int_equal(mbox_admit(mb, &t, &K, 1, 4, 0), want);
        if (want == MBOX_ADMIT_UNCLAIMED)
            mbox_unreserve(mb, 1, 4);
    }
    assert_int_equal(mbox_admit(mb, &first, &K, 1, 4, 0), MBOX_ADMIT_DROP);  /* ended last */
    mbox_free(mb);
}

/* Keys (issue 12): a frame whose key is not its attempt's is dropped and
 * counted as bad_key, whether it comes after the task was declared, before
 * (kept unclaimed beside the real one with the same tag, then dropped
 * when the task claims its own), or while its payload was in flight. */
static void test_keys(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    mbox_key_t W = {{0x66}};
    mbox_tag_t early = tag_of(5, 2, 0, 1, 0);
    /* Forged first, real second: both kept (not duplicates of each other). */
    assert_int_equal(mbox_admit(mb, &early, &W, 1, 4, in_ms(10)), MBOX_ADMIT_UNCLAIMED);
    assert_int_equal(mbox_put_from(mb, &early, &W, scalar(666), 1, MBOX_ADMIT_UNCLAIMED), 0);
    assert_int_equal(mbox_admit(mb, &early, &K, 2, 4, in_ms(10)), MBOX_ADMIT_UNCLAIMED);
    assert_int_equal(mbox_put_from(mb, &early, &K, scalar(1), 2, MBOX_ADMIT_UNCLAIMED), 0);
    assert_int_equal(mbox_count(mb), 2);
    /* In flight: admitted unclaimed with a wrong key, the task is declared
     * before its payload is stored. */
    mbox_tag_t late = tag_of(5, 2, 1, 1, 0);
    assert_int_equal(mbox_admit(mb, &late, &W, 1, 4, in_ms(10)), MBOX_ADMIT_UNCLAIMED);
    assert_int_equal(mbox_expect(mb, 5, 2, 1, 0, 4, &K), 0);
    assert_int_equal(mbox_put_from(mb, &late, &W, scalar(666), 1, MBOX_ADMIT_UNCLAIMED), 1);
    /* After: refused at the gate, before any payload. */
    assert_int_equal(mbox_admit(mb, &late, &W, 1, 4, in_ms(10)), MBOX_ADMIT_DROP);
    mbox_guard_stats_t g;
    mbox_guard_stats(mb, &g);
    assert_int_equal(g.bad_key, 3);
    assert_int_equal(g.dropped, 0);
    tensor_t *t = NULL;
    assert_int_equal(mbox_take(mb, &early, in_ms(100), &t), MBOX_OK);
    assert_true(t->data[0] == 1.0f);            /* the real one */
    tensor_free(t);
    assert_int_equal(mbox_count(mb), 0);
    mbox_task_done(mb, 5, 2, 1, 0);
    mbox_free(mb);
}

/* A second network frame with a tag still waiting is dropped (counted):
 * a sender cannot pile copies of one accepted tag into the store. Local
 * puts keep their order semantics (test_many_and_duplicates). */
static void test_network_duplicate_dropped(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    assert_int_equal(mbox_expect(mb, 9, 1, 1, 0, 4, &K), 0);
    mbox_tag_t tag = tag_of(9, 1, 5, 3, 0);
    assert_int_equal(mbox_put_from(mb, &tag, &K, scalar(1), 1, MBOX_ADMIT_TASK), 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(mbox_put_from(mb, &tag, &K, scalar(666), 2, MBOX_ADMIT_TASK), 1);
    assert_int_equal(mbox_count(mb), 1);
    mbox_guard_stats_t g;
    mbox_guard_stats(mb, &g);
    assert_int_equal(g.dropped, 5);
    tensor_t *t = NULL;
    assert_int_equal(mbox_take(mb, &tag, in_ms(100), &t), MBOX_OK);
    assert_true(t->data[0] == 1.0f);
    tensor_free(t);
    mbox_task_done(mb, 9, 1, 1, 0);
    mbox_free(mb);
}

/* ---- takers that progress the data plane (mbox_set_poller) ---- */

typedef struct fake_plane {     /* stands in for the data plane */
    mbox_t *mb;
    mbox_tag_t tag;
    int put_on_poll;            /* the poll that "receives" tag; 0: none */
    int stop_on_poll;           /* the poll that answers "stop polling"; 0: none */
    atomic_int polls, enters, leaves, last_need;
    atomic_llong last_waited;   /* waited_us of the last poll */
    pthread_t poller;           /* the thread that last polled */
} fake_plane_t;

static void fake_enter(void *ctx)
{
    fake_plane_t *f = ctx;
    atomic_fetch_add(&f->enters, 1);
}

/* Like a UCX handler run by progress: the message is put from inside the
 * poll, in the polling taker's own thread. */
static int fake_poll(void *ctx, int64_t waited_us)
{
    fake_plane_t *f = ctx;
    f->poller = pthread_self();
    atomic_store(&f->last_waited, waited_us);
    int k = atomic_fetch_add(&f->polls, 1) + 1;
    if (k == f->stop_on_poll)
        return 0;
    if (k == f->put_on_poll)
        mbox_put(f->mb, &f->tag, scalar(11.0f));
    return 1;
}

static void fake_leave(void *ctx, int need)
{
    fake_plane_t *f = ctx;
    atomic_store(&f->last_need, need);
    atomic_fetch_add(&f->leaves, 1);
}

static void set_fake(mbox_t *mb, fake_plane_t *f, int64_t spin_us)
{
    mbox_poller_t p = {.ctx = f, .spin_us = spin_us, .enter = fake_enter, .poll = fake_poll,
                       .leave = fake_leave};
    mbox_set_poller(mb, &p);
}

/* Whether a taker sleeps in mb (a mbox_t *). */
static int someone_sleeps(void *arg)
{
    mbox_t *mb = arg;
    pthread_mutex_lock(&mb->mu);
    int n = mb->sleepers;
    pthread_mutex_unlock(&mb->mu);
    return n > 0;
}

/* Waits (bounded) until cond(arg) holds; fails the test otherwise. */
static void wait_until(int (*cond)(void *), void *arg)
{
    int64_t end = util_mono_us() + 20000000;
    while (!cond(arg)) {
        assert_true(util_mono_us() < end);
        sched_yield();
    }
}

/* A taker whose message is not there polls, and the message its poll
 * receives is taken at once: no sleep, one enter and one leave, and the
 * leave says nobody needs progress. */
static void test_poller_receives_in_taker(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    fake_plane_t f = {.mb = mb, .tag = tag_of(4, 0, 1, 0, 1), .put_on_poll = 3};
    set_fake(mb, &f, 10000000);    /* 10 s: only the message ends the polling */
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(mb, &f.tag, in_ms(20000), &got), MBOX_OK);
    assert_true(got && got->data[0] == 11.0f);
    tensor_free(got);
    assert_int_equal(atomic_load(&f.polls), 3);
    assert_true(pthread_equal(f.poller, pthread_self()));
    assert_int_equal(atomic_load(&f.enters), 1);
    assert_int_equal(atomic_load(&f.leaves), 1);
    assert_int_equal(atomic_load(&f.last_need), 0);
    /* A message already there: no polling at all. */
    assert_int_equal(mbox_put(mb, &f.tag, scalar(1.0f)), 0);
    assert_int_equal(mbox_take(mb, &f.tag, in_ms(1000), &got), MBOX_OK);
    tensor_free(got);
    assert_int_equal(atomic_load(&f.enters), 1);
    mbox_free(mb);
}

static int left_once(void *arg)
{
    return atomic_load(&((fake_plane_t *)arg)->leaves) == 1;
}

static void *late_put_main(void *arg)
{
    fake_plane_t *f = arg;
    wait_until(left_once, f);      /* the taker gave up polling */
    wait_until(someone_sleeps, f->mb);
    mbox_put(f->mb, &f->tag, scalar(12.0f));
    return NULL;
}

/* f's taker (spin_us of polling at most) takes a message that comes only
 * once it gave up polling and sleeps (late_put_main): it polled once
 * (enter), left saying it needs progress (a sleeper), and got the put. */
static void take_after_polling(fake_plane_t *f, int64_t spin_us)
{
    set_fake(f->mb, f, spin_us);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, late_put_main, f), 0);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(f->mb, &f->tag, in_ms(120000), &got), MBOX_OK);
    pthread_join(th, NULL);
    assert_true(got && got->data[0] == 12.0f);
    tensor_free(got);
    assert_int_equal(atomic_load(&f->enters), 1);
    assert_int_equal(atomic_load(&f->leaves), 1);
    assert_int_equal(atomic_load(&f->last_need), 1);
}

/* A taker that polls past spin_us stops polling, says it needs progress
 * (leave with need), sleeps, and is woken by a put from elsewhere. */
static void test_poller_gives_up_then_sleeps(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    fake_plane_t f = {.mb = mb, .tag = tag_of(4, 0, 2, 0, 1)};
    take_after_polling(&f, 2000);
    assert_true(atomic_load(&f.polls) >= 1);
    /* Each poll is told how long its taker has polled (the data plane
     * yields past a while): after 2 ms of polls, more than nothing. */
    assert_true(atomic_load(&f.last_waited) >= 0);
    assert_true(atomic_load(&f.polls) == 1 || atomic_load(&f.last_waited) > 0);
    mbox_free(mb);
}

/* A poller that answers "stop" ends the polling there, long before
 * spin_us (60 s: only its answer ends it in time). */
static void test_poller_stops_when_told(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    fake_plane_t f = {.mb = mb, .tag = tag_of(4, 0, 5, 0, 1), .stop_on_poll = 3};
    take_after_polling(&f, 60000000);
    assert_int_equal(atomic_load(&f.polls), 3);
    mbox_free(mb);
}

/* A taker that got its message still says progress is needed when another
 * taker sleeps: that one's message must come from somebody. */
static void test_poller_leave_needs_for_sleepers(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    fake_plane_t f = {.mb = mb, .tag = tag_of(4, 0, 3, 0, 1), .put_on_poll = 0};
    set_fake(mb, &f, 1000);
    taker_t s = {.mb = mb, .tag = tag_of(4, 0, 3, 1, 0)};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, taker_main, &s), 0);
    wait_until(someone_sleeps, mb);     /* it polled, gave up, sleeps */
    assert_int_equal(atomic_load(&f.last_need), 1);
    atomic_store(&f.polls, 0);
    f.put_on_poll = 2;             /* now our take's message comes on its 2nd poll */
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(mb, &f.tag, in_ms(20000), &got), MBOX_OK);
    tensor_free(got);
    assert_int_equal(atomic_load(&f.leaves), 2);
    assert_int_equal(atomic_load(&f.last_need), 1);
    assert_int_equal(mbox_put(mb, &s.tag, scalar(3.0f)), 0);
    pthread_join(th, NULL);
    assert_int_equal(s.st, MBOX_OK);
    assert_true(s.value == 3.0f);
    mbox_free(mb);
}

/* spin_us 0 turns polling off; a deadline inside the spin ends it. */
static void test_poller_off_and_deadline(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    fake_plane_t f = {.mb = mb, .tag = tag_of(4, 0, 4, 0, 1)};
    set_fake(mb, &f, 0);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(mb, &f.tag, in_ms(20), &got), MBOX_TIMEOUT);
    assert_int_equal(atomic_load(&f.polls), 0);
    assert_int_equal(atomic_load(&f.enters), 0);
    set_fake(mb, &f, 10000000);
    int64_t t0 = util_mono_us();
    assert_int_equal(mbox_take(mb, &f.tag, in_ms(30), &got), MBOX_TIMEOUT);
    assert_true(util_mono_us() - t0 < 5000000);
    assert_true(atomic_load(&f.polls) > 0);
    assert_int_equal(atomic_load(&f.enters), 1);
    assert_int_equal(atomic_load(&f.leaves), 1);
    mbox_set_poller(mb, NULL);
    atomic_store(&f.polls, 0);
    assert_int_equal(mbox_take(mb, &f.tag, in_ms(20), &got), MBOX_TIMEOUT);
    assert_int_equal(atomic_load(&f.polls), 0);
    mbox_free(mb);
}

/* A task's end frees what is left for it, whichever way it came (a local
 * put or a peer's frame), after other messages of its key came and went
 * (the per-key counts that let an end skip its scan stay true), and
 * leaves every other task's messages alone. */
static void test_task_end_frees_only_its_leftovers(void **state)
{
    (void)state;
    mbox_t *mb = mbox_new();
    assert_int_equal(mbox_expect(mb, 5, 0, 1, 1, 4, &K), 0);
    assert_int_equal(mbox_expect(mb, 5, 0, 1, 2, 4, &K), 0);
    mbox_tag_t taken = tag_of(5, 0, 7, 0, 1), left = tag_of(5, 0, 8, 0, 1);
    mbox_tag_t peer = tag_of(5, 0, 9, 3, 1), other = tag_of(5, 0, 8, 0, 2);
    assert_int_equal(mbox_put(mb, &taken, scalar(1)), 0);
    tensor_t *t = NULL;
    assert_int_equal(mbox_take(mb, &taken, in_ms(100), &t), MBOX_OK);
    tensor_free(t);
    assert_int_equal(mbox_put(mb, &left, scalar(2)), 0);
    assert_int_equal(mbox_put_from(mb, &peer, &K, scalar(3), 3, MBOX_ADMIT_TASK), 0);
    assert_int_equal(mbox_put(mb, &other, scalar(4)), 0);
    assert_int_equal(mbox_count(mb), 3);
    mbox_task_done(mb, 5, 0, 1, 1);
    assert_int_equal(mbox_count(mb), 1);
    assert_int_equal(mbox_take(mb, &other, in_ms(100), &t), MBOX_OK);
    assert_true(t->data[0] == 4.0f);
    tensor_free(t);
    mbox_task_done(mb, 5, 0, 1, 2);
    assert_int_equal(mbox_count(mb), 0);
    mbox_free(mb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_then_take),
        cmocka_unit_test(test_timeout_waits_until_deadline),
        cmocka_unit_test(test_taker_first_is_woken_by_put),
        cmocka_unit_test(test_cancel_wakes_and_drops),
        cmocka_unit_test(test_shutdown_wakes_waiters),
        cmocka_unit_test(test_drop_job_is_selective),
        cmocka_unit_test(test_many_and_duplicates),
        cmocka_unit_test(test_concurrent_takers),
        cmocka_unit_test(test_gate),
        cmocka_unit_test(test_total_cap),
        cmocka_unit_test(test_many_tasks_and_ended_ring),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_network_duplicate_dropped),
        cmocka_unit_test(test_task_end_frees_only_its_leftovers),
        cmocka_unit_test(test_poller_receives_in_taker),
        cmocka_unit_test(test_poller_gives_up_then_sleeps),
        cmocka_unit_test(test_poller_stops_when_told),
        cmocka_unit_test(test_poller_leave_needs_for_sleepers),
        cmocka_unit_test(test_poller_off_and_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
