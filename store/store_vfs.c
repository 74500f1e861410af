/* store_vfs.c - a SQLite VFS shim that writes a transaction's WAL frames
 * with one system call.
 *
 * SQLite appends each WAL frame with two writes (its 24-byte header, then
 * the page), so a commit of N pages costs 2N pwrite calls. On the
 * paravirtualised machines Atoll runs on, a system call costs microseconds
 * of hypervisor time, and a report's commit writes a handful of pages, an
 * admission's dozens. This shim (VFS "atoll", wrapping the default one)
 * gathers consecutive writes to a -wal file in a buffer and hands them to
 * the real file in one write when:
 *   - the buffered frames end with a commit frame (the frame header's
 *     "database size after commit" is non-zero, and its page has come):
 *     inside the xWrite call that completes it, so an error reaches SQLite
 *     as that write's error, and the frames are in the kernel before SQLite
 *     publishes the commit in the shared-memory index (after its frame
 *     writes): another connection can never read a frame that is not
 *     written yet;
 *   - a write is not contiguous with the buffer, or would overflow it;
 *   - anything else touches the file (read, sync, truncate, size, file
 *     control, close).
 * With synchronous=NORMAL nothing changes for crash safety: SQLite issues
 * no sync inside a commit, and everything is written before COMMIT
 * returns (store_sync.c's fdatasync rounds come after). Other files pass
 * through untouched.
 *
 * The wrapped VFS is SQLite's "unix-excl": one process owns the database.
 * Its first lock takes an exclusive POSIX lock on the file, held until the
 * process's last connection closes; the connections inside the process
 * coordinate through SQLite's per-file lock counts, and the WAL index
 * lives in the process's memory instead of a mapped -shm file. With the
 * plain "unix" VFS every read transaction took and dropped a lock on the
 * -shm file with fcntl (a system call, under a process-wide mutex the
 * threads then queued on): 56 fcntl calls and 67 futex waits per tiny
 * job under bench_loop, 19 futex waits and no fcntl with this one (atolld
 * CPU per job 2,700-2,850 -> 2,380-2,410 us with 8 clients). The price:
 * no other process can open the database while atolld runs, not even to
 * read it; a second atolld on the same file is refused at start (a
 * feature: two controllers must never schedule one database), and online
 * backups go through atolld (GET /v1/admin/backup, store_backup.c).
 *
 * Threads: a file belongs to one connection, used by one thread at a time
 * (SQLite's rule for a connection, and Atoll's one connection per thread),
 * so a buffer needs no lock. Ownership: the buffer is the file's, freed on
 * xClose. */
#include "store_internal.h"
#include "store_filemirror.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define VFS_NAME "atoll"
/* The VFS wrapped: see above. Every Unix build of SQLite has it. */
#define STORE_VFS_BASE "unix-excl"
/* The unix VFS masks a write's size to 17 bits (seekAndWriteFd: larger
 * writes come back short, as SQLITE_FULL), so a buffer stays under 128 KiB:
 * 30 frames of 4 KiB pages, more than most commits here. */
#define VFS_BUF_CAP ((size_t)124 * 1024)
#define WAL_FRAME_HDR 24

typedef struct vfs_file {
    sqlite3_file base;          /* first: SQLite sees this */
    sqlite3_file *real;         /* the wrapped file, in the same allocation */
    int wal;                    /* a -wal file: its writes are gathered */
    unsigned char *buf;         /* owned; VFS_BUF_CAP bytes once needed */
    size_t len;                 /* bytes buffered */
    sqlite3_int64 off;          /* file offset of buf[0] */
    int commit_hdr;             /* the last buffered write was a commit frame's header */
    filemirror_t *mirror;       /* the database's or WAL's copy in memory (a reference), or NULL */
} vfs_file_t;

static sqlite3_vfs vfs_shim;
static sqlite3_vfs *vfs_real;

#define REAL(f) (((vfs_file_t *)(f))->real)

/* The real write, told to the mirror once the file has it (or failed). */
static int vfs_write_real(vfs_file_t *p, const void *data, int n, sqlite3_int64 off)
{
    int rc = p->real->pMethods->xWrite(p->real, data, n, off);
    if (p->mirror)
        filemirror_wrote(p->mirror, data, (size_t)n, off, rc == SQLITE_OK);
    return rc;
}

