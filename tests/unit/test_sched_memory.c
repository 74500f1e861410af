/* test_sched_memory.c - device memory in shared placement (DESIGN Part D),
 * on a real SQLite file: a device's memory is its worker's object store
 * cap over its devices (reported in heartbeats; a change reaches the
 * round's mirror), a shared job's hold records its bytes, a shared job
 * joins devices other shared jobs hold only while its memory fits beside
 * theirs, and waits with a reason naming memory otherwise; preemption
 * evicts a lower-priority shared job to make room in memory, and only when
 * its eviction does make room; an exclusive job frees a shared device only
 * by evicting every holder; a shared gang goes to the least-loaded
 * devices.
 *
 * The island west=2x2 is one worker of 4 devices whose store cap is set to
 * 4,000 bytes: 1,000 per device; east=2 has no worker unless a test adds
 * one. */
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
#include "store_internal.h"
#include "support_store.h"
#include "support_sched.h"

static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}, {"east", {1, {2, 0, 0, 0}}}};
static const alloc_request_t whole = {{2, {2, 2, 0, 0}}, "west"};

typedef support_worker_fixture_t fixture_t;

/* The worker reports a store cap of cap bytes, as its heartbeat does. */
static void set_cap(fixture_t *f, int64_t cap)
{
    worker_stats_t ws = {.cap_bytes = cap};
    assert_int_equal(store_worker_set_stats(f->st, f->worker, &ws), STORE_OK);
}

/* A running shared job `id` of priority prio, holding devices [lo, hi] of
 * both islands with `bytes` each. */
static void hold(fixture_t *f, int id, int prio, int preemptible, int lo, int hi, int bytes)
{
    char sql[512];
    snprintf(sql, sizeof sql,
             "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total, created_at,"
             " allocated_at, shared, preemptible) VALUES (%d, 'j%d', 'running', %d, 0, 1, 0, 1,"
             " 1, %d);"
             "INSERT INTO device_holds (island_id, idx, job_id, bytes) SELECT island_id, idx, %d,"
             " %d FROM devices WHERE idx BETWEEN %d AND %d",
             id, id, prio, preemptible, id, bytes, lo, hi);
    support_store_write(f->st, sql);
}

static int setup(void **state)
{
    fixture_t *f = support_sched_fixture(islands, 2, 4);
    set_cap(f, 4000);
    *state = f;
    return 0;
}

/* The round sees each device's holds (a hold makes a device busy for
 * exclusive jobs), its memory and what the holds take; a cap the worker
 * reports anew reaches the next round (its mirror is refreshed). */
static void test_round_sees_device_memory(void **state)
{
    fixture_t *f = *state;
    round_t r;
    hold(f, 70, 0, 0, 2, 3, 600);
    hold(f, 71, 0, 0, 3, 3, 150);
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(r.devs[0][0].cap_bytes, 1000);
    assert_int_equal(r.devs[0][0].held_bytes, 0);
    assert_int_equal(r.devs[0][2].held_bytes, 600);
    assert_int_equal(r.devs[0][3].held_bytes, 750);
    assert_int_equal(r.devs[0][3].shared, 2);
    assert_int_equal(alloc_island_get(r.isl[0], 3), ALLOC_BUSY);
    assert_int_equal(alloc_island_get(r.isl[0], 0), ALLOC_FREE);
    sched_round_free(&r);

    set_cap(f, 8000);
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(r.devs[0][1].cap_bytes, 2000);
    sched_round_free(&r);

    /* A hold that ends frees its memory (a patch of the one device). */
    support_store_write(f->st, "DELETE FROM device_holds WHERE job_id = 71");
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(r.devs[0][3].held_bytes, 600);
    assert_int_equal(r.devs[0][3].shared, 1);
    sched_round_free(&r);
    support_store_write(f->st, "DELETE FROM device_holds");
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(r.devs[0][3].shared, 0);
    assert_int_equal(r.devs[0][3].held_bytes, 0);
    assert_int_equal(alloc_island_get(r.isl[0], 3), ALLOC_FREE);
    sched_round_free(&r);
}

/* Places a shared whole-island gang taking `bytes` per device on a fresh
 * round; the allocator's answer and whether memory kept it out. */
static int place(fixture_t *f, int64_t bytes, int *by_memory, char *reason, size_t len)
{
    round_t r;
    alloc_placement_t pl[1];
    sched_gang_t g = {&whole, 1, 1, bytes};
    assert_int_equal(sched_round_load(f->st, &r), 0);
    int a = sched_place(&r, &g, pl, by_memory);
    if (a == ALLOC_OK)
        alloc_placements_release(pl, 1);
    else if (*by_memory && reason)
        sched_memory_reason(&r, &g, reason, len);
    sched_round_free(&r);
    return a;
}

