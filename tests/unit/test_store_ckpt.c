/* test_store_ckpt.c - WAL checkpoints off the writers' path (store_ckpt.c),
 * on a real SQLite file: commits that take the WAL far past SQLite's
 * auto-checkpoint threshold do not checkpoint (the -wal file keeps every
 * frame while no checkpointer runs); once the checkpointer thread runs,
 * the next commit past the threshold has it copy the frames into the
 * database, and the data stays whole. A WAL past STORE_CKPT_FORCE_PAGES
 * starts over even when a reader of the old one kept it from doing so
 * by itself, and a -wal file a spike grew past STORE_WAL_KEEP_BYTES is
 * cut back when it starts over. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
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

/* A fresh store in d with the table the tests fill; its connection (this
 * thread's). */
static sqlite3 *ckpt_store(support_store_t *d)
{
    static const island_desc_t islands[] = {{"west", {1, {2, 0, 0, 0}}}};
    sqlite3 *db = store_db(support_store_open(d, islands, 1));
    exec_ok(db, "CREATE TABLE ckpt_t (k INTEGER PRIMARY KEY, v BLOB)");
    return db;
}

static void test_checkpoints_off_the_commit_path(void **state)
{
    (void)state;
    support_store_t d;
    sqlite3 *db = ckpt_store(&d);
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

    /* The frames were copied: the WAL grows by no more than the next
     * commit (rounded up to the step it grows by, store_vfs.c). */
    write_rows(db, ROWS_PER_TXN, &next);
    long long most = before + page * (ROWS_PER_TXN + 8);
    assert_true(wal_bytes(&d) <= (most + STORE_WAL_STEP - 1) / STORE_WAL_STEP * STORE_WAL_STEP);
    assert_int_equal(count_rows(db), next - 1);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "ok");
    sqlite3_finalize(s);
    support_store_remove(d.dir);
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
    support_store_t d;
    sqlite3 *db = ckpt_store(&d), *rd = NULL;
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
    support_store_remove(d.dir);
}

/* The checkpoint's connection waits here while a RESTART checkpoint waits
 * for a reader of the old WAL: the test is told, and it ends that reader. */
typedef struct ckpt_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting, done;          /* guarded by mu */
    sqlite3 *db;
} ckpt_wait_t;

static int ckpt_busy(void *arg, int tries)
{
    ckpt_wait_t *w = arg;
    pthread_mutex_lock(&w->mu);
    w->waiting = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (tries > 20000)
        return 0;               /* ~20 s: give up (the test then fails) */
    sleep_ms(1);
    return 1;
}

static void *ckpt_run(void *arg)
{
    ckpt_wait_t *w = arg;
    store_ckpt_once(w->db);
    pthread_mutex_lock(&w->mu);
    w->done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Frames in the WAL now (a passive checkpoint's count; it copies nothing
 * new here: nothing was written since the last). */
static int wal_frames(sqlite3 *db)
{
    int log = -1, done = -1;
    assert_int_equal(sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done),
                     SQLITE_OK);
    return log;
}

/* A WAL of STORE_CKPT_FORCE_PAGES frames or more is started over even when
 * the passive checkpoint copied all of it: under steady reads some reader
 * always held a snapshot of the old WAL when a writer began, so the WAL
 * was never started over and grew without end (157 MB after 6,000 tiny
 * jobs). The run now waits (RESTART) for the readers of the old WAL; the
 * next commit then starts it over. A reader that began before the run
 * holds the old WAL: the run must wait for it (told through the busy
 * handler, the test then ends it), and the WAL must start over. */
static void test_full_wal_started_over(void **state)
{
    (void)state;
    support_store_t d;
    sqlite3 *db = ckpt_store(&d), *rd = NULL;
    int64_t next = 1;
    write_rows(db, STORE_CKPT_FORCE_PAGES / 3 + ROWS_PER_TXN, &next);  /* 3500-byte rows */
    assert_int_equal(sqlite3_open_v2(d.db, &rd, SQLITE_OPEN_READWRITE, store_vfs_name()),
                     SQLITE_OK);
    exec_ok(rd, "BEGIN");
    assert_true(count_rows(rd) == next - 1);        /* rd holds the old WAL */
    ckpt_wait_t w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL};
    assert_int_equal(sqlite3_open_v2(d.db, &w.db, SQLITE_OPEN_READWRITE, store_vfs_name()),
                     SQLITE_OK);
    count_rows(w.db);           /* opens the WAL (a connection that never read has none) */
    int before = wal_frames(w.db);
    print_message("frames before the run: %d\n", before);
    assert_true(before >= STORE_CKPT_FORCE_PAGES);
    sqlite3_busy_handler(w.db, ckpt_busy, &w);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ckpt_run, &w), 0);
    pthread_mutex_lock(&w.mu);
    while (!w.waiting && !w.done)
        pthread_cond_wait(&w.cv, &w.mu);
    int waited = w.waiting;
    pthread_mutex_unlock(&w.mu);
    if (waited)
        exec_ok(rd, "COMMIT");  /* the run waits for rd: let it finish */
    pthread_join(t, NULL);
    write_rows(db, 1, &next);   /* the next writer starts the WAL over */
    int frames = wal_frames(w.db);
    if (!waited)
        exec_ok(rd, "COMMIT");
    sqlite3_close(rd);
    sqlite3_close(w.db);
    assert_int_equal(count_rows(db), next - 1);
    support_store_remove(d.dir);
    print_message("the run waited for the old reader: %d; frames after the next commit: %d\n",
                  waited, frames);
    assert_true(waited);
    assert_true(frames < STORE_CKPT_PAGES);
}

/* A WAL that a spike took past STORE_WAL_KEEP_BYTES: once a checkpoint
 * copied it all, the next writer starts it over and the file is cut back
 * to that size (journal_size_limit); without it the file would keep its
 * high-water mark for good. No thread: the test runs the checkpoint. */
static void test_wal_file_cut_back(void **state)
{
    (void)state;
    support_store_t d;
    sqlite3 *db = ckpt_store(&d);
    int64_t next = 1;
    while (wal_bytes(&d) <= STORE_WAL_KEEP_BYTES)
        write_rows(db, 10 * ROWS_PER_TXN, &next);
    long long spike = wal_bytes(&d);
    store_ckpt_once(db);
    write_rows(db, 1, &next);   /* starts the WAL over */
    long long after = wal_bytes(&d);
    print_message("-wal: %lld bytes after the spike, %lld after the restart\n", spike, after);
    assert_true(after <= STORE_WAL_KEEP_BYTES);
    assert_int_equal(count_rows(db), next - 1);
    support_store_remove(d.dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checkpoints_off_the_commit_path),
        cmocka_unit_test(test_kicks_count_new_frames),
        cmocka_unit_test(test_full_wal_started_over),
        cmocka_unit_test(test_wal_file_cut_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
