/* test_sched_admit.c - the admission round's rules (scheduler/sched_admit.c,
 * sched_place.c's blocking), on a real SQLite file and real rounds: jobs
 * are placed by priority, then the tenant furthest below its fair share,
 * then age; a tenant's devices in use never pass its quota (0: no quota),
 * counting the jobs placed earlier in the same round; a job that waits
 * keeps lower-priority jobs off the islands it could use (no backfill),
 * also in the rounds that skip it because nothing changed, but not off
 * the islands it cannot use; a device with no worker takes nothing; and a
 * job that cannot be placed evicts the fewest preemptible jobs of lower
 * priority it needs gone, lowest priority first.
 *
 * Islands: west 2x2, one worker of its 4 devices; east 2, a second worker
 * where a test registers it. A job of SMALL takes 2 devices, one of WHOLE
 * all of west. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"
#include "support_store.h"
#include "support_sched.h"

static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}, {"east", {1, {2, 0, 0, 0}}}};

/* A one-computation job of priority %d on a slice of shape %s, pinned to
 * island %s ("" for any). */
#define DOC_FMT                                                                             \
    "{\"priority\": %d, \"slices\": {\"s\": {\"shape\": %s%s}}, \"computations\": [{\"name\":" \
    " \"a\", \"slice\": \"s\", \"ops\": [{\"op\": \"iota\", \"out\": \"v\", \"shape\": [4]}]," \
    " \"outputs\": [\"v\"]}]}"
#define SMALL "[2]"
#define WHOLE "[2, 2]"

typedef support_worker_fixture_t fixture_t;

static int setup(void **state)
{
    *state = support_sched_fixture(islands, 2, 4);
    return 0;
}

/* Submits a job as the API would, for tenant (0: none); its id. */
static int64_t submit(fixture_t *f, int prio, const char *shape, const char *island,
                      int64_t tenant)
{
    char doc[512], pin[64] = "";
    if (island[0])
        snprintf(pin, sizeof pin, ", \"island\": \"%s\"", island);
    snprintf(doc, sizeof doc, DOC_FMT, prio, shape, pin);
    return support_store_submit_as(f->st, doc, islands, 2, tenant);
}

/* Whether job id was placed (allocated, or running). */
static int placed(fixture_t *f, int64_t id)
{
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT state IN ('allocated', 'running') FROM jobs WHERE id = %lld",
             (long long)id);
    return (int)support_store_int(f->st, sql);
}

/* Whether job id's pending_reason contains part. */
static int reason_has(fixture_t *f, int64_t id, const char *part)
{
    json_t *j = store_job_json(f->st, id);
    const char *r = json_string_value(json_object_get(j, "pending_reason"));
    int has = r && strstr(r, part) != NULL;
    json_decref(j);
    return has;
}

/* A running exclusive job `id` of priority prio (preemptible or not) and
 * tenant (NULL: none) holding west's devices lo..hi. */
static void running_as(fixture_t *f, int id, int prio, int preemptible, const char *tenant,
                       int lo, int hi)
{
    char sql[640];
    snprintf(sql, sizeof sql,
             "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total, created_at,"
             " allocated_at, preemptible, tenant_id) VALUES (%d, 'r', 'running', %d, 0, 1, 0,"
             " 1, %d, %s);"
             "INSERT INTO allocations (island_id, lo, hi, job_id) SELECT id, %d, %d, %d"
             " FROM islands WHERE name = 'west'",
             id, prio, preemptible, tenant ? tenant : "NULL", lo, hi, id);
    support_store_write(f->st, sql);
}

/* The same, of priority 0 and not preemptible. */
static void running(fixture_t *f, int id, const char *tenant, int lo, int hi)
{
    running_as(f, id, 0, 0, tenant, lo, hi);
}

/* Whether job id is queued again (as a preemption leaves it). */
static int requeued(fixture_t *f, int64_t id)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT state = 'queued' FROM jobs WHERE id = %lld",
             (long long)id);
    return (int)support_store_int(f->st, sql);
}

/* Tenants 5 and 6, share 1 each, tenant 5 with quota `quota` devices. */
static void tenants(fixture_t *f, int quota)
{
    char sql[256];
    snprintf(sql, sizeof sql,
             "INSERT INTO tenants (id, name, token_hash, share, created_at, quota_devices)"
             " VALUES (5, 't', 'th5', 1, 0, %d), (6, 'u', 'th6', 1, 0, 0)", quota);
    support_store_write(f->st, sql);
}

/* Runs a round: job `in` is placed, job `out` is not. */
static void admit_one_of(fixture_t *f, int64_t in, int64_t out)
{
    sched_admit(f->st);
    assert_true(placed(f, in));
    assert_false(placed(f, out));
}

/* Tenants 5 and 6 (tenant 5 with quota `quota`), then job *a (priority
 * pa, tenant ta) and job *b (pb, tb), in that order, of shape `shape` on
 * any island. */
static void two_jobs(fixture_t *f, int quota, const char *shape, int pa, int ta, int pb, int tb,
                     int64_t *a, int64_t *b)
{
    tenants(f, quota);
    *a = submit(f, pa, shape, "", ta);
    *b = submit(f, pb, shape, "", tb);
}

/* Across tenants' queues (each queue is in that order already): of two
 * jobs that cannot both run, the higher priority goes first even when it
 * is younger; at equal priority and usage, the older. */
static void test_priority_first_across_tenants(void **state)
{
    int64_t low, high;
    two_jobs(*state, 0, WHOLE, 0, 5, 5, 6, &low, &high);
    admit_one_of(*state, high, low);
}

