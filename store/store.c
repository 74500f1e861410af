/* store.c - connections, statement cache, migrations, islands.
 *
 * One connection per thread (SQLite's rule): store_thread() opens it on a
 * thread's first call and a pthread key closes it when the thread ends, so
 * a store_t and its cached statements are never shared. WAL, busy_timeout,
 * synchronous=NORMAL (FULL under --durability commit; store_sync.c makes
 * acknowledged writes durable).
 * Process-wide state is written before threads share it (store_path and
 * the cluster secret by store_global_init) or is atomic (the write
 * counters: store_write_txns from the commit hook, the poll watch's
 * generations after a store_commit that changed what a parked poll or job
 * wait answers, read by them to skip re-reading the store). Every read-modify-write runs in BEGIN IMMEDIATE (store_begin),
 * and the process's write transactions take turns on one mutex
 * (store_write_mu) rather than in SQLite's busy handler. */
#include "store_internal.h"

#include <nettle/base16.h>
#include <nettle/hmac.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "jscan.h"
#include "jtext.h"
#include "util.h"

#define STORE_STMT_CACHE 96
#define STORE_BUSY_TIMEOUT_MS 10000

/* The transaction statements, by index into store_t.txn and
 * store_txn_sql. */
enum { STORE_TXN_BEGIN, STORE_TXN_BEGIN_READ, STORE_TXN_COMMIT, STORE_TXN_ROLLBACK,
       STORE_TXN__N };

/* Poll watch (STORE_WATCH_SQL): whose parked requests the open
 * transaction concerns, in one family (workers, or jobs), applied to that
 * family's generations by store_commit. */
#define STORE_KICK_MAX 32
#define STORE_NEW_LEASED 8
typedef struct kick_set {
    int all;                    /* everyone (a worker's state; more than STORE_KICK_MAX) */
    int n;
    uint32_t slot[STORE_KICK_MAX];  /* distinct slots (STORE_WATCH_SLOTS) */
} kick_set_t;

struct store {
    sqlite3 *db;
    kick_set_t kick_workers, kick_jobs, kick_stale;
    /* The (job, attempt) pairs this transaction inserted leased host tasks
     * of (store_note_leased), checked once each at commit: a trigger per
     * row made every dispatched task cost a subquery (~5 us; 5-8 % of the
     * scheduler's CPU per pass at 2,048 devices). Past STORE_NEW_LEASED
     * pairs, new_leased_all: every worker's stale generation moves. */
    int n_new_leased, new_leased_all;
    int64_t new_leased[STORE_NEW_LEASED][2];
    store_devchg_t devchg;      /* which devices (store_devlog.c) */
    uint64_t device_commits;    /* commits of this connection that moved store_devices_gen */
    int holds_write;            /* this connection holds store_write_mu (store_begin) */
    int64_t write_since_us;     /* when it took it (util_mono_us), while holds_write */
    int nstmts;
    const char *sql[STORE_STMT_CACHE];     /* cache key: pointer identity */
    sqlite3_stmt *stmt[STORE_STMT_CACHE];
    /* BEGIN IMMEDIATE, BEGIN DEFERRED, COMMIT, ROLLBACK (store_txn_sql),
     * prepared on first use: through sqlite3_exec each was parsed again
     * every time, ~62K instructions of a tiny job's ~2.2M in atolld
     * (callgrind, stop 63). Owned; finalized by store_close. */
    sqlite3_stmt *txn[STORE_TXN__N];
    void *outputs_cache;        /* store_progress.c's (store_outputs_cache): one block */
    /* What this connection's write transaction changed of the carried
     * progress (comp_carry.h): applied by store_commit before the write
     * lock goes, dropped by store_rollback. Owned. */
    comp_carry_txn_t carry;
};

extern const char *const store_migrations[];
extern const int store_migration_count;

static char store_path[4096];
/* Write transactions committed by any connection (explicit or autocommit),
 * counted by the commit hook: atoll_store_write_transactions_total. */
static _Atomic uint64_t store_write_txns;
/* Generations that move after a write transaction committed through
 * store_commit() is visible to readers, when it changed what a parked
 * request would answer: per family (worker polls; job waits), one for
 * everyone and one slot per id (modulo the slots: ids that share a slot
 * only cost each other a spurious read). An id's generation is the sum of
 * both, and only grows. Reports, the bulk of the writes while jobs run,
 * move none of them. */
#define STORE_WATCH_SLOTS 4096
typedef struct watch_gen {
    _Atomic uint64_t all;
    _Atomic uint64_t slot[STORE_WATCH_SLOTS];
} watch_gen_t;
static watch_gen_t store_worker_watch, store_job_watch;
/* A third family, for store_poll.c's memo of a worker whose probe found no
 * stale attempt: moved only by what can make one appear (see
 * STORE_WATCH_SQL), not by the dispatch of new tasks, which moves the
 * worker's poll generation at every chunk of a running job. */
static watch_gen_t store_stale_watch;
/* Set once the schema is migrated: connections opened later install the
 * poll watch at once (the first one, after migrating). */
static _Atomic int store_schema_ready;
/* Write transactions of this process queue here instead of in SQLite's
 * busy handler, which sleeps 1, 2, 5, 10 ms... between tries: a report
 * or a poll that met another thread's transaction lost milliseconds for
 * a lock held tens of microseconds. Held from store_begin() to the end of
 * its transaction (store_commit or store_rollback), by one thread. */
static pthread_mutex_t store_write_mu = PTHREAD_MUTEX_INITIALIZER;
/* How long store_begin waited for store_write_mu, and how long each
 * transaction then held it (/metrics): every write of every thread queues
 * on this one lock, so a long holder delays reports, polls' leases and
 * scheduler passes alike. */
static const int64_t store_lock_bounds_us[] = {10,    50,    100,    250,    500,    1000,
                                               2500,  5000,  10000,  25000,  100000, 1000000};
