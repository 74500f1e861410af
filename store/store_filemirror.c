/* store_filemirror.c - a copy in memory of the database's files.
 *
 * Why: SQLite drops a connection's page cache whenever another connection
 * committed, and then reads each page it needs again: from the WAL when a
 * commit since the last checkpoint changed it, else from the database
 * file. Each read was a pread, a system call that pays this project's
 * paravirtualised machines' hypervisor: ~100 a tiny job on the WAL before
 * it had a copy, and then a quarter of the scheduler thread's CPU in
 * bench_passes on the database file. The mirror answers both with a
 * memcpy. (SQLite's own mmap_size, tried twice, was slower: every
 * connection maps the file apart and maps it again each time it grows,
 * and each mapping faults its pages in.)
 *
 * Why it is exact:
 *   - The VFS wraps "unix-excl": this process owns the database, so every
 *     write and truncation of its files goes through store_vfs.c, which
 *     reports it here after the file took it, inside the same call: before
 *     SQLite publishes what it wrote (a commit in the WAL index, a
 *     checkpoint's progress), so no connection looks for bytes the mirror
 *     does not have yet.
 *   - The mirror knows the file's size (from the first open on, moved by
 *     every write and truncation) and holds chunks of FILEMIRROR_CHUNK
 *     bytes, each either absent or equal to the file's bytes in its range,
 *     zero past the file's end (what a later write past the end leaves in
 *     the gap reads as zero in the file too). A read past the end goes to
 *     the file (its short read is SQLite's to see). An absent chunk is
 *     loaded from the caller's own file under the lock held alone. A write
 *     updates the chunks present and makes those wholly past the old end
 *     in a WAL (its appends); it leaves the others absent, loaded on the
 *     next read. A write or truncation that failed leaves the file's bytes
 *     unknown: the mirror stops and every read goes to the file.
 *   - Writes of one file are ordered by SQLite's locks (one WAL writer,
 *     one checkpointer), and each reaches the mirror before its writer
 *     lets the lock go; a load racing a write reads the file before or
 *     after it, and the write's copy comes after the load either way. SQLite
 *     never reads bytes while another connection writes them: readers read
 *     WAL frames up to their snapshot, a writer appends past every
 *     snapshot or starts over only when no reader uses the old WAL, and a
 *     checkpoint copies into the database only pages that every reader
 *     takes from the WAL. The lock is for memory safety, not ordering.
 *
 * Memory: at most a budget of chunks a file (64 MiB a database, 32 MiB a
 * WAL, which the checkpointer starts over past ~16 MB); past it a load
 * first drops a chunk no read touched since the clock hand last passed it.
 * Freed with the mirror when the last connection closes the file.
 *
 * Threads: the registry under reg_mu; a mirror's chunks, size and clock
 * under its rwlock (readers share it, a load, a write or a truncation takes
 * it alone); the touched marks are atomics a reader sets under the shared
 * lock. */
#include "store_filemirror.h"

#include "store.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHUNK ((int64_t)FILEMIRROR_CHUNK)

