/* store_internal.h - helpers shared by the store_*.c files only. */
#ifndef ATOLL_STORE_INTERNAL_H
#define ATOLL_STORE_INTERNAL_H

#include "store.h"
#include "comp_carry.h"

/* SQL: the job state column `col` is terminal. Comparisons, not
 * `IN ('succeeded','failed','cancelled')`: SQLite evaluates a constant IN
 * list of more than two values through an ephemeral table built on every
 * run of the statement (polls, the poll watch's trigger). */
#define STORE_JOB_ENDED(col) \
    "(" col " = 'succeeded' OR " col " = 'failed' OR " col " = 'cancelled')"
/* A host task's attempt `att` is stale when its job (state `jstate`,
 * current attempt `jatt`) ended or moved on: the worker must abort it. The
 * poll's probe and cancels, the stale watch's trigger and a dispatch's
 * check at commit all test this one condition. */
#define STORE_ATTEMPT_STALE(jstate, att, jatt) \
    "(" STORE_JOB_ENDED(jstate) " OR " att " < " jatt ")"

/* Ends a job (succeeded/failed/cancelled) inside the caller's transaction:
 * sets state, error, finished_at; frees its devices; cancels its blocked
 * tasks; marks unfinished computations. Leased tasks stay leased until their
 * worker reports (it is told through the poll's cancel list) or its poll
 * shows it never received them (store_poll.c). */
int store_job_finish(store_t *st, int64_t job, const char *state, const char *error);
/* Writes the job's carried progress (comp_carry.h) to its computations'
 * rows while its attempt is live, and drops it: before the job ends
 * otherwise than by success. Inside the caller's write transaction. 0 or
 * -1. */
int store_carry_show_job(store_t *st, int64_t job);
/* RFC 3339 UTC text with microseconds for a Unix-microsecond time, or JSON
 * null when t is 0 / SQL NULL. New reference. */
json_t *store_time_json(sqlite3_stmt *s, int col);
/* Sets key to a new integer (or null for SQL NULL) from column col. */
void store_set_int_or_null(json_t *obj, const char *key, sqlite3_stmt *s, int col);
void store_set_text_or_null(json_t *obj, const char *key, sqlite3_stmt *s, int col);
/* Inside the caller's transaction: the worker is gone, its devices go
 * down, its unfinished tasks are cancelled, and each live job holding one
 * of its devices is requeued (retries left) or failed naming the worker. */
int store_worker_lost(store_t *st, int64_t worker, const char *how);
/* Inside the caller's transaction: a fault outside the job (a lost or
 * unreachable worker) ended its current attempt. Requeued for a new attempt
 * while jobs.retries < max_retries, else failed with `why`. 0 or -1. */
int store_job_retry(store_t *st, int64_t job, const char *why);
/* The VFS every connection opens with (store_vfs.c: a transaction's WAL
 * frames in one write, over SQLite's "unix-excl": this process owns the
 * file), registered on the first call; "unix-excl" itself when the shim
 * could not be. Anything in the process that opens the database must use
 * it: a connection through another VFS would not share the WAL index. */
const char *store_vfs_name(void);
/* SQLite's process-wide settings (store.c), once, before anything else
 * initialises SQLite: store_vfs_name's registration calls it first. */
void store_sqlite_init(void);
/* Removes the copy a backup left beside database db when atolld stopped
 * halfway (store_backup.c); at start, before anything else runs. */
void store_backup_clean(const char *db);

/* SQL rows (job_id, n): n devices held by job_id, exclusively (one row
 * per allocation run) or shared (one per hold); sum n per job or tenant. */
#define STORE_HELD_SQL                                                                     \
    "SELECT job_id, hi - lo + 1 AS n FROM allocations"                                    \
    " UNION ALL SELECT job_id, 1 FROM device_holds"

/* The coordinates of device idx of an island of this shape (row-major,
 * as devices.coords holds them) into c[0..shape->rank). */
void store_idx_coords(const shape_t *shape, int64_t idx, int64_t *c);

/* WAL pages past which a commit asks the checkpointer for a checkpoint
 * (SQLite's own default threshold), and past which it forces one. */
#define STORE_CKPT_PAGES 1000
#define STORE_CKPT_FORCE_PAGES 16000
/* The -wal file's size at rest (PRAGMA journal_size_limit): when a writer
 * starts the WAL over, SQLite cuts a longer file back to this. Above what
 * the checkpointer lets the WAL reach under steady load (about
 * STORE_CKPT_FORCE_PAGES frames of 1 KiB pages, ~17 MB), so steady
 * restarts never cut and re-grow it (a growing file makes each fdatasync
 * write its size too); what a spike took (a migration's copy of a table,
 * a reader that held the old WAL for long) is given back at the next
 * restart instead of staying the file's size for good. */
#define STORE_WAL_KEEP_BYTES 25165824 /* 24 MiB; a literal: PRAGMA takes no expression */
/* The WAL grows by zeros written this many bytes at a time ahead of its
 * frames (store_vfs.c), so that a commit overwrites the file in place. */
#define STORE_WAL_STEP ((int64_t)1024 * 1024)
/* Every connection's sqlite3_wal_hook (store_ckpt.c): it replaces
 * auto-checkpointing, so no COMMIT checkpoints. Returns SQLITE_OK. */
int store_ckpt_hook(void *arg, sqlite3 *db, const char *name, int pages);
/* One checkpoint on db (the checkpointer thread's connection; tests call it
 * directly): passive, RESTART when the WAL outgrew STORE_CKPT_FORCE_PAGES. */
void store_ckpt_once(sqlite3 *db);

