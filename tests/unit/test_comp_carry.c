/* test_comp_carry.c - the table of computations' carried progress
 * (store/comp_carry.h), on its own: a transaction's staged changes are
 * seen by it at once and by the table only once committed, a discarded
 * one leaves the table as it was, a staged drop removes the part, and
 * thousands of keys put and half of them dropped (the table grows, and
 * drops shift the probes back) leave every other key found with its
 * value. The next due time is never later than a part's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>

#include "comp_carry.h"

static comp_carry_t part(int64_t job, int64_t attempt, int64_t comp, int64_t shards,
                         int64_t due)
{
    return (comp_carry_t){.job = job, .attempt = attempt, .comp = comp, .total = 8,
                          .shards = shards, .due_us = due, .unblocks = 1};
}

static int setup(void **state)
{
    (void)state;
    comp_carry_reset();
    return 0;
}

static void test_staged_then_committed(void **state)
{
    (void)state;
    comp_carry_txn_t t = {0}, other = {0};
    comp_carry_t p = part(1, 0, 3, 2, 500), got;
    assert_int_equal(comp_carry_put(&t, &p), 0);
    assert_int_equal(comp_carry_get(&t, 1, 0, 3, &got), 1);
    assert_int_equal(got.shards, 2);
    assert_int_equal(comp_carry_get(&other, 1, 0, 3, &got), 0);     /* not committed */
    assert_int_equal(comp_carry_count(), 0);
    assert_int_equal(comp_carry_get(&t, 1, 1, 3, &got), 0);         /* another attempt */
    comp_carry_commit(&t);
    assert_int_equal(comp_carry_count(), 1);
    assert_int_equal(comp_carry_get(&other, 1, 0, 3, &got), 1);
    assert_int_equal(got.shards, 2);
    assert_true(comp_carry_next_due() != 0 && comp_carry_next_due() <= 500);

    p.shards = 5;                   /* a change rolled back */
    assert_int_equal(comp_carry_put(&t, &p), 0);
    comp_carry_discard(&t);
    assert_int_equal(comp_carry_get(&t, 1, 0, 3, &got), 1);
    assert_int_equal(got.shards, 2);

    p.gone = 1;                     /* dropped: gone for the transaction at once */
    assert_int_equal(comp_carry_put(&t, &p), 0);
    assert_int_equal(comp_carry_get(&t, 1, 0, 3, &got), 0);
    assert_int_equal(comp_carry_get(&other, 1, 0, 3, &got), 1);
    comp_carry_commit(&t);
    assert_int_equal(comp_carry_get(&other, 1, 0, 3, &got), 0);
    assert_int_equal(comp_carry_count(), 0);
    assert_int_equal(comp_carry_next_due(), 0);
    comp_carry_txn_free(&t);
    comp_carry_txn_free(&other);
}

static void test_of_job_and_due(void **state)
{
    (void)state;
    comp_carry_txn_t t = {0};
    for (int k = 0; k < 5; k++) {
        comp_carry_t p = part(k < 3 ? 7 : 8, 0, k, 1, 100 * (k + 1));
        assert_int_equal(comp_carry_put(&t, &p), 0);
    }
    comp_carry_commit(&t);
    comp_carry_t p = part(7, 0, 9, 1, 50);          /* staged only */
    assert_int_equal(comp_carry_put(&t, &p), 0);
    comp_carry_t *parts = NULL;
    assert_int_equal(comp_carry_of_job(&t, 7, &parts), 4);
    int64_t comps = 0;
    for (int i = 0; i < 4; i++)
        comps += parts[i].comp;
    assert_int_equal(comps, 0 + 1 + 2 + 9);
    free(parts);
    comp_carry_discard(&t);
    comp_carry_t due[8];
    assert_int_equal(comp_carry_due(250, due, 8), 2);   /* 100 and 200 */
    assert_int_equal(comp_carry_next_due(), 100);
    assert_int_equal(comp_carry_due(1000, due, 3), 3);  /* at most max */
    comp_carry_txn_free(&t);
}

static void test_many_keys(void **state)
{
    (void)state;
    enum { N = 5000 };
    comp_carry_txn_t t = {0};
    for (int k = 0; k < N; k++) {
        comp_carry_t p = part(1 + k % 37, k % 3, k, k + 1, 1000 + k);
        assert_int_equal(comp_carry_put(&t, &p), 0);
        if (k % 100 == 99)
            comp_carry_commit(&t);
    }
    comp_carry_commit(&t);
    assert_int_equal(comp_carry_count(), N);
    for (int k = 0; k < N; k += 2) {
        comp_carry_t p = part(1 + k % 37, k % 3, k, 0, 0);
        p.gone = 1;
        assert_int_equal(comp_carry_put(&t, &p), 0);
    }
    comp_carry_commit(&t);
    assert_int_equal(comp_carry_count(), N / 2);
    for (int k = 0; k < N; k++) {
        comp_carry_t got;
        int found = comp_carry_get(&t, 1 + k % 37, k % 3, k, &got);
        assert_int_equal(found, k % 2);
        if (found)
            assert_int_equal(got.shards, k + 1);
    }
    comp_carry_txn_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_staged_then_committed, setup),
        cmocka_unit_test_setup(test_of_job_and_due, setup),
        cmocka_unit_test_setup(test_many_keys, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
