/* test_store_prune.c - job retention (store_prune.c) on a real SQLite
 * file: an ended job past the cutoff goes with its rows in every table
 * that has a job_id column (the test finds those tables in the schema, so
 * a table added later without a place in the prune fails here); a live
 * job, one ended within the window, and one with a host task still leased
 * stay; the owner of the newest jobs, host_tasks, events or run_logs row
 * stays, so no id is handed out twice; a call deletes at most its batch;
 * the kept counts follow; and a call's cost does not grow with the jobs
 * created within the window. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "store.h"
#include "support_store.h"

static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}};

#define CUTOFF 1000     /* µs; "old" jobs were created at 50 and ended at 100 */

typedef struct fixture {
    support_store_t d;          /* first: support_store_teardown */
    store_t *st;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->st = support_store_open(&f->d, islands, 1);
    *state = f;
    return 0;
}

static void sql_f(store_t *st, const char *fmt, long long a, const char *b, long long c)
{
    char sql[1024];
    snprintf(sql, sizeof sql, fmt, a, b, c);
    support_store_write(st, sql);
}

/* A job submitted, then set to `state`, created at 50 and ended at
 * `finished` (-1: never). */
static int64_t job_in(store_t *st, const char *state, long long finished)
{
    int64_t id = support_store_submit(st, SUPPORT_STORE_JOB_DOC, islands, 1);
    sql_f(st, "UPDATE jobs SET created_at = 50, finished_at = NULLIF(%lld, -1) * 1, state = '%s'"
              " WHERE id = %lld", finished, state, (long long)id);
    return id;
}

/* One row for job `id` in every table that holds a job's rows; its host
 * task in `task_state`. */
static void rows_of(store_t *st, int64_t id, const char *task_state)
{
    static const char *const sqls[] = {
        "INSERT OR IGNORE INTO computations (job_id, idx, name, slice, state, shards_total)"
        " VALUES (%lld, 99, '%s', 's', 'succeeded', 1 + 0 * %lld)",
        "INSERT INTO host_tasks (job_id, attempt, comp_idx, island_id, worker_id, seq, shards,"
        " nshards, state) VALUES (%lld, 0, 0, 1, 1, 1, '[0]', 1, '%s') -- %lld",
        "INSERT INTO outputs (job_id, comp_idx, value, shard0, meta) VALUES (%lld, 0, '%s', %lld,"
        " '{}')",
        "INSERT INTO comp_payloads (job_id, attempt, comp_idx, payload) VALUES (%lld, 0, 0, '%s')"
        " -- %lld",
        "INSERT INTO run_procs (job_id, attempt, comp_idx, process, worker_id, host, pid, state,"
        " started_at) VALUES (%lld, 0, 0, 0, 1, '%s', %lld, 'exited', 1)",
        "INSERT OR IGNORE INTO slices (job_id, name, island_id, shape, devices)"
        " VALUES (%lld, 's', 1, '[1]', '%s') -- %lld",
        "INSERT INTO device_holds (island_id, idx, job_id) VALUES (1, %lld + 0 * length('%s'), %lld)",
        "INSERT INTO allocations (island_id, lo, hi, job_id)"
        " VALUES (1, 100 + %lld, 1000000 + length('%s'), %lld)",
        "INSERT OR IGNORE INTO job_docs (job_id, doc) VALUES (%lld, '%s') -- %lld",
        "INSERT INTO run_logs (job_id, attempt, comp_idx, process, stream, bytes)"
        " VALUES (%lld, 0, 0, 0, 1, '%s') -- %lld",
        "INSERT INTO events (job_id, at, kind, detail) VALUES (%lld, 1, 'k', '%s') -- %lld",
    };
    for (size_t i = 0; i < sizeof sqls / sizeof sqls[0]; i++)
        sql_f(st, sqls[i], (long long)id, task_state, (long long)id);
}

/* Rows naming job `id`, summed over every table with a job_id column, and
 * into *tables how many of those tables hold one. */