#define STORE_LOCK_NBOUNDS ((int)(sizeof store_lock_bounds_us / sizeof store_lock_bounds_us[0]))
_Static_assert(STORE_LOCK_NBOUNDS <= UTIL_HIST_MAX_BOUNDS, "util_hist_t holds the lock buckets");
static util_hist_t store_lock_hists[2] = {
    {.bounds_us = store_lock_bounds_us, .nbounds = STORE_LOCK_NBOUNDS},
    {.bounds_us = store_lock_bounds_us, .nbounds = STORE_LOCK_NBOUNDS}};
static pthread_key_t store_key;
static pthread_once_t store_key_once = PTHREAD_ONCE_INIT;

static void store_close(store_t *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->nstmts; i++)
        sqlite3_finalize(st->stmt[i]);
    for (int i = 0; i < STORE_TXN__N; i++)
        sqlite3_finalize(st->txn[i]);
    sqlite3_close(st->db);      /* rolls back a transaction left open */
    if (st->holds_write)
        pthread_mutex_unlock(&store_write_mu);
    comp_carry_txn_free(&st->carry);
    free(st->outputs_cache);
    free(st);
}

comp_carry_txn_t *store_carry(store_t *st) { return &st->carry; }

void *store_outputs_cache(store_t *st, size_t size)
{
    if (!st->outputs_cache)
        st->outputs_cache = calloc(1, size);
    return st->outputs_cache;
}

static void store_key_destroy(void *p) { store_close(p); }
static void store_key_make(void) { pthread_key_create(&store_key, store_key_destroy); }

