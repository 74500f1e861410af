/* test_store_ckpt.c - WAL checkpoints off the writers' path (store_ckpt.c),
 * on a real SQLite file: commits that take the WAL far past SQLite's
 * auto-checkpoint threshold do not checkpoint (the -wal file keeps every
 * frame while no checkpointer runs); once the checkpointer thread runs,
 * the next commit past the threshold has it copy the frames into the
 * database, and the data stays whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "store_internal.h"
#include "support_store.h"

/* Rows of a bit under one page each, so a row costs a WAL frame or so. */
#define ROW_BYTES 3500
#define ROWS_PER_TXN 50

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err ? err : "?");
}

/* Commits `rows` rows in transactions of ROWS_PER_TXN, keys from *next. */
static void write_rows(sqlite3 *db, int rows, int64_t *next)
{
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO ckpt_t (k, v) VALUES (?1, zeroblob(?2))",
                                        -1, &s, NULL),
                     SQLITE_OK);
    for (int done = 0; done < rows;) {
        exec_ok(db, "BEGIN IMMEDIATE");
        for (int i = 0; i < ROWS_PER_TXN && done < rows; i++, done++) {
            sqlite3_bind_int64(s, 1, (*next)++);
            sqlite3_bind_int(s, 2, ROW_BYTES);
            assert_int_equal(sqlite3_step(s), SQLITE_DONE);
            sqlite3_reset(s);
        }
        exec_ok(db, "COMMIT");
    }
    sqlite3_finalize(s);
}

static long long wal_bytes(const support_store_t *d)
{
    char path[128];
    struct stat sb;
    snprintf(path, sizeof path, "%s-wal", d->db);
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

static long long count_rows(sqlite3 *db)
{
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM ckpt_t", -1, &s, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    long long n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return n;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_checkpoints_off_the_commit_path(void **state)
{
    (void)state;
    static const island_desc_t islands[] = {{"west", {1, {2, 0, 0, 0}}}};
    support_store_t d;
    store_t *st = support_store_open(&d, islands, 1);
    sqlite3 *db = store_db(st);
    exec_ok(db, "CREATE TABLE ckpt_t (k INTEGER PRIMARY KEY, v BLOB)");
    int64_t next = 1;
    uint64_t runs, frames, forced, kicks;

    /* Three thresholds' worth of pages, no checkpointer: had a commit
     * checkpointed (SQLite's default hook), the WAL would have started
     * over and the file would hold about one threshold. */
    write_rows(db, 3 * STORE_CKPT_PAGES, &next);
    long long page = 4096, before = wal_bytes(&d);
    assert_true(before >= (long long)(5 * STORE_CKPT_PAGES / 2) * page);
    store_ckpt_counts(&runs, &frames, &forced, &kicks);
    assert_int_equal(runs, 0);

    /* The thread runs: the next commit past the threshold asks it, and it
     * copies the WAL into the database (passive: no writer waited). */
    assert_int_equal(store_ckpt_start(), 0);
    write_rows(db, ROWS_PER_TXN, &next);
    for (int waited = 0; waited < 30000; waited += 10) {
        store_ckpt_counts(&runs, &frames, &forced, &kicks);
        if (frames >= 3 * STORE_CKPT_PAGES)
            break;
        sleep_ms(10);
    }
    assert_true(frames >= 3 * STORE_CKPT_PAGES);
    assert_int_equal(forced, 0);
    store_ckpt_stop();

    /* Every frame was copied: the next commit starts the WAL over, so the
     * file does not grow past what it was. */
    write_rows(db, ROWS_PER_TXN, &next);
    assert_true(wal_bytes(&d) <= before + page * (ROWS_PER_TXN + 8));
    assert_int_equal(count_rows(db), next - 1);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "ok");
    sqlite3_finalize(s);
    store_thread_close();
}

static uint64_t kicks_now(void)
{
    uint64_t runs, frames, forced, kicks;
    store_ckpt_counts(&runs, &frames, &forced, &kicks);
    return kicks;
}

/* A checkpoint that copied every frame does not start the WAL over: the
 * next writer does, only when no reader holds a snapshot of the old one.
 * Commits after it ask for the next checkpoint only once the WAL gained
 * STORE_CKPT_PAGES more frames (it used to ask at every commit until the
 * WAL started over), and a WAL that did start over counts from zero.
 * No thread here: checkpoints run when the test calls them, so the
 * hook's requests (kicks) are counted exactly. */
static void test_kicks_count_new_frames(void **state)
{
    (void)state;
    static const island_desc_t islands[] = {{"west", {1, {2, 0, 0, 0}}}};
    support_store_t d;
    store_t *st = support_store_open(&d, islands, 1);
    sqlite3 *db = store_db(st), *rd = NULL;
    exec_ok(db, "CREATE TABLE ckpt_t (k INTEGER PRIMARY KEY, v BLOB)");
    store_ckpt_once(db);            /* a clean start: nothing asked */
    int64_t next = 1;

    uint64_t k0 = kicks_now();
    write_rows(db, STORE_CKPT_PAGES + ROWS_PER_TXN, &next);
    assert_int_equal(kicks_now(), k0 + 1);

    /* A reader on the current snapshot; then a checkpoint copies it all. */
    assert_int_equal(sqlite3_open_v2(d.db, &rd, SQLITE_OPEN_READWRITE, store_vfs_name()),
                     SQLITE_OK);     /* the store's VFS: its WAL index is in this process */
    exec_ok(rd, "BEGIN");
    assert_true(count_rows(rd) == next - 1);
    store_ckpt_once(db);
    long long held = wal_bytes(&d);

    /* The reader keeps the WAL from starting over: it grows, and these
     * few frames ask for nothing. */
    write_rows(db, 4 * ROWS_PER_TXN, &next);
    assert_true(wal_bytes(&d) > held);
    assert_int_equal(kicks_now(), k0 + 1);

    /* Reader gone, everything copied: the next commit starts the WAL over
     * (the file stops growing), and STORE_CKPT_PAGES frames of the new
     * WAL ask again, though the old one had more than that. */
    exec_ok(rd, "COMMIT");
    store_ckpt_once(db);
    long long full = wal_bytes(&d);
    write_rows(db, ROWS_PER_TXN, &next);
    assert_true(wal_bytes(&d) <= full);
    assert_int_equal(kicks_now(), k0 + 1);
    write_rows(db, STORE_CKPT_PAGES, &next);
    assert_int_equal(kicks_now(), k0 + 2);

    assert_int_equal(count_rows(db), next - 1);
    sqlite3_close(rd);
    store_thread_close();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoints_off_the_commit_path),
        cmocka_unit_test(test_kicks_count_new_frames),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
