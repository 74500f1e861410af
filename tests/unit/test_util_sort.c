/* test_util_sort.c - util_sort (common/util.c): an array out of order is
 * sorted as qsort sorts it; one in order already is left as it is,
 * after n - 1 comparisons and no more (the point of it: a one-slice
 * gang's 2,048 placement entries come in island order). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "util.h"

static int compares;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    compares++;
    return (x > y) - (x < y);
}

static void test_out_of_order_is_sorted(void **state)
{
    (void)state;
    int64_t v[] = {5, 3, 9, 1, 1, 7, 2};
    util_sort(v, 7, sizeof *v, cmp_i64);
    for (int i = 1; i < 7; i++)
        assert_true(v[i - 1] <= v[i]);
    assert_int_equal(v[0], 1);
    assert_int_equal(v[6], 9);
}

static void test_in_order_costs_one_pass(void **state)
{
    (void)state;
    int64_t v[2048];
    for (int i = 0; i < 2048; i++)
        v[i] = i / 2;       /* equal neighbours are in order too */
    compares = 0;
    util_sort(v, 2048, sizeof *v, cmp_i64);
    assert_int_equal(compares, 2047);
    for (int i = 0; i < 2048; i++)
        assert_int_equal(v[i], i / 2);
    util_sort(v, 0, sizeof *v, cmp_i64);    /* empty and single: nothing to do */
    util_sort(v, 1, sizeof *v, cmp_i64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_of_order_is_sorted),
        cmocka_unit_test(test_in_order_costs_one_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
