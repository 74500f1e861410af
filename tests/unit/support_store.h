/* support_store.h - the store unit tests' database directory: made by
 * mkdtemp, holding atoll.db (and SQLite's -wal and -shm beside it). */
#ifndef SUPPORT_STORE_H
#define SUPPORT_STORE_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