static void test_age_across_tenants(void **state)
{
    int64_t old, young;
    two_jobs(*state, 0, WHOLE, 3, 5, 3, 6, &old, &young);
    admit_one_of(*state, old, young);
}

/* A device with no live worker is never placed on: east has none. */
static void test_no_worker_no_placement(void **state)
{
    fixture_t *f = *state;
    int64_t id = submit(f, 0, SMALL, "east", 0);
    sched_admit(f->st);
    assert_false(placed(f, id));
    assert_true(reason_has(f, id, "no free device on east"));
}

/* At equal priority the tenant using fewer devices per share goes first,
 * even with the younger job: tenant 5 already runs a job of 2 devices. */
static void test_fair_share_before_age(void **state)
{
    fixture_t *f = *state;
    tenants(f, 0);
    running(f, 81, "5", 0, 1);
    int64_t busy = submit(f, 0, SMALL, "west", 5), idle = submit(f, 0, SMALL, "west", 6);
    admit_one_of(f, idle, busy);
}

/* Tenant 5's quota of 2 devices: of its two jobs of 2 devices queued
 * together, the round places one and the other waits for its quota (the
 * first one's devices count at once, in the same round), although the
 * island has room for both. */
static void test_quota_counts_the_round(void **state)
{
    int64_t a, b;
    two_jobs(*state, 2, SMALL, 0, 5, 0, 5, &a, &b);
    admit_one_of(*state, a, b);
    assert_true(reason_has(*state, b, "quota"));
}

/* A quota of 0 is no quota. */
static void test_quota_zero_is_none(void **state)
{
    fixture_t *f = *state;
    tenants(f, 0);
    int64_t a = submit(f, 0, WHOLE, "", 5);
    sched_admit(f->st);
    assert_true(placed(f, a));
}

/* A high-priority job that cannot be placed (half of west is taken by a
 * job it may not preempt) keeps a lower-priority job that would fit off
 * west, in its first round and in the next, which skips it (no device
 * changed), also for a job that arrived in between. */
static void test_waiting_job_blocks_lower_priority(void **state)
{
    fixture_t *f = *state;
    running(f, 77, NULL, 0, 1);
    int64_t big = submit(f, 5, WHOLE, "west", 0), small = submit(f, 0, SMALL, "west", 0);
    sched_admit(f->st);
    assert_false(placed(f, big));
    assert_false(placed(f, small));
    assert_true(reason_has(f, small, "waiting behind"));
    int64_t later = submit(f, 0, SMALL, "", 0);
    sched_admit(f->st);
    assert_false(placed(f, big));
    assert_false(placed(f, small));
    assert_false(placed(f, later));
}

/* ... but not off an island it cannot use: a job pinned to east goes. */
static void test_waiting_job_leaves_other_islands(void **state)
{
    fixture_t *f = *state;
    support_store_register(f->st, "east", "127.0.0.1:2", 2);
    running(f, 77, NULL, 0, 1);
    int64_t big = submit(f, 5, WHOLE, "west", 0), other = submit(f, 0, SMALL, "east", 0);
    sched_admit(f->st);
    assert_false(placed(f, big));
    assert_true(placed(f, other));
}

/* Jobs 70 (priority 1) on west's devices 0-1 and 71 (priority 0) on 2-3,
 * both preemptible; then a job of priority 5 and shape `shape` on west,
 * and a round. The new job's id. */
static int64_t preempt_round(fixture_t *f, const char *shape)
{
    running_as(f, 70, 1, 1, NULL, 0, 1);
    running_as(f, 71, 0, 1, NULL, 2, 3);
    int64_t id = submit(f, 5, shape, "west", 0);
    sched_admit(f->st);
    return id;
}

/* A job that cannot be placed evicts preemptible jobs of lower priority,
 * the lowest first, and no more of them than it needs: here job 71
 * (priority 0) makes room, 70 (priority 1) keeps running ... */
static void test_preempt_lowest_priority_first(void **state)
{
    fixture_t *f = *state;
    assert_true(placed(f, preempt_round(f, SMALL)));
    assert_true(requeued(f, 71));
    assert_true(placed(f, 70));
}

/* ... all the jobs it needs gone, when one is not enough ... */
static void test_preempt_evicts_every_job_needed(void **state)
{
    fixture_t *f = *state;
    assert_true(placed(f, preempt_round(f, WHOLE)));
    assert_true(requeued(f, 70));
    assert_true(requeued(f, 71));
}

/* ... and never a job of its own priority or above. */
static void test_preempt_never_equal_priority(void **state)
{
    fixture_t *f = *state;
    running_as(f, 70, 5, 1, NULL, 0, 3);
    int64_t id = submit(f, 5, WHOLE, "west", 0);
    sched_admit(f->st);
    assert_false(placed(f, id));
    assert_true(placed(f, 70));
}

int main(void)
{
#define T(test) cmocka_unit_test_setup_teardown(test, setup, support_sched_teardown)
    const struct CMUnitTest tests[] = {
        T(test_priority_first_across_tenants),
        T(test_age_across_tenants),
        T(test_no_worker_no_placement),
        T(test_fair_share_before_age),
        T(test_quota_counts_the_round),
        T(test_quota_zero_is_none),
        T(test_waiting_job_blocks_lower_priority),
        T(test_waiting_job_leaves_other_islands),
        T(test_preempt_lowest_priority_first),
        T(test_preempt_evicts_every_job_needed),
        T(test_preempt_never_equal_priority),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
