/* test_util_clock.c - monotonic <-> unix time conversions (common/util.c).
 *
 * Workers stamp tasks and data-plane frames in unix time from monotonic
 * ones (a sim device's clock, a deadline). The conversions use one offset,
 * sampled so that a preemption cannot skew it and kept for a second: two
 * conversions then differ exactly as their monotonic times do. An offset
 * read afresh at each call, as wall - mono of two calls, moved by a
 * microsecond whenever the two reads straddled a microsecond differently,
 * and by milliseconds when the thread waited for a core between them (a
 * task's stamps closer together than its device time, test_worker_exec
 * under load). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "util.h"

#define PAIRS 200000

/* Pairs the offset's refreshes may have moved by a microsecond: one per
 * refresh (one a second) during a loop that began at t0, and one more.
 * The loop takes ~0.1 s alone, seconds under a sanitizer on a loaded
 * host; an offset read afresh at each call moves thousands of pairs. */
static int refresh_allowance(int64_t t0)
{
    return 2 + (int)((util_mono_us() - t0) / 1000000);
}

/* Conversions keep differences: mono x and x + d become unix times d
 * apart, but for the pairs that straddle the offset's refresh. */
static void test_conversions_keep_differences(void **state)
{
    (void)state;
    int off = 0;
    int64_t t0 = util_mono_us();
    for (int i = 0; i < PAIRS; i++) {
        int64_t x = util_mono_us(), d = 1 + i % 5000;
        int64_t a = util_mono_to_wall_us(x), b = util_mono_to_wall_us(x + d);
        int64_t e = b - a - d;
        assert_true(e >= -2 && e <= 2);
        off += e != 0;
    }
    assert_true(off <= refresh_allowance(t0));
}

/* unix -> mono undoes mono -> unix (the same offset both ways). */
static void test_round_trip(void **state)
{
    (void)state;
    int off = 0;
    int64_t t0 = util_mono_us();
    for (int i = 0; i < PAIRS; i++) {
        int64_t x = util_mono_us() + i % 3000 - 1500;
        int64_t e = util_wall_to_mono_us(util_mono_to_wall_us(x)) - x;
        assert_true(e >= -2 && e <= 2);
        off += e != 0;
    }
    assert_true(off <= refresh_allowance(t0));
}

/* The offset is the clocks' real one: now in unix time is the wall clock
 * now (the best of a few tries: the test itself may wait for a core
 * between its two reads). */
static void test_conversion_is_the_wall_clock(void **state)
{
    (void)state;
    int64_t best = INT64_MAX;
    for (int i = 0; i < 50; i++) {
        int64_t e = util_mono_to_wall_us(util_mono_us()) - util_wall_us();
        if (e < 0)
            e = -e;
        if (e < best)
            best = e;
    }
    assert_true(best <= 50);
}

/* Threads that keep both cores of a small host busy, so that converting
 * threads are preempted often. */
static atomic_int spin_stop;

static void *spin_main(void *arg)
{
    (void)arg;
    volatile uint64_t x = 0;
    while (!atomic_load(&spin_stop))
        x++;
    return NULL;
}

typedef struct conv_res {
    int64_t worst;              /* largest |difference error| seen, us */
} conv_res_t;

static void *conv_main(void *arg)
{
    conv_res_t *r = arg;
    for (int i = 0; i < PAIRS / 4; i++) {
        int64_t x = util_mono_us();
        int64_t e = util_mono_to_wall_us(x + 777) - util_mono_to_wall_us(x) - 777;
        if (e < 0)
            e = -e;
        if (e > r->worst)
            r->worst = e;
    }
    return NULL;
}

/* Under preemption (more busy threads than cores, four converting
 * threads) no conversion moves by more than a refresh's microsecond. */
static void test_preempted_conversions_stay_exact(void **state)
{
    (void)state;
    pthread_t spin[3], conv[4];
    conv_res_t res[4] = {{0}};
    atomic_store(&spin_stop, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&spin[i], NULL, spin_main, NULL), 0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&conv[i], NULL, conv_main, &res[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(conv[i], NULL);
    atomic_store(&spin_stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(spin[i], NULL);
    for (int i = 0; i < 4; i++)
        assert_true(res[i].worst <= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conversions_keep_differences),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_conversion_is_the_wall_clock),
        cmocka_unit_test(test_preempted_conversions_stay_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
