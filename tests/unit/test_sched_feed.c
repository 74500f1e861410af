/* test_sched_feed.c - the island lookahead's steering law
 * (sched_feed_budget_next, scheduler/sched_feed.c): the budget grows while
 * the island's devices idle more than the band allows, shrinks while they
 * idle less, holds inside it, and never leaves its bounds. And the feed
 * itself, on a real SQLite file and real rounds: fresh jobs go over the
 * island's budget only while few of them are in flight there; virtual
 * time is device time over the tenant's share; and while the job of least
 * virtual time cannot be fed, no other job of its island is; and a full
 * table of virtual times never gives one job's entry to another. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "sched_internal.h"
#include "support_store.h"
#include "support_sched.h"

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

/* ------------------------------------------------------------------ */
/* The feed. west=2x2, one worker of its 4 devices. Nothing measured yet:
 * every computation is costed 1 ms (FEED_DEFAULT_SHARD_US), and the
 * island's budget starts at 8 ms (FEED_BUDGET_INIT_US), so 8 computations
 * fit in it. The feed's virtual times outlive a test (as they outlive a
 * round): each test that feeds uses keys of its own (tenants 7 to 10, or
 * jobs without a tenant in one test only). */

static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}};

typedef support_worker_fixture_t fixture_t;

static int setup(void **state)
{
    *state = support_sched_fixture(islands, 1, 4);
    return 0;
}

/* Submits a shared job of ncomps independent computations on a slice of
 * `shape` (JSON) for tenant (0: none); its id. */
static int64_t shared_job(fixture_t *f, int ncomps, const char *shape, int64_t tenant)
{
    char doc[2048];
    int len = snprintf(doc, sizeof doc, "{\"sharing\": \"shared\", \"slices\": {\"s\":"
                       " {\"shape\": %s}}, \"computations\": [", shape);
    for (int c = 0; c < ncomps; c++)
        len += snprintf(doc + len, sizeof doc - (size_t)len, "%s{\"name\": \"c%d\", \"slice\":"
                        " \"s\", \"ops\": [{\"op\": \"iota\", \"out\": \"v\", \"shape\": [4]}],"
                        " \"outputs\": [\"v\"]}", c ? ", " : "", c);
    snprintf(doc + len, sizeof doc - (size_t)len, "]}");
    return support_store_submit_as(f->st, doc, islands, 1, tenant);
}

/* Host tasks the feed gave job (one per computation: one worker). */
static int64_t fed(fixture_t *f, int64_t job)
{
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM host_tasks WHERE job_id = %lld",
             (long long)job);
    return support_store_int(f->st, sql);
}

/* Ten fresh one-computation jobs: 8 fill the budget; a fresh job may go
 * over it only while fewer than 2 fresh ones are in flight there (8 are):
 * the other 2 wait. */
static void test_newcomers_over_budget_are_few(void **state)
{
    fixture_t *f = *state;
    int64_t id[10], total = 0;
    for (int i = 0; i < 10; i++)
        id[i] = shared_job(f, 1, "[2]", 0);
    sched_admit(f->st);
    for (int i = 0; i < 10; i++)
        total += fed(f, id[i]);
    assert_int_equal(total, 8);
}

/* Tenants id and id + 1 of shares sa and sb, a job of six computations on
 * a slice of shape_a for the first and one on shape_b for the second, a
 * round; the host tasks each job got into *fa and *fb. */
static void feed_two(fixture_t *f, int id, int sa, int sb, const char *shape_a,
                     const char *shape_b, int64_t *fa, int64_t *fb)
{
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO tenants (id, name, token_hash, share, created_at)"
             " VALUES (%d, 't%d', 'th%d', %d, 0), (%d, 't%d', 'th%d', %d, 0)", id, id, id, sa,
             id + 1, id + 1, id + 1, sb);
    support_store_write(f->st, sql);
    int64_t a = shared_job(f, 6, shape_a, id), b = shared_job(f, 6, shape_b, id + 1);
    sched_admit(f->st);
    *fa = fed(f, a);
    *fb = fed(f, b);
}

/* Jobs a (slice [1]: 1 ms a computation in virtual time) and b ([2]: 2 ms)
 * of tenants 7 and 8. The feed goes to the least virtual time: a, b, a, a,
 * b, a (a's window of 4 now full), b; then a has the least and cannot be
 * fed, so b is not fed either, although the budget has room for one
 * more. */
static void test_least_virtual_time_holds_its_island(void **state)
{
    int64_t fa, fb;
    feed_two(*state, 7, 1, 1, "[1]", "[2]", &fa, &fb);
    assert_int_equal(fa, 4);
    assert_int_equal(fb, 3);
}

/* Virtual time is device time over the tenant's share: tenant 9 (share 4)
 * pays 0.25 ms a computation, tenant 10 (share 1) 1 ms: a, b, a, a, a
 * (full), b; then a has the least again. */
static void test_share_divides_virtual_time(void **state)
{
    int64_t fa, fb;
    feed_two(*state, 9, 4, 1, "[1]", "[1]", &fa, &fb);
    assert_int_equal(fa, 4);
    assert_int_equal(fb, 2);
}

/* The feed keeps at most sched_cfg.vtimes_max keys (3 here). A pass feeds
 * jobs a and b (one computation each, no tenant); the next, c and d: c
 * takes the third entry, d finds none and waits, and c's virtual time is
 * its own, charged for what it got. (When the table was compacted while
 * the pass handed entries out, d's entry took c's place under c's
 * pointer: both were fed, on one key, and c's was lost.) The pass after
 * forgets the keys no longer backlogged to make room. */
static void test_full_vtimes_keep_their_keys(void **state)
{
    fixture_t *f = *state;
    sched_feed_forget();
    sched_cfg.vtimes_max = 3;
    int64_t a = shared_job(f, 1, "[1]", 0), b = shared_job(f, 1, "[1]", 0);
    sched_admit(f->st);
    assert_int_equal(fed(f, a), 1);
    assert_int_equal(fed(f, b), 1);
    int64_t c = shared_job(f, 1, "[1]", 0), d = shared_job(f, 1, "[1]", 0);
    sched_admit(f->st);
    assert_int_equal(fed(f, c), 1);
    assert_int_equal(fed(f, d), 0);
    assert_true(sched_feed_vtime(-c) > 0);
    assert_true(sched_feed_vtime(-d) < 0);
    /* a and b, fed out, were not backlogged in that pass: the next one
     * that needs room forgets them, so d and a new e get entries. */
    int64_t e = shared_job(f, 1, "[1]", 0);
    sched_admit(f->st);
    assert_int_equal(fed(f, d), 1);
    assert_int_equal(fed(f, e), 1);
    assert_true(sched_feed_vtime(-a) < 0);
    assert_true(sched_feed_vtime(-c) > 0);
    sched_feed_forget();        /* none of these keys outlives the test */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grows_when_starved),
        cmocka_unit_test(test_shrinks_when_fed),
        cmocka_unit_test(test_holds_in_band),
        cmocka_unit_test_setup_teardown(test_newcomers_over_budget_are_few, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_least_virtual_time_holds_its_island, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_share_divides_virtual_time, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_full_vtimes_keep_their_keys, setup,
                                        support_sched_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
