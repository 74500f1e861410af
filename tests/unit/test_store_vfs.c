/* test_store_vfs.c - the store's VFS shim (store_vfs.c) on real SQLite
 * files: a commit's WAL frames reach the file in one write call where
 * SQLite alone makes two per page (counted in /proc/self/io's syscw), and
 * gathering changes nothing else: every commit is visible to another
 * connection at once, a transaction larger than the buffer commits whole,
 * a rolled-back one leaves nothing, and the files reopen intact
 * (integrity_check) after the WAL was checkpointed. And one process owns
 * the file: no other can read it or open a store on it meanwhile. Reads
 * of the WAL and of the database file come from their copies in memory
 * (store_filemirror.c), which hold exactly the files' bytes: after
 * commits, checkpoints, a WAL that starts over, truncations, a VACUUM, a
 * budget smaller than the files, and a WAL left by a process that died;
 * a write the disk refused stops the copy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "store_internal.h"
#include "store_filemirror.h"
#include "support_proc.h"
#include "support_store.h"

/* Write system calls of this process so far (/proc/self/io), or -1. */
static long long write_calls(void)
{
    return support_proc_value("/proc/self/io", "syscw: %lld");
}

static sqlite3 *open_db(const char *path, const char *vfs)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                                     vfs),
                     SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                                      " PRAGMA wal_autocheckpoint=0;"
                                      " CREATE TABLE IF NOT EXISTS t (k INTEGER PRIMARY KEY, v BLOB);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    return db;
}

/* Two connections to path through the store's VFS: a writer and a reader. */
static void open_pair(const char *path, sqlite3 **a, sqlite3 **b)
{
    *a = open_db(path, store_vfs_name());
    *b = open_db(path, store_vfs_name());
}

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err ? err : "?");
}

static long long count_rows(sqlite3 *db)
{
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM t", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    long long n = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return n;
}

/* One transaction of n rows of `bytes` random bytes each (a page or so each). */
static void insert_rows(sqlite3 *db, int from, int n, int bytes)
{
    char sql[160];
    exec_ok(db, "BEGIN IMMEDIATE");
    snprintf(sql, sizeof sql, "WITH RECURSIVE c(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM c"
             " WHERE i < %d) INSERT INTO t SELECT i, randomblob(%d) FROM c", from,
             from + n - 1, bytes);
    exec_ok(db, sql);
    exec_ok(db, "COMMIT");
}

/* Write calls of one 20-page commit through vfs (NULL: SQLite's own). */
static long long commit_writes(const char *path, const char *vfs)
{
    sqlite3 *db = open_db(path, vfs);
    insert_rows(db, 1, 1, 10);          /* the WAL exists and has its header */
    long long before = write_calls();
    insert_rows(db, 100, 20, 3000);
    long long n = write_calls() - before;
    sqlite3_close(db);
    return n;
}

static void test_commit_is_one_write(void **state)
{
    support_store_t *d = *state;
    const char *vfs = store_vfs_name();
    assert_non_null(vfs);
    assert_true(write_calls() >= 0);
    char plain[128];
    snprintf(plain, sizeof plain, "%s/plain.db", d->dir);
    long long sqlite_alone = commit_writes(plain, NULL), shim = commit_writes(d->db, vfs);
    print_message("one 20-page commit: %lld write calls by SQLite alone, %lld through %s\n",
                  sqlite_alone, shim, vfs);
    assert_true(sqlite_alone >= 40);    /* a header and a page per frame */
    assert_true(shim <= 2);
    char path[160];
    static const char *const sfx[] = {"", "-wal", "-shm"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s%s", plain, sfx[i]);
        unlink(path);
    }
}

