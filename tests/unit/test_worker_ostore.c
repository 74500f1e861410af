/* test_worker_ostore.c - the worker's object store: refcounts, the memory
 * cap with back-pressure (real threads), dropping a task's objects, and
 * mailbox messages counted through the accounting hook. workers/ostore.c
 * and mbox.c are compiled in (unit tests link only atoll_common). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "../../workers/mbox.c"
#include "../../workers/ostore.c"

static tensor_t *vec(int64_t n)
{
    shape_t s = {.rank = 1, .dim = {n}};
    tensor_t *t = tensor_new(&s);
    assert_non_null(t);
    return t;
}

static ostore_key_t key(int64_t job, int value, int shard)
{
    ostore_key_t k = {.job = job, .attempt = 0, .comp = 0, .value = value, .shard = shard};
    return k;
}

static void assert_stats(ostore_t *s, int64_t objects, int64_t bytes)
{
    ostore_stats_t st;
    ostore_stats(s, &st);
    assert_int_equal(st.objects, objects);
    assert_int_equal(st.bytes, bytes);
}

/* An object lives until its last consumer releases it. */
static void test_refcounts(void **state)
{
    (void)state;
    ostore_t *s = ostore_new(1 << 20);
    assert_non_null(s);
    ostore_key_t k = key(1, 0, 0);
    assert_int_equal(ostore_reserve(s, 400, util_mono_us(), NULL, NULL), OSTORE_OK);
    assert_stats(s, 0, 400);                  /* a reservation counts at once */
    ostore_obj_t *o = ostore_put(s, &k, vec(100), 3, 400);
    assert_non_null(o);
    assert_stats(s, 1, 400);
    assert_int_equal(shape_numel(&ostore_tensor(o)->shape), 100);
    assert_int_equal(ostore_release(s, o, 1), 2);
    assert_int_equal(ostore_release(s, o, 1), 1);
    assert_stats(s, 1, 400);
    assert_int_equal(ostore_release(s, o, 1), 0);
    assert_stats(s, 0, 0);
    /* Adopted buffers (reserved 0) are charged without waiting. */
    o = ostore_put(s, &k, vec(10), 1, 0);
    assert_stats(s, 1, 40);
    assert_int_equal(ostore_release(s, o, 1), 0);
    assert_stats(s, 0, 0);
    ostore_stats_t st;
    ostore_stats(s, &st);
    assert_int_equal(st.peak_bytes, 400);
    assert_int_equal(st.cap_bytes, 1 << 20);
    ostore_free(s);
}

/* Dropping a task frees its objects whatever their refcounts, and only
 * its own. */
static void test_drop_task(void **state)
{
    (void)state;
    ostore_t *s = ostore_new(1 << 20);
    ostore_key_t a0 = key(5, 0, 0), a1 = key(5, 1, 0), other = key(5, 0, 1), job6 = key(6, 0, 0);
    ostore_put(s, &a0, vec(4), 2, 0);
    ostore_put(s, &a1, vec(4), 7, 0);
    ostore_obj_t *keep = ostore_put(s, &other, vec(4), 1, 0);
    ostore_obj_t *keep6 = ostore_put(s, &job6, vec(4), 1, 0);
    assert_int_equal(ostore_job_objects(s, 5), 3);
    assert_int_equal(ostore_drop_task(s, 5, 0, 0, 0), 2);
    assert_int_equal(ostore_job_objects(s, 5), 1);
    assert_int_equal(ostore_drop_task(s, 5, 0, 0, 0), 0);
    assert_stats(s, 2, 32);
    ostore_release(s, keep, 1);
    ostore_release(s, keep6, 1);
    assert_stats(s, 0, 0);
    ostore_free(s);
}

/* Larger than the whole cap: refused at once (it could never fit). */
static void test_too_big(void **state)
{
    (void)state;
    ostore_t *s = ostore_new(1000);
    assert_int_equal(ostore_reserve(s, 1001, util_mono_us() + 1000000, NULL, NULL),
                     OSTORE_TOO_BIG);
    assert_stats(s, 0, 0);
    ostore_free(s);
}

