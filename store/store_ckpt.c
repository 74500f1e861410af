/* store_ckpt.c - the WAL checkpointer: checkpoints run on a thread of their
 * own, never inside a writer's COMMIT.
 *
 * SQLite's default (wal_autocheckpoint=1000) runs a checkpoint inside the
 * COMMIT that took the WAL past 1,000 pages, on the committing thread:
 * an fsync of the WAL, the pages copied into the database, an fsync of
 * it. Atoll's writers take turns under store_write_mu (store.c), which
 * is released only after COMMIT returns, so for those 5-9 ms nobody else
 * wrote either. Under bench_share (2 cores) that was 15-20 times a
 * second, mostly in the report applier's commits: the scheduler could not
 * feed the island, the devices ran out of queued computations (2-8 ms
 * idle, island-wide, each time), and the feed's budget grew to cover the
 * stalls, which is what a newcomer waits behind.
 *
 * Here every connection's wal hook (store_ckpt_hook, installed by
 * store_open in place of auto-checkpointing) only tells this thread that
 * the WAL passed STORE_CKPT_PAGES; the thread, with its own connection,
 * runs a PASSIVE checkpoint, which takes no lock a writer needs: commits
 * go on appending meanwhile. Once a checkpoint has copied every frame,
 * the next writer starts the WAL over from its beginning (SQLite), so it
 * stays near STORE_CKPT_PAGES. Writers that always keep it from catching
 * up, or readers that always hold a snapshot of the old WAL when a writer
 * begins (so that it never starts over), would let it grow: past
 * STORE_CKPT_FORCE_PAGES the thread runs a RESTART checkpoint, which waits
 * (busy handler) for the writer and the readers of the old WAL, and makes
 * new writers wait for it: a stall, but only in that case.
 *
 * Durability is unchanged: with synchronous=NORMAL a checkpoint syncs the
 * WAL before copying from it and the database after; group commit
 * (store_sync.c) syncs the WAL for acknowledged writes on its own.
 * Without the thread (unit tests that do not start it) nothing
 * checkpoints until the last connection closes, which checkpoints the
 * whole WAL (SQLite). */
#include "store_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "util.h"

/* How often the thread looks even without a kick: a WAL that stopped
 * short of STORE_CKPT_PAGES is still folded in when writes pause. */
#define CKPT_IDLE_MS 1000

static pthread_mutex_t ckpt_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ckpt_cv = PTHREAD_COND_INITIALIZER;
static pthread_t ckpt_thread;
static int ckpt_on;             /* guarded by ckpt_mu: the thread runs */
static int ckpt_kicked;         /* guarded by ckpt_mu */
/* When a commit kicks the thread: once the WAL holds STORE_CKPT_PAGES
 * frames more than it had at the last run (ckpt_base). A run that copied
 * every frame does not start the WAL over by itself: the next writer
 * does, and only when no reader still holds a snapshot of the old one;
 * under steady reads it often cannot, and the WAL keeps growing past the
 * frames just copied. Counting from zero after such a run (as this did)
 * kicked a checkpoint at every commit until the WAL finally started over:
 * 1.5 checkpoints, each with its two fsyncs, per tiny job under bench_loop.
 * A WAL that started over is seen by its size dropping between commits
 * (ckpt_seen); then the count starts from zero. Hooks run one at a time
 * (a commit's, under the store's write turn), all of this under ckpt_mu.
 * ckpt_restarts tells a run that the WAL started over while it copied, so
 * that it does not set a base from the old WAL. */
static int ckpt_base, ckpt_seen;
static uint64_t ckpt_restarts;
/* Checkpointing thread (or test) only: the frames copied as of the last
 * run, and ckpt_restarts then. */
static int ckpt_done_last;
static uint64_t ckpt_restarts_last;
static _Atomic uint64_t ckpt_runs, ckpt_frames, ckpt_forced, ckpt_kicks;

int store_ckpt_hook(void *arg, sqlite3 *db, const char *name, int pages)
{
    (void)arg;
    (void)db;
    (void)name;
    pthread_mutex_lock(&ckpt_mu);
    if (pages < ckpt_seen) {        /* the WAL started over */
        ckpt_base = 0;
        ckpt_restarts++;
    }
    ckpt_seen = pages;
    if (pages - ckpt_base >= STORE_CKPT_PAGES && !ckpt_kicked) {
        ckpt_kicked = 1;
        atomic_fetch_add(&ckpt_kicks, 1);
        if (ckpt_on)
            pthread_cond_signal(&ckpt_cv);
    }
    pthread_mutex_unlock(&ckpt_mu);
    return SQLITE_OK;
}