struct filemirror {
    dev_t dev;
    ino_t ino;
    filemirror_kind_t kind;
    int refs;                   /* guarded by reg_mu */
    struct filemirror *next;    /* guarded by reg_mu: the registry's list */
    pthread_rwlock_t lock;
    int64_t size;               /* guarded by lock: the file's size; -1: stopped */
    size_t n;                   /* guarded by lock: slots in chunk[] and touched[] */
    unsigned char **chunk;      /* guarded by lock; owned, as is each chunk */
    atomic_uchar *touched;      /* a read used the chunk since the hand passed */
    size_t held;                /* guarded by lock: chunks present */
    size_t hand;                /* guarded by lock: the clock's next slot */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static filemirror_t *reg_head;  /* guarded by reg_mu */
static atomic_uint_least64_t hits[2], misses[2];
static atomic_int_least64_t budget[2] = {64 * 1024 * 1024, 32 * 1024 * 1024};

static void mirror_free_chunks(filemirror_t *m)
{
    for (size_t i = 0; i < m->n; i++)
        free(m->chunk[i]);
    free(m->chunk);
    free(m->touched);
    m->chunk = NULL;
    m->touched = NULL;
    m->n = m->held = m->hand = 0;
}

/* Stops the mirror: from now on every read goes to the file. Holds the
 * lock alone. */
static void mirror_stop(filemirror_t *m)
{
    mirror_free_chunks(m);
    m->size = -1;
}

/* A lock that lets a waiting writer in before new readers: with glibc's
 * default (readers first) a steady stream of reading threads could hold
 * a commit's write, which waits for this lock, back for as long as it
 * lasts. 0 or an error number. */
static int mirror_lock_init(pthread_rwlock_t *lock)
{
    pthread_rwlockattr_t attr;
    int rc = pthread_rwlockattr_init(&attr);
    if (rc != 0)
        return rc;
    rc = pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    if (rc == 0)
        rc = pthread_rwlock_init(lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    return rc;
}

/* The registered mirror of the file sb describes, or NULL. Holds reg_mu. */
static filemirror_t *reg_lookup(const struct stat *sb)
{
    filemirror_t *m = reg_head;
    while (m && !(m->dev == sb->st_dev && m->ino == sb->st_ino))
        m = m->next;
    return m;
}

filemirror_t *filemirror_get(const char *path, filemirror_kind_t kind, int64_t size)
{
    struct stat sb;
    if (stat(path, &sb) != 0 || size < 0)
        return NULL;
    pthread_mutex_lock(&reg_mu);
    filemirror_t *m = reg_lookup(&sb);
    if (!m && (m = calloc(1, sizeof *m)) != NULL) {
        if (mirror_lock_init(&m->lock) != 0) {
            free(m);
            m = NULL;
        } else {
            m->dev = sb.st_dev;
            m->ino = sb.st_ino;
            m->kind = kind;
            m->size = size;
            m->next = reg_head;
            reg_head = m;
        }
    }
    if (m)
        m->refs++;
    pthread_mutex_unlock(&reg_mu);
    return m;
}

void filemirror_put(filemirror_t *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&reg_mu);
    int last = --m->refs == 0;
    if (last) {
        filemirror_t **p = &reg_head;
        while (*p != m)
            p = &(*p)->next;
        *p = m->next;
    }
    pthread_mutex_unlock(&reg_mu);
    if (!last)
        return;
    mirror_free_chunks(m);
    pthread_rwlock_destroy(&m->lock);
    free(m);
}

/* Whether chunks [first, last] are all present. Holds the lock. */
static int mirror_has(const filemirror_t *m, size_t first, size_t last)
{
    if (last >= m->n)
        return 0;
    for (size_t c = first; c <= last; c++)
        if (!m->chunk[c])
            return 0;
    return 1;
}

/* The piece of a byte range that lies in one chunk: the range's bytes
 * from `at` on (left of them) that chunk *c holds, from offset *in in it.
 * Returns how many. */
static size_t chunk_piece(int64_t at, size_t left, size_t *c, size_t *in)
{
    *c = (size_t)(at / CHUNK);
    *in = (size_t)(at % CHUNK);
    return FILEMIRROR_CHUNK - *in < left ? FILEMIRROR_CHUNK - *in : left;
}

/* Copies n bytes at off out of present chunks, marking them touched
 * when touch (a read; not a test's peek). Holds the lock (shared will
 * do). */
static void mirror_copy_out(filemirror_t *m, void *out, size_t n, int64_t off, int touch)
{
    for (size_t done = 0, c, in, take; done < n; done += take) {
        take = chunk_piece(off + (int64_t)done, n - done, &c, &in);
        memcpy((unsigned char *)out + done, m->chunk[c] + in, take);
        if (touch)
            atomic_store_explicit(&m->touched[c], 1, memory_order_relaxed);
    }
}

/* Makes room for chunk slot c: 0 or -1 (no memory). Holds the lock alone. */
static int mirror_slots(filemirror_t *m, size_t c)
{
    if (c < m->n)
        return 0;
    size_t n = m->n ? m->n : 16;
    while (n <= c)
        n *= 2;
    unsigned char **chunk = realloc(m->chunk, n * sizeof *chunk);
    if (!chunk)
        return -1;
    m->chunk = chunk;
    atomic_uchar *touched = realloc(m->touched, n * sizeof *touched);
    if (!touched)
        return -1;
    m->touched = touched;
    for (size_t i = m->n; i < n; i++) {
        m->chunk[i] = NULL;
        atomic_init(&m->touched[i], 0);
    }
    m->n = n;
    return 0;
}

/* A new chunk for slot c (zeroed), dropping one no read touched lately
 * when the mirror is at its budget; slots [keep_lo, keep_hi] stay (the
 * read being served). NULL: no memory, or nothing to drop. Holds the lock
 * alone. */
static unsigned char *mirror_new_chunk(filemirror_t *m, size_t c, size_t keep_lo, size_t keep_hi)
{
    if (mirror_slots(m, c) != 0)
        return NULL;
    int64_t most = atomic_load_explicit(&budget[m->kind], memory_order_relaxed) / CHUNK;
    for (size_t steps = 0; (int64_t)m->held >= most && steps < 2 * m->n; steps++) {
        size_t v = m->hand;
        m->hand = (m->hand + 1) % m->n;
        if (!m->chunk[v] || (v >= keep_lo && v <= keep_hi))
            continue;
        if (atomic_exchange_explicit(&m->touched[v], 0, memory_order_relaxed))
            continue;
        free(m->chunk[v]);
        m->chunk[v] = NULL;
        m->held--;
    }
    if ((int64_t)m->held >= most)
        return NULL;
    unsigned char *p = calloc(1, FILEMIRROR_CHUNK);
    if (p) {
        m->chunk[c] = p;
        m->held++;
    }
    return p;
}

/* Loads the absent chunks among [first, last] from the file: 0, or -1
 * (a load failed or no room: the caller reads the file). Holds the lock
 * alone. */
static int mirror_load(filemirror_t *m, size_t first, size_t last, filemirror_load_fn load,
                       void *ctx)
{
    for (size_t c = first; c <= last; c++) {
        if (c < m->n && m->chunk[c])
            continue;
        unsigned char *p = mirror_new_chunk(m, c, first, last);
        if (!p)
            return -1;
        int64_t at = (int64_t)c * CHUNK;
        size_t len = (size_t)(m->size - at < CHUNK ? m->size - at : CHUNK);
        if (load(ctx, p, len, at) != 0) {
            free(p);
            m->chunk[c] = NULL;
            m->held--;
            return -1;
        }
    }
    return 0;
}

int filemirror_read(filemirror_t *m, void *out, size_t n, int64_t off,
                    filemirror_load_fn load, void *ctx)
{
    if (off < 0 || n == 0)
        return 0;
    size_t first = (size_t)(off / CHUNK), last = (size_t)((off + (int64_t)n - 1) / CHUNK);
    pthread_rwlock_rdlock(&m->lock);
    int inside = m->size >= 0 && (int64_t)n <= m->size - off;
    int held = inside && mirror_has(m, first, last);
    if (held)
        mirror_copy_out(m, out, n, off, 1);
    pthread_rwlock_unlock(&m->lock);
    if (held) {
        atomic_fetch_add_explicit(&hits[m->kind], 1, memory_order_relaxed);
        return 1;
    }
    atomic_fetch_add_explicit(&misses[m->kind], 1, memory_order_relaxed);
    if (!inside)
        return 0;
    pthread_rwlock_wrlock(&m->lock);
    /* Looked at again: the size may have moved while the lock was free. */
    int ok = m->size >= 0 && (int64_t)n <= m->size - off &&
             mirror_load(m, first, last, load, ctx) == 0;
    if (ok)
        mirror_copy_out(m, out, n, off, 1);
    pthread_rwlock_unlock(&m->lock);
    return ok;
}

void filemirror_wrote(filemirror_t *m, const void *data, size_t n, int64_t off, int ok)
{
    if (off < 0)
        return;
    pthread_rwlock_wrlock(&m->lock);
    if (!ok && m->size >= 0)
        mirror_stop(m);
    for (size_t done = 0, c, in, take; m->size >= 0 && done < n; done += take) {
        take = chunk_piece(off + (int64_t)done, n - done, &c, &in);
        unsigned char *p = c < m->n ? m->chunk[c] : NULL;
        /* Past the old end a new chunk is exact: the gap before the write
         * reads as zero in the file too. Else it waits for a read's load.
         * Only a WAL's appends make chunks: a database grows by writes
         * (checkpoints; VACUUM INTO's copy, a backup nobody reads back)
         * whose pages are read later if at all. */
        if (!p && m->kind == FILEMIRROR_WAL && (int64_t)c * CHUNK >= m->size)
            p = mirror_new_chunk(m, c, c, c);
        if (p)
            memcpy(p + in, (const unsigned char *)data + done, take);
    }
    if (m->size >= 0 && off + (int64_t)n > m->size)
        m->size = off + (int64_t)n;
    pthread_rwlock_unlock(&m->lock);
}

void filemirror_sized(filemirror_t *m, int64_t size, int ok)
{
    pthread_rwlock_wrlock(&m->lock);
    if ((!ok || size < 0) && m->size >= 0)
        mirror_stop(m);
    if (m->size >= 0) {
        /* Chunks wholly past the new end go; the one it cuts keeps zeros
         * past it, as the file reads if it grows again. */
        for (size_t c = (size_t)((size + CHUNK - 1) / CHUNK); c < m->n; c++) {
            if (m->chunk[c]) {
                free(m->chunk[c]);
                m->chunk[c] = NULL;
                m->held--;
            }
        }
        size_t cut = (size_t)(size / CHUNK);
        if (size % CHUNK && cut < m->n && m->chunk[cut])
            memset(m->chunk[cut] + size % CHUNK, 0, (size_t)(CHUNK - size % CHUNK));
        m->size = size;
    }
    pthread_rwlock_unlock(&m->lock);
}

int64_t filemirror_size(filemirror_t *m)
{
    pthread_rwlock_rdlock(&m->lock);
    int64_t size = m->size;
    pthread_rwlock_unlock(&m->lock);
    return size;
}

void store_file_reads(int wal, uint64_t *memory, uint64_t *file)
{
    int k = wal ? FILEMIRROR_WAL : FILEMIRROR_DB;
    *memory = atomic_load_explicit(&hits[k], memory_order_relaxed);
    *file = atomic_load_explicit(&misses[k], memory_order_relaxed);
}

void filemirror_set_budget(filemirror_kind_t kind, int64_t bytes)
{
    atomic_store_explicit(&budget[kind], bytes, memory_order_relaxed);
}

/* The open mirror of path, with its lock held shared; NULL if none.
 * Holds reg_mu meanwhile (the caller releases both). */
static filemirror_t *mirror_find(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return NULL;
    pthread_mutex_lock(&reg_mu);
    filemirror_t *m = reg_lookup(&sb);
    if (m)
        pthread_rwlock_rdlock(&m->lock);
    else
        pthread_mutex_unlock(&reg_mu);
    return m;
}

static void mirror_found_done(filemirror_t *m)
{
    pthread_rwlock_unlock(&m->lock);
    pthread_mutex_unlock(&reg_mu);
}

int filemirror_peek(const char *path, void *out, size_t n, int64_t off, int64_t *size)
{
    filemirror_t *m = mirror_find(path);
    if (!m)
        return -1;
    int rc = -1;
    if (m->size >= 0) {
        if (size)
            *size = m->size;
        rc = n > 0 && off >= 0 &&
             mirror_has(m, (size_t)(off / CHUNK), (size_t)((off + (int64_t)n - 1) / CHUNK));
        if (rc)
            mirror_copy_out(m, out, n, off, 0);
    }
    mirror_found_done(m);
    return rc;
}

int64_t filemirror_held(const char *path)
{
    filemirror_t *m = mirror_find(path);
    if (!m)
        return -1;
    int64_t held = m->size >= 0 ? (int64_t)m->held * CHUNK : -1;
    mirror_found_done(m);
    return held;
}