/* Beside a job holding 600 of each device's 1,000 bytes: 400 fit, 401 do
 * not, and the reason names memory with the figures. Unheld devices take
 * any job; a device whose memory is not reported yet bounds nothing. */
static void test_shared_job_joins_only_where_memory_fits(void **state)
{
    fixture_t *f = *state;
    char reason[512] = "";
    int by_memory = -1;
    hold(f, 70, 0, 0, 0, 3, 600);
    assert_int_equal(place(f, 400, &by_memory, NULL, 0), ALLOC_OK);
    assert_int_equal(by_memory, 0);
    assert_int_equal(place(f, 401, &by_memory, reason, sizeof reason), ALLOC_ENOSPACE);
    assert_int_equal(by_memory, 1);
    assert_non_null(strstr(reason, "device memory"));
    assert_non_null(strstr(reason, "401 bytes"));
    assert_non_null(strstr(reason, "400 bytes of 1000 bytes"));

    support_store_write(f->st, "DELETE FROM device_holds WHERE idx = 0");
    assert_int_equal(place(f, 401, &by_memory, NULL, 0), ALLOC_ENOSPACE);
    assert_int_equal(by_memory, 1);     /* one free device does not make a 2x2 */

    support_store_write(f->st, "DELETE FROM device_holds");
    assert_int_equal(place(f, 5000, &by_memory, NULL, 0), ALLOC_OK);

    hold(f, 71, 0, 0, 0, 3, 600);
    set_cap(f, 0);
    assert_int_equal(place(f, 5000, &by_memory, NULL, 0), ALLOC_OK);
}

/* The reason names what is left on the islands the job may use: a roomier
 * shared device on another island is not its to take. */
static void test_memory_reason_names_its_islands(void **state)
{
    fixture_t *f = *state;
    char reason[512] = "";
    int by_memory = -1;
    int64_t east = support_store_register(f->st, "east", "127.0.0.1:2", 2);
    worker_stats_t ws = {.cap_bytes = 20000};
    assert_int_equal(store_worker_set_stats(f->st, east, &ws), STORE_OK);
    hold(f, 70, 0, 0, 0, 3, 600);       /* east's two devices too: 9,400 bytes left there */
    assert_int_equal(place(f, 401, &by_memory, reason, sizeof reason), ALLOC_ENOSPACE);
    assert_int_equal(by_memory, 1);
    assert_non_null(strstr(reason, "400 bytes of 1000 bytes"));
}

/* A placement recorded in the round adds its bytes to its devices, so the
 * next job of the same round sees them. */
static void test_round_take_adds_memory(void **state)
{
    fixture_t *f = *state;
    round_t r;
    alloc_placement_t pl[1];
    int by_memory;
    sched_gang_t g = {&whole, 1, 1, 600};
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(sched_place(&r, &g, pl, &by_memory), ALLOC_OK);
    sched_round_take(&r, pl, &g, 90);
    alloc_placements_release(pl, 1);
    assert_int_equal(r.devs[0][0].held_bytes, 600);
    assert_int_equal(sched_place(&r, &g, pl, &by_memory), ALLOC_ENOSPACE);
    assert_int_equal(by_memory, 1);
    g.bytes = 400;
    assert_int_equal(sched_place(&r, &g, pl, &by_memory), ALLOC_OK);
    alloc_placements_release(pl, 1);
    sched_round_free(&r);
}

