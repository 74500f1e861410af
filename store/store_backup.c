/* store_backup.c - online backups: a consistent copy of the database,
 * made by atolld, which owns the file (store_vfs.c: no other process can
 * open it while atolld runs, so `sqlite3 .backup` from outside cannot).
 *
 * VACUUM INTO writes one snapshot of every table into a new database file;
 * it is a read transaction, so the writers go on meanwhile. The copy goes
 * beside the database, <db>-backup.tmp (the same volume: atolld may write
 * there, and nowhere else is known to be), is opened, then unlinked: the
 * caller streams it from the descriptor, and its disk space returns when
 * that closes. A crash halfway leaves the file; the next start removes it
 * (store_backup_clean, from store_global_init). One copy at a time
 * (backup_busy): each reads the whole database and needs its size again
 * on disk. */
#include "store_internal.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

#define BACKUP_SUFFIX "-backup.tmp"
#define BACKUP_PATH_MAX 4200    /* store.c's path limit plus the suffix */

static atomic_int backup_busy;  /* 1 while a copy is being made */

static int backup_path(const char *db, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s" BACKUP_SUFFIX, db);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

void store_backup_clean(const char *db)
{
    char path[BACKUP_PATH_MAX];
    if (backup_path(db, path, sizeof path) == 0 && unlink(path) == 0)
        log_warn("store: removed %s, left by a backup that did not finish", path);
}

/* VACUUM INTO path on this connection (outside any transaction). 0 or -1
 * with why. */
static int backup_write(sqlite3 *db, const char *path, char *why, size_t cap)
{
    sqlite3_stmt *s = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(db, "VACUUM INTO ?1", -1, &s, NULL) != SQLITE_OK) {
        snprintf(why, cap, "cannot prepare the copy: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    sqlite3_bind_text(s, 1, path, -1, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) {
        snprintf(why, cap, "writing the copy failed: %s", sqlite3_errmsg(db));
        goto cleanup;
    }
    rc = 0;
cleanup:
    sqlite3_finalize(s);
    return rc;
}

int store_backup(store_t *st, int *fd, uint64_t *size, char *why, size_t cap)
{
    int idle = 0;
    if (!atomic_compare_exchange_strong(&backup_busy, &idle, 1))
        return STORE_CONFLICT;
    int rc = STORE_ERR;
    *fd = -1;
    sqlite3 *db = store_db(st);
    const char *file = sqlite3_db_filename(db, "main");
    char path[BACKUP_PATH_MAX];
    if (!file || !*file || backup_path(file, path, sizeof path) != 0) {
        snprintf(why, cap, "the database has no file name to write a copy beside");
        goto cleanup;
    }
    unlink(path);   /* VACUUM INTO refuses a file that is not empty */
    if (backup_write(db, path, why, cap) != 0) {
        unlink(path);
        goto cleanup;
    }
    int f = open(path, O_RDONLY | O_CLOEXEC);
    unlink(path);   /* the open descriptor keeps the copy until it closes */
    struct stat sb;
    if (f < 0 || fstat(f, &sb) != 0) {
        snprintf(why, cap, "cannot open the copy just written");
        if (f >= 0)
            close(f);
        goto cleanup;
    }
    *fd = f;
    *size = (uint64_t)sb.st_size;
    rc = STORE_OK;
cleanup:
    atomic_store(&backup_busy, 0);
    return rc;
}
