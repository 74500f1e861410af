/* test_store_backup.c - online backups (store_backup.c) on a real store:
 * the copy is a whole, intact database that any SQLite opens, holding
 * every job committed before it and read from the descriptor alone (the
 * file beside the database is gone once it is open); one copy at a time
 * (a second asked for while one is being written is refused, and the
 * next after it works); a copy left behind by a stop halfway is removed
 * when the store opens again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support_store.h"

static const island_desc_t isl[] = {{"west", {1, {4, 0, 0, 0}}}};

typedef struct fixture {
    support_store_t d;          /* first: support_store_teardown */
    store_t *st;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->st = support_store_open(&f->d, isl, 1);
    *state = f;
    return 0;
}

/* Copies what fd holds (from offset 0) into a new file at path. */
static void save_fd(int fd, uint64_t size, const char *path)
{
    int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(out >= 0);
    char buf[65536];
    uint64_t done = 0;
    ssize_t n;
    while ((n = pread(fd, buf, sizeof buf, (off_t)done)) > 0) {
        assert_int_equal(write(out, buf, (size_t)n), n);
        done += (uint64_t)n;
    }
    close(out);
    assert_int_equal(done, size);
}

/* One integer from sql on the plain (not Atoll's) SQLite of a file. */
static long long file_int(const char *path, const char *sql, char *text, size_t cap)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    long long v = sqlite3_column_int64(s, 0);
    if (text)
        snprintf(text, cap, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static void test_copy_is_whole_and_intact(void **state)
{
    fixture_t *f = *state;
    int64_t last = 0;
    for (int i = 0; i < 5; i++)
        last = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, isl, 1);
    int fd = -1;
    uint64_t size = 0;
    char why[256] = "";
    assert_int_equal(store_backup(f->st, &fd, &size, why, sizeof why), STORE_OK);
    assert_true(fd >= 0 && size > 0);
    char beside[160], copy[160], text[64];
    snprintf(beside, sizeof beside, "%s-backup.tmp", f->d.db);
    assert_int_equal(access(beside, F_OK), -1);   /* unlinked: only fd holds it */
    snprintf(copy, sizeof copy, "%s/copy.db", f->d.dir);
    save_fd(fd, size, copy);
    close(fd);
    file_int(copy, "PRAGMA integrity_check", text, sizeof text);
    assert_string_equal(text, "ok");
    assert_int_equal(file_int(copy, "SELECT count(*) FROM jobs", NULL, 0), 5);
    assert_int_equal(file_int(copy, "SELECT max(id) FROM jobs", NULL, 0), last);
    assert_int_equal(file_int(copy, "SELECT count(*) FROM islands WHERE name = 'west'", NULL, 0),
                     1);
    unlink(copy);
}

/* Called by SQLite every few hundred instructions of the copy being
 * written: asks for a second copy meanwhile, on the same connection (the
 * refusal must come before anything touches the database). */
typedef struct second_try {
    store_t *st;
    int tries, refused, other;
} second_try_t;

static int try_second(void *arg)
{
    second_try_t *t = arg;
    int fd = -1;
    uint64_t size = 0;
    char why[64];
    int rc = store_backup(t->st, &fd, &size, why, sizeof why);
    t->tries++;
    if (rc == STORE_CONFLICT)
        t->refused++;
    else
        t->other++;
    if (fd >= 0)
        close(fd);
    return 0;
}

static void test_one_copy_at_a_time(void **state)
{
    fixture_t *f = *state;
    support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, isl, 1);
    second_try_t t = {f->st, 0, 0, 0};
    sqlite3_progress_handler(store_db(f->st), 200, try_second, &t);
    int fd = -1;
    uint64_t size = 0;
    char why[256] = "";
    int rc = store_backup(f->st, &fd, &size, why, sizeof why);
    sqlite3_progress_handler(store_db(f->st), 0, NULL, NULL);
    assert_int_equal(rc, STORE_OK);
    close(fd);
    print_message("a second copy asked for %d times while one was written\n", t.tries);
    assert_true(t.tries > 0);
    assert_int_equal(t.refused, t.tries);
    assert_int_equal(t.other, 0);
    fd = -1;                     /* and the next one, after it, is made */
    assert_int_equal(store_backup(f->st, &fd, &size, why, sizeof why), STORE_OK);
    close(fd);
}

static void test_leftover_removed_at_open(void **state)
{
    fixture_t *f = *state;
    char beside[160];
    snprintf(beside, sizeof beside, "%s-backup.tmp", f->d.db);
    FILE *left = fopen(beside, "w");
    assert_non_null(left);
    fputs("half a copy", left);
    fclose(left);
    store_thread_close();
    err_t e = {0};
    assert_int_equal(store_global_init(f->d.db, isl, 1, &e), 0);
    f->st = store_thread();
    assert_non_null(f->st);
    assert_int_equal(access(beside, F_OK), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_copy_is_whole_and_intact, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_one_copy_at_a_time, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_leftover_removed_at_open, setup,
                                        support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
