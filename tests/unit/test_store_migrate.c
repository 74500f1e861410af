/* test_store_migrate.c - a database of an older schema opens under this
 * one and keeps what it held: on a real SQLite file built at schema
 * version 16 (the migrations of that time, applied by hand), with a job
 * and its document in the jobs row, store_global_init() migrates to the
 * newest version. Version 17 moved the document out of the jobs row into
 * job_docs: the job must still answer its document, and the jobs row must
 * no longer carry it (every report rewrote it there). Version 18 moved
 * host task payloads into host_task_payloads and their devices into a
 * column, and version 21 keeps one payload per computation (comp_payloads)
 * without the task's shards and devices: an old host task keeps its
 * devices, and its computation the rest of its payload. Version 23 keeps
 * one outputs row per host task and output: a succeeded job's per-shard
 * rows answer the same result, values and all 17 digits of each sum
 * included; rows whose shard sets interleave (two workers' blocks) are
 * answered in shard order. Version 25 rebuilt host_tasks (its state check
 * as comparisons): the old host task keeps its fields and a state outside
 * the list is still refused. Version 28 made exclusive holds allocation
 * runs: the devices the job held are its runs, devices.job_id is gone and
 * the rest of the devices rows is kept. Version 29 keeps only live tasks
 * in host_tasks_by_worker. Version 35 starts job_counts and
 * admission_buckets from the jobs already there. A new database has 1 KiB pages, an old one
 * keeps its 4 KiB. Also the store's
 * write transactions: one cannot begin inside another on a connection,
 * and each end (commit, rollback) lets the next begin. */
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

#include "store.h"
#include "support_store.h"

extern const char *const store_migrations[];
extern const int store_migration_count;

#define OLD_VERSION 16

static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}};

static const char old_doc[] =
    "{\"name\": \"kept\", \"slices\": {\"s\": {\"shape\": [2]}}, \"computations\": [{\"name\":"
    " \"a\", \"slice\": \"s\", \"ops\": [{\"op\": \"iota\", \"out\": \"v\", \"shape\": [4]}],"
    " \"outputs\": [\"v\"]}]}";

typedef struct fixture {
    support_store_t d;          /* first: support_store_teardown */
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(support_store_make(&f->d), 0);
    *state = f;
    return 0;
}


static const char old_payload[] =
    "{\"job\":1,\"comp\":0,\"shards\":[0,1],\"devices\":[2,3]}";

/* A database as atolld left it at schema OLD_VERSION, holding one queued
 * job with its document in the jobs row, and a host task of it with its
 * payload in the host_tasks row. Returns the job's id. */