/* Full store: a reservation waits until its deadline, then times out. */
static void test_full_times_out(void **state)
{
    (void)state;
    ostore_t *s = ostore_new(1000);
    assert_int_equal(ostore_reserve(s, 800, util_mono_us(), NULL, NULL), OSTORE_OK);
    assert_int_equal(ostore_reserve(s, 300, util_mono_us() + 50000, NULL, NULL),
                     OSTORE_TIMEOUT);
    ostore_stats_t st;
    ostore_stats(s, &st);
    assert_int_equal(st.bytes, 800);
    assert_int_equal(st.waits, 1);
    ostore_unreserve(s, 800);
    assert_stats(s, 0, 0);
    ostore_free(s);
}

typedef struct waiter {
    ostore_t *s;
    int64_t bytes;
    atomic_int stop;
    atomic_int done;
    ostore_status_t st;
} waiter_t;

static int waiter_stop(void *ctx)
{
    return atomic_load(&((waiter_t *)ctx)->stop);
}

static void *waiter_main(void *arg)
{
    waiter_t *w = arg;
    w->st = ostore_reserve(w->s, w->bytes, util_mono_us() + 20 * 1000000, waiter_stop, w);
    atomic_store(&w->done, 1);
    return NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Back-pressure: a reservation over the cap blocks its thread until an
 * object is freed, then proceeds. */
static void test_backpressure_waits_for_free(void **state)
{
    (void)state;
    ostore_t *s = ostore_new(1000);
    ostore_key_t k = key(1, 0, 0);
    assert_int_equal(ostore_reserve(s, 800, util_mono_us(), NULL, NULL), OSTORE_OK);
    ostore_obj_t *o = ostore_put(s, &k, vec(200), 1, 800);
    waiter_t w = {.s = s, .bytes = 400};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    sleep_ms(100);
    assert_int_equal(atomic_load(&w.done), 0);      /* still held back */
    assert_int_equal(ostore_release(s, o, 1), 0);   /* frees 800 bytes */
    pthread_join(th, NULL);
    assert_int_equal(w.st, OSTORE_OK);
    assert_stats(s, 0, 400);
    ostore_unreserve(s, 400);
    ostore_free(s);
}

/* A cancelled task stops waiting (stop predicate) without memory freed. */
static void test_backpressure_stops_on_cancel(void **state)
{
    (void)state;
    ostore_t *s = ostore_new(1000);
    assert_int_equal(ostore_reserve(s, 1000, util_mono_us(), NULL, NULL), OSTORE_OK);
    waiter_t w = {.s = s, .bytes = 1};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, waiter_main, &w), 0);
    sleep_ms(50);
    assert_int_equal(atomic_load(&w.done), 0);
    atomic_store(&w.stop, 1);
    pthread_join(th, NULL);
    assert_int_equal(w.st, OSTORE_STOPPED);
    assert_stats(s, 0, 1000);
    ostore_unreserve(s, 1000);
    ostore_free(s);
}

static void acct(void *ctx, int64_t dobjects, int64_t dbytes)
{
    ostore_charge(ctx, dobjects, dbytes);
}

/* Mailbox messages count as objects while they wait, and stop counting
 * when taken, dropped by a cancel, or freed with the mailbox. */
static void test_mailbox_accounting(void **state)
{
    (void)state;
    ostore_t *s = ostore_new(1 << 20);
    mbox_t *mb = mbox_new();
    mbox_set_accounting(mb, acct, s);
    mbox_tag_t t1 = {.job = 1, .op = 1}, t2 = {.job = 2, .op = 2}, t3 = {.job = 3};
    mbox_put(mb, &t1, vec(10));
    mbox_put(mb, &t2, vec(20));
    mbox_put(mb, &t3, vec(5));
    assert_stats(s, 3, 140);
    tensor_t *got = NULL;
    assert_int_equal(mbox_take(mb, &t1, util_mono_us(), &got), MBOX_OK);
    tensor_free(got);
    assert_stats(s, 2, 100);
    mbox_cancel_job(mb, 2, 0);
    assert_stats(s, 1, 20);
    mbox_put(mb, &t2, vec(20));                /* cancelled job: dropped, not counted */
    assert_stats(s, 1, 20);
    mbox_free(mb);
    assert_stats(s, 0, 0);
    ostore_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refcounts),
        cmocka_unit_test(test_drop_task),
        cmocka_unit_test(test_too_big),
        cmocka_unit_test(test_full_times_out),
        cmocka_unit_test(test_backpressure_waits_for_free),
        cmocka_unit_test(test_backpressure_stops_on_cancel),
        cmocka_unit_test(test_mailbox_accounting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
