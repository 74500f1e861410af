/* test_store_sched.c - the scheduler's own moves in the store act only on a
 * job still in the state the scheduler read: on a real SQLite file, a job
 * that ended or was cancelled between the scheduler's read and its
 * transaction is left as it is (store.h: terminal states never move), and
 * an allocation is written only on the workers the scheduler saw; an
 * island's idle time is read from its shared jobs' host tasks; lease ids
 * keep growing across a restart; the data-plane directory answers the
 * newest live worker at an address, and nothing for one gone or without a
 * UCX address; SQLite keeps no memory statistics (their global lock). */
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
#include <unistd.h>

#include "compiler.h"
#include "store_internal.h"
#include "support_store.h"
#include "util.h"

static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}};

static const char job_doc[] = SUPPORT_STORE_JOB_DOC;

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

static int64_t submit(store_t *st)
{
    return support_store_submit(st, job_doc, islands, 1);
}

/* The job's state and attempt as GET /v1/jobs/{id} shows them (a job not yet
 * allocated is at attempt 0; a requeue adds one). */
static void expect_job(store_t *st, int64_t id, const char *state, int attempt)
{
    json_t *job = store_job_json(st, id);
    assert_non_null(job);
    assert_string_equal(json_string_value(json_object_get(job, "state")), state);
    assert_int_equal(json_integer_value(json_object_get(job, "attempt")), attempt);
    json_decref(job);
}

/* A victim cancelled after the scheduler chose it is not requeued: a
 * cancelled job would otherwise come back as queued and run again. */
static void test_preempt_leaves_ended_job(void **state)
{
    fixture_t *f = *state;
    int64_t id = submit(f->st);
    char was[16];
    assert_int_equal(store_job_cancel(f->st, id, was), STORE_OK);
    assert_int_equal(store_sched_preempt(f->st, id, 99, 5), 1);
    expect_job(f->st, id, "cancelled", 0);
}

/* A queued job is not a victim either: only allocated or running jobs hold
 * devices to take. */
static void test_preempt_leaves_queued_job(void **state)
{
    fixture_t *f = *state;
    int64_t id = submit(f->st);
    assert_int_equal(store_sched_preempt(f->st, id, 99, 5), 1);
    expect_job(f->st, id, "queued", 0);
}

/* A job the scheduler found uncompilable, cancelled meanwhile, stays
 * cancelled (not failed); a job still queued is failed. */
static void test_fail_only_queued(void **state)
{
    fixture_t *f = *state;
    int64_t gone = submit(f->st), waiting = submit(f->st);
    char was[16];
    assert_int_equal(store_job_cancel(f->st, gone, was), STORE_OK);
    assert_int_equal(store_sched_fail(f->st, gone, "no longer valid"), 1);
    expect_job(f->st, gone, "cancelled", 0);
    assert_int_equal(store_sched_fail(f->st, waiting, "no longer valid"), 0);
    expect_job(f->st, waiting, "failed", 0);
}

/* Registers a worker holding all of west (2x2); returns its id. */
static int64_t register_worker(store_t *st)
{
    return support_store_register(st, "west", "127.0.0.1:1", 4);
}

/* Tries to allocate devices dev[0..n) of west to the job, as on worker w. */
static int allocate_devs(store_t *st, int64_t job, int shared, int64_t w, const int64_t *dev,
                         int n)
{
    store_mark_t m[4];
    for (int i = 0; i < n; i++)
        m[i] = (store_mark_t){store_island_id(st, "west"), dev[i], w};
    assert_int_equal(store_begin(st), 0);
    int rc = store_sched_mark_allocated(st, job, shared, shared ? 1000 : 0, m, n, "{}", 0, 0, -1);
    if (rc == 0)
        assert_int_equal(store_commit(st), 0);
    else
        store_rollback(st);
    return rc;
}

/* The allocation is written only while each device is on the worker the
 * round saw: host tasks for a worker that left or was replaced meanwhile
 * would never run, and the job would wait for ever. */
