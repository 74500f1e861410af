/* test_cmocka_group_teardown.c - a group whose one case passes and whose
 * teardown fails, as an integration test's does when a process it started
 * did not exit cleanly. cmocka 1.1 exits 0 for it; tests/CMakeLists.txt
 * fails every cmocka program that prints the failed teardown, and runs
 * this one with WILL_FAIL: it passes only while that rule holds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

static int passes_case_ran;

static void test_passes(void **state)
{
    (void)state;
    passes_case_ran = 1;
}

/* Fails only after the case ran: a failure of the case itself would fail
 * the program through cmocka's own count and prove nothing here. */
static int group_teardown(void **state)
{
    (void)state;
    return passes_case_ran ? -1 : 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passes),
    };
    return cmocka_run_group_tests(tests, NULL, group_teardown);
}