static void test_commits_visible_and_intact(void **state)
{
    support_store_t *d = *state;
    sqlite3 *a, *b;
    open_pair(d->db, &a, &b);
    long long rows = 0;
    for (int i = 0; i < 50; i++) {      /* each commit is seen by the other connection */
        insert_rows(a, (int)rows + 1, 3, 2000);
        rows += 3;
        assert_int_equal(count_rows(b), rows);
    }
    insert_rows(a, (int)rows + 1, 600, 4000);     /* ~2.4 MB: many times the buffer */
    rows += 600;
    assert_int_equal(count_rows(b), rows);
    exec_ok(a, "BEGIN IMMEDIATE");                 /* undone: nothing of it is seen */
    exec_ok(a, "INSERT INTO t SELECT k + 100000, v FROM t");
    exec_ok(a, "ROLLBACK");
    assert_int_equal(count_rows(b), rows);
    insert_rows(b, (int)rows + 1, 2, 100);        /* the other way round too */
    rows += 2;
    assert_int_equal(count_rows(a), rows);
    exec_ok(a, "PRAGMA wal_checkpoint(TRUNCATE)");
    insert_rows(a, (int)rows + 1, 5, 3000);       /* a fresh WAL header, then frames */
    rows += 5;
    sqlite3_close(a);
    sqlite3_close(b);
    sqlite3 *c = open_db(d->db, store_vfs_name());
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(c, "PRAGMA integrity_check", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "ok");
    sqlite3_finalize(s);
    assert_int_equal(count_rows(c), rows);
    sqlite3_close(c);
}

/* Sum of the blobs' lengths, read through db (every page of the table). */
static long long blob_bytes(sqlite3 *db)
{
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v2(db, "SELECT total(length(v)) FROM t", -1, &s, NULL) != SQLITE_OK)
        return -1;
    long long n = sqlite3_step(s) == SQLITE_ROW ? (long long)sqlite3_column_double(s, 0) : -1;
    sqlite3_finalize(s);
    return n;
}

/* Commits of every size from 1 to 60 pages right after a WAL restart, so
 * that one of them has its commit frame's header and page on either side
 * of the buffer's edge (32 header bytes + 30 frames fill it): the page
 * must still leave with the commit, before another connection reads. */
static void test_commit_frame_at_buffer_edge(void **state)
{
    support_store_t *d = *state;
    sqlite3 *a, *b;
    open_pair(d->db, &a, &b);
    long long rows = 0, bytes = 0;
    for (int n = 1; n <= 60; n++) {
        exec_ok(a, "PRAGMA wal_checkpoint(TRUNCATE)");
        insert_rows(a, (int)rows + 1, n, 3000);
        rows += n;
        bytes += (long long)n * 3000;
        assert_int_equal(count_rows(b), rows);
        assert_int_equal(blob_bytes(b), bytes);
    }
    sqlite3_close(a);
    sqlite3_close(b);
}

/* What another process (this program run again: a forked copy would
 * share SQLite's in-memory lock state) gets on `path`: a read by plain
 * SQLite, and whether a store opens there. Its exit code carries both:
 * SQLite's code * 4 + 1 if the store opened, + 2 if it was refused
 * without saying why. */
static int other_process_main(const char *path)
{
    sqlite3 *db = NULL;
    int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(db, "SELECT count(*) FROM t", NULL, NULL, NULL);
    sqlite3_close(db);
    static const island_desc_t isl[] = {{"west", {1, {2, 0, 0, 0}}}};
    err_t e = {0};
    int opened = store_global_init(path, isl, 1, &e) == 0;
    if (!opened && !strstr(e.detail, "in use by another process"))
        opened = 2;
    return (rc & 0xff) * 4 + opened;
}

static int other_process_tries(const char *path)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/proc/self/exe", "test_store_vfs", "--other-process", path, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

/* One process owns the database (the shim wraps "unix-excl"): while this
 * one has it open through the store's VFS, another process can neither
 * read it with plain SQLite nor open a store on it, and is told why; once
 * this one closes it, the other may. */
static void test_one_process_owns_the_file(void **state)
{
    support_store_t *d = *state;
    sqlite3 *a = open_db(d->db, store_vfs_name());
    insert_rows(a, 1, 3, 100);
    int got = other_process_tries(d->db);
    assert_int_equal(got / 4, SQLITE_BUSY);
    assert_int_equal(got % 4, 0);
    sqlite3_close(a);
    got = other_process_tries(d->db);
    assert_int_equal(got / 4, SQLITE_OK);
    assert_int_equal(got % 4, 1);
}

/* The mirror of the file at path holds exactly the file's bytes: the
 * size the file has, and each chunk it holds the same as the file's range
 * (read through fd, kept open by the caller: closing a descriptor of the
 * database would drop this process's lock on it). Returns the bytes held. */
