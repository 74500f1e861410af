/* test_util_hist.c - the duration histograms behind /metrics (common/util.c:
 * util_hist_add, util_hist_read, util_hist_prom), which the scheduler's
 * passes and the store's write lock use.
 *
 * An entry lands in the first bucket whose bound it does not exceed (a
 * bound is an inclusive upper limit, Prometheus' `le`), past the last one
 * in +Inf; a negative duration (a clock read out of order) counts as 0;
 * counts read cumulative; the text is a well-formed histogram family in
 * seconds. Concurrent adders lose nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "util.h"

static const int64_t bounds[] = {10, 100, 1000};

static void test_buckets_are_inclusive_upper_bounds(void **state)
{
    (void)state;
    util_hist_t h = {.bounds_us = bounds, .nbounds = 3};
    static const int64_t in[] = {-5, 0, 10, 11, 100, 101, 1000, 1001, 5000000};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++)
        util_hist_add(&h, in[i]);
    uint64_t cum[UTIL_HIST_MAX_BOUNDS], count, sum;
    util_hist_read(&h, cum, &count, &sum);
    /* <= 10: -5 (as 0), 0, 10; <= 100: + 11, 100; <= 1000: + 101, 1000. */
    assert_int_equal(cum[0], 3);
    assert_int_equal(cum[1], 5);
    assert_int_equal(cum[2], 7);
    assert_int_equal(count, 9);
    assert_int_equal(sum, 0 + 0 + 10 + 11 + 100 + 101 + 1000 + 1001 + 5000000);
}

static void test_prometheus_text(void **state)
{
    (void)state;
    util_hist_t h = {.bounds_us = bounds, .nbounds = 3};
    util_hist_add(&h, 50);
    util_hist_add(&h, 2000);
    char buf[1024];
    size_t len = util_hist_prom(buf, 0, sizeof buf, &h, "atoll_t_seconds", "A test.");
    assert_int_equal(len, strlen(buf));
    assert_string_equal(buf, "# HELP atoll_t_seconds A test.\n"
                             "# TYPE atoll_t_seconds histogram\n"
                             "atoll_t_seconds_bucket{le=\"1e-05\"} 0\n"
                             "atoll_t_seconds_bucket{le=\"0.0001\"} 1\n"
                             "atoll_t_seconds_bucket{le=\"0.001\"} 1\n"
                             "atoll_t_seconds_bucket{le=\"+Inf\"} 2\n"
                             "atoll_t_seconds_sum 0.002050\n"
                             "atoll_t_seconds_count 2\n");
}

#define ADDERS 4
#define ADDS 100000

static void *adder(void *arg)
{
    util_hist_t *h = arg;
    for (int i = 0; i < ADDS; i++)
        util_hist_add(h, i % 2000);
    return NULL;
}

/* Four threads adding at once: every entry counted, the sum exact. */
static void test_concurrent_adds(void **state)
{
    (void)state;
    static util_hist_t h = {.bounds_us = bounds, .nbounds = 3};
    pthread_t t[ADDERS];
    for (int i = 0; i < ADDERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, adder, &h), 0);
    for (int i = 0; i < ADDERS; i++)
        pthread_join(t[i], NULL);
    uint64_t cum[UTIL_HIST_MAX_BOUNDS], count, sum;
    util_hist_read(&h, cum, &count, &sum);
    assert_int_equal(count, (uint64_t)ADDERS * ADDS);
    /* Per thread: 50 rounds of 0..1999 (sum 1,999,000 each). */
    assert_int_equal(sum, (uint64_t)ADDERS * (ADDS / 2000) * 1999000);
    assert_int_equal(cum[0], (uint64_t)ADDERS * (ADDS / 2000) * 11);   /* 0..10 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_buckets_are_inclusive_upper_bounds),
        cmocka_unit_test(test_prometheus_text),
        cmocka_unit_test(test_concurrent_adds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
