/* test_sched_rest.c - the real-time scheduler thread's meter
 * (sched_rt_rest_us, scheduler/scheduler.c; sched_internal.h): passes
 * that come apart never rest; back-to-back passes run free for a burst of
 * SCHED_RT_BURST_US of debt-free time, then rest twice their debt, so that
 * over a long stretch they hold at most half a core; a rest is at most
 * SCHED_RT_REST_MAX_US; idle time refills the burst and no more; a clock
 * that went back starts the meter again. Simulated time: no thread, no
 * sleep. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_internal.h"

#define T0 1000000          /* any start (0 means "no pass yet" to the meter) */
/* Back-to-back 500 us passes before the first rest, from a whole burst. */
#define BURST_PASSES ((SCHED_RT_BURST_US - 500) / 250 + 1)

/* Runs back-to-back passes of pass_us each from *now, sleeping what the
 * meter says after each; returns how many passes ran before the first
 * rest (n if none), and adds the passes' time to *busy and the rests' to
 * *idle. */
static int run_passes(sched_rt_bucket_t *b, int64_t *now, int n, int64_t pass_us,
                      int64_t *busy, int64_t *idle)
{
    int first_rest = n;
    for (int i = 0; i < n; i++) {
        *now += pass_us;
        int64_t rest = sched_rt_rest_us(b, *now, pass_us, 1);
        assert_true(rest >= 0 && rest <= SCHED_RT_REST_MAX_US);
        if (rest > 0 && first_rest == n)
            first_rest = i;
        *now += rest;
        *busy += pass_us;
        *idle += rest;
    }
    return first_rest;
}

static void test_passes_apart_never_rest(void **state)
{
    (void)state;
    sched_rt_bucket_t b = {0};
    int64_t now = T0;
    for (int i = 0; i < 1000; i++) {
        now += 3000;
        assert_int_equal(sched_rt_rest_us(&b, now, 3000, 0), 0);
    }
}

static void test_burst_then_half_a_core(void **state)
{
    (void)state;
    sched_rt_bucket_t b = {0};
    int64_t now = T0, busy = 0, idle = 0;
    /* 500 us passes: the first spends 500 of the burst, each later one
     * earns 250 and spends 500, so the 20th (index 19) is the first in
     * debt (250) and rests twice that. */
    int first = run_passes(&b, &now, 20, 500, &busy, &idle);
    assert_int_equal(first, BURST_PASSES);
    assert_int_equal(idle, 500);
    /* Over a long stretch: half of the time running, within a pass. */
    busy = idle = 0;
    run_passes(&b, &now, 10000, 500, &busy, &idle);
    assert_true(busy <= idle + 500 && busy >= idle - 500);
}

static void test_rest_is_bounded(void **state)
{
    (void)state;
    sched_rt_bucket_t b = {0};
    int64_t now = T0 + 50000;
    /* One 50 ms pass: the debt is 20 ms, the rest at most the cap; the next
     * back-to-back pass still rests (the debt is not forgiven). */
    assert_int_equal(sched_rt_rest_us(&b, now, 50000, 1), SCHED_RT_REST_MAX_US);
    now += SCHED_RT_REST_MAX_US + 1;
    assert_true(sched_rt_rest_us(&b, now, 1, 1) > 0);
}

static void test_idle_refills_the_burst_only(void **state)
{
    (void)state;
    sched_rt_bucket_t b = {0};
    int64_t now = T0, busy = 0, idle = 0;
    run_passes(&b, &now, 100, 500, &busy, &idle);
    /* A minute idle: the burst is whole again, and no larger. */
    now += 60 * 1000000LL;
    assert_int_equal(run_passes(&b, &now, 30, 500, &busy, &idle), BURST_PASSES);
    assert_true(b.balance_us <= SCHED_RT_BURST_US);
}

static void test_clock_back_restarts(void **state)
{
    (void)state;
    sched_rt_bucket_t b = {0};
    int64_t now = T0 + 10 * 1000000LL, busy = 0, idle = 0;
    run_passes(&b, &now, 100, 500, &busy, &idle);
    now = T0;
    assert_int_equal(sched_rt_rest_us(&b, now, 100, 1), 0);
    assert_int_equal(b.balance_us, SCHED_RT_BURST_US - 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passes_apart_never_rest),
        cmocka_unit_test(test_burst_then_half_a_core),
        cmocka_unit_test(test_rest_is_bounded),
        cmocka_unit_test(test_idle_refills_the_burst_only),
        cmocka_unit_test(test_clock_back_restarts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