static int64_t make_old_db(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_true(store_migration_count > OLD_VERSION);
    for (int v = 0; v < OLD_VERSION; v++)
        assert_int_equal(sqlite3_exec(db, store_migrations[v], NULL, NULL, NULL), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
        "INSERT INTO jobs(name, state, priority, max_retries, doc, comps_total, created_at)"
        " VALUES ('kept', 'queued', 0, 0, ?, 1, 1)", -1, &s, NULL), SQLITE_OK);
    sqlite3_bind_text(s, 1, old_doc, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(s), SQLITE_DONE);
    sqlite3_finalize(s);
    int64_t id = sqlite3_last_insert_rowid(db);
    assert_int_equal(sqlite3_prepare_v2(db,
        "INSERT INTO host_tasks(id, job_id, attempt, comp_idx, island_id, worker_id, seq, shards,"
        " nshards, state, payload) VALUES (7, ?, 0, 0, 1, 1, 1, '[0,1]', 2, 'succeeded', ?)",
        -1, &s, NULL), SQLITE_OK);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_text(s, 2, old_payload, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(s), SQLITE_DONE);
    sqlite3_finalize(s);
    /* Island west as atolld made it, the job holding devices 2 and 3
     * (devices.job_id, until version 28), device 1 with busy time. */
    char devs[512];
    snprintf(devs, sizeof devs,
             "INSERT INTO islands(id, name, shape) VALUES (1, 'west', '[2,2]');"
             "INSERT INTO devices(island_id, idx, coords, job_id, busy_us) VALUES"
             " (1, 0, '[0,0]', NULL, 0), (1, 1, '[0,1]', NULL, 5),"
             " (1, 2, '[1,0]', %lld, 0), (1, 3, '[1,1]', %lld, 0)", (long long)id, (long long)id);
    assert_int_equal(sqlite3_exec(db, devs, NULL, NULL, NULL), SQLITE_OK);
    char pragma[64];
    snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", OLD_VERSION);
    assert_int_equal(sqlite3_exec(db, pragma, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    return id;
}

static int column_exists(store_t *st, const char *table, const char *col)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM pragma_table_info('%s') WHERE name = ?", table);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(st), sql, -1, &s, NULL), SQLITE_OK);
    sqlite3_bind_text(s, 1, col, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int n = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return n;
}

/* Opens (and migrates) the store at path on `islands`, durability none;
 * this thread's connection. */
static store_t *open_store(const char *path)
{
    err_t e = {0};
    store_sync_setup(path, STORE_DURABLE_NONE);
    assert_int_equal(store_global_init(path, islands, 1, &e), 0);
    store_t *st = store_thread();
    assert_non_null(st);
    return st;
}

static void test_old_job_keeps_its_document(void **state)
{
    fixture_t *f = *state;
    int64_t id = make_old_db(f->d.db);
    store_t *st = open_store(f->d.db);
    json_t *want = json_loads(old_doc, 0, NULL);
    json_t *doc = store_sched_job_doc(st, id);
    assert_non_null(want);
    assert_non_null(doc);
    assert_true(json_equal(doc, want));
    json_t *job = store_job_json(st, id);
    assert_non_null(job);
    assert_true(json_equal(json_object_get(job, "document"), want));
    assert_string_equal(json_string_value(json_object_get(job, "state")), "queued");
    assert_int_equal(column_exists(st, "jobs", "doc"), 0);
    assert_int_equal(column_exists(st, "job_docs", "doc"), 1);
    assert_int_equal(column_exists(st, "host_tasks", "payload"), 0);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(st),
        "SELECT t.devices, p.payload FROM host_tasks t JOIN comp_payloads p"
        " ON p.job_id = t.job_id AND p.attempt = t.attempt AND p.comp_idx = t.comp_idx"
        " WHERE t.id = 7", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "[2,3]");
    /* Version 21: the computation's shared text, without the task's own
     * shards and devices (those stay in the row). */
    assert_string_equal((const char *)sqlite3_column_text(s, 1), "{\"job\":1,\"comp\":0}");
    sqlite3_finalize(s);
    /* Version 25 rebuilt host_tasks: the row is there as it was, and its
     * state is still checked. */
    assert_int_equal(sqlite3_prepare_v2(store_db(st),
        "SELECT job_id, seq, shards, nshards, state FROM host_tasks WHERE id = 7", -1, &s, NULL),
        SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int64(s, 0), id);
    assert_int_equal(sqlite3_column_int(s, 1), 1);
    assert_string_equal((const char *)sqlite3_column_text(s, 2), "[0,1]");
    assert_int_equal(sqlite3_column_int(s, 3), 2);
    assert_string_equal((const char *)sqlite3_column_text(s, 4), "succeeded");
    sqlite3_finalize(s);
    assert_int_equal(sqlite3_exec(store_db(st), "UPDATE host_tasks SET state = 'leased' WHERE id = 7",
                                  NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(store_db(st), "UPDATE host_tasks SET state = 'lost' WHERE id = 7",
                                  NULL, NULL, NULL), SQLITE_CONSTRAINT);
    /* Version 28: the devices it held are allocation runs (one per device
     * as migrated), devices.job_id is gone, and the rest of each device
     * row is kept. */
    assert_int_equal(column_exists(st, "devices", "job_id"), 0);
    assert_int_equal(sqlite3_prepare_v2(store_db(st),
        "SELECT group_concat(lo || '-' || hi || ':' || job_id, ' ') FROM"
        " (SELECT * FROM allocations ORDER BY lo)", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    char want_runs[64];
    snprintf(want_runs, sizeof want_runs, "2-2:%lld 3-3:%lld", (long long)id, (long long)id);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), want_runs);
    sqlite3_finalize(s);
    assert_int_equal(sqlite3_prepare_v2(store_db(st),
        "SELECT COUNT(*), SUM(busy_us), group_concat(coords, '') FROM"
        " (SELECT * FROM devices ORDER BY idx)", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), 4);
    assert_int_equal(sqlite3_column_int(s, 1), 5);
    assert_string_equal((const char *)sqlite3_column_text(s, 2), "[0,0][0,1][1,0][1,1]");
    sqlite3_finalize(s);
    /* Version 29: the by-worker index holds live tasks only: the old
     * task, leased again above, is found through it; succeeded, it is
     * not in it. */
    const char *live_sql = "SELECT COUNT(*) FROM host_tasks INDEXED BY host_tasks_by_worker"
                           " WHERE worker_id = 1 AND state = 'leased'";
    for (int k = 0; k < 2; k++) {
        if (k == 1)
            assert_int_equal(sqlite3_exec(store_db(st), "UPDATE host_tasks SET state ="
                                          " 'succeeded' WHERE id = 7", NULL, NULL, NULL),
                             SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(store_db(st), live_sql, -1, &s, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(s), SQLITE_ROW);
        assert_int_equal(sqlite3_column_int(s, 0), 1 - k);
        sqlite3_finalize(s);
    }
    assert_int_equal(sqlite3_prepare_v2(store_db(st), "SELECT sql FROM sqlite_master"
                                        " WHERE name = 'host_tasks_by_worker'", -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_non_null(strstr((const char *)sqlite3_column_text(s, 0),
                           "WHERE state = 'leased' OR state = 'blocked'"));
    sqlite3_finalize(s);
    json_decref(job);
    json_decref(doc);
    json_decref(want);
}

/* Adds to the old database at path a succeeded job whose computation "a"
 * has output v on 2 shards in old per-shard rows: shard 0 with values
 * 1.5, -2, 0.1 (f32), shard 1 without values and with a null sum, and
 * shard 0 of output w. Returns the job's id. */
static int64_t add_old_outputs(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
        "INSERT INTO jobs(name, state, priority, max_retries, doc, comps_total, created_at)"
        " VALUES ('done', 'succeeded', 0, 0, '{}', 1, 1)", NULL, NULL, NULL), SQLITE_OK);
    int64_t id = sqlite3_last_insert_rowid(db);
    char sql[256];
    snprintf(sql, sizeof sql, "INSERT INTO computations(job_id, idx, name, slice, state,"
             " shards_total) VALUES (%lld, 0, 'a', 's', 'succeeded', 2)", (long long)id);
    assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    static const float vals[3] = {1.5f, -2.0f, 0.1f};
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
        "INSERT INTO outputs(job_id, comp_idx, value, shard, shape, sum, vals)"
        " VALUES (?1, 0, ?2, ?3, ?4, ?5, ?6)", -1, &s, NULL), SQLITE_OK);
    for (int row = 0; row < 3; row++) {
        sqlite3_bind_int64(s, 1, id);
        sqlite3_bind_text(s, 2, row < 2 ? "v" : "w", -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 3, row == 1);
        sqlite3_bind_text(s, 4, "[3]", -1, SQLITE_STATIC);
        if (row != 1)
            sqlite3_bind_double(s, 5, 0.1 + 0.2);
        if (row != 1)
            sqlite3_bind_blob(s, 6, vals, sizeof vals, SQLITE_STATIC);
        assert_int_equal(sqlite3_step(s), SQLITE_DONE);
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
    }
    sqlite3_finalize(s);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    return id;
}