static int store_exec(store_t *st, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        log_error("sqlite: %s (in: %.80s)", msg ? msg : "?", sql);
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static const char *const store_txn_sql[STORE_TXN__N] = {"BEGIN IMMEDIATE", "BEGIN DEFERRED",
                                                        "COMMIT", "ROLLBACK"};

/* Runs transaction statement `which` (its prepared copy, made on first
 * use). A failure is logged and leaves the transaction as SQLite left it
 * (a COMMIT that met SQLITE_BUSY keeps it open), exactly as sqlite3_exec
 * of the same text would. 0 or -1. */
static int store_txn(store_t *st, int which)
{
    const char *sql = store_txn_sql[which];
    sqlite3_stmt **s = &st->txn[which];
    if (!*s && sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, s, NULL) !=
                   SQLITE_OK) {
        log_error("sqlite prepare: %s (in: %s)", sqlite3_errmsg(st->db), sql);
        *s = NULL;
        return -1;
    }
    int rc = sqlite3_step(*s);
    if (rc != SQLITE_DONE)
        log_error("sqlite: %s (in: %s)", sqlite3_errmsg(st->db), sql);
    sqlite3_reset(*s);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* sqlite3_commit_hook: called inside the commit of every write transaction
 * (a read-only one never calls it). Returns 0: the commit goes ahead. */
static int store_on_commit(void *arg)
{
    (void)arg;
    atomic_fetch_add(&store_write_txns, 1);
    return 0;
}

uint64_t store_write_transactions(void) { return atomic_load(&store_write_txns); }

const util_hist_t *store_lock_histogram(int which)
{
    return &store_lock_hists[which == STORE_LOCK_HOLD];
}

/* Lease ids (host_tasks.leased_at) only grow, even if the wall clock steps
 * back. Drawn inside write transactions, which take turns, so a larger id
 * is never committed before a smaller one: a worker that acknowledged id L
 * has received every row of its leased at or before L (store_poll.c). */
static _Atomic int64_t store_last_lease;

/* Lease ids continue from the newest one stored, not from the wall clock
 * alone: a worker that acknowledged an id issued before a restart must
 * still be handed what is leased after it, even if the clock stepped back
 * meanwhile (index host_tasks_by_lease: one b-tree probe). 0 or -1. */
static int lease_seed(store_t *st)
{
    sqlite3_stmt *s = store_stmt(st, "SELECT MAX(leased_at) FROM host_tasks");
    if (!s)
        return -1;
    int rc = sqlite3_step(s);
    int64_t newest = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    if (rc != SQLITE_ROW)
        return -1;
    int64_t last = atomic_load(&store_last_lease);
    while (newest > last && !atomic_compare_exchange_weak(&store_last_lease, &last, newest))
        ;
    return 0;
}

int64_t store_lease_id(void)
{
    int64_t now = util_wall_us(), last = atomic_load(&store_last_lease);
    while (1) {
        int64_t id = now > last ? now : last + 1;
        if (atomic_compare_exchange_weak(&store_last_lease, &last, id))
            return id;
    }
}
static uint32_t watch_slot(int64_t id) { return (uint32_t)((uint64_t)id % STORE_WATCH_SLOTS); }

/* Both terms only grow, so the sum moves whenever either does. */
static uint64_t watch_read(watch_gen_t *g, int64_t id)
{
    return atomic_load(&g->all) + atomic_load(&g->slot[watch_slot(id)]);
}

uint64_t store_poll_gen(int64_t worker) { return watch_read(&store_worker_watch, worker); }
uint64_t store_workers_gen(void) { return atomic_load(&store_worker_watch.all); }
uint64_t store_stale_gen(int64_t worker) { return watch_read(&store_stale_watch, worker); }
uint64_t store_job_gen(int64_t job) { return watch_read(&store_job_watch, job); }
uint64_t store_devices_commits(const store_t *st) { return st->device_commits; }

uint32_t store_devlog_writer(const store_t *st) { return st->devchg.writer; }

/* What a worker's poll answers (store_poll.c's probe) depends on: its host
 * tasks becoming leased (dispatch, release) or cancelled, a job
 * it holds leased tasks of ending or moving to a new attempt (they must be
 * aborted), a worker's state, and a lost predecessor's tasks. These TEMP
 * triggers (per connection, nothing in the schema) note in the
 * connection's transaction whom it concerns: the worker of the task row,
 * the workers holding leased tasks of the job, everyone (a worker's state,
 * a lost worker's tasks, which its successor's poll reports). store_commit
 * then moves their generations. A spurious kick (a rolled-back write)
 * costs a parked poll one probe; a missed one would delay a worker by its
 * poll wait, so every column the probe reads that can make it true is
 * watched here. A job's end or new attempt also moves its job slot.
 * The watch_dev_* and watch_alloc_* triggers mark a transaction that
 * changed what store_sched_devices reads (only those columns: a report's
 * busy_us update must not invalidate the scheduler's mirror); the
 * scheduler's own allocations and frees are quiet and note their runs
 * themselves (store_step_devices, store_free_job_devices); the
 * allocations triggers name a run's devices for any other writer.
 * The stale family (store_stale_gen) is kicked by a job's end or new
 * attempt (its leased tasks' workers), a stale task released to leased,
 * a worker lost, registered or changed; a stale task inserted leased is
 * checked once per (job, attempt) at commit instead (store_note_leased),
 * since a trigger per inserted row cost every dispatched task a subquery. */
/* A host task row NEW of a job that ended or moved past its attempt. */
#define STORE_WATCH_STALE \
    " EXISTS (SELECT 1 FROM main.jobs j WHERE j.id = NEW.job_id" \
    " AND " STORE_ATTEMPT_STALE("j.state", "NEW.attempt", "j.attempt") ")"
#define STORE_WATCH_SQL \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_task_new AFTER INSERT ON main.host_tasks" \
    " BEGIN SELECT atoll_kick_worker(NEW.worker_id); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_task_state AFTER UPDATE OF state ON main.host_tasks" \
    " WHEN NEW.state IN ('leased', 'cancelled') BEGIN SELECT atoll_kick_worker(NEW.worker_id);" \
    " SELECT atoll_kick_all(), atoll_kick_stale() WHERE NEW.error = 'worker lost';" \
    " SELECT atoll_kick_stale(NEW.worker_id) WHERE NEW.state = 'leased' AND" \
    STORE_WATCH_STALE "; END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_job AFTER UPDATE OF state, attempt ON main.jobs" \
    " WHEN " STORE_JOB_ENDED("NEW.state") " OR NEW.attempt <> OLD.attempt" \
    " BEGIN SELECT atoll_kick_job(NEW.id);" \
    " SELECT atoll_kick_worker(worker_id), atoll_kick_stale(worker_id) FROM main.host_tasks" \
    "  WHERE job_id = NEW.id AND state = 'leased'; END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_worker AFTER UPDATE OF state ON main.workers" \
    " BEGIN SELECT atoll_kick_all(); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_stale_worker AFTER UPDATE OF state, pid, host," \
    " data_addr ON main.workers BEGIN SELECT atoll_kick_stale(); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_stale_worker_new AFTER INSERT ON main.workers" \
    " BEGIN SELECT atoll_kick_stale(); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_dev_new AFTER INSERT ON main.devices" \
    " BEGIN SELECT atoll_kick_devices(NEW.island_id, NEW.idx); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_dev_set AFTER UPDATE OF worker_id, local" \
    " ON main.devices BEGIN SELECT atoll_kick_devices(NEW.island_id, NEW.idx); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_alloc_new AFTER INSERT ON main.allocations" \
    " BEGIN SELECT atoll_kick_run(NEW.island_id, NEW.lo, NEW.hi); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_alloc_gone AFTER DELETE ON main.allocations" \
    " BEGIN SELECT atoll_kick_run(OLD.island_id, OLD.lo, OLD.hi); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_dev_gone AFTER DELETE ON main.devices" \
    " BEGIN SELECT atoll_kick_devices(OLD.island_id, OLD.idx); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_hold_new AFTER INSERT ON main.device_holds" \
    " BEGIN SELECT atoll_kick_devices(NEW.island_id, NEW.idx); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_hold_gone AFTER DELETE ON main.device_holds" \
    " BEGIN SELECT atoll_kick_devices(OLD.island_id, OLD.idx); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_dev_worker_new AFTER INSERT ON main.workers" \
    " BEGIN SELECT atoll_kick_devices(); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_dev_worker AFTER UPDATE OF state, data_addr," \
    " first_device, ndevices ON main.workers BEGIN SELECT atoll_kick_devices(); END;" \
    "CREATE TEMP TRIGGER IF NOT EXISTS watch_dev_memory AFTER UPDATE OF store_cap_bytes" \
    " ON main.workers WHEN OLD.store_cap_bytes IS NOT NEW.store_cap_bytes BEGIN" \
    " SELECT atoll_kick_devices(d.island_id, d.idx) FROM main.devices d" \
    "  WHERE d.island_id = NEW.island_id AND d.idx BETWEEN NEW.first_device" \
    "  AND NEW.first_device + NEW.ndevices - 1 AND d.worker_id = NEW.id; END;"

/* atoll_kick_worker(id), atoll_kick_job(id): the parked requests of that
 * id may answer otherwise; atoll_kick_all(): every worker's. The user data
 * is the connection's kick set of that family. */
static void store_kick_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    kick_set_t *k = sqlite3_user_data(ctx);
    uint32_t slot = argc ? watch_slot(sqlite3_value_int64(argv[0])) : 0;
    int i = 0;
    while (argc && i < k->n && k->slot[i] != slot)
        i++;
    if (!argc || (i == k->n && k->n == STORE_KICK_MAX))
        k->all = 1;
    else if (i == k->n)
        k->slot[k->n++] = slot;
    sqlite3_result_null(ctx);
}

/* atoll_kick_devices(island, idx): the transaction changed that device's
 * holder, shared holds, worker or local number; atoll_kick_devices():
 * something of every device's (a worker registered, left, moved). The
 * user data is the connection. */
static void store_kick_devices_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    store_t *st = sqlite3_user_data(ctx);
    store_devlog_note(&st->devchg, argc == 2 ? sqlite3_value_int64(argv[0]) : 0,
                      argc == 2 ? sqlite3_value_int64(argv[1]) : -1);
    sqlite3_result_null(ctx);
}