/* store_devlog.c: the devices a connection's transaction changed (the
 * TEMP triggers name them: store.c), published with the generation its
 * commit moves. Cleared by store_devlog_publish and on rollback. */
#define STORE_DEVCHG_MAX 256
typedef struct store_devchg {
    int all;                    /* not one device's change, or too many */
    int n;
    uint32_t writer;            /* the connection's tag in the record (store_devlog_writer) */
    int quiet;                  /* the triggers' notes are ignored (store_free_job_devices) */
    int nfreed;
    int64_t dev[STORE_DEVCHG_MAX][2];   /* island id, device index */
    int64_t freed[STORE_DEVLOG_JOBS];   /* jobs whose devices were all freed */
} store_devchg_t;
/* Notes one device (idx < 0: everything); nothing while c->quiet. */
void store_devlog_note(store_devchg_t *c, int64_t island, int64_t idx);
/* Notes that every device job held was freed (too many jobs: everything). */
void store_devlog_note_freed(store_devchg_t *c, int64_t job);
/* Steps s, a statement that changes the holder or shared holds of
 * devices [lo, hi] of island and of no other device, with the devices'
 * triggers quiet, and notes that range itself (store.c): a shared job's
 * holds on a whole island ran 2,048 trigger programs. 0 or -1
 * (store_step_done). */
int store_step_devices(store_t *st, sqlite3_stmt *s, int64_t island, int64_t lo, int64_t hi);
/* Frees every device job holds (its allocations rows), inside st's transaction,
 * noting the job rather than each device (store.c). 0 or -1. */
int store_free_job_devices(store_t *st, int64_t job);
/* Whether c noted anything (the transaction changed what
 * store_sched_devices reads). */
static inline int store_devlog_pending(const store_devchg_t *c)
{
    return c->all || c->n > 0 || c->nfreed > 0;
}
/* Forgets what c noted (a rollback). */
static inline void store_devlog_clear(store_devchg_t *c) { c->all = c->n = c->nfreed = 0; }
/* After a commit that changed devices (c: its changes; NULL: everything):
 * moves store_devices_gen() by one and records what changed with it;
 * empties c. */
void store_devlog_publish(store_devchg_t *c);

/* store_worker.c: 1 when the worker is live (registered, lease not
 * expired), 0 when not (fenced: store_poll.c and store_progress.c refuse it),
 * -1 on error. A read; inside the caller's transaction when it has one. */
int store_worker_is_live(store_t *st, int64_t worker);

/* store.c: a generation that moves after every commit that changed a
 * worker's state (the poll watch's all-workers count, STORE_WATCH_SQL) and
 * whenever a database is opened (store_global_init); store_worker.c's
 * credential cache is valid while it stands still. */
uint64_t store_workers_gen(void);
/* store.c: a generation of worker's that moves after every commit that can
 * give it a stale attempt to be told of (store_poll.c's probe): a job it
 * holds leased tasks of ended or moved to a new attempt, a task of such a
 * job leased to it, a worker lost, a worker registered or changed; and
 * whenever a database is opened. */
uint64_t store_stale_gen(int64_t worker);
/* store.c: the caller's write transaction inserted a host task of (job,
 * attempt) leased; its commit checks once per pair whether that attempt
 * is stale by then, and if so moves every worker's stale generation (the
 * watch triggers cover every other way a leased task becomes stale). */
void store_note_leased(store_t *st, int64_t job, int64_t attempt);
/* store.c: a new lease id (host_tasks.leased_at) for host tasks made
 * deliverable in the caller's write transaction; ids grow in commit order
 * (the write transactions take turns), which is what lets a worker's `ack`
 * name everything it received (store_poll.c). */
int64_t store_lease_id(void);

/* store_tenants.c: adds a succeeded host task's device time to its
 * job's tenant (0 for none) in tenant_usage. 0 or -1. */
int store_usage_add(store_t *st, int64_t job, int64_t device_us);

/* store.c: writes into out (cap bytes) the INSERT `head` followed by
 * `rows` copies of the row placeholders `row` ("(?,?,...)"), comma-
 * separated: the statement of a multi-row INSERT, built once per row
 * count (host tasks, store_sched.c; outputs, report_acc.c). A statement
 * writing k rows opens its cursors and runs its program once. out must
 * hold strlen(head) + rows * (strlen(row) + 1) + 1 bytes. */
void store_multirow_sql(char *out, size_t cap, const char *head, const char *row, int rows);

/* store.c: a growing text buffer (answers and metrics built as text). p is
 * malloc'd and NUL-terminated while !failed; after a failed append
 * (out of memory) it stays failed and appends do nothing. The owner frees
 * p. */
typedef struct store_buf {
    char *p;
    size_t len, cap;
    int failed;
} store_buf_t;

/* An empty buffer of capacity cap; failed if that cannot be had. */
store_buf_t store_buf_new(size_t cap);
void store_buf_printf(store_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends n bytes of s (no NUL needed). */
void store_buf_put(store_buf_t *b, const char *s, size_t n);
/* Appends a string literal. */
#define STORE_BUF_LIT(b, lit) store_buf_put((b), (lit), sizeof(lit) - 1)
/* Appends v in decimal (util_i64_text: no printf on the answers' hot
 * paths, a job view's rows are mostly integers). */
void store_buf_int(store_buf_t *b, int64_t v);

/* The connection's cache of computations' outputs (store_progress.c):
 * `size` zeroed bytes on first use, the same block afterwards (it belongs
 * to this connection's database), freed with the connection; NULL when
 * out of memory. */
void *store_outputs_cache(store_t *st, size_t size);
/* The connection's staged changes of the carried progress (comp_carry.h),
 * for its write transaction. */
comp_carry_txn_t *store_carry(store_t *st);

#endif