/* An old database with add_old_outputs' job, migrated and opened: the
 * store of this thread, the job's id in *id. */
static store_t *migrated_with_outputs(fixture_t *f, int64_t *id)
{
    make_old_db(f->d.db);
    *id = add_old_outputs(f->d.db);
    store_t *st = open_store(f->d.db);
    return st;
}

static void test_old_outputs_answer_the_same(void **state)
{
    int64_t id;
    store_t *st = migrated_with_outputs(*state, &id);
    json_t *res = NULL;
    char state_out[16];
    assert_int_equal(store_job_result(st, id, 4096, &res, state_out), STORE_OK);
    json_t *want = json_pack("{s:I, s:{s:[{s:i, s:[i], s:f, s:[f,f,f]}, {s:i, s:[i], s:n}],"
                             " s:[{s:i, s:[i], s:f, s:[f,f,f]}]}}", "id", (json_int_t)id,
                             "outputs", "a.v", "shard", 0, "shape", 3, "sum", 0.1 + 0.2,
                             "values", 1.5, -2.0, (double)0.1f, "shard", 1, "shape", 3, "sum",
                             "a.w", "shard", 0, "shape", 3, "sum", 0.1 + 0.2, "values", 1.5,
                             -2.0, (double)0.1f);
    assert_non_null(want);
    if (!json_equal(res, want)) {
        char *got = json_dumps(res, JSON_COMPACT | JSON_SORT_KEYS);
        fprintf(stderr, "got %s\n", got ? got : "?");
        free(got);
    }
    assert_true(json_equal(res, want));
    json_decref(want);
    json_decref(res);
}