static int allocate(store_t *st, int64_t job, int shared, int64_t w)
{
    static const int64_t dev[2] = {0, 1};
    return allocate_devs(st, job, shared, w, dev, 2);
}

/* Holders (an exclusive job, shared holds) of west's device idx. */
static int holders(store_t *st, int idx)
{
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT (SELECT COUNT(*) FROM allocations WHERE lo <= %d AND hi >= %d) +"
             " (SELECT COUNT(*) FROM device_holds WHERE idx = %d)", idx, idx, idx);
    return (int)support_store_int(st, sql);
}

/* An allocation takes its devices only if no exclusive job holds any of
 * them, and, for an exclusive one, no shared job either; all or nothing,
 * whether its devices are one run of indexes or several. */
static void test_allocate_checks_holders(void **state)
{
    fixture_t *f = *state;
    int64_t a = submit(f->st), b = submit(f->st), c = submit(f->st), d = submit(f->st);
    int64_t w = register_worker(f->st);
    static const int64_t d02[2] = {0, 2}, d3[1] = {3}, d23[2] = {2, 3}, d13[2] = {1, 3};
    assert_int_equal(allocate_devs(f->st, a, 0, w, d02, 2), 0);     /* two runs */
    assert_int_equal(holders(f->st, 0) + holders(f->st, 2), 2);
    assert_int_equal(allocate_devs(f->st, b, 0, w, d23, 2), -1);    /* 2 is a's */
    assert_int_equal(allocate_devs(f->st, b, 1, w, d23, 2), -1);    /* shared: still a's */
    assert_int_equal(holders(f->st, 3), 0);                         /* nothing half-done */
    assert_int_equal(allocate_devs(f->st, c, 1, w, d3, 1), 0);      /* a shared hold on 3 */
    assert_int_equal(allocate_devs(f->st, d, 1, w, d13, 2), 0);     /* shared joins it */
    assert_int_equal(holders(f->st, 3), 2);
    assert_int_equal(allocate_devs(f->st, b, 0, w, d13, 2), -1);    /* exclusive: held */
    expect_job(f->st, b, "queued", 0);
    assert_int_equal(holders(f->st, 1), 1);
}

/* An exclusive job's devices are one allocation row per run of indexes.
 * A run is refused when an earlier run reaches into it or one starts
 * inside it (the seek for the nearest run below the range's end), and
 * taken beside runs that end before it or start after it; a job's end
 * deletes its runs and frees those devices. */
static void test_allocation_runs(void **state)
{
    fixture_t *f = *state;
    int64_t a = submit(f->st), b = submit(f->st), c = submit(f->st);
    int64_t w = register_worker(f->st);
    static const int64_t d12[2] = {1, 2}, d23[2] = {2, 3}, d01[2] = {0, 1}, d0[1] = {0},
                         d3[1] = {3};
    assert_int_equal(allocate_devs(f->st, a, 0, w, d12, 2), 0);
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM allocations"), 1);
    assert_int_equal(allocate_devs(f->st, b, 0, w, d23, 2), -1);    /* a's run reaches 2 */
    assert_int_equal(allocate_devs(f->st, b, 0, w, d01, 2), -1);    /* a's run starts at 1 */
    assert_int_equal(allocate_devs(f->st, b, 1, w, d01, 2), -1);    /* shared: the same */
    assert_int_equal(allocate_devs(f->st, b, 0, w, d0, 1), 0);      /* before a's run */
    assert_int_equal(allocate_devs(f->st, c, 0, w, d3, 1), 0);      /* after it */
    for (int i = 0; i < 4; i++)
        assert_int_equal(holders(f->st, i), 1);
    char was[16];
    assert_int_equal(store_job_cancel(f->st, a, was), STORE_OK);
    assert_int_equal(holders(f->st, 1) + holders(f->st, 2), 0);
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM allocations"), 2);
}