/* The mirror's loader: the real file's bytes (filemirror_load_fn). */
static int vfs_load(void *ctx, void *out, size_t n, int64_t off)
{
    sqlite3_file *real = ctx;
    return real->pMethods->xRead(real, out, (int)n, off) != SQLITE_OK;
}

/* The WAL grows in steps of zeros written ahead of its frames: an
 * fdatasync of a file that grew must commit the new size (and the new
 * blocks) to the filesystem's journal, one of a file overwritten in place
 * only writes the data back. Appending 15 KiB then fdatasync, as a
 * submission's commit and group-commit round do: p50 234 us against 163
 * in place on this project's VM (ext4). Zeros past the last frame are
 * what SQLite leaves there itself when it starts the WAL over (old frames,
 * or zeros after a truncation): a frame whose salt and checksum do not
 * match ends the WAL at recovery. The unix VFS takes writes of at most
 * 128 KiB, hence the pieces. (Every STORE_WAL_STEP bytes of frames, one
 * fdatasync also writes the new blocks and size.) */
#define VFS_ZERO_PIECE 65536
static const unsigned char vfs_zeros[VFS_ZERO_PIECE];

/* Extends p's WAL with zeros to the next multiple of STORE_WAL_STEP at or
 * past end when end lies beyond its size. SQLITE_OK or the write's
 * error. */
static int vfs_wal_ahead(vfs_file_t *p, sqlite3_int64 end)
{
    sqlite3_int64 size = p->mirror ? filemirror_size(p->mirror) : -1;
    if (size < 0 && p->real->pMethods->xFileSize(p->real, &size) != SQLITE_OK)
        return SQLITE_OK;       /* no size known: frames append as they come */
    if (end <= size)
        return SQLITE_OK;
    sqlite3_int64 to = (end + STORE_WAL_STEP - 1) / STORE_WAL_STEP * STORE_WAL_STEP;
    while (size < to) {
        int n = to - size < VFS_ZERO_PIECE ? (int)(to - size) : VFS_ZERO_PIECE;
        int rc = vfs_write_real(p, vfs_zeros, n, size);
        if (rc != SQLITE_OK)
            return rc;
        size += n;
    }
    return SQLITE_OK;
}

/* Writes the buffer out. SQLITE_OK or the real write's error (the buffer
 * is dropped either way: SQLite treats a failed write as a failed
 * transaction and rolls back). */
static int vfs_flush(vfs_file_t *p)
{
    if (p->len == 0)
        return SQLITE_OK;
    int rc = vfs_wal_ahead(p, p->off + (sqlite3_int64)p->len);
    if (rc == SQLITE_OK)
        rc = vfs_write_real(p, p->buf, (int)p->len, p->off);
    p->len = 0;
    p->commit_hdr = 0;
    return rc;
}

static int vfs_close(sqlite3_file *f)
{
    vfs_file_t *p = (vfs_file_t *)f;
    int rc = vfs_flush(p);
    int rc2 = p->real->pMethods->xClose(p->real);
    free(p->buf);
    p->buf = NULL;
    filemirror_put(p->mirror);
    p->mirror = NULL;
    return rc != SQLITE_OK ? rc : rc2;
}

static int vfs_read(sqlite3_file *f, void *out, int n, sqlite3_int64 off)
{
    vfs_file_t *p = (vfs_file_t *)f;
    int rc = vfs_flush(p);
    if (rc != SQLITE_OK)
        return rc;
    if (p->mirror && n > 0 &&
        filemirror_read(p->mirror, out, (size_t)n, off, vfs_load, p->real))
        return SQLITE_OK;
    return p->real->pMethods->xRead(p->real, out, n, off);
}

/* Whether a WAL frame header says "commit" (bytes 4..7, big-endian: the
 * database size in pages after the commit; zero for other frames). */
static int frame_is_commit(const unsigned char *hdr)
{
    return (hdr[4] | hdr[5] | hdr[6] | hdr[7]) != 0;
}