static void test_interleaved_rows_in_shard_order(void **state)
{
    int64_t id;
    store_t *st = migrated_with_outputs(*state, &id);
    /* Output u of two host tasks: shards 0 and 2, then 1 and 3. */
    char sql[512];
    snprintf(sql, sizeof sql, "INSERT INTO outputs(job_id, comp_idx, value, shard0, meta, vals)"
             " VALUES (%lld, 0, 'u', 0, '[[0,[],0,0],[2,[],2,0]]', NULL),"
             " (%lld, 0, 'u', 1, '[[1,[],1,0],[3,[],3,0]]', NULL)", (long long)id,
             (long long)id);
    assert_int_equal(sqlite3_exec(store_db(st), sql, NULL, NULL, NULL), SQLITE_OK);
    json_t *res = NULL;
    char state_out[16];
    assert_int_equal(store_job_result(st, id, 4096, &res, state_out), STORE_OK);
    json_t *u = json_object_get(json_object_get(res, "outputs"), "a.u");
    assert_int_equal(json_array_size(u), 4);
    for (int k = 0; k < 4; k++) {
        json_t *t = json_array_get(u, (size_t)k);
        assert_int_equal(json_integer_value(json_object_get(t, "shard")), k);
        assert_true(json_number_value(json_object_get(t, "sum")) == k);
    }
    json_decref(res);
}

/* Version 33 rebuilt jobs (its state check as comparisons) with foreign
 * keys off: the old job keeps its fields and id, rows that reference it
 * still do, its state is still checked, the new CHECK has no IN list, and
 * the connection has its foreign keys on again. */
static void test_jobs_rebuilt_with_foreign_keys_off(void **state)
{
    fixture_t *f = *state;
    int64_t id = make_old_db(f->d.db);
    store_t *st = open_store(f->d.db);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM jobs WHERE id = %lld AND name = 'kept'"
             " AND state = 'queued' AND comps_total = 1 AND created_at = 1", (long long)id);
    assert_int_equal(support_store_int(st, sql), 1);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM host_tasks t JOIN jobs j ON j.id = t.job_id"
             " WHERE t.id = 7 AND j.id = %lld", (long long)id);
    assert_int_equal(support_store_int(st, sql), 1);
    assert_int_equal(support_store_int(st, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    assert_int_equal(support_store_int(st, "PRAGMA foreign_keys"), 1);
    assert_int_equal(support_store_int(st, "SELECT count(*) FROM sqlite_schema WHERE name ="
                                           " 'jobs' AND sql LIKE '%state IN%'"), 0);
    assert_int_equal(support_store_int(st, "SELECT count(*) FROM sqlite_schema WHERE type ="
                                           " 'index' AND tbl_name = 'jobs'"), 7);
    assert_int_equal(sqlite3_exec(store_db(st), "UPDATE jobs SET state = 'running'", NULL, NULL,
                                  NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(store_db(st), "UPDATE jobs SET state = 'lost'", NULL, NULL,
                                  NULL), SQLITE_CONSTRAINT);
    /* Foreign keys are on again: a row naming no job is refused. */
    assert_int_equal(sqlite3_exec(store_db(st), "INSERT INTO job_docs(job_id, doc)"
                                  " VALUES (999, '{}')", NULL, NULL, NULL), SQLITE_CONSTRAINT);
}

/* Version 35 counts ended jobs in job_counts and allocated ones by their
 * admission latency in admission_buckets: a database of version 34 starts
 * both from the jobs it holds. */
static void test_job_counts_seeded(void **state)
{
    fixture_t *f = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->d.db, &db), SQLITE_OK);
    assert_true(store_migration_count >= 35);
    for (int v = 0; v < 34; v++)
        assert_int_equal(sqlite3_exec(db, store_migrations[v], NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
        "INSERT INTO jobs (name, state, priority, max_retries, comps_total, created_at,"
        " allocated_at) VALUES ('a', 'succeeded', 0, 0, 1, 1, 501),"
        " ('b', 'succeeded', 0, 0, 1, 1, 7001), ('c', 'failed', 0, 0, 1, 1, NULL),"
        " ('d', 'running', 0, 0, 1, 1, 400000001), ('e', 'queued', 0, 0, 1, 1, NULL),"
        " ('f', 'running', 0, 0, 1, 1, 5001);"
        " PRAGMA user_version = 34", NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    store_t *st = open_store(f->d.db);
    int64_t c[STORE_JOB_NSTATES];
    assert_int_equal(store_job_counts(st, c), 0);
    static const int64_t want[STORE_JOB_NSTATES] = {1, 0, 2, 2, 1, 0};
    for (int i = 0; i < STORE_JOB_NSTATES; i++)
        if (c[i] != want[i])
            fail_msg("%s: %lld, not %lld", store_job_states[i], (long long)c[i],
                     (long long)want[i]);
    /* The admission histogram too: bucket:jobs:latency sum, bounds 1 ms,
     * 5 ms (inclusive), 10 ms, ..., +Inf. */
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(st), "SELECT group_concat(bucket || ':' || n"
                                        " || ':' || sum_us, ' ') FROM (SELECT * FROM"
                                        " admission_buckets WHERE n > 0 ORDER BY bucket)", -1,
                                        &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0),
                        "0:1:500 1:1:5000 2:1:7000 11:1:400000000");
    sqlite3_finalize(s);
}