static void test_allocate_checks_worker(void **state)
{
    fixture_t *f = *state;
    int64_t job = submit(f->st);
    assert_int_equal(allocate(f->st, job, 0, 1), -1);      /* no worker yet */
    int64_t w = register_worker(f->st);
    assert_int_equal(allocate(f->st, job, 0, w + 1), -1);  /* another worker */
    assert_int_equal(allocate(f->st, job, 1, w + 1), -1);  /* shared holds too */
    expect_job(f->st, job, "queued", 0);
    assert_int_equal(allocate(f->st, job, 0, w), 0);
    expect_job(f->st, job, "allocated", 0);
}

/* A host task of job on worker w, then (through a second connection, as
 * a report would have left it) succeeded with the given stamps. */
static void add_done_task(store_t *st, sqlite3 *db, int64_t job, int64_t w, int64_t start,
                          int64_t ready, int64_t end)
{
    static int seq;
    sched_task_t t = {.job = job, .ncomps = 1, .island = store_island_id(st, "west"), .worker = w,
                      .seq = ++seq, .shards = "[0]", .nshards = 1, .devices = "[0]"};
    assert_int_equal(store_begin(st), 0);
    assert_int_equal(store_sched_add_tasks(st, &t, 1), 0);
    assert_int_equal(store_commit(st), 0);
    char sql[256];
    snprintf(sql, sizeof sql,
             "UPDATE host_tasks SET state = 'succeeded', started_us = %lld,"
             " inputs_ready_us = %lld, finished_us = %lld WHERE seq = %d",
             (long long)start, (long long)ready, (long long)end, seq);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
}

/* Dispatches one (unblocked) host task of job on worker w; its leased_at. */
static int64_t lease_one(store_t *st, int64_t job, int64_t w)
{
    static int seq = 1000;
    sched_task_t t = {.job = job, .ncomps = 1, .island = store_island_id(st, "west"), .worker = w,
                      .seq = ++seq, .shards = "[0]", .nshards = 1, .devices = "[0]"};
    assert_int_equal(store_begin(st), 0);
    assert_int_equal(store_sched_add_tasks(st, &t, 1), 0);
    int64_t id = sqlite3_last_insert_rowid(store_db(st));
    assert_int_equal(store_commit(st), 0);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(st), "SELECT leased_at FROM host_tasks"
                                        " WHERE id = ?", -1, &s, NULL), SQLITE_OK);
    sqlite3_bind_int64(s, 1, id);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t leased_at = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return leased_at;
}

/* store_sched_add_tasks writes every row it is given, STORE_TASK_ROWS to
 * a statement and the rest in a shorter one, each with its own fields and
 * its own lease id (increasing in the rows' order); blocked rows get none. */
static void test_add_tasks_rows(void **state)
{
    fixture_t *f = *state;
    int64_t job = submit(f->st), w = register_worker(f->st);
    enum { N = 2 * STORE_TASK_ROWS + 3 };
    sched_task_t t[N];
    char shards[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(shards[i], sizeof shards[i], "[%d]", i);
        t[i] = (sched_task_t){.job = job, .comp = i, .ncomps = 1,
                              .island = store_island_id(f->st, "west"), .worker = w,
                              .seq = 100 + i, .shards = shards[i], .nshards = 1,
                              .blocked = i == N - 1, .devices = "[0]"};
    }
    assert_int_equal(store_begin(f->st), 0);
    assert_int_equal(store_sched_add_tasks(f->st, t, N), 0);
    assert_int_equal(store_commit(f->st), 0);
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM host_tasks"), N);
    /* Row i: computation i, seq 100 + i, shards [i]; leased in order. */
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM host_tasks"
                                              " WHERE seq = 100 + comp_idx AND shards ="
                                              " '[' || comp_idx || ']'"), N);
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM host_tasks a JOIN host_tasks b"
                                              " ON b.comp_idx = a.comp_idx + 1"
                                              " WHERE b.leased_at <= a.leased_at"), 0);
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(DISTINCT leased_at) FROM host_tasks"
                                              " WHERE state = 'leased'"), N - 1);
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM host_tasks WHERE state ="
                                              " 'blocked' AND leased_at IS NULL"), 1);
}

