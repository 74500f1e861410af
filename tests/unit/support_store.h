/* support_store.h - the store unit tests' database directory: made by
 * mkdtemp, holding atoll.db (and SQLite's -wal beside it), and
 * what they do to it as the API would. Include after <cmocka.h>. */
#ifndef SUPPORT_STORE_H
#define SUPPORT_STORE_H

#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "compiler.h"
#include "store.h"

/* A fresh directory /tmp/atoll-store-XXXXXX and the database path in it. */
typedef struct support_store {
    char dir[64];
    char db[96];
} support_store_t;

/* Makes the directory. Returns 0 or -1. */
static inline int support_store_make(support_store_t *d)
{
    snprintf(d->dir, sizeof d->dir, "/tmp/atoll-store-XXXXXX");
    if (!mkdtemp(d->dir))
        return -1;
    snprintf(d->db, sizeof d->db, "%s/atoll.db", d->dir);
    return 0;
}

/* A one-computation job on a 2-shard slice of the first island. */
#define SUPPORT_STORE_JOB_DOC                                                               \
    "{\"slices\": {\"s\": {\"shape\": [2]}}, \"computations\": [{\"name\": \"a\", \"slice\": \"s\"," \
    " \"ops\": [{\"op\": \"iota\", \"out\": \"v\", \"shape\": [4]}], \"outputs\": [\"v\"]}]}"

/* Makes d, opens a store there on islands[0..n) (durability none) and
 * returns this thread's connection. */
static inline store_t *support_store_open(support_store_t *d, const island_desc_t *islands, int n)
{
    assert_int_equal(support_store_make(d), 0);
    err_t e = {0};
    store_sync_setup(d->db, STORE_DURABLE_NONE);
    assert_int_equal(store_global_init(d->db, islands, n, &e), 0);
    store_t *st = store_thread();
    assert_non_null(st);
    return st;
}

/* Runs sql (no parameters) in one write transaction, committed, as
 * atolld's writers do (store_begin/store_commit: the watches and the
 * device log see it). */
static inline void support_store_write(store_t *st, const char *sql)
{
    assert_int_equal(store_begin(st), 0);
    char *err = NULL;
    if (sqlite3_exec(store_db(st), sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err ? err : "?");
    assert_int_equal(store_commit(st), 0);
}

/* One integer from a one-row, one-column query on st's connection. */
static inline int64_t support_store_int(store_t *st, const char *sql)
{
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(st), sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

/* Submits the job document `doc` as POST /v1/jobs would for tenant
 * (0: none, as admin); its id. */
static inline int support_store_count_vm(void *arg)
{
    (*(long *)arg)++;
    return 0;
}

/* Counts the SQLite VM instructions st runs into *steps (zeroed) until
 * support_store_vm_meter_off: a query's cost, exact and independent of
 * the machine's speed. */
static inline void support_store_vm_meter_on(store_t *st, long *steps)
{
    *steps = 0;
    sqlite3_progress_handler(store_db(st), 1, support_store_count_vm, steps);
}

static inline void support_store_vm_meter_off(store_t *st)
{
    sqlite3_progress_handler(store_db(st), 0, NULL, NULL);
}

static inline int64_t support_store_submit_as(store_t *st, const char *doc,
                                              const island_desc_t *islands, int n,
                                              int64_t tenant)
{
    json_error_t jerr;
    json_t *d = json_loads(doc, 0, &jerr);
    assert_non_null(d);
    job_plan_t *plan = NULL;
    err_t e = {0};
    assert_int_equal(compiler_job(d, islands, n, &plan, &e), 0);
    store_job_new_t nj = {doc, NULL, NULL, tenant, 0};
    int64_t id = 0;
    assert_int_equal(store_job_create(st, plan, &nj, &id), STORE_OK);
    job_plan_free(plan);
    json_decref(d);
    return id;
}

static inline int64_t support_store_submit(store_t *st, const char *doc,
                                           const island_desc_t *islands, int n)
{
    return support_store_submit_as(st, doc, islands, n, 0);
}

/* Registers a sim worker of ndev devices on `island` with data address
 * addr; its id. */
static inline int64_t support_store_register(store_t *st, const char *island, const char *addr,
                                             int ndev)
{
    worker_reg_t reg = {island, "sim", addr, "localhost", ndev, 1, "00", NULL};
    json_t *out = NULL;
    assert_int_equal(store_worker_register(st, &reg, 60 * 1000000LL, &out, NULL), STORE_OK);
    int64_t id = json_integer_value(json_object_get(out, "id"));
    json_decref(out);
    assert_true(id > 0);
    return id;
}

/* The fixture of tests on a store with one worker on the first island: the
 * database (first member: support_store_teardown frees it), this thread's
 * connection and the worker's id. */
typedef struct support_worker_fixture {
    support_store_t d;
    store_t *st;
    int64_t worker;
} support_worker_fixture_t;

/* Opens a store on islands[0..n) and registers a sim worker of ndev
 * devices (data address 127.0.0.1:1) on islands[0]; calloc'd, caller's
 * (support_store_teardown). */
static inline support_worker_fixture_t *support_worker_fixture(const island_desc_t *islands,
                                                                int n, int ndev)
{
    support_worker_fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->st = support_store_open(&f->d, islands, n);
    f->worker = support_store_register(f->st, islands[0].name, "127.0.0.1:1", ndev);
    return f;
}

/* Closes this thread's connection and the sync thread, then removes the
 * database files and the directory `dir`. */
static inline void support_store_remove(const char *dir)
{
    store_thread_close();
    store_sync_close();
    char path[128];
    static const char *const files[] = {"atoll.db", "atoll.db-wal", "atoll.db-shm"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* cmocka teardown of a fixture (calloc'd, in *state) whose first member
 * is its support_store_t: removes the database and frees the fixture. */
static inline int support_store_teardown(void **state)
{
    support_store_t *d = *state;
    support_store_remove(d->dir);
    free(d);
    return 0;
}

#endif
