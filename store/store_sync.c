/* store_sync.c - group commit: acknowledged writes reach the disk, and
 * concurrent writers share one fdatasync.
 *
 * Every connection commits with synchronous=NORMAL: in WAL mode a COMMIT
 * appends its frames to the -wal file with write() and no fsync, which is
 * durable across a process crash (kill -9) but not across power loss. A
 * handler about to acknowledge a write to a client (the 201 of POST
 * /v1/jobs) asks for a round (store_sync_request) and answers once that
 * round, an fdatasync of the WAL that *began after* the caller's COMMIT
 * returned, has finished. Such an fdatasync covers every commit before
 * it, from any connection, so callers asking while one runs wait for the
 * next round and share it: one fsync per round, not per commit, and no
 * fsync inside SQLite's write lock.
 *
 * Rounds run on one thread of their own (atoll-sync, started with the
 * first request). An HTTP handler does not wait for its round: it parks
 * its request (store_sync_gen), and the thread's hook (store_sync_hook:
 * atolld's http_wake) runs it again after each round. A handler that ran
 * the fdatasync itself, as before, held its HTTP thread for the sync's
 * 150-350 us, and every other connection that thread served (a worker's
 * poll answering the job just admitted) waited behind it.
 *
 * Checkpoints stay correct without us: with synchronous=NORMAL SQLite
 * syncs the WAL before copying frames into the database and the database
 * after, so a commit that was checkpointed (and its WAL space reused) before
 * our round is on disk already.
 *
 * Invariant (under sync_mu): rounds run one at a time and are numbered in
 * the order they start; sync_started is the number of the last round that
 * began, sync_done of the last that finished, sync_wanted the highest
 * round asked for. A request made when sync_started == k needs round
 * k + 1 (its ticket). A failed fdatasync is sticky (the kernel may have
 * dropped the dirty pages: retrying could report success for lost data),
 * so every ticket fails from then on until atolld is restarted and SQLite
 * recovers the WAL. */
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

static store_durability_t sync_mode = STORE_DURABLE_GROUP;
static char sync_db_path[4096];
static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sync_cv = PTHREAD_COND_INITIALIZER;
static uint64_t sync_started, sync_done;
static int sync_busy, sync_failed;
/* The WAL's descriptor; used only by the round's leader (sync_busy). */
static int sync_wal_fd = -1;
static _Atomic uint64_t sync_rounds, sync_waits;
/* Each round's fdatasync, in µs (/metrics: atoll_store_sync_seconds).
 * On one connection requests are sequential, so this is the floor of
 * each acknowledged write's time there (docs/performance.md, stop 82). */
const int64_t store_sync_bounds_us[STORE_SYNC_NBOUNDS] = {50,    100,   250,    500,
                                                          1000,  2500,  5000,   10000,
                                                          25000, 100000, 1000000};
_Static_assert(STORE_SYNC_NBOUNDS <= UTIL_HIST_MAX_BOUNDS, "util_hist_t holds the sync buckets");
static util_hist_t sync_hist = {.bounds_us = store_sync_bounds_us,
                                .nbounds = STORE_SYNC_NBOUNDS};

int store_durability_parse(const char *s, store_durability_t *out)
{
    static const char *const names[] = {"group", "commit", "none"};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = (store_durability_t)i;
            return 0;
        }
    return -1;
}

void store_sync_setup(const char *db_path, store_durability_t mode)
{
    sync_mode = mode;
    snprintf(sync_db_path, sizeof sync_db_path, "%s", db_path);
}

store_durability_t store_durability(void) { return sync_mode; }

/* fsync of the database's directory: makes a newly created -wal file's
 * directory entry durable (its data alone is not enough after a crash). */