/* Lease ids keep growing across a controller restart even when the wall
 * clock stepped back: a worker acknowledging an id from before the restart
 * must still be handed what is leased after it (its poll reads the tasks
 * leased after its ack). Here the newest stored id is an hour ahead of the
 * clock; after the store starts again on the same file, the next lease is
 * newer still. */
static void test_lease_ids_survive_restart(void **state)
{
    fixture_t *f = *state;
    int64_t job = submit(f->st), w = register_worker(f->st);
    int64_t first = lease_one(f->st, job, w);
    assert_true(first > 0);
    char sql[160];
    int64_t ahead = first + 3600LL * 1000000;
    snprintf(sql, sizeof sql, "UPDATE host_tasks SET leased_at = %lld WHERE leased_at = %lld",
             (long long)ahead, (long long)first);
    assert_int_equal(sqlite3_exec(store_db(f->st), sql, NULL, NULL, NULL), SQLITE_OK);
    err_t e = {0};
    assert_int_equal(store_global_init(f->d.db, islands, 1, &e), 0);
    assert_true(lease_one(f->st, job, w) > ahead);
}

/* The island's idle time for the feed's lookahead: per worker, the gaps
 * between one task's end (the latest so far) and the next one's inputs
 * ready; tasks of exclusive jobs and those that finished before `since`
 * do not count. */
