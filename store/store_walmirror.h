/* store_walmirror.h - a copy in memory of a WAL file's bytes, so that
 * reading a frame another connection committed costs a memcpy, not a
 * pread (store_walmirror.c says why that is safe).
 *
 * Used by the VFS shim (store_vfs.c) only: it reports every write and
 * truncation of a -wal file after the real one, and asks the mirror first
 * on every read. One mirror per file (device and inode), shared by every
 * connection of the process that has the file open; each open file holds a
 * reference. */
#ifndef ATOLL_STORE_WALMIRROR_H
#define ATOLL_STORE_WALMIRROR_H

#include <stddef.h>
#include <stdint.h>

typedef struct walmirror walmirror_t;

/* The most of a file a mirror holds (its first bytes): the checkpointer
 * starts the WAL over past 16,000 pages, 16.4 MB with 1 KiB pages. */
#define WALMIRROR_CAP ((int64_t)32 * 1024 * 1024)

/* The mirror of the file at path (opened already), a new reference; NULL
 * when it cannot be had (then every read goes to the file). */
walmirror_t *walmirror_get(const char *path);
/* Drops a reference from walmirror_get; the last one frees the mirror. */
void walmirror_put(walmirror_t *m);
/* Copies n bytes at off into out and returns 1 when the mirror holds all
 * of them; 0 (out untouched) when the caller must read the file. */
int walmirror_read(walmirror_t *m, void *out, size_t n, int64_t off);
/* After a write of n bytes at off reached the file (ok) or failed (!ok:
 * what the file holds from off on is unknown). */
void walmirror_wrote(walmirror_t *m, const void *data, size_t n, int64_t off, int ok);
/* After the file was truncated to size (or a truncation was tried). */
void walmirror_truncated(walmirror_t *m, int64_t size);
/* Bytes of the file the mirror holds now (its valid prefix), or -1 when
 * no mirror of path is open. For tests. (Its read counts are
 * store_wal_reads, store.h.) */
int64_t walmirror_held(const char *path);

#endif
