/* store_devlog.c - which devices each move of store_devices_gen changed.
 *
 * The scheduler keeps a mirror of every island's devices (sched_place.c)
 * and read the whole island again whenever the generation moved: after
 * every job's end, at 2,048 devices, 0.3 ms of scans plus the rebuild,
 * the largest part of most passes under bench_passes. The TEMP triggers
 * that mark a device change (store.c, STORE_WATCH_SQL) now name the
 * device; a connection collects them during its transaction
 * (store_devlog_note) and, when it commits, the generation moves and its
 * devices are appended to a ring with it (store_devlog_publish), under
 * one mutex so that a reader sees every device of every generation up to
 * the one it is told. A change that is not one device's (a worker's
 * registration or state, a database opened, more devices than a
 * connection collects) is published as "everything". A reader asks what
 * changed on an island since the generation it last read
 * (store_devlog_since) and re-reads only those devices, or everything
 * when the answer is -1: "everything" in between, entries the ring
 * already dropped, or more devices than it wants to patch. A job's end
 * frees all its devices at once (store_free_job_devices): that is
 * published as the job, not as its devices, and the reader frees what its
 * mirror shows the job holding without a read (2,048 devices: a read of
 * the whole island was 0.6-1.5 ms of the next pass under bench_passes).
 * What a transaction rolled back is forgotten with it (store_rollback),
 * and the generation moves before the writer releases the write lock
 * (store_commit): inside a write transaction, a generation that moved only
 * by the reader's own commits since it read means nobody else changed a
 * device (sched_round_current), and an allocation skips reading its
 * devices' workers again.
 *
 * Invariant (under devlog_mu): every generation in (0, devlog_gen] has at
 * least one entry, written in generation order; devlog_n counts entries
 * ever written, the last DEVLOG_CAP of which are kept. */
#include "store_internal.h"

#include <pthread.h>
#include <stdatomic.h>

#define DEVLOG_CAP 16384

typedef struct devlog_ent {
    uint64_t gen;
    int64_t island;             /* for DEVLOG_FREED: the job */
    int64_t idx;                /* a device, DEVLOG_ALL or DEVLOG_FREED */
    uint32_t writer;            /* the committing connection's tag; 0: unknown */
} devlog_ent_t;
#define DEVLOG_ALL (-1)         /* everything changed */
#define DEVLOG_FREED (-2)       /* every device of job `island` was freed */

static pthread_mutex_t devlog_mu = PTHREAD_MUTEX_INITIALIZER;
static devlog_ent_t devlog[DEVLOG_CAP];
static uint64_t devlog_n;               /* guarded by devlog_mu */
static _Atomic uint64_t devlog_gen;     /* written under devlog_mu; read by anyone */

void store_devlog_note(store_devchg_t *c, int64_t island, int64_t idx)
{
    if (c->all || c->quiet)
        return;
    for (int i = 0; i < c->n; i++)
        if (c->dev[i][0] == island && c->dev[i][1] == idx)
            return;
    if (c->n == STORE_DEVCHG_MAX || idx < 0) {
        c->all = 1;
        return;
    }
    c->dev[c->n][0] = island;
    c->dev[c->n++][1] = idx;
}

void store_devlog_note_freed(store_devchg_t *c, int64_t job)
{
    for (int i = 0; i < c->nfreed; i++)
        if (c->freed[i] == job)
            return;
    if (c->nfreed == STORE_DEVLOG_JOBS)
        c->all = 1;
    else
        c->freed[c->nfreed++] = job;
}

static void devlog_put(uint64_t gen, int64_t island, int64_t idx, uint32_t writer)
{
    devlog[devlog_n % DEVLOG_CAP] = (devlog_ent_t){gen, island, idx, writer};
    devlog_n++;
}

void store_devlog_publish(store_devchg_t *c)
{
    pthread_mutex_lock(&devlog_mu);
    uint64_t gen = atomic_load(&devlog_gen) + 1;
    uint32_t w = c ? c->writer : 0;
    if (!c || c->all || (c->n == 0 && c->nfreed == 0)) {
        devlog_put(gen, 0, DEVLOG_ALL, w);
    } else {
        for (int i = 0; i < c->nfreed; i++)
            devlog_put(gen, c->freed[i], DEVLOG_FREED, w);
        for (int i = 0; i < c->n; i++)
            devlog_put(gen, c->dev[i][0], c->dev[i][1], w);
    }
    atomic_store(&devlog_gen, gen);
    pthread_mutex_unlock(&devlog_mu);
    if (c)
        store_devlog_clear(c);
}

uint64_t store_devices_gen(void) { return atomic_load(&devlog_gen); }

/* Adds key to a[0..*n) unless there; 0, or -1 when a holds cap already. */
static int add_unique(int64_t *a, int *n, int cap, int64_t key)
{
    for (int j = 0; j < *n; j++)
        if (a[j] == key)
            return 0;
    if (*n == cap)
        return -1;
    a[(*n)++] = key;
    return 0;
}

int store_devlog_since(uint64_t since, int64_t island, store_devlog_view_t *v)
{
    int rc = 0;
    v->n = v->njobs = 0;
    pthread_mutex_lock(&devlog_mu);
    uint64_t gen = atomic_load(&devlog_gen), i = devlog_n;
    v->upto = gen;
    /* Back from the newest entry to the last of generation `since` or
     * older: all of (since, gen] must still be in the ring. Freed jobs
     * concern every island (a job's devices may be on any). */
    for (; i > 0 && devlog[(i - 1) % DEVLOG_CAP].gen > since; i--) {
        const devlog_ent_t *e = &devlog[(i - 1) % DEVLOG_CAP];
        if (devlog_n - (i - 1) > DEVLOG_CAP) {
            rc = -1;
            break;
        }
        if (v->skip_writer != 0 && e->writer == v->skip_writer)
            continue;   /* the reader holds its own changes already */
        if (e->idx == DEVLOG_ALL) {
            rc = -1;
            break;
        }
        int full = e->idx == DEVLOG_FREED
                       ? add_unique(v->jobs, &v->njobs, STORE_DEVLOG_JOBS, e->island)
                   : e->island == island ? add_unique(v->idx, &v->n, v->cap, e->idx) : 0;
        if (full) {
            rc = -1;
            break;
        }
    }
    /* Stopping at an entry of `since` or older, or at the first entry ever
     * written, leaves none of (since, gen] unseen: a slot that was written
     * over holds a newer entry, which the loop takes for one of the range
     * and refuses as dropped. */
    pthread_mutex_unlock(&devlog_mu);
    return rc;
}