/* Notes devices [lo, hi] of island (the whole island when they would
 * overflow the transaction's list). */
static void note_range(store_t *st, int64_t island, int64_t lo, int64_t hi)
{
    if (hi - lo + 1 + st->devchg.n > STORE_DEVCHG_MAX)
        store_devlog_note(&st->devchg, island, -1);
    else
        for (int64_t i = lo; i <= hi; i++)
            store_devlog_note(&st->devchg, island, i);
}

/* atoll_kick_run(island, lo, hi): the transaction changed the holder of
 * devices lo..hi (an allocation run inserted or deleted). */
static void store_kick_run_fn(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
    (void)argc;
    note_range(sqlite3_user_data(ctx), sqlite3_value_int64(argv[0]),
               sqlite3_value_int64(argv[1]), sqlite3_value_int64(argv[2]));
    sqlite3_result_null(ctx);
}

/* Steps s with the devices' triggers quiet: the caller notes what s
 * changed itself (a trigger program per row cost ~0.3 us each, and named
 * each device). 0 or -1 (store_step_done). */
static int step_quiet(store_t *st, sqlite3_stmt *s)
{
    st->devchg.quiet = 1;
    int rc = store_step_done(s);
    st->devchg.quiet = 0;
    return rc;
}

int store_step_devices(store_t *st, sqlite3_stmt *s, int64_t island, int64_t lo, int64_t hi)
{
    int rc = step_quiet(st, s);
    if (rc != 0 || sqlite3_changes(st->db) == 0)
        return rc;
    note_range(st, island, lo, hi);
    return 0;
}

int store_free_job_devices(store_t *st, int64_t job)
{
    static const char sql[] = "DELETE FROM allocations WHERE job_id = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, job);
    int rc = step_quiet(st, s);
    if (rc == 0 && sqlite3_changes(st->db) > 0)
        store_devlog_note_freed(&st->devchg, job);
    return rc;
}

/* After a commit, not in the hook: a reader that sees a new generation
 * must also see the data. Empties k. */
static void kick_apply(watch_gen_t *g, kick_set_t *k)
{
    if (k->all)
        atomic_fetch_add(&g->all, 1);
    else
        for (int i = 0; i < k->n; i++)
            atomic_fetch_add(&g->slot[k->slot[i]], 1);
    memset(k, 0, sizeof *k);
}

