/* test_sched_feed.c - the island lookahead's steering law
 * (sched_feed_budget_next, scheduler/sched_feed.c): the budget grows while
 * the island's devices idle more than the band allows, shrinks while they
 * idle less, holds inside it, and never leaves its bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched_internal.h"

static void test_grows_when_starved(void **state)
{
    (void)state;
    assert_true(sched_feed_budget_next(8000.0, 0.20) > 8000.0);
    /* Starved for ever: it stops at the upper bound. */
    double b = 8000.0;
    for (int i = 0; i < 100; i++)
        b = sched_feed_budget_next(b, 0.50);
    assert_true(b == SCHED_FEED_BUDGET_MAX_US);
}

static void test_shrinks_when_fed(void **state)
{
    (void)state;
    assert_true(sched_feed_budget_next(8000.0, 0.0) < 8000.0);
    double b = 8000.0;
    for (int i = 0; i < 200; i++)
        b = sched_feed_budget_next(b, 0.0);
    assert_true(b == SCHED_FEED_BUDGET_MIN_US);
}

/* Inside the band (3-5 % idle) nothing moves: a budget that keeps the
 * devices that busy is the one wanted. */
static void test_holds_in_band(void **state)
{
    (void)state;
    assert_true(sched_feed_budget_next(8000.0, 0.04) == 8000.0);
    assert_true(sched_feed_budget_next(SCHED_FEED_BUDGET_MAX_US, 0.04) == SCHED_FEED_BUDGET_MAX_US);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_when_starved),
        cmocka_unit_test(test_shrinks_when_fed),
        cmocka_unit_test(test_holds_in_band),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
