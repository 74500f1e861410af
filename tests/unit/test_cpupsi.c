/* test_cpupsi.c - the host's CPU pressure (workers/cpupsi.c): the "some"
 * line's total read from /proc/pressure/cpu's format, the hysteresis
 * between CPUPSI_LOW and CPUPSI_HIGH, and sampling a file on given clock
 * values (no real time passes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmocka.h>

#include "cpupsi.h"

static void test_parse_total(void **state)
{
    (void)state;
    assert_int_equal(cpupsi_parse_total("some avg10=0.00 avg60=0.11 avg300=1.33 "
                                        "total=3968115432\n"
                                        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
                     3968115432LL);
    assert_int_equal(cpupsi_parse_total("some avg10=1.00 avg60=2.00 avg300=3.00 total=7"), 7);
    /* Not the "some" line first, no total on it, or a total that is not a
     * number: nothing. */
    assert_int_equal(cpupsi_parse_total("full avg10=0.00 total=5\n"), -1);
    assert_int_equal(cpupsi_parse_total("some avg10=0.00\nfull total=5\n"), -1);
    assert_int_equal(cpupsi_parse_total("some avg10=0.00 total=-5\n"), -1);
    assert_int_equal(cpupsi_parse_total("some avg10=0.00 total=12x\n"), -1);
    assert_int_equal(cpupsi_parse_total("some total=99999999999999999999999\n"), -1);
    assert_int_equal(cpupsi_parse_total(""), -1);
}

static void test_hysteresis(void **state)
{
    (void)state;
    assert_int_equal(cpupsi_next(0, CPUPSI_HIGH), 1);
    assert_int_equal(cpupsi_next(0, 0.5), 1);
    assert_int_equal(cpupsi_next(0, (CPUPSI_LOW + CPUPSI_HIGH) / 2), 0);
    assert_int_equal(cpupsi_next(1, (CPUPSI_LOW + CPUPSI_HIGH) / 2), 1);
    assert_int_equal(cpupsi_next(1, CPUPSI_LOW), 1);
    assert_int_equal(cpupsi_next(1, CPUPSI_LOW / 2), 0);
    assert_int_equal(cpupsi_next(1, 0.0), 0);
}

static void write_total(const char *path, long long total)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "some avg10=0.00 avg60=0.00 avg300=0.00 total=%lld\n"
               "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", total);
    fclose(f);
}

/* The share is the total's growth over the clock's between two samples. */
static void test_sample_file(void **state)
{
    (void)state;
    char path[] = "/tmp/atoll-cpupsi-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    cpupsi_t p;
    cpupsi_init(&p, path);
    write_total(path, 1000000);
    assert_int_equal(cpupsi_sample(&p, 10000000), 0);        /* first: no share yet */
    write_total(path, 1200000);                              /* 20 % of 1 s */
    assert_int_equal(cpupsi_sample(&p, 11000000), 1);
    write_total(path, 1270000);                              /* 7 %: stays */
    assert_int_equal(cpupsi_sample(&p, 12000000), 1);
    write_total(path, 5000000);                              /* < 100 ms later: not read */
    assert_int_equal(cpupsi_sample(&p, 12050000), 1);
    write_total(path, 1280000);                              /* 1 % of 1 s */
    assert_int_equal(cpupsi_sample(&p, 13000000), 0);
    write_total(path, 10);                                   /* went back: restarts */
    assert_int_equal(cpupsi_sample(&p, 14000000), 0);
    write_total(path, 500010);                               /* 50 % from the restart */
    assert_int_equal(cpupsi_sample(&p, 15000000), 1);
    unlink(path);                                            /* unreadable: as it was */
    assert_int_equal(cpupsi_sample(&p, 16000000), 1);
}

/* No file at all (an old kernel): never contended. */
static void test_no_file(void **state)
{
    (void)state;
    cpupsi_t p;
    cpupsi_init(&p, "/nonexistent/pressure/cpu");
    assert_int_equal(cpupsi_sample(&p, 1000000), 0);
    assert_int_equal(cpupsi_sample(&p, 2000000), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_total),
        cmocka_unit_test(test_hysteresis),
        cmocka_unit_test(test_sample_file),
        cmocka_unit_test(test_no_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
