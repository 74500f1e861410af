/* test_store_watch.c - the poll watch (store.c, STORE_WATCH_SQL) on a real
 * SQLite file: a committed write moves the generation of exactly the
 * parked requests whose answer it can change. A host task written or
 * released (leased) for worker A moves A's poll generation and not B's; a report's writes move
 * nothing; a rolled-back transaction moves nothing; a job's end moves the
 * generation of the workers holding its leased tasks and the job wait
 * generation of that job (not another's); a worker's state change moves
 * every worker's. The stale family (store_stale_gen) moves only for what
 * can give a worker a stale attempt to be told of, never for a dispatch of
 * a live attempt (a dispatch of a stale one, checked at commit, moves
 * everyone's),
 * and a poll whose probe skipped the stale half on its memo still names a
 * job that ended since, and settles a stale task leased since. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store_internal.h"
#include "support_store.h"

static const island_desc_t islands[] = {{"west", {2, {2, 4, 0, 0}}}};

static const char job_doc[] = SUPPORT_STORE_JOB_DOC;

typedef struct fixture {
    support_store_t d;          /* first: support_store_teardown */
    store_t *st;
    int64_t job, a, b;          /* a queued job; two workers of 4 devices each */
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->st = support_store_open(&f->d, islands, 1);
    f->job = support_store_submit(f->st, job_doc, islands, 1);
    f->a = support_store_register(f->st, "west", "127.0.0.1:1", 4);
    f->b = support_store_register(f->st, "west", "127.0.0.1:2", 4);
    *state = f;
    return 0;
}

