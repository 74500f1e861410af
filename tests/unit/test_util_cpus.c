/* test_util_cpus.c - util_cpu_count (common/util.c) counts the CPUs this
 * process may run on (its affinity mask, as a container's cpuset or
 * taskset sets it), not the machine's online CPUs. */
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

#include <cmocka.h>

#include "util.h"

static void test_follows_the_affinity_mask(void **state)
{
    (void)state;
    cpu_set_t all;
    assert_int_equal(sched_getaffinity(0, sizeof all, &all), 0);
    assert_int_equal(util_cpu_count(), CPU_COUNT(&all));
    /* One CPU allowed: one counted, whatever the machine has. */
    int first = 0;
    while (!CPU_ISSET(first, &all))
        first++;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    assert_int_equal(sched_setaffinity(0, sizeof one, &one), 0);
    assert_int_equal(util_cpu_count(), 1);
    assert_int_equal(sched_setaffinity(0, sizeof all, &all), 0);
    assert_true(util_cpu_count() >= 1);
    assert_true(util_cpu_count() <= sysconf(_SC_NPROCESSORS_CONF));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_follows_the_affinity_mask),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