static int vfs_write(sqlite3_file *f, const void *data, int n, sqlite3_int64 off)
{
    vfs_file_t *p = (vfs_file_t *)f;
    if (!p->wal)
        return vfs_write_real(p, data, n, off);
    /* Read before a flush for room clears it: a commit frame whose header
     * went out in that flush still sends its page at once. */
    int completes_commit = p->commit_hdr && n != WAL_FRAME_HDR;
    int rc = SQLITE_OK;
    if (p->len && (off != p->off + (sqlite3_int64)p->len || p->len + (size_t)n > VFS_BUF_CAP))
        rc = vfs_flush(p);
    if (rc != SQLITE_OK)
        return rc;
    if (!p->buf && (size_t)n <= VFS_BUF_CAP)
        p->buf = malloc(VFS_BUF_CAP);
    if (!p->buf || (size_t)n > VFS_BUF_CAP) {       /* no buffer: as it comes */
        p->commit_hdr = 0;
        rc = vfs_wal_ahead(p, off + n);
        return rc != SQLITE_OK ? rc : vfs_write_real(p, data, n, off);
    }
    if (p->len == 0)
        p->off = off;
    memcpy(p->buf + p->len, data, (size_t)n);
    p->len += (size_t)n;
    p->commit_hdr = n == WAL_FRAME_HDR && frame_is_commit(data);
    return completes_commit ? vfs_flush(p) : SQLITE_OK;
}

static int vfs_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    vfs_file_t *p = (vfs_file_t *)f;
    int rc = vfs_flush(p);
    if (rc != SQLITE_OK)
        return rc;
    rc = p->real->pMethods->xTruncate(p->real, size);
    if (p->mirror)
        filemirror_sized(p->mirror, size, rc == SQLITE_OK);
    return rc;
}

