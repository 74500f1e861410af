/* store_walmirror.c - a copy in memory of a WAL file's bytes.
 *
 * Why: SQLite drops a connection's page cache whenever another connection
 * committed, and then reads each page it needs again; most hot pages live
 * in the WAL, so under a loop of tiny jobs atolld made ~100 pread calls a
 * job on the -wal file (strace), each a system call that pays this
 * project's paravirtualised machines' hypervisor. The mirror answers those
 * reads with a memcpy.
 *
 * Why it is exact:
 *   - The VFS wraps "unix-excl": this process owns the database, so every
 *     write to the WAL goes through store_vfs.c, which reports it here
 *     after the file took it, inside the same xWrite call: before SQLite
 *     publishes the commit in the WAL index, so no connection can look for
 *     a frame the mirror does not have yet.
 *   - The mirror holds a prefix [0, valid) of the file, byte for byte. It
 *     grows only by a write that starts inside or at the end of it, so a
 *     WAL that existed before this process opened it (the frames a restart
 *     recovers) is read from the file until SQLite starts the WAL over at
 *     offset 0. A failed write cuts the prefix at its offset, a
 *     truncation at the new size; a byte the mirror cannot store (no
 *     memory, past WALMIRROR_CAP) ends the prefix there.
 *   - SQLite never reads a range of the WAL while another connection
 *     writes it: readers read frames up to their snapshot, a writer appends
 *     past every snapshot and starts the WAL over only when no reader uses
 *     the old one. The lock below is for memory safety, not ordering.
 *
 * Memory: 64 KiB chunks made on first write, at most WALMIRROR_CAP bytes a
 * file (the whole WAL in steady state), freed with the
 * mirror when the last connection closes the file, or past a truncation.
 *
 * Threads: the registry under reg_mu; a mirror's chunks and prefix under
 * its rwlock (readers share it, a write or truncation takes it alone). */
#include "store_walmirror.h"

#include "store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WALMIRROR_CHUNK ((size_t)64 * 1024)
#define WALMIRROR_CHUNKS ((size_t)(WALMIRROR_CAP / (int64_t)WALMIRROR_CHUNK))

struct walmirror {
    dev_t dev;
    ino_t ino;
    int refs;                   /* guarded by reg_mu */
    struct walmirror *next;     /* guarded by reg_mu: the registry's list */
    pthread_rwlock_t lock;
    int64_t valid;              /* guarded by lock: bytes [0, valid) equal the file's */
    unsigned char *chunk[WALMIRROR_CHUNKS];     /* guarded by lock; owned */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static walmirror_t *reg_head;   /* guarded by reg_mu */
static atomic_uint_least64_t hits, misses;

walmirror_t *walmirror_get(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return NULL;
    pthread_mutex_lock(&reg_mu);
    walmirror_t *m = reg_head;
    while (m && !(m->dev == sb.st_dev && m->ino == sb.st_ino))
        m = m->next;
    if (!m && (m = calloc(1, sizeof *m)) != NULL) {
        if (pthread_rwlock_init(&m->lock, NULL) != 0) {
            free(m);
            m = NULL;
        } else {
            m->dev = sb.st_dev;
            m->ino = sb.st_ino;
            m->next = reg_head;
            reg_head = m;
        }
    }
    if (m)
        m->refs++;
    pthread_mutex_unlock(&reg_mu);
    return m;
}

void walmirror_put(walmirror_t *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&reg_mu);
    int last = --m->refs == 0;
    if (last) {
        walmirror_t **p = &reg_head;
        while (*p != m)
            p = &(*p)->next;
        *p = m->next;
    }
    pthread_mutex_unlock(&reg_mu);
    if (!last)
        return;
    for (size_t i = 0; i < WALMIRROR_CHUNKS; i++)
        free(m->chunk[i]);
    pthread_rwlock_destroy(&m->lock);
    free(m);
}

int walmirror_read(walmirror_t *m, void *out, size_t n, int64_t off)
{
    if (off < 0)
        return 0;
    pthread_rwlock_rdlock(&m->lock);
    int held = (int64_t)n <= m->valid - off;
    for (size_t done = 0; held && done < n;) {
        int64_t at = off + (int64_t)done;
        size_t in = (size_t)(at % (int64_t)WALMIRROR_CHUNK);
        size_t take = WALMIRROR_CHUNK - in < n - done ? WALMIRROR_CHUNK - in : n - done;
        memcpy((unsigned char *)out + done, m->chunk[at / (int64_t)WALMIRROR_CHUNK] + in, take);
        done += take;
    }
    pthread_rwlock_unlock(&m->lock);
    atomic_fetch_add_explicit(held ? &hits : &misses, 1, memory_order_relaxed);
    return held;
}

/* Copies data (n bytes at off, off <= m->valid) into the chunks; the
 * offset where copying stopped (off + n unless a chunk could not be made
 * or the cap came). Holds m->lock alone. */
static int64_t mirror_copy(walmirror_t *m, const unsigned char *data, size_t n, int64_t off)
{
    size_t done = 0;
    while (done < n && off + (int64_t)done < WALMIRROR_CAP) {
        int64_t at = off + (int64_t)done;
        size_t c = (size_t)(at / (int64_t)WALMIRROR_CHUNK);
        size_t in = (size_t)(at % (int64_t)WALMIRROR_CHUNK);
        if (!m->chunk[c] && !(m->chunk[c] = malloc(WALMIRROR_CHUNK)))
            break;
        size_t take = WALMIRROR_CHUNK - in < n - done ? WALMIRROR_CHUNK - in : n - done;
        memcpy(m->chunk[c] + in, data + done, take);
        done += take;
    }
    return off + (int64_t)done;
}

void walmirror_wrote(walmirror_t *m, const void *data, size_t n, int64_t off, int ok)
{
    if (off < 0)
        return;
    pthread_rwlock_wrlock(&m->lock);
    if (!ok) {
        if (off < m->valid)
            m->valid = off;
    } else if (off <= m->valid) {       /* a write past the prefix leaves a gap: not kept */
        int64_t end = mirror_copy(m, data, n, off);
        if (end < off + (int64_t)n && end < m->valid)
            m->valid = end;             /* the rest of the write is not in the chunks */
        else if (end > m->valid)
            m->valid = end;
    }
    pthread_rwlock_unlock(&m->lock);
}

void walmirror_truncated(walmirror_t *m, int64_t size)
{
    if (size < 0)
        size = 0;
    pthread_rwlock_wrlock(&m->lock);
    if (size < m->valid)
        m->valid = size;
    /* Chunks wholly past the new end go; the next writes make them again. */
    for (size_t c = (size_t)((size + (int64_t)WALMIRROR_CHUNK - 1) / (int64_t)WALMIRROR_CHUNK);
         c < WALMIRROR_CHUNKS; c++) {
        free(m->chunk[c]);
        m->chunk[c] = NULL;
    }
    pthread_rwlock_unlock(&m->lock);
}

void store_wal_reads(uint64_t *memory, uint64_t *file)
{
    *memory = atomic_load_explicit(&hits, memory_order_relaxed);
    *file = atomic_load_explicit(&misses, memory_order_relaxed);
}

int64_t walmirror_held(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return -1;
    int64_t held = -1;
    pthread_mutex_lock(&reg_mu);
    for (walmirror_t *m = reg_head; m; m = m->next) {
        if (m->dev == sb.st_dev && m->ino == sb.st_ino) {
            pthread_rwlock_rdlock(&m->lock);
            held = m->valid;
            pthread_rwlock_unlock(&m->lock);
            break;
        }
    }
    pthread_mutex_unlock(&reg_mu);
    return held;
}