/* Of `done` (the WAL's frames copied so far, this run's and earlier
 * ones'), those this run copied: all of them when the WAL started over
 * since the last run (`restarts` moved), else those past the last run's.
 * (A WAL started over between a commit and its hook, with a run in
 * between, miscounts that run's frames: a metric.) */
static int ckpt_fresh(uint64_t restarts, int done)
{
    if (restarts != ckpt_restarts_last)
        return done;
    return done > ckpt_done_last ? done - ckpt_done_last : 0;
}

void store_ckpt_once(sqlite3 *db)
{
    int log = 0, done = 0;
    pthread_mutex_lock(&ckpt_mu);
    ckpt_kicked = 0;                /* commits from now on may ask again */
    uint64_t restarts = ckpt_restarts;
    pthread_mutex_unlock(&ckpt_mu);
    int rc = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
    /* Past STORE_CKPT_FORCE_PAGES, RESTART even when the passive run copied
     * every frame: the WAL starts over only at a writer that finds no
     * reader of the old one, and under steady reads (polls, waits, the
     * scheduler) some reader always had one, so the WAL grew without end
     * (157 MB after 6,000 tiny jobs, 1 KiB pages). RESTART waits for those
     * readers (short transactions) and makes the next writer start over. */
    if (rc == SQLITE_OK && log >= STORE_CKPT_FORCE_PAGES) {
        rc = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_RESTART, &log, &done);
        atomic_fetch_add(&ckpt_forced, 1);
    }
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) {
        log_warn("store: checkpoint: %s", sqlite3_errmsg(db));
        return;
    }
    atomic_fetch_add(&ckpt_runs, 1);
    if (log < 0 || done < 0)
        return;         /* not in WAL mode (SQLite says -1): nothing to follow */
    atomic_fetch_add(&ckpt_frames, (uint64_t)ckpt_fresh(restarts, done));
    ckpt_restarts_last = restarts;
    ckpt_done_last = done;
    pthread_mutex_lock(&ckpt_mu);
    if (ckpt_restarts == restarts)
        ckpt_base = log;
    pthread_mutex_unlock(&ckpt_mu);
}

static void *ckpt_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "atoll-ckpt");
    store_t *st = store_thread();
    if (!st)
        log_error("store: no connection for the checkpointer; the WAL grows until exit");
    pthread_mutex_lock(&ckpt_mu);
    while (ckpt_on) {
        if (!ckpt_kicked) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += CKPT_IDLE_MS / 1000;
            pthread_cond_timedwait(&ckpt_cv, &ckpt_mu, &ts);
        }
        int go = ckpt_on && st;
        pthread_mutex_unlock(&ckpt_mu);
        if (go)
            store_ckpt_once(store_db(st));
        pthread_mutex_lock(&ckpt_mu);
    }
    pthread_mutex_unlock(&ckpt_mu);
    store_thread_close();
    return NULL;
}

int store_ckpt_start(void)
{
    pthread_mutex_lock(&ckpt_mu);
    int rc = 0;
    if (!ckpt_on) {
        ckpt_on = 1;
        if (pthread_create(&ckpt_thread, NULL, ckpt_main, NULL) != 0) {
            ckpt_on = 0;
            rc = -1;
        }
    }
    pthread_mutex_unlock(&ckpt_mu);
    return rc;
}

void store_ckpt_stop(void)
{
    pthread_mutex_lock(&ckpt_mu);
    int was = ckpt_on;
    ckpt_on = 0;
    pthread_cond_signal(&ckpt_cv);
    pthread_mutex_unlock(&ckpt_mu);
    if (was)
        pthread_join(ckpt_thread, NULL);
}

void store_ckpt_counts(uint64_t *runs, uint64_t *frames, uint64_t *forced, uint64_t *kicks)
{
    *kicks = atomic_load(&ckpt_kicks);
    *runs = atomic_load(&ckpt_runs);
    *frames = atomic_load(&ckpt_frames);
    *forced = atomic_load(&ckpt_forced);
}