static int sync_dir(void)
{
    char copy[sizeof sync_db_path];
    snprintf(copy, sizeof copy, "%s", sync_db_path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* One round: (re)opens the WAL when it is not open or was unlinked, then
 * fdatasync. Runs only in the round's leader. 0 or -1 (logged). */
static int sync_wal(void)
{
    struct stat sb;
    if (sync_wal_fd >= 0 && (fstat(sync_wal_fd, &sb) != 0 || sb.st_nlink == 0)) {
        close(sync_wal_fd);
        sync_wal_fd = -1;
    }
    if (sync_wal_fd < 0) {
        char wal[sizeof sync_db_path + 8];
        snprintf(wal, sizeof wal, "%s-wal", sync_db_path);
        if ((sync_wal_fd = open(wal, O_RDONLY | O_CLOEXEC)) < 0 || sync_dir() != 0) {
            log_error("group commit: cannot open %s or sync its directory: %s", wal,
                      strerror(errno));
            return -1;
        }
    }
    int64_t t0 = util_mono_us();
    if (fdatasync(sync_wal_fd) != 0) {
        log_error("group commit: fdatasync of the WAL failed: %s; acknowledged writes are"
                  " refused from now on (restart atolld)", strerror(errno));
        return -1;
    }
    util_hist_add(&sync_hist, util_mono_us() - t0);
    atomic_fetch_add(&sync_rounds, 1);
    return 0;
}

/* The sync thread: a round whenever one was asked for that has not begun,
 * until store_sync_stop and every asked round ran. */
static pthread_cond_t sync_work_cv = PTHREAD_COND_INITIALIZER;
static pthread_once_t sync_once = PTHREAD_ONCE_INIT;
static pthread_t sync_thread;
static uint64_t sync_wanted;
static int sync_on, sync_stopping;      /* guarded by sync_mu */
static void (*sync_hook)(void);         /* set before the first request */

/* One round, sync_mu held on entry and return (dropped around the sync);
 * only while no other round runs (!sync_busy): rounds are one at a time. */
static void sync_round(void)
{
    sync_busy = 1;
    uint64_t round = ++sync_started;
    pthread_mutex_unlock(&sync_mu);
    int rc = sync_wal();
    pthread_mutex_lock(&sync_mu);
    sync_busy = 0;
    if (rc != 0)
        sync_failed = 1;
    else
        sync_done = round;
    pthread_cond_broadcast(&sync_cv);
    pthread_cond_broadcast(&sync_work_cv);     /* the thread may wait for this round's end */
}

static void *sync_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "atoll-sync");
    pthread_mutex_lock(&sync_mu);
    for (;;) {
        /* A caller runs rounds itself once the thread is told to stop
         * (store_sync_request): never two at once. */
        while (sync_busy || (sync_wanted <= sync_started && !sync_stopping))
            pthread_cond_wait(&sync_work_cv, &sync_mu);
        if (sync_wanted <= sync_started)
            break;      /* stopping, and every asked round ran */
        sync_round();
        pthread_mutex_unlock(&sync_mu);
        if (sync_hook)
            sync_hook();    /* parked answers whose round this was go out */
        pthread_mutex_lock(&sync_mu);
    }
    pthread_mutex_unlock(&sync_mu);
    return NULL;
}

static void sync_start(void)
{
    pthread_mutex_lock(&sync_mu);
    if (!sync_stopping && pthread_create(&sync_thread, NULL, sync_main, NULL) == 0)
        sync_on = 1;
    else if (!sync_stopping)
        log_warn("group commit: no sync thread; each acknowledgement syncs on its own thread");
    pthread_mutex_unlock(&sync_mu);
}

void store_sync_hook(void (*fn)(void)) { sync_hook = fn; }

uint64_t store_sync_request(void)
{
    if (sync_mode != STORE_DURABLE_GROUP)
        return 0;
    atomic_fetch_add(&sync_waits, 1);
    pthread_once(&sync_once, sync_start);
    pthread_mutex_lock(&sync_mu);
    uint64_t ticket = sync_started + 1;
    if (ticket > sync_wanted)
        sync_wanted = ticket;
    if (sync_on) {
        pthread_cond_signal(&sync_work_cv);
    } else {
        /* No thread (it could not start, or the store is stopping): the
         * caller runs the rounds it needs. */
        while (sync_done < ticket && !sync_failed) {
            if (sync_busy)
                pthread_cond_wait(&sync_cv, &sync_mu);
            else
                sync_round();
        }
    }
    pthread_mutex_unlock(&sync_mu);
    return ticket;
}

int store_sync_check(uint64_t ticket)
{
    if (ticket == 0)
        return 1;
    pthread_mutex_lock(&sync_mu);
    int rc = sync_failed ? -1 : sync_done >= ticket ? 1 : 0;
    pthread_mutex_unlock(&sync_mu);
    return rc;
}

uint64_t store_sync_gen(int64_t ticket)
{
    return store_sync_check((uint64_t)ticket) != 0;
}

int store_sync_wait(uint64_t ticket)
{
    if (ticket == 0)
        return 0;
    pthread_mutex_lock(&sync_mu);
    while (sync_done < ticket && !sync_failed)
        pthread_cond_wait(&sync_cv, &sync_mu);
    int rc = sync_failed ? -1 : 0;
    pthread_mutex_unlock(&sync_mu);
    return rc;
}

void store_sync_stop(void)
{
    pthread_mutex_lock(&sync_mu);
    sync_stopping = 1;
    int on = sync_on;
    sync_on = 0;
    pthread_cond_broadcast(&sync_work_cv);
    pthread_mutex_unlock(&sync_mu);
    if (on)
        pthread_join(sync_thread, NULL);
}

uint64_t store_sync_rounds(void) { return atomic_load(&sync_rounds); }
uint64_t store_sync_waits(void) { return atomic_load(&sync_waits); }
const util_hist_t *store_sync_histogram(void) { return &sync_hist; }

void store_sync_close(void)
{
    pthread_mutex_lock(&sync_mu);
    if (sync_wal_fd >= 0 && !sync_busy) {
        close(sync_wal_fd);
        sync_wal_fd = -1;
    }
    pthread_mutex_unlock(&sync_mu);
}