/* Runs sql (formatted) in one write transaction, committed or rolled back. */
static void write_sql(store_t *st, int commit, const char *fmt, ...)
{
    char sql[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    assert_int_equal(store_begin(st), 0);
    char *err = NULL;
    int rc = sqlite3_exec(store_db(st), sql, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fail_msg("%s: %s", sql, err ? err : "?");
    if (commit)
        assert_int_equal(store_commit(st), 0);
    else
        store_rollback(st);
}

/* Inserts a host task of the job for worker w in state `state`; its id. */
static int64_t add_task(fixture_t *f, int64_t w, const char *state)
{
    write_sql(f->st, 1,
              "INSERT INTO host_tasks (job_id, attempt, comp_idx, island_id, worker_id, seq,"
              " shards, nshards, state, devices) VALUES (%lld, 0, 0, %lld, %lld, 1, '[0]', 1,"
              " '%s', '[0]')",
              (long long)f->job, (long long)store_island_id(f->st, "west"), (long long)w, state);
    return sqlite3_last_insert_rowid(store_db(f->st));
}

/* Dispatches a leased host task of (job, attempt) to worker w as the
 * scheduler does (store_sched_add_tasks, in its own write transaction). */
static void dispatch_task(fixture_t *f, int64_t w, int64_t job, int attempt)
{
    sched_task_t task = {.job = job, .attempt = attempt, .ncomps = 1,
                         .island = store_island_id(f->st, "west"), .worker = w, .seq = 1,
                         .shards = "[0]", .nshards = 1, .devices = "[0]"};
    assert_int_equal(store_begin(f->st), 0);
    assert_int_equal(store_sched_add_tasks(f->st, &task, 1), 0);
    assert_int_equal(store_commit(f->st), 0);
}

static void test_task_moves_its_worker_only(void **state)
{
    fixture_t *f = *state;
    assert_true(f->a % 4096 != f->b % 4096);
    uint64_t a0 = store_poll_gen(f->a), b0 = store_poll_gen(f->b), j0 = store_job_gen(f->job);
    int64_t t = add_task(f, f->a, "blocked");
    assert_true(store_poll_gen(f->a) != a0);
    assert_true(store_poll_gen(f->b) == b0);
    assert_true(store_job_gen(f->job) == j0);

    /* Released (sequential dispatch): leased, so its worker's poll must
     * look again; nobody else's. */
    uint64_t a1 = store_poll_gen(f->a);
    write_sql(f->st, 1, "UPDATE host_tasks SET state = 'leased', leased_at = 7 WHERE id = %lld",
              (long long)t);
    assert_true(store_poll_gen(f->a) != a1);
    assert_true(store_poll_gen(f->b) == b0);

    /* A report: nothing a parked poll must look at again. */
    uint64_t a2 = store_poll_gen(f->a);
    write_sql(f->st, 1, "UPDATE host_tasks SET state = 'succeeded', finished_us = 5"
              " WHERE id = %lld", (long long)t);
    assert_true(store_poll_gen(f->a) == a2);
    assert_true(store_poll_gen(f->b) == b0);

    /* Rolled back: nothing was committed, nothing moves. */
    write_sql(f->st, 0,
              "UPDATE host_tasks SET state = 'leased' WHERE id = %lld", (long long)t);
    assert_true(store_poll_gen(f->a) == a2);
}

static void test_job_end_moves_holders(void **state)
{
    fixture_t *f = *state;
    add_task(f, f->a, "leased");
    int64_t other = support_store_submit(f->st, job_doc, islands, 1);
    uint64_t a0 = store_poll_gen(f->a), b0 = store_poll_gen(f->b), j0 = store_job_gen(f->job);
    uint64_t o0 = store_job_gen(other);
    /* The job ends while A holds its task leased: A must learn to abort;
     * its waiters wake, another job's do not. */
    write_sql(f->st, 1, "UPDATE jobs SET state = 'cancelled' WHERE id = %lld", (long long)f->job);
    assert_true(store_poll_gen(f->a) != a0);
    assert_true(store_poll_gen(f->b) == b0);
    assert_true(store_job_gen(f->job) != j0);
    assert_true(store_job_gen(other) == o0);
}

static void test_worker_state_moves_all(void **state)
{
    fixture_t *f = *state;
    uint64_t a0 = store_poll_gen(f->a), b0 = store_poll_gen(f->b);
    assert_int_equal(store_worker_leave(f->st, f->b), STORE_OK);
    assert_true(store_poll_gen(f->a) != a0);
    assert_true(store_poll_gen(f->b) != b0);
}

static void test_stale_gen_moves_for_stale_only(void **state)
{
    fixture_t *f = *state;
    uint64_t a0 = store_stale_gen(f->a), b0 = store_stale_gen(f->b);
    /* A dispatch (a live attempt's task leased) concerns no stale attempt:
     * a running chain's chunks must not make every poll scan again. */
    dispatch_task(f, f->a, f->job, 0);
    int64_t t = add_task(f, f->b, "blocked");
    assert_true(store_stale_gen(f->a) == a0);
    assert_true(store_stale_gen(f->b) == b0);
    /* The job ends: A holds a leased task of it, B only a blocked one. */
    write_sql(f->st, 1, "UPDATE jobs SET state = 'cancelled' WHERE id = %lld", (long long)f->job);
    assert_true(store_stale_gen(f->a) != a0);
    assert_true(store_stale_gen(f->b) == b0);
    /* A task of the ended job leased afterwards: released (its worker's),
     * or inserted by a dispatch (checked at commit: everyone's). */
    write_sql(f->st, 1, "UPDATE host_tasks SET state = 'leased', leased_at = 9 WHERE id = %lld",
              (long long)t);
    assert_true(store_stale_gen(f->b) != b0);
    uint64_t b1 = store_stale_gen(f->b), a1 = store_stale_gen(f->a);
    dispatch_task(f, f->b, f->job, 0);
    assert_true(store_stale_gen(f->b) != b1);
    uint64_t a1b = store_stale_gen(f->a);
    assert_true(a1b != a1);
    a1 = a1b;
    /* A worker's state, a lost worker's tasks (what a successor of the
     * same process is told to abort): everyone's. */
    write_sql(f->st, 1, "UPDATE workers SET data_addr = '127.0.0.1:9' WHERE id = %lld",
              (long long)f->b);
    uint64_t a2 = store_stale_gen(f->a);
    assert_true(a2 != a1);
    write_sql(f->st, 1, "UPDATE host_tasks SET state = 'cancelled', error = 'worker lost'"
              " WHERE worker_id = %lld", (long long)f->b);
    assert_true(store_stale_gen(f->a) != a2);
    /* A registration (a reused id must not inherit a memo). */
    assert_int_equal(store_worker_leave(f->st, f->b), STORE_OK);
    uint64_t a3 = store_stale_gen(f->a);
    support_store_register(f->st, "west", "127.0.0.1:3", 4);
    assert_true(store_stale_gen(f->a) != a3);
}

/* Polls worker w acknowledging ack; the answer (new reference). */
static json_t *poll(fixture_t *f, int64_t w, int64_t ack)
{
    char *out = NULL;
    size_t len = 0;
    int any = 0;
    int64_t quiet = -1;
    assert_int_equal(store_worker_poll(f->st, w, ack, &out, &len, &any, &quiet), STORE_OK);
    json_t *a = json_loadb(out, len, 0, NULL);
    free(out);
    assert_non_null(a);
    return a;
}

static void test_poll_after_clean_probe_sees_stale(void **state)
{
    fixture_t *f = *state;
    write_sql(f->st, 1, "UPDATE jobs SET state = 'running' WHERE id = %lld", (long long)f->job);
    write_sql(f->st, 1, "INSERT INTO comp_payloads VALUES (%lld, 0, 0, '{}')", (long long)f->job);
    int64_t t = add_task(f, f->a, "leased");
    write_sql(f->st, 1, "UPDATE host_tasks SET leased_at = 7 WHERE id = %lld", (long long)t);
    json_t *ans = poll(f, f->a, 0);
    assert_int_equal(json_array_size(json_object_get(ans, "jobs")), 1);
    json_decref(ans);
    /* Nothing new: the memo vouches for the stale half (clean probe). */
    ans = poll(f, f->a, 7);
    assert_int_equal(json_array_size(json_object_get(ans, "jobs")), 0);
    assert_int_equal(json_array_size(json_object_get(ans, "cancel")), 0);
    json_decref(ans);
    ans = poll(f, f->b, 0);
    json_decref(ans);
    /* The job ends: A must be told, memo or not. */
    write_sql(f->st, 1, "UPDATE jobs SET state = 'cancelled' WHERE id = %lld", (long long)f->job);
    ans = poll(f, f->a, 7);
    json_t *c = json_array_get(json_object_get(ans, "cancel"), 0);
    assert_non_null(c);
    assert_int_equal(json_integer_value(json_object_get(c, "job")), f->job);
    json_decref(ans);
    /* A task of the ended job leased to B after B's clean probe never
     * reached B: its next poll settles it. */
    dispatch_task(f, f->b, f->job, 0);
    int64_t u = sqlite3_last_insert_rowid(store_db(f->st));
    ans = poll(f, f->b, 0);
    json_decref(ans);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT state FROM host_tasks WHERE id = %lld", (long long)u);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(f->st), sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "cancelled");
    sqlite3_finalize(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_task_moves_its_worker_only, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_job_end_moves_holders, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_worker_state_moves_all, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_stale_gen_moves_for_stale_only, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_poll_after_clean_probe_sees_stale, setup,
                                        support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