static long rows_naming(store_t *st, int64_t id, int *tables)
{
    sqlite3 *db = store_db(st);
    sqlite3_stmt *t;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT m.name FROM sqlite_master m, pragma_table_info(m.name) c"
                                            " WHERE m.type = 'table' AND c.name = 'job_id'",
                                        -1, &t, NULL), SQLITE_OK);
    long total = 0;
    *tables = 0;
    while (sqlite3_step(t) == SQLITE_ROW) {
        char sql[256];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM \"%s\" WHERE job_id = %lld",
                 (const char *)sqlite3_column_text(t, 0), (long long)id);
        int64_t n = support_store_int(st, sql);
        total += n;
        *tables += n > 0;
    }
    sqlite3_finalize(t);
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM jobs WHERE id = %lld", (long long)id);
    return total + support_store_int(st, sql);
}

static int job_tables(store_t *st)
{
    return (int)support_store_int(st, "SELECT COUNT(*) FROM sqlite_master m,"
                                      " pragma_table_info(m.name) c WHERE m.type = 'table'"
                                      " AND c.name = 'job_id'");
}

static int stored(store_t *st, int64_t id)
{
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM jobs WHERE id = %lld", (long long)id);
    return (int)support_store_int(st, sql);
}

/* Which jobs go, and that everything of the ones that go goes (two in
 * one batch: each table's delete takes the whole batch). */
static void test_prune_takes_every_row(void **state)
{
    fixture_t *f = *state;
    int64_t gone = job_in(f->st, "succeeded", 100);
    int64_t gone2 = job_in(f->st, "failed", 100);
    int64_t leased = job_in(f->st, "failed", 100);
    int64_t recent = job_in(f->st, "succeeded", CUTOFF + 1);
    int64_t live = job_in(f->st, "running", 100);      /* finished_at of an older attempt */
    int64_t newest = job_in(f->st, "cancelled", 100);
    rows_of(f->st, gone, "succeeded");
    rows_of(f->st, gone2, "failed");
    rows_of(f->st, leased, "leased");
    rows_of(f->st, recent, "succeeded");
    rows_of(f->st, live, "succeeded");
    rows_of(f->st, newest, "succeeded");
    int tables;
    assert_true(rows_naming(f->st, gone, &tables) > 0);
    /* Every table with a job_id column got a row: one added to the schema
     * must be added to rows_of, and to the prune's list. */
    assert_int_equal(tables, job_tables(f->st));
    assert_true(rows_naming(f->st, gone2, &tables) > 0);
    assert_int_equal(tables, job_tables(f->st));
    int64_t counts[STORE_JOB_NSTATES];
    assert_int_equal(store_job_counts(f->st, counts), 0);
    int64_t succeeded = counts[3];

    uint64_t before = store_jobs_pruned();
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 64), 2);
    assert_int_equal(store_jobs_pruned() - before, 2);
    assert_int_equal(rows_naming(f->st, gone, &tables), 0);
    assert_int_equal(rows_naming(f->st, gone2, &tables), 0);
    assert_int_equal(stored(f->st, leased), 1);
    assert_int_equal(stored(f->st, recent), 1);
    assert_int_equal(stored(f->st, live), 1);
    assert_int_equal(stored(f->st, newest), 1);
    assert_true(rows_naming(f->st, recent, &tables) > 1);
    assert_int_equal(store_job_counts(f->st, counts), 0);
    assert_int_equal(counts[3], succeeded - 1);
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 64), 0);

    /* The leased task reported: its job goes on the next call. */
    sql_f(f->st, "UPDATE host_tasks SET state = 'succeeded' WHERE job_id = %lld AND '%s' <> ''"
                 " -- %lld", (long long)leased, "x", 0);
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 64), 1);
    assert_int_equal(stored(f->st, leased), 0);
}

/* The owner of each table's newest row stays until a newer row exists:
 * then it goes, and the next job's id is still new. */