/* Installs the poll watch on st's connection (the tables must exist). */
static int store_watch(store_t *st)
{
    if (sqlite3_create_function(st->db, "atoll_kick_worker", 1, SQLITE_UTF8, &st->kick_workers,
                                store_kick_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(st->db, "atoll_kick_all", 0, SQLITE_UTF8, &st->kick_workers,
                                store_kick_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(st->db, "atoll_kick_job", 1, SQLITE_UTF8, &st->kick_jobs,
                                store_kick_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(st->db, "atoll_kick_stale", 1, SQLITE_UTF8, &st->kick_stale,
                                store_kick_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(st->db, "atoll_kick_stale", 0, SQLITE_UTF8, &st->kick_stale,
                                store_kick_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(st->db, "atoll_kick_devices", 0, SQLITE_UTF8, st,
                                store_kick_devices_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(st->db, "atoll_kick_devices", 2, SQLITE_UTF8, st,
                                store_kick_devices_fn, NULL, NULL) != SQLITE_OK ||
        sqlite3_create_function(st->db, "atoll_kick_run", 3, SQLITE_UTF8, st,
                                store_kick_run_fn, NULL, NULL) != SQLITE_OK)
        return -1;
    return store_exec(st, STORE_WATCH_SQL);
}

/* temp_store=MEMORY: SQLite's statement journals stay in memory (past
 * 64 KiB SQLite spilled them to a temporary file it created, wrote and
 * deleted inside the transaction). journal_size_limit: see
 * STORE_WAL_KEEP_BYTES. */
#define STORE_TEMP_PRAGMA " PRAGMA temp_store=MEMORY;" \
    " PRAGMA journal_size_limit=" STORE_STR(STORE_WAL_KEEP_BYTES) ";"

/* A new database gets pages of STORE_PAGE_SIZE bytes (before WAL mode
 * writes its first page; on an existing database the pragma does
 * nothing, and it keeps the size it was made with). Every commit writes
 * each page it changed whole, into the WAL and later again into the
 * database, and Atoll's commits change a row or two in each of many
 * tables and indexes: ~15 pages a commit, ~4 commits a tiny job. With
 * SQLite's 4 KiB pages that was 250 KiB written and 610 KiB read per tiny
 * job (WAL frames, checkpoints, and every connection reading again the
 * pages another one changed); with 1 KiB, 72 and 178 KiB, and each fsync
 * writes back a quarter of the bytes. The cost: trees a level deeper, and
 * a large row (a job's document, a 2,048-device placement) spans four
 * times as many overflow pages. */
#define STORE_PAGE_SIZE 1024
#define STORE_PAGE_PRAGMA "PRAGMA page_size=" STORE_STR(STORE_PAGE_SIZE) ";"
#define STORE_STR(x) STORE_STR_(x)
#define STORE_STR_(x) #x

/* SQLite's busy handler for the locks store_write_mu does not order: an
 * autocommit write meeting a transaction, a checkpoint, another process.
 * SQLite's own (sqlite3_busy_timeout) sleeps 1 ms at the first try and
 * 100 ms later on; these waits start at 20 us and stay at 1 ms, for the
 * same STORE_BUSY_TIMEOUT_MS in all. Returns 0 to give up (SQLITE_BUSY). */
static int store_busy(void *unused, int tries)
{
    (void)unused;
    int64_t us = tries < 6 ? (int64_t)20 << tries : 1000;
    /* Waited so far: 20 + 40 + ... + 640 us, then 1 ms a try. */
    int64_t waited = tries < 6 ? ((int64_t)20 << tries) - 20 : 1260 + (int64_t)(tries - 6) * 1000;
    if (waited >= (int64_t)STORE_BUSY_TIMEOUT_MS * 1000)
        return 0;
    struct timespec ts = {0, (long)us * 1000};
    nanosleep(&ts, NULL);
    return 1;
}

/* Process-wide SQLite settings, before its first use. MEMSTATUS off:
 * with it on (SQLite's default) every sqlite3_malloc and sqlite3_free
 * takes one global mutex to keep statistics Atoll never reads, shared by
 * every thread's connection: the scheduler thread slept on that lock
 * inside its passes (bench_passes, off-CPU stacks in sqlite3_free), and
 * 6 % of its CPU went to it. sqlite3_config fails (SQLITE_MISUSE) once
 * SQLite is initialised, which any call that finds a VFS does: so the
 * first caller is store_vfs_name's registration, which every connection
 * (the owner probe included) goes through first. A test asserts it took
 * effect (test_store_sched: sqlite3_memory_used() stays 0). */
static pthread_once_t store_sqlite_once = PTHREAD_ONCE_INIT;
static void store_sqlite_setup(void)
{
    if (sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) != SQLITE_OK)
        log_warn("store: SQLite was initialised before its settings");
}

void store_sqlite_init(void) { pthread_once(&store_sqlite_once, store_sqlite_setup); }

static store_t *store_open(const char *path)
{
    static _Atomic uint32_t next_writer = 1;
    store_t *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->devchg.writer = atomic_fetch_add(&next_writer, 1);
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path, &st->db, flags, store_vfs_name()) != SQLITE_OK) {
        log_error("cannot open database %s: %s", path, st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_handler(st->db, store_busy, NULL);
    sqlite3_commit_hook(st->db, store_on_commit, st);
    /* WAL: readers (dashboard, lists) never block the scheduler's writes.
     * synchronous=NORMAL is durable across process crashes in WAL mode
     * (kill -9); what a client was told is on disk is made so by group
     * commit after the COMMIT (store_sync.c), outside the write lock.
     * FULL only in the "commit" durability mode, kept for comparison. */
    const char *pragmas = store_durability() == STORE_DURABLE_COMMIT
        ? STORE_PAGE_PRAGMA "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
          " PRAGMA foreign_keys=ON;" STORE_TEMP_PRAGMA
        : STORE_PAGE_PRAGMA "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
          " PRAGMA foreign_keys=ON;" STORE_TEMP_PRAGMA;
    if (store_exec(st, pragmas) != 0)
        goto fail;
    /* Instead of auto-checkpointing: no COMMIT checkpoints (store_ckpt.c).
     * Set after the pragmas, since PRAGMA wal_autocheckpoint would replace
     * it. */
    sqlite3_wal_hook(st->db, store_ckpt_hook, NULL);
    return st;
fail:
    store_close(st);
    return NULL;
}

store_t *store_thread(void)
{
    pthread_once(&store_key_once, store_key_make);
    store_t *st = pthread_getspecific(store_key);
    if (st)
        return st;
    st = store_open(store_path);
    if (st && atomic_load(&store_schema_ready) && store_watch(st) != 0) {
        store_close(st);
        return NULL;
    }
    if (st && pthread_setspecific(store_key, st) != 0) {
        store_close(st);
        return NULL;
    }
    return st;
}

void store_thread_close(void)
{
    pthread_once(&store_key_once, store_key_make);
    store_t *st = pthread_getspecific(store_key);
    pthread_setspecific(store_key, NULL);
    store_close(st);
}

sqlite3 *store_db(store_t *st) { return st->db; }

sqlite3_stmt *store_stmt(store_t *st, const char *sql)
{
    for (int i = 0; i < st->nstmts; i++) {
        if (st->sql[i] == sql) {
            sqlite3_reset(st->stmt[i]);
            sqlite3_clear_bindings(st->stmt[i]);
            return st->stmt[i];
        }
    }
    sqlite3_stmt *s = NULL;
    if (sqlite3_prepare_v3(st->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, NULL) != SQLITE_OK) {
        log_error("sqlite prepare: %s (in: %.100s)", sqlite3_errmsg(st->db), sql);
        return NULL;
    }
    if (st->nstmts == STORE_STMT_CACHE) {
        /* Cache full: a programming error (more distinct statements than
         * slots); still correct, just not cached. Leaks nothing: the
         * caller's statement is finalized when the slot is reused. */
        sqlite3_finalize(st->stmt[0]);
        memmove(&st->stmt[0], &st->stmt[1], sizeof st->stmt[0] * (STORE_STMT_CACHE - 1));
        memmove(&st->sql[0], &st->sql[1], sizeof st->sql[0] * (STORE_STMT_CACHE - 1));
        st->nstmts--;
    }
    st->sql[st->nstmts] = sql;
    st->stmt[st->nstmts] = s;
    st->nstmts++;
    return s;
}

/* Releases store_write_mu once the connection's transaction has ended
 * (committed, rolled back, or ended by SQLite after an error). */
static void store_write_end(store_t *st)
{
    if (st->holds_write && sqlite3_get_autocommit(st->db)) {
        st->holds_write = 0;
        util_hist_add(&store_lock_hists[STORE_LOCK_HOLD], util_mono_us() - st->write_since_us);
        pthread_mutex_unlock(&store_write_mu);
    }
}

int store_begin(store_t *st)
{
    if (st->holds_write) {
        log_error("store: a write transaction began inside another");
        return -1;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += STORE_BUSY_TIMEOUT_MS / 1000;
    int64_t asked = util_mono_us();
    if (pthread_mutex_timedlock(&store_write_mu, &until) != 0) {
        log_error("store: no write lock after %d ms", STORE_BUSY_TIMEOUT_MS);
        return -1;
    }
    st->holds_write = 1;
    st->write_since_us = util_mono_us();
    util_hist_add(&store_lock_hists[STORE_LOCK_WAIT], st->write_since_us - asked);
    int rc = store_txn(st, STORE_TXN_BEGIN);
    store_write_end(st);        /* the BEGIN failed: no transaction */
    return rc;
}
int store_begin_read(store_t *st) { return store_txn(st, STORE_TXN_BEGIN_READ); }
void store_note_leased(store_t *st, int64_t job, int64_t attempt)
{
    for (int i = 0; i < st->n_new_leased; i++)
        if (st->new_leased[i][0] == job && st->new_leased[i][1] == attempt)
            return;
    if (st->n_new_leased == STORE_NEW_LEASED) {
        st->new_leased_all = 1;
        return;
    }
    st->new_leased[st->n_new_leased][0] = job;
    st->new_leased[st->n_new_leased++][1] = attempt;
}

/* Inside the transaction, before its COMMIT (the write lock held, so what
 * it reads is what commits): when a job this transaction leased host tasks
 * of has ended or moved past that attempt, or cannot be read, every
 * worker's stale generation moves (conservative: the dispatch leases only
 * the live attempt it read in the same transaction, so this is not
 * expected). Empties the notes. */
static void new_leased_check(store_t *st)
{
    static const char sql[] =
        "SELECT " STORE_ATTEMPT_STALE("state", "?2", "attempt") " FROM jobs WHERE id = ?1";
    int stale = st->new_leased_all;
    for (int i = 0; !stale && i < st->n_new_leased; i++) {
        sqlite3_stmt *s = store_stmt(st, sql);
        if (!s) {
            stale = 1;
            break;
        }
        sqlite3_bind_int64(s, 1, st->new_leased[i][0]);
        sqlite3_bind_int64(s, 2, st->new_leased[i][1]);
        stale = sqlite3_step(s) != SQLITE_ROW || sqlite3_column_int(s, 0);
        sqlite3_reset(s);
    }
    if (stale)
        st->kick_stale.all = 1;
    st->n_new_leased = st->new_leased_all = 0;
}

int store_commit(store_t *st)
{
    if (st->n_new_leased || st->new_leased_all)
        new_leased_check(st);
    int rc = store_txn(st, STORE_TXN_COMMIT);
    /* The generation (store_devices_gen) moves after the commit is
     * visible: what changed devices, a worker's registration or state.
     * Reports (busy_us), heartbeats and everything else leave it. It moves
     * before the write lock is released, so the next writer sees every
     * device change committed before its own transaction began in the
     * generation (sched_round_current relies on it). */
    if (rc == 0 && store_devlog_pending(&st->devchg)) {
        store_devlog_publish(&st->devchg);
        st->device_commits++;
    }
    /* The carry too, before the next writer can read it: what it holds
     * must match the rows as of the last commit (comp_carry.h). A failed
     * COMMIT is rolled back by the caller, which discards it. */
    if (rc == 0)
        comp_carry_commit(&st->carry);
    store_write_end(st);
    /* The stale family first: a parked poll woken by its worker's
     * generation must find the stale one moved too, or store_poll.c's
     * memo could vouch for a probe that no longer holds and the poll
     * would park again, its cancel named only after its wait. */
    if (rc == 0) {
        kick_apply(&store_stale_watch, &st->kick_stale);
        kick_apply(&store_worker_watch, &st->kick_workers);
        kick_apply(&store_job_watch, &st->kick_jobs);
    }
    return rc;
}
void store_rollback(store_t *st)
{
    if (!sqlite3_get_autocommit(st->db))
        store_txn(st, STORE_TXN_ROLLBACK);
    memset(&st->kick_workers, 0, sizeof st->kick_workers);
    memset(&st->kick_jobs, 0, sizeof st->kick_jobs);
    memset(&st->kick_stale, 0, sizeof st->kick_stale);
    st->n_new_leased = st->new_leased_all = 0;
    store_devlog_clear(&st->devchg);
    comp_carry_discard(&st->carry);
    store_write_end(st);
}

void store_multirow_sql(char *out, size_t cap, const char *head, const char *row, int rows)
{
    int n = snprintf(out, cap, "%s%s", head, row);
    for (int r = 1; r < rows && n > 0 && (size_t)n < cap; r++)
        n += snprintf(out + n, cap - (size_t)n, ",%s", row);
}

store_buf_t store_buf_new(size_t cap)
{
    store_buf_t b = {malloc(cap), 0, cap, 0};
    if (b.p)
        b.p[0] = '\0';
    else
        b.failed = 1;
    return b;
}

/* Makes room for n more bytes and the NUL. 0, or -1 (failed set). */
static int store_buf_room(store_buf_t *b, size_t n)
{
    if (b->failed)
        return -1;
    if (b->len + n < b->cap)
        return 0;
    size_t cap = b->cap * 2 + n + 1;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

void store_buf_printf(store_buf_t *b, const char *fmt, ...)
{
    for (;;) {
        if (b->failed)
            return;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        if (store_buf_room(b, (size_t)n) != 0)
            return;
    }
}

void store_buf_put(store_buf_t *b, const char *s, size_t n)
{
    if (store_buf_room(b, n) != 0)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void store_buf_int(store_buf_t *b, int64_t v)
{
    char t[UTIL_I64_TEXT_MAX];
    store_buf_put(b, t, util_i64_text(v, t));
}

int store_step_done(sqlite3_stmt *s)
{
    int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        log_error("sqlite step: %s", sqlite3_errmsg(sqlite3_db_handle(s)));
        sqlite3_reset(s);
        return -1;
    }
    sqlite3_reset(s);
    return 0;
}

int64_t store_scalar(store_t *st, const char *sql, int64_t arg, int64_t dflt)
{
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return dflt;
    sqlite3_bind_int64(s, 1, arg);
    int64_t v = sqlite3_step(s) == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL
                    ? sqlite3_column_int64(s, 0) : dflt;
    sqlite3_reset(s);
    return v;
}

json_t *store_col_json(sqlite3_stmt *s, int col)
{
    const char *text = (const char *)sqlite3_column_text(s, col);
    if (!text)
        return NULL;
    return jscan_load(text, strlen(text), JSON_DECODE_ANY, NULL);
}

void store_event(store_t *st, int64_t job, const char *kind, const char *fmt, ...)
{
    static const char sql[] = "INSERT INTO events(job_id, at, kind, detail) VALUES (?,?,?,?)";
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return;
    if (job > 0)
        sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, util_wall_us());
    sqlite3_bind_text(s, 3, kind, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, detail, -1, SQLITE_TRANSIENT);
    store_step_done(s);
}

int64_t store_island_id(store_t *st, const char *name)
{
    static const char sql[] = "SELECT id FROM islands WHERE name = ?";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    int64_t id = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int64(s, 0) : -1;
    sqlite3_reset(s);
    return id;
}

/* A migration whose text begins so rebuilds a table other tables
 * reference (SQLite cannot alter a CHECK): it runs with foreign keys off,
 * as SQLite's own procedure for a table rebuild says (a DROP TABLE with
 * them on would delete, or refuse over, every referencing row), and
 * commits only when PRAGMA foreign_key_check finds nothing. The pragma is
 * a no-op inside a transaction, so it goes around the transaction. */
#define STORE_MIGRATION_FK_OFF "-- atoll: foreign keys off"

/* One migration, text sql, to version v + 1 in one transaction. 0 or -1. */
static int store_migrate_one(store_t *st, const char *sql, int v)
{
    char pragma[64];
    int fk_off = strncmp(sql, STORE_MIGRATION_FK_OFF, strlen(STORE_MIGRATION_FK_OFF)) == 0;
    int rc = -1;
    snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", v + 1);
    if (fk_off && store_exec(st, "PRAGMA foreign_keys=OFF") != 0)
        return -1;
    if (store_begin(st) != 0 || store_exec(st, sql) != 0 || store_exec(st, pragma) != 0)
        goto done;
    if (fk_off) {
        sqlite3_stmt *s = NULL;
        int bad = sqlite3_prepare_v2(st->db, "PRAGMA foreign_key_check", -1, &s, NULL) !=
                  SQLITE_OK || sqlite3_step(s) != SQLITE_DONE;
        sqlite3_finalize(s);
        if (bad)
            goto done;
    }
    rc = store_commit(st);
done:
    if (rc != 0)
        store_rollback(st);
    if (fk_off && store_exec(st, "PRAGMA foreign_keys=ON") != 0)
        rc = -1;
    return rc;
}

/* Applies migrations newer than PRAGMA user_version, each in one
 * transaction, so a crash mid-migration leaves the previous version. */
static int store_migrate(store_t *st, err_t *e)
{
    sqlite3_stmt *s = NULL;
    int version = 0;
    if (sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        version = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    if (version > store_migration_count)
        return err_set(e, -1, "db", "database schema version %d is newer than this atolld (%d)",
                       version, store_migration_count), -1;
    for (int v = version; v < store_migration_count; v++) {
        if (store_migrate_one(st, store_migrations[v], v) != 0)
            return err_set(e, -1, "db", "migration %d failed", v + 1), -1;
        log_info("database migrated to schema version %d", v + 1);
    }
    return 0;
}

void store_idx_coords(const shape_t *shape, int64_t idx, int64_t *c)
{
    for (int d = shape->rank - 1; d >= 0; d--) {
        c[d] = idx % shape->dim[d];
        idx /= shape->dim[d];
    }
}

static json_t *shape_to_json(const shape_t *s)
{
    json_t *a = json_array();
    for (int i = 0; a && i < s->rank; i++)
        json_array_append_new(a, json_integer(s->dim[i]));
    return a;
}

/* Inserts an island and one row per device; rejects an existing island
 * whose mesh shape differs (the devices' coordinates would be wrong). */
static int store_island_ensure(store_t *st, const island_desc_t *isl, err_t *e)
{
    int rc = -1;
    char *shape_txt = NULL;
    json_t *shape = shape_to_json(&isl->shape);
    if (!shape || !(shape_txt = jtext_dump(shape, NULL)))
        goto cleanup;
    sqlite3_stmt *s = store_stmt(st, "SELECT shape FROM islands WHERE name = ?");
    if (!s)
        goto cleanup;
    sqlite3_bind_text(s, 1, isl->name, -1, SQLITE_STATIC);
    if (sqlite3_step(s) == SQLITE_ROW) {
        int same = strcmp((const char *)sqlite3_column_text(s, 0), shape_txt) == 0;
        if (!same)
            err_set(e, -1, "island", "island %s exists in the database with shape %s, not %s",
                    isl->name, sqlite3_column_text(s, 0), shape_txt);
        sqlite3_reset(s);
        rc = same ? 0 : -1;
        goto cleanup;
    }
    sqlite3_reset(s);
    s = store_stmt(st, "INSERT INTO islands(name, shape) VALUES (?, ?)");
    if (!s)
        goto cleanup;
    sqlite3_bind_text(s, 1, isl->name, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, shape_txt, -1, SQLITE_STATIC);
    if (store_step_done(s) != 0)
        goto cleanup;
    int64_t island_id = sqlite3_last_insert_rowid(st->db);
    int64_t n = shape_numel(&isl->shape);
    s = store_stmt(st, "INSERT INTO devices(island_id, idx, coords) VALUES (?, ?, ?)");
    if (!s)
        goto cleanup;
    for (int64_t i = 0; i < n; i++) {
        char coords[64];
        int64_t c[MESH_MAX_RANK] = {0};
        store_idx_coords(&isl->shape, i, c);
        if (isl->shape.rank == 1)
            snprintf(coords, sizeof coords, "[%ld]", (long)c[0]);
        else if (isl->shape.rank == 2)
            snprintf(coords, sizeof coords, "[%ld,%ld]", (long)c[0], (long)c[1]);
        else
            snprintf(coords, sizeof coords, "[%ld,%ld,%ld]", (long)c[0], (long)c[1], (long)c[2]);
        sqlite3_bind_int64(s, 1, island_id);
        sqlite3_bind_int64(s, 2, i);
        sqlite3_bind_text(s, 3, coords, -1, SQLITE_TRANSIENT);
        if (store_step_done(s) != 0)
            goto cleanup;
    }
    rc = 0;
cleanup:
    json_decref(shape);
    free(shape_txt);
    return rc;
}

/* The cluster's data-plane secret (schema/015_dplane_keys.sql): written
 * once by store_global_init() before any thread reads it, then read-only. */
static uint8_t store_secret[32];

/* Reads the cluster secret, creating it on first start. 0 or -1. */
static int store_secret_load(store_t *st, err_t *e)
{
    uint8_t fresh[32];
    if (getrandom(fresh, sizeof fresh, 0) != (ssize_t)sizeof fresh)
        return err_set(e, -1, "db", "no random bytes for the data-plane secret"), -1;
    sqlite3_stmt *s = store_stmt(st, "INSERT OR IGNORE INTO cluster_secret(id, secret)"
                                     " VALUES (1, ?)");
    if (!s)
        return err_set(e, -1, "db", "cannot store the data-plane secret"), -1;
    sqlite3_bind_blob(s, 1, fresh, sizeof fresh, SQLITE_TRANSIENT);
    if (store_step_done(s) != 0)
        return err_set(e, -1, "db", "cannot store the data-plane secret"), -1;
    s = store_stmt(st, "SELECT secret FROM cluster_secret WHERE id = 1");
    int ok = s && sqlite3_step(s) == SQLITE_ROW && sqlite3_column_bytes(s, 0) == 32;
    if (ok)
        memcpy(store_secret, sqlite3_column_blob(s, 0), sizeof store_secret);
    if (s)
        sqlite3_reset(s);
    return ok ? 0 : (err_set(e, -1, "db", "cannot read the data-plane secret"), -1);
}

void store_attempt_key(int64_t job, int32_t attempt, char hex[STORE_KEY_HEX_LEN])
{
    uint8_t msg[12], mac[SHA256_DIGEST_SIZE];
    for (int i = 0; i < 8; i++)
        msg[i] = (uint8_t)((uint64_t)job >> (8 * i));
    for (int i = 0; i < 4; i++)
        msg[8 + i] = (uint8_t)((uint32_t)attempt >> (8 * i));
    struct hmac_sha256_ctx ctx;
    hmac_sha256_set_key(&ctx, sizeof store_secret, store_secret);
    hmac_sha256_update(&ctx, sizeof msg, msg);
    hmac_sha256_digest(&ctx, sizeof mac, mac);
    base16_encode_update(hex, 16, mac);   /* lowercase: the first 128 bits */
    hex[32] = '\0';
}

/* One process owns a database (store_vfs.c): the first read takes an
 * exclusive lock on the file. A probe with no busy handler tells at once
 * when another process holds it, instead of after STORE_BUSY_TIMEOUT_MS
 * in the handler. *probe (owned by the caller, closed with sqlite3_close
 * once the store's own connection holds the lock, so the file is never
 * unlocked in between) may be set even on failure. -1 with e set only
 * for that case; anything else is left to the store's own open, which
 * reports it. */
static int store_probe_owner(const char *path, sqlite3 **probe, err_t *e)
{
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path, probe, flags, store_vfs_name()) != SQLITE_OK)
        return 0;
    int rc = sqlite3_exec(*probe, "SELECT count(*) FROM sqlite_schema", NULL, NULL, NULL);
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
        return err_set(e, -1, "db", "database %s is in use by another process (another atolld?);"
                       " one controller owns a database: stop the other first", path), -1;
    return 0;
}

/* store_global_init's work, with the probe's connection open throughout. */
static int store_global_open(const island_desc_t *islands, int nislands, sqlite3 **probe,
                             err_t *e)
{
    const char *path = store_path;
    if (store_probe_owner(path, probe, e) != 0)
        return -1;
    store_backup_clean(path);
    /* This thread's connection watches once the schema exists (a process
     * may open a new database, e.g. one per unit test, whose workers are
     * not the last one's: store_workers_gen moves). */
    atomic_store(&store_schema_ready, 0);
    atomic_fetch_add(&store_worker_watch.all, 1);
    atomic_fetch_add(&store_stale_watch.all, 1);
    store_devlog_publish(NULL);
    store_t *st = store_thread();
    if (!st)
        return err_set(e, -1, "db", "cannot open database %s", path), -1;
    if (store_migrate(st, e) != 0)
        return -1;
    if (store_watch(st) != 0)
        return err_set(e, -1, "db", "cannot install the poll watch: %s", sqlite3_errmsg(st->db)), -1;
    atomic_store(&store_schema_ready, 1);
    if (store_begin(st) != 0)
        return err_set(e, -1, "db", "cannot lock database %s", path), -1;
    if (store_secret_load(st, e) != 0) {
        store_rollback(st);
        return -1;
    }
    for (int i = 0; i < nislands; i++) {
        if (store_island_ensure(st, &islands[i], e) != 0) {
            store_rollback(st);
            return -1;
        }
    }
    if (lease_seed(st) != 0) {
        store_rollback(st);
        return err_set(e, -1, "db", "cannot read the newest lease id: %s",
                       sqlite3_errmsg(st->db)), -1;
    }
    return store_commit(st) == 0 ? 0 : (err_set(e, -1, "db", "commit failed"), -1);
}

int store_global_init(const char *path, const island_desc_t *islands, int nislands, err_t *e)
{
    if (strlen(path) >= sizeof store_path)
        return err_set(e, -1, "db", "database path too long"), -1;
    snprintf(store_path, sizeof store_path, "%s", path);
    comp_carry_reset();         /* parts of another database's jobs */
    sqlite3 *probe = NULL;
    int rc = store_global_open(islands, nislands, &probe, e);
    sqlite3_close(probe);
    return rc;
}