static int vfs_sync(sqlite3_file *f, int flags)
{
    int rc = vfs_flush((vfs_file_t *)f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int vfs_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    int rc = vfs_flush((vfs_file_t *)f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int vfs_lock(sqlite3_file *f, int lock) { return REAL(f)->pMethods->xLock(REAL(f), lock); }
static int vfs_unlock(sqlite3_file *f, int lock)
{
    return REAL(f)->pMethods->xUnlock(REAL(f), lock);
}
static int vfs_check_lock(sqlite3_file *f, int *out)
{
    return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

/* A size hint may grow the file (with zeros; the unix VFS does so only
 * once a chunk size is set, which Atoll never does): the mirror need not
 * know, since it sends reads past the size it knows to the file, and a
 * chunk it makes past that size for a write is zeros where the file has
 * zeros. */
static int vfs_file_control(sqlite3_file *f, int op, void *arg)
{
    int rc = vfs_flush((vfs_file_t *)f);
    return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int vfs_sector_size(sqlite3_file *f) { return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int vfs_device_chars(sqlite3_file *f)
{
    return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int vfs_shm_map(sqlite3_file *f, int pg, int sz, int extend, void volatile **pp)
{
    return REAL(f)->pMethods->xShmMap(REAL(f), pg, sz, extend, pp);
}
static int vfs_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    return REAL(f)->pMethods->xShmLock(REAL(f), offset, n, flags);
}
static void vfs_shm_barrier(sqlite3_file *f) { REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int vfs_shm_unmap(sqlite3_file *f, int del)
{
    return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int vfs_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
    return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}
static int vfs_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    return REAL(f)->pMethods->xUnfetch(REAL(f), off, p);
}

static const sqlite3_io_methods vfs_methods = {
    3, vfs_close, vfs_read, vfs_write, vfs_truncate, vfs_sync, vfs_file_size, vfs_lock,
    vfs_unlock, vfs_check_lock, vfs_file_control, vfs_sector_size, vfs_device_chars,
    vfs_shm_map, vfs_shm_lock, vfs_shm_barrier, vfs_shm_unmap, vfs_fetch, vfs_unfetch,
};

/* Gives a newly opened database or WAL file its mirror (none: its reads
 * go to the file). Other files (a VACUUM INTO's target, temporary ones)
 * have none. */
static void vfs_mirror(vfs_file_t *p, const char *name, int flags)
{
    sqlite3_int64 size;
    if (!name || !(flags & (SQLITE_OPEN_MAIN_DB | SQLITE_OPEN_WAL)) ||
        p->real->pMethods->xFileSize(p->real, &size) != SQLITE_OK)
        return;
    p->mirror = filemirror_get(name, p->wal ? FILEMIRROR_WAL : FILEMIRROR_DB, size);
}

static int vfs_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
    (void)vfs;
    vfs_file_t *p = (vfs_file_t *)f;
    memset(p, 0, sizeof *p);
    p->real = (sqlite3_file *)((char *)p + sizeof *p);
    p->wal = (flags & SQLITE_OPEN_WAL) != 0;
    int rc = vfs_real->xOpen(vfs_real, name, p->real, flags, out);
    /* The wrapped methods must have what ours forward (version 3: shared
     * memory and mmap); otherwise SQLite must not call ours at all. */
    if (rc == SQLITE_OK && p->real->pMethods && p->real->pMethods->iVersion >= 3) {
        p->base.pMethods = &vfs_methods;
        vfs_mirror(p, name, flags);
    } else if (rc == SQLITE_OK) {
        if (p->real->pMethods)
            p->real->pMethods->xClose(p->real);
        rc = SQLITE_CANTOPEN;
    }
    return rc;
}

/* The rest of the VFS is the real one's. */
static int vfs_delete(sqlite3_vfs *v, const char *name, int sync)
{
    (void)v;
    return vfs_real->xDelete(vfs_real, name, sync);
}
static int vfs_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    (void)v;
    return vfs_real->xAccess(vfs_real, name, flags, out);
}
static int vfs_full_path(sqlite3_vfs *v, const char *name, int n, char *out)
{
    (void)v;
    return vfs_real->xFullPathname(vfs_real, name, n, out);
}
static void *vfs_dlopen(sqlite3_vfs *v, const char *name)
{
    (void)v;
    return vfs_real->xDlOpen(vfs_real, name);
}
static void vfs_dlerror(sqlite3_vfs *v, int n, char *msg)
{
    (void)v;
    vfs_real->xDlError(vfs_real, n, msg);
}
static void (*vfs_dlsym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    (void)v;
    return vfs_real->xDlSym(vfs_real, h, sym);
}
static void vfs_dlclose(sqlite3_vfs *v, void *h)
{
    (void)v;
    vfs_real->xDlClose(vfs_real, h);
}
static int vfs_randomness(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return vfs_real->xRandomness(vfs_real, n, out);
}
static int vfs_sleep(sqlite3_vfs *v, int us)
{
    (void)v;
    return vfs_real->xSleep(vfs_real, us);
}
static int vfs_current_time(sqlite3_vfs *v, double *out)
{
    (void)v;
    return vfs_real->xCurrentTime(vfs_real, out);
}
static int vfs_last_error(sqlite3_vfs *v, int n, char *out)
{
    (void)v;
    return vfs_real->xGetLastError ? vfs_real->xGetLastError(vfs_real, n, out) : 0;
}
static int vfs_current_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    (void)v;
    return vfs_real->xCurrentTimeInt64(vfs_real, out);
}

static int vfs_registered;      /* written once under vfs_once */
static pthread_once_t vfs_once = PTHREAD_ONCE_INIT;

static void vfs_register(void)
{
    store_sqlite_init();        /* sqlite3_vfs_find initialises SQLite */
    vfs_real = sqlite3_vfs_find(STORE_VFS_BASE);
    if (!vfs_real || vfs_real->iVersion < 2 || !vfs_real->xCurrentTimeInt64)
        return;
    vfs_shim = (sqlite3_vfs){
        .iVersion = 2,
        .szOsFile = (int)sizeof(vfs_file_t) + vfs_real->szOsFile,
        .mxPathname = vfs_real->mxPathname,
        .zName = VFS_NAME,
        .xOpen = vfs_open, .xDelete = vfs_delete, .xAccess = vfs_access,
        .xFullPathname = vfs_full_path, .xDlOpen = vfs_dlopen, .xDlError = vfs_dlerror,
        .xDlSym = vfs_dlsym, .xDlClose = vfs_dlclose, .xRandomness = vfs_randomness,
        .xSleep = vfs_sleep, .xCurrentTime = vfs_current_time,
        .xGetLastError = vfs_last_error, .xCurrentTimeInt64 = vfs_current_time64,
    };
    vfs_registered = sqlite3_vfs_register(&vfs_shim, 0) == SQLITE_OK;
}

const char *store_vfs_name(void)
{
    pthread_once(&vfs_once, vfs_register);
    return vfs_registered ? VFS_NAME : STORE_VFS_BASE;
}