/* A rebuild that foreign_key_check would find a dangling row after (here
 * one the old database already had, written with foreign keys off) is
 * rolled back: the database stays at the version before, whole. */
static void test_dangling_row_refuses_the_rebuild(void **state)
{
    fixture_t *f = *state;
    make_old_db(f->d.db);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->d.db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA foreign_keys=OFF; INSERT INTO slices(job_id, name,"
                                  " island_id, shape, devices) VALUES (999, 's', 1, '[1]', '[0]')",
                                  NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
    err_t e = {0};
    store_sync_setup(f->d.db, STORE_DURABLE_NONE);
    assert_int_equal(store_global_init(f->d.db, islands, 1, &e), -1);
    assert_non_null(strstr(e.detail, "migration 33 failed"));
    store_thread_close();
    assert_int_equal(sqlite3_open(f->d.db, &db), SQLITE_OK);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(s, 0), 32);
    sqlite3_finalize(s);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT sql FROM sqlite_schema WHERE name = 'jobs'",
                                        -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_non_null(strstr((const char *)sqlite3_column_text(s, 0), "state IN"));
    sqlite3_finalize(s);
    assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void test_write_transactions_take_turns(void **state)
{
    fixture_t *f = *state;
    store_t *st = open_store(f->d.db);
    assert_int_equal(store_begin(st), 0);
    assert_int_equal(store_begin(st), -1);      /* inside the first: refused */
    assert_int_equal(store_commit(st), 0);      /* the first still commits */
    assert_int_equal(store_begin(st), 0);       /* the commit let it go */
    store_rollback(st);
    assert_int_equal(store_begin(st), 0);       /* and so did the rollback */
    assert_int_equal(store_commit(st), 0);
}

/* A new database is made with 1 KiB pages (store.c: STORE_PAGE_SIZE,
 * each commit writes a quarter of the bytes); one made earlier keeps the
 * 4 KiB pages it has, and opens and migrates as before. */
static void test_page_size_new_and_old(void **state)
{
    fixture_t *f = *state;
    store_t *st = open_store(f->d.db);
    assert_int_equal(support_store_int(st, "PRAGMA page_size"), 1024);
    store_thread_close();
    char old[160];
    snprintf(old, sizeof old, "%s/old.db", f->d.dir);
    make_old_db(old);
    st = open_store(old);
    assert_int_equal(support_store_int(st, "PRAGMA page_size"), 4096);
    assert_int_equal(support_store_int(st, "SELECT count(*) FROM jobs"), 1);
    store_thread_close();
    static const char *const sfx[] = {"", "-wal"};
    for (int i = 0; i < 2; i++) {
        char path[176];
        snprintf(path, sizeof path, "%s%s", old, sfx[i]);
        unlink(path);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_old_job_keeps_its_document, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_old_outputs_answer_the_same, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_interleaved_rows_in_shard_order, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_job_counts_seeded, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_jobs_rebuilt_with_foreign_keys_off, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_dangling_row_refuses_the_rebuild, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_write_transactions_take_turns, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_page_size_new_and_old, setup,
                                        support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