static int64_t mirror_matches(const char *path, int fd)
{
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    int64_t size = -1, held = 0;
    unsigned char *mem = malloc(FILEMIRROR_CHUNK), *disk = malloc(FILEMIRROR_CHUNK);
    assert_true(mem && disk);
    for (int64_t at = 0; at < (int64_t)sb.st_size; at += (int64_t)FILEMIRROR_CHUNK) {
        size_t n = (size_t)((int64_t)sb.st_size - at < (int64_t)FILEMIRROR_CHUNK
                                ? (int64_t)sb.st_size - at : (int64_t)FILEMIRROR_CHUNK);
        int got = filemirror_peek(path, mem, n, at, &size);
        assert_true(got >= 0);
        if (got) {
            assert_int_equal(pread(fd, disk, n, at), (ssize_t)n);
            assert_memory_equal(mem, disk, n);
            held += (int64_t)n;
        }
    }
    assert_true(filemirror_peek(path, mem, 0, 0, &size) >= 0);
    assert_int_equal(size, (int64_t)sb.st_size);
    free(mem);
    free(disk);
    return held;
}

/* mirror_matches for d's WAL. */
static int64_t wal_matches(const support_store_t *d)
{
    char wal[128];
    snprintf(wal, sizeof wal, "%s-wal", d->db);
    int fd = open(wal, O_RDONLY);
    assert_true(fd >= 0);
    int64_t held = mirror_matches(wal, fd);
    close(fd);
    return held;
}

static uint64_t mirror_hits(int wal)
{
    uint64_t mem, file;
    store_file_reads(wal, &mem, &file);
    return mem;
}

/* Another connection's reads of committed frames come from memory, and
 * read what was committed; the copy follows the WAL through a restart
 * from offset 0 and a truncation to nothing. */
