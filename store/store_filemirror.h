/* store_filemirror.h - a copy in memory of the database's files (the
 * database and its -wal), so that reading a page another connection
 * committed or checkpointed costs a memcpy, not a pread
 * (store_filemirror.c says why that is exact).
 *
 * Used by the VFS shim (store_vfs.c) only: it reports every write and
 * truncation of a mirrored file after the real one, and asks the mirror
 * first on every read. One mirror per file (device and inode), shared by
 * every connection of the process that has the file open; each open file
 * holds a reference. */
#ifndef ATOLL_STORE_FILEMIRROR_H
#define ATOLL_STORE_FILEMIRROR_H

#include <stddef.h>
#include <stdint.h>

typedef struct filemirror filemirror_t;

/* What a mirror copies: the kinds count their reads apart (/metrics). */
typedef enum { FILEMIRROR_DB = 0, FILEMIRROR_WAL = 1 } filemirror_kind_t;

/* The unit a mirror loads, keeps and drops. */
#define FILEMIRROR_CHUNK ((size_t)64 * 1024)

/* Reads n bytes at off of the file the mirror copies into out: the
 * caller's own open file (never a second descriptor: closing one would
 * drop the process's POSIX lock on the database). 0 when all n bytes
 * came, else non-zero. */
typedef int (*filemirror_load_fn)(void *ctx, void *out, size_t n, int64_t off);

/* The mirror of the file at path (opened already, size bytes long as the
 * caller's file says), a new reference; NULL when it cannot be had (then
 * every read goes to the file). A second caller's size is ignored: the
 * mirror follows the file from its first open on. */
filemirror_t *filemirror_get(const char *path, filemirror_kind_t kind, int64_t size);
/* Drops a reference from filemirror_get; the last one frees the mirror. */
void filemirror_put(filemirror_t *m);
/* Copies n bytes at off into out and returns 1 when the mirror has them
 * or could load the chunks they lie in through load(ctx, ...); 0 (out
 * untouched) when the caller must read the file itself: past the end of
 * the file, a load that failed, a mirror that stopped. */
int filemirror_read(filemirror_t *m, void *out, size_t n, int64_t off,
                    filemirror_load_fn load, void *ctx);
/* After a write of n bytes at off reached the file (ok) or failed (!ok:
 * what the file holds is unknown, and the mirror stops for good). */
void filemirror_wrote(filemirror_t *m, const void *data, size_t n, int64_t off, int ok);
/* The file's size as the mirror knows it, or -1 (stopped). */
int64_t filemirror_size(filemirror_t *m);
/* After the file was truncated to size bytes (ok), or its truncation
 * failed (!ok: the mirror stops). */
void filemirror_sized(filemirror_t *m, int64_t size, int ok);

/* ---- for tests ---- */
/* The most bytes of chunks a mirror of kind holds (the default: 64 MiB a
 * database, 32 MiB a WAL); applies to the loads after the call. */
void filemirror_set_budget(filemirror_kind_t kind, int64_t bytes);
/* Copies n bytes at off of path's mirror into out without loading
 * anything or counting a read: 1 when it holds them all, 0 when not, -1
 * when no mirror of path is open or it stopped. *size (when not NULL):
 * the file's size as the mirror knows it. */
int filemirror_peek(const char *path, void *out, size_t n, int64_t off, int64_t *size);
/* Bytes of chunks path's mirror holds now, or -1 (none open, stopped). */
int64_t filemirror_held(const char *path);

#endif