/* The state of job id. */
static void expect_state(fixture_t *f, int id, const char *want)
{
    char sql[128], *got = NULL;
    snprintf(sql, sizeof sql, "SELECT state FROM jobs WHERE id = %d", id);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(f->st), sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    got = strdup((const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    assert_string_equal(got, want);
    free(got);
}

/* A round in which job (gang g) evicts nothing: sched_try_preempt answers
 * 0 and job `kept` is still running. */
static void expect_no_eviction(fixture_t *f, const sched_job_t *job, const sched_gang_t *g,
                               int kept)
{
    round_t r;
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(sched_try_preempt(f->st, &r, job, g), 0);
    sched_round_free(&r);
    expect_state(f, kept, "running");
}

/* A high-priority shared job kept out by memory evicts the preemptible
 * shared job whose memory makes room, and spares a preemptible one whose
 * eviction would not (a shared gang never evicts only to join devices). */
static void test_preemption_makes_room_in_memory(void **state)
{
    fixture_t *f = *state;
    round_t r;
    int by_memory;
    alloc_placement_t pl[1];
    hold(f, 70, 0, 0, 0, 3, 300);       /* not preemptible */
    hold(f, 71, 1, 1, 0, 3, 500);       /* makes room: 300 + 500 left -> 300 + 600 */
    hold(f, 72, 0, 1, 0, 0, 100);       /* lower priority, but frees too little */
    sched_gang_t g = {&whole, 1, 1, 600};
    sched_job_t job = {.id = 99, .priority = 5};
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(sched_place(&r, &g, pl, &by_memory), ALLOC_ENOSPACE);
    assert_int_equal(by_memory, 1);
    assert_int_equal(sched_try_preempt(f->st, &r, &job, &g), 1);
    assert_int_equal(r.devs[0][1].held_bytes, 300);
    /* 70 still holds it: busy for an exclusive job in the rest of the round. */
    assert_int_equal(alloc_island_get(r.isl[0], 1), ALLOC_BUSY);
    assert_int_equal(sched_place(&r, &g, pl, &by_memory), ALLOC_OK);
    alloc_placements_release(pl, 1);
    sched_round_free(&r);
    expect_state(f, 71, "queued");
    expect_state(f, 72, "running");
    expect_state(f, 70, "running");

    /* Nothing evictable makes room: nothing is evicted. */
    g.bytes = 800;
    expect_no_eviction(f, &job, &g, 72);
}

/* An exclusive job frees a shared device only by evicting every job that
 * holds it: one of the two holders here may not be evicted, so evicting
 * the other would free nothing, and nothing is evicted. */
static void test_exclusive_preemption_needs_every_holder(void **state)
{
    fixture_t *f = *state;
    hold(f, 70, 0, 0, 0, 3, 100);       /* not preemptible */
    hold(f, 71, 0, 1, 0, 3, 100);
    sched_gang_t g = {&whole, 1, 0, 0};
    sched_job_t job = {.id = 99, .priority = 5};
    expect_no_eviction(f, &job, &g, 71);
}

/* A shared gang lands on the least-loaded devices that take it: with
 * devices 0-1 held by a shared job and 2-3 by none, on 2-3, although the
 * memory would fit beside the holder (and, all else equal, the allocator
 * takes the lowest devices first). */
static void test_shared_gang_least_loaded_first(void **state)
{
    fixture_t *f = *state;
    round_t r;
    int by_memory;
    alloc_placement_t pl[1];
    static const alloc_request_t two = {{1, {2, 0, 0, 0}}, "west"};
    hold(f, 70, 0, 0, 0, 1, 100);
    sched_gang_t g = {&two, 1, 1, 100};
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(sched_place(&r, &g, pl, &by_memory), ALLOC_OK);
    assert_int_equal(pl[0].nshards, 2);
    assert_int_equal(pl[0].devices[0], 2);
    assert_int_equal(pl[0].devices[1], 3);
    alloc_placements_release(pl, 1);
    sched_round_free(&r);
}

/* The planner's estimate: the largest computation's per-shard values. */
static void test_plan_bytes(void **state)
{
    fixture_t *f = *state;
    int64_t id = support_store_submit(
        f->st,
        "{\"name\":\"m\",\"sharing\":\"shared\",\"slices\":{\"s\":{\"shape\":[2,2]}},"
        "\"computations\":["
        "{\"name\":\"a\",\"slice\":\"s\",\"ops\":["
        "{\"op\":\"fill\",\"out\":\"x\",\"shape\":[256],\"value\":1},"
        "{\"op\":\"scale\",\"out\":\"y\",\"args\":[\"x\"],\"factor\":2}],"
        "\"outputs\":[\"y\"]},"
        "{\"name\":\"b\",\"slice\":\"s\",\"ops\":["
        "{\"op\":\"input\",\"out\":\"p\",\"from\":\"a.y\"},"
        "{\"op\":\"reduce_sum\",\"out\":\"q\",\"args\":[\"p\"]}],"
        "\"outputs\":[\"q\"]}]}",
        islands, 2);
    plan_entry_t *pe = sched_plan_get(f->st, id);
    assert_non_null(pe);
    assert_int_equal(pe->dev_bytes, 2 * 256 * 4);
    assert_int_equal(sched_plan_bytes(pe->plan), 2 * 256 * 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_sees_device_memory, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_shared_job_joins_only_where_memory_fits, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_memory_reason_names_its_islands, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_round_take_adds_memory, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_preemption_makes_room_in_memory, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_exclusive_preemption_needs_every_holder, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_shared_gang_least_loaded_first, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_plan_bytes, setup, support_sched_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