static void test_island_idle(void **state)
{
    fixture_t *f = *state;
    static const char shared_doc[] =
        "{\"sharing\": \"shared\", \"slices\": {\"s\": {\"shape\": [2]}},"
        " \"computations\": [{\"name\": \"a\", \"slice\": \"s\", \"ops\": [{\"op\":"
        " \"iota\", \"out\": \"v\", \"shape\": [4]}], \"outputs\": [\"v\"]}]}";
    int64_t sj = support_store_submit(f->st, shared_doc, islands, 1), xj = submit(f->st);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(f->d.db, &db, SQLITE_OPEN_READWRITE, store_vfs_name()),
                     SQLITE_OK);     /* the store's VFS: its WAL index is in this process */
    sqlite3_busy_timeout(db, 5000);
    int64_t b = util_wall_us() - 1000000;
    add_done_task(f->st, db, sj, 1, b, b, b + 1000);
    add_done_task(f->st, db, sj, 1, b + 1000, b + 1500, b + 3000);    /* 500 idle */
    add_done_task(f->st, db, sj, 1, b + 3200, b + 3300, b + 4000);    /* 300 idle */
    add_done_task(f->st, db, sj, 2, b, b + 100, b + 2000);
    add_done_task(f->st, db, sj, 2, b + 1500, b + 1600, b + 2500);    /* overlaps: none */
    add_done_task(f->st, db, xj, 1, b + 5000, b + 9000, b + 9500);    /* exclusive job */
    int64_t idle = -1, span = -1;
    int n = -1;
    int64_t island = store_island_id(f->st, "west");
    assert_int_equal(store_sched_island_idle(f->st, island, b - 1, &idle, &span, &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(idle, 800);
    assert_int_equal(span, 4000 + 2500);
    assert_int_equal(store_sched_island_idle(f->st, island, b + 2500, &idle, &span, &n), 0);
    assert_int_equal(n, 2);                     /* worker 1's last two */
    assert_int_equal(idle, 300);
    assert_int_equal(span, 3000);
    sqlite3_close(db);
}

/* Registers a 1-device worker at addr with UCX address ucx (NULL: none). */
static int64_t register_at(store_t *st, const char *addr, const char *ucx)
{
    worker_reg_t reg = {"west", "sim", addr, "localhost", 1, 1, "00", ucx};
    json_t *out = NULL;
    assert_int_equal(store_worker_register(st, &reg, 60 * 1000000LL, &out, NULL), STORE_OK);
    int64_t id = json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    return id;
}

static void expect_peer(store_t *st, const char *addr, int64_t want_id, const char *want_ucx)
{
    int64_t id = 0;
    char *ucx = NULL;
    int rc = store_worker_peer(st, addr, &id, &ucx);
    if (!want_ucx) {
        assert_int_equal(rc, STORE_NOTFOUND);
        assert_null(ucx);
        return;
    }
    assert_int_equal(rc, STORE_OK);
    assert_int_equal(id, want_id);
    assert_string_equal(ucx, want_ucx);
    free(ucx);
}

static void test_peer_directory(void **state)
{
    fixture_t *f = *state;
    int64_t a = register_at(f->st, "127.0.0.1:7", "QUJD");
    register_at(f->st, "127.0.0.1:8", NULL);
    expect_peer(f->st, "127.0.0.1:7", a, "QUJD");
    expect_peer(f->st, "127.0.0.1:8", 0, NULL);     /* registered without one */
    expect_peer(f->st, "127.0.0.1:9", 0, NULL);     /* nobody there */
    /* A second worker at a live worker's port is refused (the directory
     * keeps answering the first); restarted there once the first left,
     * the new registration answers. */
    worker_reg_t reg = {"west", "sim", "127.0.0.1:7", "localhost", 1, 1, "00", "REVG"};
    json_t *out = NULL;
    int64_t holder = 0;
    assert_int_equal(store_worker_register(f->st, &reg, 60 * 1000000LL, &out, &holder),
                     STORE_CONFLICT);
    assert_null(out);
    assert_int_equal(holder, a);
    expect_peer(f->st, "127.0.0.1:7", a, "QUJD");
    assert_int_equal(store_worker_leave(f->st, a), STORE_OK);
    expect_peer(f->st, "127.0.0.1:7", 0, NULL);     /* gone: never a dead peer's address */
    int64_t b = register_at(f->st, "127.0.0.1:7", "REVG");
    expect_peer(f->st, "127.0.0.1:7", b, "REVG");
}

/* A worker that left is fenced in the store: its heartbeat renews
 * nothing and a second leave finds nobody (NOTFOUND: it must register
 * again), while a live one's heartbeat and leave are taken. */
static void test_gone_worker_fenced(void **state)
{
    fixture_t *f = *state;
    int64_t a = register_at(f->st, "127.0.0.1:7", NULL);
    assert_int_equal(store_worker_heartbeat(f->st, a), STORE_OK);
    assert_int_equal(store_worker_leave(f->st, a), STORE_OK);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT heartbeat_at FROM workers WHERE id = %lld", (long long)a);
    int64_t beat = support_store_int(f->st, sql);
    assert_int_equal(store_worker_heartbeat(f->st, a), STORE_NOTFOUND);
    assert_int_equal(support_store_int(f->st, sql), beat);
    assert_int_equal(store_worker_leave(f->st, a), STORE_NOTFOUND);
    snprintf(sql, sizeof sql, "SELECT state = 'gone' FROM workers WHERE id = %lld", (long long)a);
    assert_int_equal(support_store_int(f->st, sql), 1);
}

/* SQLite keeps no memory statistics in atolld (store.c, store_sqlite_init):
 * with them, every sqlite3_malloc and sqlite3_free of every thread takes
 * one global mutex, on which the scheduler's passes slept. The setting
 * only holds when made before SQLite is first initialised, so this counts
 * what SQLite reports after a store was opened and written through. */
static void test_sqlite_keeps_no_statistics(void **state)
{
    fixture_t *f = *state;
    assert_true(submit(f->st) > 0);
    assert_int_equal(sqlite3_memory_used(), 0);
    assert_int_equal(sqlite3_memory_highwater(0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sqlite_keeps_no_statistics, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_preempt_leaves_ended_job, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_preempt_leaves_queued_job, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_fail_only_queued, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_island_idle, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_lease_ids_survive_restart, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_allocate_checks_holders, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_allocation_runs, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_allocate_checks_worker, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_peer_directory, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_gone_worker_fenced, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_add_tasks_rows, setup, support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