static void test_prune_never_reuses_ids(void **state)
{
    fixture_t *f = *state;
    int64_t a = job_in(f->st, "succeeded", 100);
    int64_t b = job_in(f->st, "succeeded", 100);
    int64_t c = job_in(f->st, "failed", 100);
    int64_t d = job_in(f->st, "failed", 100);
    /* a owns the newest host task, b the newest run log, c the newest
     * event; d is the newest job. */
    sql_f(f->st, "INSERT INTO host_tasks (job_id, attempt, comp_idx, island_id, worker_id, seq,"
                 " shards, nshards, state) VALUES (%lld, 0, 0, 1, 1, 1, '[0]', 1, '%s') -- %lld",
          (long long)a, "succeeded", 0);
    sql_f(f->st, "INSERT INTO run_logs (job_id, attempt, comp_idx, process, stream, bytes)"
                 " VALUES (%lld, 0, 0, 0, 1, '%s') -- %lld", (long long)b, "x", 0);
    sql_f(f->st, "INSERT INTO events (job_id, at, kind, detail) VALUES (%lld, 1, 'k', '%s')"
                 " -- %lld", (long long)c, "x", 0);
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 64), 0);
    assert_int_equal(stored(f->st, a) + stored(f->st, b) + stored(f->st, c) + stored(f->st, d), 4);

    /* A queued job e, with a host task, a run log and an event of its
     * own: a, b, c and d all go; e is live (and the newest). */
    int64_t e = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    sql_f(f->st, "INSERT INTO host_tasks (job_id, attempt, comp_idx, island_id, worker_id, seq,"
                 " shards, nshards, state) VALUES (%lld, 0, 0, 1, 1, 1, '[0]', 1, '%s') -- %lld",
          (long long)e, "blocked", 0);
    sql_f(f->st, "INSERT INTO run_logs (job_id, attempt, comp_idx, process, stream, bytes)"
                 " VALUES (%lld, 0, 0, 0, 1, '%s') -- %lld", (long long)e, "x", 0);
    int64_t max_task = support_store_int(f->st, "SELECT MAX(id) FROM host_tasks");
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 64), 4);
    assert_int_equal(stored(f->st, e), 1);
    int64_t next = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    assert_true(next > e);
    sql_f(f->st, "INSERT INTO host_tasks (job_id, attempt, comp_idx, island_id, worker_id, seq,"
                 " shards, nshards, state) VALUES (%lld, 0, 0, 1, 1, 1, '[0]', 1, '%s') -- %lld",
          (long long)next, "blocked", 0);
    assert_true(support_store_int(f->st, "SELECT MAX(id) FROM host_tasks") > max_task);
}

/* A call deletes at most its batch; the rest go on the next calls. */
static void test_prune_batches(void **state)
{
    fixture_t *f = *state;
    for (int i = 0; i < 5; i++)
        job_in(f->st, "succeeded", 100);
    (void)support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);    /* newest, live */
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 2), 2);
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 2), 2);
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 2), 1);
    assert_int_equal(store_jobs_prune(f->st, CUTOFF, 2), 0);
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM jobs"), 1);
}

static long prune_cost(store_t *st)
{
    long steps;
    support_store_vm_meter_on(st, &steps);
    int n = store_jobs_prune(st, CUTOFF, 64);
    support_store_vm_meter_off(st);
    assert_int_equal(n, 0);
    return steps;
}

/* A call reads the old jobs, not the window: jobs created at or after the
 * cutoff end its read (it runs every second). */
static void test_prune_cost_flat_in_window(void **state)
{
    fixture_t *f = *state;
    job_in(f->st, "succeeded", CUTOFF + 1);     /* old, ended within the window */
    (void)support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    long small = prune_cost(f->st);
    support_store_write(f->st, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
                               " WHERE i < 5000) INSERT INTO jobs (name, state, priority,"
                               " max_retries, comps_total, created_at, finished_at)"
                               " SELECT 'recent', 'succeeded', 0, 0, 1, 2000 + i, 3000 + i FROM n");
    long big = prune_cost(f->st);
    print_message("prune: %ld VM instructions with 2 jobs, %ld with 5002\n", small, big);
    if (big > small + small / 2)
        fail_msg("a prune costs %ld VM instructions with 5,000 recent jobs, %ld without",
                 big, small);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_prune_takes_every_row, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_prune_never_reuses_ids, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_prune_batches, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_prune_cost_flat_in_window, setup,
                                        support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