static void test_wal_reads_from_memory(void **state)
{
    support_store_t *d = *state;
    sqlite3 *a, *b;
    open_pair(d->db, &a, &b);
    long long rows = 0, bytes = 0;
    for (int i = 0; i < 20; i++) {
        insert_rows(a, (int)rows + 1, 4, 1500);
        rows += 4;
        bytes += 4 * 1500;
        uint64_t before = mirror_hits(1);
        assert_int_equal(blob_bytes(b), bytes);
        assert_true(mirror_hits(1) > before);
    }
    assert_true(wal_matches(d) > 20 * 4 * 1500);
    exec_ok(a, "PRAGMA wal_checkpoint(RESTART)");  /* the next commit starts over at 0 */
    insert_rows(a, (int)rows + 1, 3, 1500);
    rows += 3;
    bytes += 3 * 1500;
    assert_int_equal(blob_bytes(b), bytes);
    wal_matches(d);
    exec_ok(a, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(wal_matches(d), 0);   /* the file is empty: so is the copy */
    insert_rows(a, (int)rows + 1, 2, 1500);
    rows += 2;
    assert_int_equal(count_rows(b), rows);
    assert_true(wal_matches(d) > 2 * 1500);
    sqlite3_close(a);
    sqlite3_close(b);
}

/* Pages of the database file another connection checkpointed come from
 * memory once loaded, and read what was checkpointed; the copy follows
 * the file as checkpoints write into it and as a VACUUM shrinks it (the
 * checkpoint after it truncates the file). */
static void test_db_reads_from_memory(void **state)
{
    support_store_t *d = *state;
    sqlite3 *a, *b;
    open_pair(d->db, &a, &b);
    int fd = open(d->db, O_RDONLY);     /* closed after the connections (see mirror_matches) */
    assert_true(fd >= 0);
    insert_rows(a, 1, 300, 1500);
    exec_ok(a, "PRAGMA wal_checkpoint(TRUNCATE)");      /* every page now in the file */
    /* The checkpoint's writes grew the file by ~450 KB and made no chunks:
     * the copy holds what reads loaded (the first pages), no more. */
    assert_true(filemirror_held(d->db) <= (int64_t)FILEMIRROR_CHUNK);
    assert_int_equal(blob_bytes(b), 300 * 1500);        /* loads the chunks b reads */
    insert_rows(a, 301, 1, 10);          /* b's cache goes: it reads every page again */
    uint64_t before = mirror_hits(0);
    assert_int_equal(blob_bytes(b), 300 * 1500 + 10);
    assert_true(mirror_hits(0) >= before + 100);        /* ~2 rows a 4 KiB page */
    assert_true(mirror_matches(d->db, fd) > 300 * 1500);
    exec_ok(a, "DELETE FROM t WHERE k > 20");
    exec_ok(a, "PRAGMA wal_checkpoint(TRUNCATE)");
    struct stat big;
    assert_int_equal(fstat(fd, &big), 0);
    exec_ok(a, "VACUUM");
    exec_ok(a, "PRAGMA wal_checkpoint(TRUNCATE)");
    struct stat small;
    assert_int_equal(fstat(fd, &small), 0);
    assert_true(small.st_size < big.st_size / 4);       /* the file was cut */
    assert_int_equal(blob_bytes(b), 20 * 1500);
    mirror_matches(d->db, fd);
    insert_rows(a, 21, 50, 1500);                       /* and grows again */
    exec_ok(a, "PRAGMA wal_checkpoint(TRUNCATE)");
    assert_int_equal(blob_bytes(b), 70 * 1500);
    mirror_matches(d->db, fd);
    sqlite3_close(a);
    sqlite3_close(b);
    close(fd);
}

/* The loader of the module test below: fd's bytes (filemirror_load_fn). */
static int fd_load(void *ctx, void *out, size_t n, int64_t off)
{
    return pread(*(int *)ctx, out, n, off) != (ssize_t)n;
}

/* Writes n bytes at off to the file, then tells the mirror, as the VFS does. */
static void file_write(int fd, filemirror_t *m, const void *data, size_t n, int64_t off)
{
    assert_int_equal(pwrite(fd, data, n, off), (ssize_t)n);
    filemirror_wrote(m, data, n, off, 1);
}

/* n bytes at off read through the mirror equal the file's. */
static void reads_as_file(int fd, filemirror_t *m, size_t n, int64_t off)
{
    unsigned char *mem = malloc(n), *disk = malloc(n);
    assert_true(mem && disk);
    assert_int_equal(filemirror_read(m, mem, n, off, fd_load, &fd), 1);
    assert_int_equal(pread(fd, disk, n, off), (ssize_t)n);
    assert_memory_equal(mem, disk, n);
    free(mem);
    free(disk);
}

/* The mirror module on a plain file, for what SQLite does too rarely to
 * test through it: a write into a chunk it does not hold keeps the rest
 * of that chunk the file's (loaded on the next read, not made of zeros),
 * and a file cut inside a chunk and grown again past a gap reads zeros in
 * the gap, as the file does. */
static void test_mirror_on_a_plain_file(void **state)
{
    support_store_t *d = *state;
    char path[160];
    snprintf(path, sizeof path, "%s/plain.bin", d->dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    const size_t len = 3 * FILEMIRROR_CHUNK;
    unsigned char *bytes = malloc(len);
    assert_non_null(bytes);
    for (size_t i = 0; i < len; i++)
        bytes[i] = (unsigned char)(i * 7 + 1);
    assert_int_equal(pwrite(fd, bytes, len, 0), (ssize_t)len);
    filemirror_t *m = filemirror_get(path, FILEMIRROR_WAL, (int64_t)len);   /* appends kept */
    assert_non_null(m);
    file_write(fd, m, "abcdef", 6, 1000);        /* chunk 0, not held yet */
    reads_as_file(fd, m, 4000, 0);
    reads_as_file(fd, m, len, 0);                /* every chunk held now */
    int64_t cut = (int64_t)FILEMIRROR_CHUNK + 5000;
    assert_int_equal(ftruncate(fd, cut), 0);
    filemirror_sized(m, cut, 1);
    file_write(fd, m, "xyz", 3, 2 * (int64_t)FILEMIRROR_CHUNK + 100);   /* past a gap */
    reads_as_file(fd, m, FILEMIRROR_CHUNK + 103, FILEMIRROR_CHUNK);
    unsigned char one;
    assert_int_equal(filemirror_read(m, &one, 1, 3 * (int64_t)FILEMIRROR_CHUNK, fd_load, &fd),
                     0);                         /* past the end: the file's to answer */
    filemirror_put(m);
    close(fd);
    free(bytes);
    unlink(path);
}

/* A commit the disk refused (the file size limit: EFBIG) stops the WAL's
 * copy, whose bytes would be unknown; commits after it read right, from
 * the file. */
static void test_refused_write_stops_the_copy(void **state)
{
    support_store_t *d = *state;
    sqlite3 *a, *b;
    open_pair(d->db, &a, &b);
    insert_rows(a, 1, 10, 1000);
    assert_int_equal(count_rows(b), 10);
    assert_true(wal_matches(d) > 0);
    char wal[128];
    snprintf(wal, sizeof wal, "%s-wal", d->db);
    struct stat sb;
    assert_int_equal(stat(wal, &sb), 0);
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)sb.st_size + 20000;  /* the commit needs the WAL to grow a step */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    exec_ok(a, "BEGIN IMMEDIATE");
    exec_ok(a, "WITH RECURSIVE c(i) AS (SELECT 100 UNION ALL SELECT i + 1 FROM c WHERE i < 1599)"
               " INSERT INTO t SELECT i, randomblob(1000) FROM c");
    int rc = sqlite3_exec(a, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        sqlite3_exec(a, "ROLLBACK", NULL, NULL, NULL);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_not_equal(rc, SQLITE_OK);
    assert_int_equal(filemirror_held(wal), -1);
    assert_int_equal(count_rows(b), 10);
    insert_rows(a, 11, 5, 1000);
    assert_int_equal(count_rows(b), 15);
    assert_int_equal(blob_bytes(b), 15 * 1000);
    sqlite3_close(a);
    sqlite3_close(b);
}

/* Files larger than the copies' budgets: each copy keeps to its budget,
 * dropping chunks no read touched lately, and what it holds and what is
 * read through it stays the file's. */
static void test_copy_keeps_to_its_budget(void **state)
{
    support_store_t *d = *state;
    const int64_t budget = 8 * (int64_t)FILEMIRROR_CHUNK;
    filemirror_set_budget(FILEMIRROR_DB, budget);
    filemirror_set_budget(FILEMIRROR_WAL, budget);
    sqlite3 *a, *b;
    open_pair(d->db, &a, &b);
    int fd = open(d->db, O_RDONLY);
    assert_true(fd >= 0);
    int rows = (int)(4 * budget / 3000);                /* ~4 budgets of WAL */
    insert_rows(a, 1, rows, 3000);
    assert_int_equal(blob_bytes(b), (long long)rows * 3000);
    int64_t held = wal_matches(d);
    assert_true(held > 0 && held <= budget);
    exec_ok(a, "PRAGMA wal_checkpoint(TRUNCATE)");
    insert_rows(a, rows + 1, 1, 10);
    for (int i = 0; i < 3; i++)                          /* every page loaded, again and again */
        assert_int_equal(blob_bytes(b), (long long)rows * 3000 + 10);
    held = mirror_matches(d->db, fd);
    assert_true(held > 0 && held <= budget);
    /* The last rows' pages, read twice, come from memory the second time:
     * their chunks took the place of ones the scans left untouched. */
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT total(length(v)) FROM t WHERE k > %d", rows - 20);
    exec_ok(b, sql);
    insert_rows(a, rows + 2, 1, 10);     /* b's cache goes */
    uint64_t mem0, file0, mem1, file1;
    store_file_reads(0, &mem0, &file0);
    exec_ok(b, sql);
    store_file_reads(0, &mem1, &file1);
    assert_true(mem1 - mem0 >= 20);      /* a 4 KiB page a row */
    assert_true(file1 - file0 < 5);
    sqlite3_close(a);
    sqlite3_close(b);
    close(fd);
    filemirror_set_budget(FILEMIRROR_DB, 64 * 1024 * 1024);
    filemirror_set_budget(FILEMIRROR_WAL, 32 * 1024 * 1024);
}

/* Threads of the test below; each has its own connection. Failures are
 * counted, not asserted (cmocka's asserts jump: one thread only). */
typedef struct race {
    const char *path;
    int writing;                /* guarded by mu */
    int errors;                 /* guarded by mu */
    pthread_mutex_t mu;
} race_t;

#define RACE_ROWS 1500
#define RACE_VALUE "printf('%.*c', 1500, char(65 + k % 26))"

static int race_writing(race_t *r)
{
    pthread_mutex_lock(&r->mu);
    int w = r->writing;
    pthread_mutex_unlock(&r->mu);
    return w;
}

static void race_error(race_t *r)
{
    pthread_mutex_lock(&r->mu);
    r->errors++;
    pthread_mutex_unlock(&r->mu);
}

static sqlite3 *race_open(race_t *r)
{
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(r->path, &db, SQLITE_OPEN_READWRITE, store_vfs_name()) != SQLITE_OK) {
        race_error(r);
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 10000);
    return db;
}

/* Rows in transactions of 5, each row's value a function of its key. */
static void *race_writer(void *arg)
{
    race_t *r = arg;
    sqlite3 *db = race_open(r);
    char sql[200];
    for (int k = 1; db && k <= RACE_ROWS; k += 5) {
        snprintf(sql, sizeof sql, "WITH RECURSIVE c(k) AS (SELECT %d UNION ALL SELECT k + 1"
                 " FROM c WHERE k < %d) INSERT INTO t SELECT k, printf('%%.*c', 1500,"
                 " char(65 + k %% 26)) FROM c", k, k + 4);     /* RACE_VALUE */
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
            race_error(r);
    }
    sqlite3_close(db);
    pthread_mutex_lock(&r->mu);
    r->writing = 0;
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Reads every row while the writer runs: none differs from its value, and
 * the count never goes back. */
static void *race_reader(void *arg)
{
    race_t *r = arg;
    sqlite3 *db = race_open(r);
    sqlite3_stmt *s = NULL;
    if (db && sqlite3_prepare_v2(db, "SELECT count(*), total(v <> " RACE_VALUE ") FROM t", -1,
                                 &s, NULL) != SQLITE_OK)
        race_error(r);
    long long seen = 0;
    for (int more = 1; s && more;) {
        more = race_writing(r);         /* one last read after the writer ended */
        if (sqlite3_step(s) != SQLITE_ROW || sqlite3_column_int64(s, 0) < seen ||
            sqlite3_column_double(s, 1) != 0)
            race_error(r);
        seen = sqlite3_column_int64(s, 0);
        sqlite3_reset(s);
    }
    if (seen != RACE_ROWS)
        race_error(r);
    sqlite3_finalize(s);
    sqlite3_close(db);
    return NULL;
}

/* Checkpoints while the writer runs: passive ones, and now and then one
 * that starts the WAL over (busy is an answer, not an error). */
static void *race_checkpointer(void *arg)
{
    race_t *r = arg;
    sqlite3 *db = race_open(r);
    for (int i = 0; db && race_writing(r); i++) {
        int rc = sqlite3_wal_checkpoint_v2(db, NULL, i % 8 ? SQLITE_CHECKPOINT_PASSIVE
                                                           : SQLITE_CHECKPOINT_RESTART, NULL, NULL);
        if (rc != SQLITE_OK && rc != SQLITE_BUSY)
            race_error(r);
    }
    sqlite3_close(db);
    return NULL;
}

/* Connections on several threads share the copies while one writes, two
 * read and one checkpoints, with budgets of 8 chunks so that loads and
 * drops race with the writes: every read sees rows as written, and the
 * database is intact after. */
static void test_threads_share_the_copies(void **state)
{
    support_store_t *d = *state;
    filemirror_set_budget(FILEMIRROR_DB, 8 * (int64_t)FILEMIRROR_CHUNK);
    filemirror_set_budget(FILEMIRROR_WAL, 8 * (int64_t)FILEMIRROR_CHUNK);
    sqlite3 *keep = open_db(d->db, store_vfs_name());   /* the table; the files stay open */
    race_t r = {.path = d->db, .writing = 1, .mu = PTHREAD_MUTEX_INITIALIZER};
    pthread_t t[4];
    void *(*fn[4])(void *) = {race_writer, race_reader, race_reader, race_checkpointer};
    for (int i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, fn[i], &r), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(r.errors, 0);
    assert_int_equal(count_rows(keep), RACE_ROWS);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(keep, "PRAGMA integrity_check", -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(s, 0), "ok");
    sqlite3_finalize(s);
    sqlite3_close(keep);
    filemirror_set_budget(FILEMIRROR_DB, 64 * 1024 * 1024);
    filemirror_set_budget(FILEMIRROR_WAL, 32 * 1024 * 1024);
}

/* Leaves d's database with committed frames in a WAL nobody checkpointed:
 * a process that commits and dies without closing, through vfs (NULL:
 * SQLite's own). */
static void leave_wal_behind(const support_store_t *d, const char *vfs)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        sqlite3 *db = NULL;
        if (sqlite3_open_v2(d->db, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, vfs) ||
            sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0;"
                             " CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB);"
                             " WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c"
                             " WHERE i < 40) INSERT INTO t SELECT i, randomblob(900) FROM c;",
                             NULL, NULL, NULL))
            _exit(1);
        _exit(0);       /* no close: the WAL stays, its frames not checkpointed */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The WAL's size, or -1. */
static long long wal_size(const support_store_t *d)
{
    char wal[128];
    snprintf(wal, sizeof wal, "%s-wal", d->db);
    struct stat sb;
    return stat(wal, &sb) == 0 ? (long long)sb.st_size : -1;
}

/* The WAL grows by zeros a step at a time ahead of its frames, so that
 * commits overwrite it in place; a process that died leaves the zeros past
 * its last frame, and recovery reads its frames and stops there. */
static void test_wal_grows_in_steps(void **state)
{
    support_store_t *d = *state;
    leave_wal_behind(d, store_vfs_name());
    assert_int_equal(wal_size(d), STORE_WAL_STEP);
    sqlite3 *a = open_db(d->db, store_vfs_name());
    assert_int_equal(count_rows(a), 40);
    for (int i = 0; i < 10; i++)
        insert_rows(a, 41 + i, 1, 900);
    assert_int_equal(wal_size(d), STORE_WAL_STEP);     /* in place */
    insert_rows(a, 51, 1500, 1000);                    /* ~1.6 MB more */
    long long size = wal_size(d);
    assert_true(size > STORE_WAL_STEP && size % STORE_WAL_STEP == 0);
    sqlite3 *b = open_db(d->db, store_vfs_name());
    assert_int_equal(count_rows(b), 1550);
    assert_int_equal(blob_bytes(b), 50 * 900 + 1500 * 1000);
    sqlite3_close(a);
    sqlite3_close(b);
}

/* A WAL this process did not write is copied from the file as it is
 * read: recovery reads the frames left behind, appends after them and a
 * restart from offset 0 read right, through new connections too. */
static void test_recovered_wal_read_right(void **state)
{
    support_store_t *d = *state;
    leave_wal_behind(d, NULL);
    const char *vfs = store_vfs_name();
    sqlite3 *a = open_db(d->db, vfs);
    assert_int_equal(count_rows(a), 40);
    insert_rows(a, 41, 5, 900);                    /* appended after the recovered frames */
    sqlite3 *b = open_db(d->db, vfs);               /* an empty page cache */
    assert_int_equal(count_rows(b), 45);
    assert_int_equal(blob_bytes(b), 45 * 900);
    assert_true(wal_matches(d) > 40 * 900);
    exec_ok(a, "PRAGMA wal_checkpoint(RESTART)");
    insert_rows(a, 46, 5, 900);                    /* the WAL starts over at 0 */
    wal_matches(d);
    sqlite3 *c = open_db(d->db, vfs);
    assert_int_equal(blob_bytes(c), 50 * 900);
    sqlite3_close(a);
    sqlite3_close(b);
    sqlite3_close(c);
}

static int setup(void **state)
{
    support_store_t *d = calloc(1, sizeof *d);
    assert_non_null(d);
    assert_int_equal(support_store_make(d), 0);
    *state = d;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--other-process") == 0)
        return other_process_main(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_commit_is_one_write, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_commits_visible_and_intact, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_commit_frame_at_buffer_edge, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_one_process_owns_the_file, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_wal_reads_from_memory, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_db_reads_from_memory, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_mirror_on_a_plain_file, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_refused_write_stops_the_copy, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_wal_grows_in_steps, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_threads_share_the_copies, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_recovered_wal_read_right, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_copy_keeps_to_its_budget, setup,
                                        support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
