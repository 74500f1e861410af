/* store.h - the controller's SQLite store: the source of truth.
 *
 * One store_t wraps one SQLite connection and is used by one thread only
 * (SQLite "one connection per thread"); store_thread() hands each thread
 * its own, opened on first use and closed when the thread exits. Every
 * read-modify-write runs inside store_begin() (BEGIN IMMEDIATE), so two
 * threads never interleave a state change. The database is in WAL mode with
 * a busy timeout, so readers never block the writer.
 *
 * JSON returned by store functions is a new reference the caller must
 * json_decref().
 *
 * States and who moves them. Every move below runs inside one write
 * transaction, made by the function named (in the file named) and by no
 * other code.
 *
 * Jobs (jobs.state):
 *
 *     queued -> allocated -> running -> succeeded | failed
 *        ^          |            |
 *        +----------+------------+  requeued: a new attempt (attempt + 1)
 *     any non-terminal state -> cancelled | failed
 *
 *   (new)      -> queued     store_job_create: a submission (store_jobs.c)
 *   queued     -> allocated  store_sched_mark_allocated: admission, devices
 *                            taken and the PLACEMENT stored (store_sched.c)
 *   queued     -> running    the same, when the attempt's first host tasks
 *                            go out in the admission's transaction (one
 *                            write of the job's row; it was never seen
 *                            allocated, which only says "no task yet")
 *   allocated  -> running    the dispatch of the attempt's first host tasks
 *                            in a later transaction: a chunk
 *                            (store_sched_dispatched) or a shared job's
 *                            first fed computation (sched_feed.c)
 *   allocated|running -> succeeded
 *                            the report that completes the last computation
 *                            (comp_succeeded, store_progress.c)
 *   allocated|running -> failed
 *                            a failed report (host_failed, store_progress.c);
 *                            a lost worker or unreachable peer with no retry
 *                            left (store_worker_lost, store_job_retry:
 *                            store_sched.c)
 *   allocated|running -> queued (new attempt)
 *                            a lost worker or unreachable peer with retries
 *                            left (store_worker_lost, store_job_retry), a
 *                            preemption (store_sched_preempt), a controller
 *                            restart (store_sched_recover): job_requeue,
 *                            store_sched.c
 *   queued     -> failed     store_sched_fail: its document no longer
 *                            compiles (store_sched.c)
 *   non-terminal -> cancelled
 *                            store_job_cancel (store_jobs.c)
 *
 * So a job's state changes in three places: the user's requests
 * (store_jobs.c); the scheduler side, admission and worker loss,
 * preemption, restart, the first dispatch (store_sched.c); the workers'
 * side, the reports (store_progress.c).
 * Ending is always store_job_finish (store_jobs.c): it frees the job's
 * devices and cancels its blocked tasks; leased ones stay leased until
 * their worker reports, the poll has it abort them, or the poll finds it
 * never received them.
 * Requeueing is always job_requeue (store_sched.c). succeeded, failed and
 * cancelled are terminal: a job holds devices only while allocated or
 * running, and reports move only the job's current attempt while it is
 * live. The scheduler's own moves (store_sched_preempt, store_sched_fail)
 * act on what it read before their transaction, so each checks the job's
 * state again inside it and does nothing to a job that moved meanwhile.
 *
 * Host tasks (host_tasks.state), one per computation, attempt and worker:
 *
 *   (new)      -> leased | blocked
 *                            store_sched_add_task at dispatch, leased under
 *                            a lease id of the dispatch transaction (its
 *                            worker's polls deliver it until it acknowledges
 *                            that id; store_poll.c reads, writes nothing);
 *                            blocked only in sequential dispatch
 *   blocked    -> leased     its computation's producers all succeeded and
 *                            no earlier-numbered computation of the job on
 *                            its island still waits for its own: released
 *                            in seq order (comp_succeeded, store_progress.c)
 *   leased     -> succeeded | failed | cancelled
 *                            its worker's report, once: only the live worker
 *                            holding the lease (fencing; report_apply,
 *                            store_progress.c)
 *   blocked    -> cancelled  its job ended (store_job_finish, store_jobs.c)
 *                            or was requeued (job_requeue, store_sched.c)
 *   leased     -> cancelled ('never delivered')
 *                            its attempt went stale before its worker
 *                            acknowledged its lease id: that worker's next
 *                            poll settles it (poll_settle, store_poll.c)
 *   blocked|leased -> cancelled ('worker lost')
 *                            store_worker_lost (store_sched.c)
 *   leased     -> cancelled ('abandoned ...')
 *                            its abort went unanswered for a lease period
 *                            (abandon_stale, store_sched_expire: store_sched.c)
 * A task leaves 'leased' at most once. Naming a stale attempt to its
 * worker (abort_sent_at, store_poll.c) changes no state.
 *
 * Computations (computations.state): waiting at creation (store_jobs.c);
 * waiting -> dispatched with an island and seq (store_sched_set_comp,
 * store_sched.c; in sequential dispatch later, when unblocked:
 * store_progress.c); -> succeeded when all its shards reported
 * (store_progress.c); the unfinished ones take the job's state when it fails
 * or is cancelled (store_job_finish); all go back to waiting on a requeue.
 *
 * Workers (workers.state): live at registration (store_worker.c); live ->
 * gone when lost (store_worker_lost, store_sched.c: a missed lease through
 * store_sched_expire, or leaving through store_worker_leave). A gone worker
 * never comes back: the same process registers again under a new id. */
#ifndef ATOLL_STORE_H
#define ATOLL_STORE_H

#include <jansson.h>
#include <sqlite3.h>
#include <stdint.h>

#include "compiler.h"
#include "err.h"
#include "report_decode.h"
#include "util.h"

typedef struct store store_t;

enum {
    STORE_OK = 0,
    STORE_NOTFOUND = 1,
    STORE_CONFLICT = 2,
    STORE_FULL = 3,
    STORE_MISMATCH = 4,         /* a key reused with different content */
    STORE_ERR = -1,
};

/* Opens the database file once for the process, applies migrations and
 * creates the islands. Returns 0, or -1 with a message in e->detail. */
int store_global_init(const char *path, const island_desc_t *islands, int nislands, err_t *e);
/* This thread's connection; NULL if it cannot be opened (logged). */
store_t *store_thread(void);

/* An online backup (store_backup.c): a consistent copy of the whole
 * database as of one snapshot, written beside it and unlinked once open.
 * *fd (the caller's: it closes it) reads the copy from offset 0, *size
 * bytes. STORE_CONFLICT while another copy is being made; STORE_ERR with
 * why (a full disk, say). Outside any transaction; writers go on. */
int store_backup(store_t *st, int *fd, uint64_t *size, char *why, size_t cap);

/* The data-plane key of a job attempt (issue 12, docs/worker-protocol.md
 * "Data-plane keys"): 32 lowercase hex digits of HMAC-SHA256(cluster
 * secret, job, attempt) cut to 128 bits, written to hex with its NUL.
 * The secret is read by store_global_init(); the same attempt always gets
 * the same key, across controller restarts too. */
#define STORE_KEY_HEX_LEN 33
void store_attempt_key(int64_t job, int32_t attempt, char hex[STORE_KEY_HEX_LEN]);
/* Closes the calling thread's connection now (before process exit). */
void store_thread_close(void);

sqlite3 *store_db(store_t *st);
/* A prepared statement for `sql`, cached per connection by the pointer of
 * the (static) SQL string, reset and with bindings cleared. NULL on error. */
sqlite3_stmt *store_stmt(store_t *st, const char *sql);
int store_begin(store_t *st);          /* BEGIN IMMEDIATE */
int store_commit(store_t *st);
/* A read transaction: the reads until store_commit() see one snapshot
 * (WAL), so a view assembled from several queries is consistent. */
int store_begin_read(store_t *st);
/* Write transactions committed since the process started (every
 * connection, explicit or autocommit); for /metrics. */
uint64_t store_write_transactions(void);
/* The write lock's histograms (/metrics atoll_store_write_lock_wait_seconds
 * and _hold_seconds): how long store_begin waited for it, how long each
 * write transaction held it; 10 µs to 1 s. Any thread may read them
 * (util_hist_read); static, never freed. */
enum { STORE_LOCK_WAIT, STORE_LOCK_HOLD };
const util_hist_t *store_lock_histogram(int which);
/* 1 for a job state that never moves again: succeeded, failed, cancelled
 * (0 for NULL). */
int store_state_is_terminal(const char *state);
/* A generation that moves after a write transaction committed through
 * store_commit() becomes visible if it changed what worker `worker`'s poll
 * may answer (its tasks leased or cancelled, a job it holds leased tasks
 * of ended or requeued, any worker's state; store.c STORE_WATCH_SQL). A
 * poll that notes it before reading and finds it unchanged later needs no
 * new read. Another worker's tasks do not move it (rarely, a worker
 * sharing its slot). */
uint64_t store_poll_gen(int64_t worker);
/* Moves after a commit in which job `job` ended or moved to a new attempt
 * (rarely, another job sharing its slot): a parked GET /v1/jobs/{id}?wait_ms
 * looks again only then. */
uint64_t store_job_gen(int64_t job);
/* Moves after a commit through store_commit() that changed what
 * store_sched_devices reads (a device's exclusive job, worker or local
 * number; a shared hold; a worker registered, lost or moved), and when a
 * database is opened (store_global_init). Read before store_sched_devices,
 * unchanged later: the devices read are still current, except for writes
 * committed since and not yet counted, which every allocation re-checks
 * in its own transaction anyway. */
uint64_t store_devices_gen(void);
/* What changed on an island in the generations (since, upto], upto being
 * the generation now (store_devlog_since): the devices whose holder,
 * shared holds, worker or local number changed (distinct, in idx), and
 * the exclusive jobs whose devices were all freed (a job's end or requeue:
 * every device that job held is free; told as the job, not its devices,
 * so that a whole-island job's end is not a read of the whole island).
 * The caller applies the freed jobs first: the devices named may have been
 * taken again since, and a read of them returns what is current. */
#define STORE_DEVLOG_JOBS 16
typedef struct store_devlog_view {
    int64_t *idx;               /* caller's array of cap entries */
    int cap;
    int n;
    int64_t jobs[STORE_DEVLOG_JOBS];
    int njobs;
    uint64_t upto;
    uint32_t skip_writer;       /* in: changes this connection committed are left out
                                 * (store_devlog_writer; 0: none are) */
} store_devlog_view_t;
/* Fills v (idx and cap set by the caller) with the changes on island
 * since generation `since`: 0, or -1 when that is unknown or not worth it
 * (a change that was not one device's or one job's, a database opened,
 * more than cap devices or STORE_DEVLOG_JOBS jobs, or so long ago that the
 * record is gone): then read everything. store_devlog.c. */
int store_devlog_since(uint64_t since, int64_t island, store_devlog_view_t *v);
/* How many of st's own commits moved store_devices_gen (each by one): a
 * thread that knows what its commits changed can tell whether anyone
 * else's did (the scheduler's round mirror, sched_place.c). */
uint64_t store_devices_commits(const store_t *st);
/* st's tag in the record of device changes: what a store_devlog_view_t's
 * skip_writer names to leave out the changes st committed (a reader that
 * already holds them: the scheduler's round mirror). Never 0. */
uint32_t store_devlog_writer(const store_t *st);
void store_rollback(store_t *st);
/* Runs a statement that returns no rows; 0 or -1 (logged). */
int store_step_done(sqlite3_stmt *s);
/* Job retention (store_prune.c): deletes, in one write transaction, up
 * to `batch` (1..STORE_PRUNE_BATCH_MAX, else the max) ended jobs whose
 * finished_at is before cutoff_us, with every row they own; a job with a
 * host task still leased, or owning the newest row of a table whose ids
 * are handed out, stays (ids are never reused). Returns how many went,
 * or -1 (nothing changed). store_jobs_pruned: how many went since the
 * process started (/metrics). */
#define STORE_PRUNE_BATCH_MAX 256
int store_jobs_prune(store_t *st, int64_t cutoff_us, int batch);
uint64_t store_jobs_pruned(void);
/* Appends an event row (job may be 0 for cluster events). */
void store_event(store_t *st, int64_t job, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Runs a cached one-row, one-column query with one integer parameter;
 * returns the value, or dflt when there is no row, it is NULL, or on error. */
int64_t store_scalar(store_t *st, const char *sql, int64_t arg, int64_t dflt);
/* Parses a JSON text column into a new reference (NULL on NULL/invalid). */
json_t *store_col_json(sqlite3_stmt *s, int col);
int64_t store_island_id(store_t *st, const char *name);

/* ---- durability of acknowledged writes (store_sync.c) ---- */
typedef enum store_durability {
    STORE_DURABLE_GROUP = 0,    /* default: fdatasync of the WAL before an
                                   acknowledgement, shared by concurrent callers */
    STORE_DURABLE_COMMIT = 1,   /* synchronous=FULL: every commit fsyncs inside
                                   SQLite's write lock (for comparison) */
    STORE_DURABLE_NONE = 2,     /* no fsync before acknowledging: survives a
                                   process crash, not power loss */
} store_durability_t;
/* "group", "commit" or "none"; 0, or -1 for anything else. */
int store_durability_parse(const char *s, store_durability_t *out);
/* Before store_global_init(): the database path and the mode. */
void store_sync_setup(const char *db_path, store_durability_t mode);
store_durability_t store_durability(void);
/* Group commit (store_sync.c). After a committed write and before
 * acknowledging it to a client, ask for a round: the ticket names the
 * fdatasync of the WAL, begun after this call and shared with concurrent
 * callers, that puts the write on disk (0 in the other modes: nothing to
 * wait for). store_sync_check: 1 once that round finished, 0 while it is
 * pending, -1 when the disk refused a sync (the write is committed but may
 * not survive power loss; answer 503; sticky until restart).
 * store_sync_gen is the same as a generation for http_park_until (arg:
 * the ticket; 0 pending, 1 decided), and the hook (set once, before the
 * first request) runs after each round on the sync thread: atolld wakes
 * parked requests with it. store_sync_wait blocks until the ticket is
 * decided (0 or -1), for callers that may block (not an HTTP handler).
 * store_sync_stop runs the rounds
 * still asked for and ends the thread (shutdown, after HTTP stopped). */
uint64_t store_sync_request(void);
int store_sync_check(uint64_t ticket);
uint64_t store_sync_gen(int64_t ticket);
int store_sync_wait(uint64_t ticket);
void store_sync_hook(void (*fn)(void));
void store_sync_stop(void);
/* For /metrics: fdatasync rounds run and rounds asked for (requests). */
uint64_t store_sync_rounds(void);
uint64_t store_sync_waits(void);
/* Each successful round's fdatasync duration (a /metrics histogram). */
const util_hist_t *store_sync_histogram(void);
/* The buckets (us) of group commit's histograms: the rounds' above, and
 * the acknowledgements' waits for them (server/api_durable.c). */
#define STORE_SYNC_NBOUNDS 11
extern const int64_t store_sync_bounds_us[STORE_SYNC_NBOUNDS];
/* Closes the WAL descriptor (shutdown). */
void store_sync_close(void);

/* SQL for the job holding device (island, idx) exclusively, or NULL: the
 * allocation run with the largest lo <= idx, if it reaches idx (runs of an
 * island never overlap: schema/028_allocations.sql); one index seek
 * whatever the number of runs. island and idx are SQL expressions. For
 * the store's readers and the sampler's (server/sampler.c). */
#define STORE_ALLOC_HOLDER_SQL(island, idx)                                                \
    "(SELECT CASE WHEN a.hi >= " idx " THEN a.job_id END FROM allocations a"              \
    " WHERE a.island_id = " island " AND a.lo <= " idx " ORDER BY a.lo DESC LIMIT 1)"

/* ---- WAL checkpoints (store_ckpt.c) ---- */
/* Starts the checkpointer thread (after store_global_init): from then on
 * the WAL is folded into the database off every writer's path. Without
 * it nothing checkpoints before exit. 0 or -1; idempotent. */
int store_ckpt_start(void);
/* Stops and joins it (shutdown, before the last connection closes). */
void store_ckpt_stop(void);
/* For /metrics and tests: checkpoints run, frames copied, RESTART ones,
 * and commits that asked for one (kicks: at most one per STORE_CKPT_PAGES
 * frames the WAL gained). */
void store_ckpt_counts(uint64_t *runs, uint64_t *frames, uint64_t *forced, uint64_t *kicks);
/* For /metrics: reads of the WAL (wal) or of the database file (!wal)
 * answered from its copy in memory, and reads that went to the file (a
 * chunk loaded included) (store_filemirror.c). */
void store_file_reads(int wal, uint64_t *memory, uint64_t *file);

/* ---- jobs (store_jobs.c) ---- */
/* What a submission brings besides its plan. Strings are borrowed. */
typedef struct store_job_new {
    const char *doc;            /* the document as received */
    const char *idem_key;       /* NULL: none */
    const char *doc_hash;       /* hash of the canonical document (with idem_key) */
    int64_t tenant;             /* 0: none (admin, auth off): not capped */
    int64_t max_queued;         /* the tenant's cap on its queued jobs; 0: none */
} store_job_new_t;
/* Stores an accepted, compiled job as queued with its computations, in one
 * transaction with its checks. With an idempotency key already used:
 * STORE_CONFLICT (same doc_hash) or STORE_MISMATCH (another document), *id
 * set to the existing job. STORE_FULL: the tenant already has max_queued
 * jobs queued; nothing stored. */
int store_job_create(store_t *st, const job_plan_t *plan, const store_job_new_t *nj,
                     int64_t *id);
/* The job object of GET /v1/jobs/{id} as JSON text (malloc'd, *len
 * bytes, NUL-terminated), its "document" the body it was accepted with;
 * NULL: not found or out of memory. store_job_json: the same, parsed, for
 * callers that look inside (tests). */
char *store_job_json_text(store_t *st, int64_t id, size_t *len);
json_t *store_job_json(store_t *st, int64_t id);      /* NULL: not found */
/* The job as GET /v1/jobs lists it (one row: no slices, computations,
 * events or document), for clients that poll a job's state, as JSON text
 * (malloc'd, *len bytes, NUL-terminated); the full object begins with the
 * same fields. NULL: not found or out of memory. */
char *store_job_summary_text(store_t *st, int64_t id, size_t *len);
/* The job's state ("queued" ... "cancelled") into out: STORE_OK,
 * STORE_NOTFOUND or STORE_ERR. */
int store_job_state(store_t *st, int64_t id, char out[16]);
/* GET /v1/jobs as JSON text {"jobs": [summary...], "next_before": id or
 * null}: newest first, at most limit, state NULL for any, ids below
 * before (0: from the newest); tenant 0: every tenant's jobs, else only
 * that tenant's. malloc'd (*len bytes), NULL on a store error or OOM. */
char *store_jobs_list_text(store_t *st, const char *state, int64_t before, int limit,
                           int64_t tenant, size_t *len);
/* Cancels a non-terminal job: state cancelled, devices freed, unleased
 * tasks cancelled. STORE_NOTFOUND / STORE_CONFLICT (already terminal). */
int store_job_cancel(store_t *st, int64_t id, char state_out[16]);
/* {"id","outputs":{...}}, each shard's "values" when it has at most
 * max_values elements (the shards view: GSPMD_SHARD_VALUES_MAX, DESIGN
 * Part A; larger stored pieces, gspmd.h "full_values", serve the global
 * view); STORE_CONFLICT (not succeeded) with *state set. */
int store_job_result(store_t *st, int64_t id, int64_t max_values, json_t **out,
                     char state_out[16]);

/* ---- cluster views (store_cluster.c) ---- */
json_t *store_islands_json(store_t *st);
json_t *store_island_json(store_t *st, const char *name);   /* NULL: unknown */
json_t *store_workers_json(store_t *st, int64_t lease_us);
/* Host tasks handed to live workers (heartbeat within lease_us) and not
 * reported yet; -1 on error. */
int64_t store_tasks_leased(store_t *st, int64_t lease_us);
/* Appends Prometheus text to a malloc'd buffer; NULL on error. For a
 * tenant's caller (tenant > 0) the per-tenant series hold its own only. */
char *store_metrics_text(store_t *st, int64_t tenant);
/* SQL: the job state column `col` is not succeeded: the WHERE of the
 * partial index jobs_unsucceeded (schema 036), so that a query with this
 * term can read that index rather than every job ever run. */
#define STORE_JOB_UNSUCCEEDED(col) "(" col " <> 'succeeded')"
/* SQL: the job state column `col` is live (queued, allocated or running),
 * through jobs_unsucceeded. */
#define STORE_JOB_LIVE(col)                                                               \
    "(" STORE_JOB_UNSUCCEEDED(col) " AND (" col " = 'queued' OR " col " = 'allocated' OR "  \
    col " = 'running'))"
/* SQL: the job in `col` is allocated or running, through jobs_unsucceeded: the
 * planner, left to itself with `IN ('allocated', 'running')`, scans every
 * job (or every computation of a join) rather than read a partial index
 * whose key does not lead with the state. */
#define STORE_JOB_HOLDING(col) "(" STORE_JOB_LIVE(col) " AND " col " != 'queued')"
enum { STORE_JOB_NSTATES = 6 };
/* The job states in the order store_job_counts fills its array. */
extern const char *const store_job_states[STORE_JOB_NSTATES];
/* Jobs per state: live ones counted through jobs_unsucceeded, ended ones read
 * from job_counts, kept by triggers (schema 035), so the work is
 * proportional to the live jobs, not to every job ever submitted. Reads
 * in the caller's transaction if one is open. 0 or -1. */
int store_job_counts(store_t *st, int64_t counts[STORE_JOB_NSTATES]);

/* ---- worker protocol (store_worker.c: membership; store_poll.c: store_worker_poll;
 *      store_progress.c: store_worker_report, store_worker_report_batch) ---- */
typedef struct worker_reg {
    const char *island, *backend, *data_addr, *host;
    int ndevices;
    int64_t pid;
    const char *secret_hash;    /* hex hash of the worker's own credential (api_worker.c) */
    const char *ucx_address;    /* base64 UCX worker address (api_worker.c checks it); NULL: none */
} worker_reg_t;
/* STORE_NOTFOUND unknown island, STORE_FULL no free block, STORE_CONFLICT
 * a live worker holds reg->data_addr (its id into *holder, unless NULL);
 * else *out is the 201 body. */
int store_worker_register(store_t *st, const worker_reg_t *reg, int64_t lease_us, json_t **out,
                          int64_t *holder);
int store_worker_heartbeat(store_t *st, int64_t worker);      /* NOTFOUND when gone */
/* The data-plane directory: the newest live worker registered at
 * data_addr with a UCX address: its id and that address (base64,
 * malloc'd; the caller frees). STORE_NOTFOUND when there is none. */
int store_worker_peer(store_t *st, const char *data_addr, int64_t *peer, char **ucx_address);
/* Figures a worker sends with its heartbeat (all >= 0): its object store
 * now, and what its data plane refused since it started (cumulative). */
typedef struct worker_stats {
    int64_t objects, bytes, cap_bytes;
    int64_t dp_dropped, dp_dropped_bytes, dp_refused, dp_bad_frames, dp_bad_key;
} worker_stats_t;
/* Data-plane refusals summed over every worker ever registered: frames
 * dropped, their bytes, connections refused, messages with a bad header,
 * messages with a wrong key. A sum past INT64_MAX reads as INT64_MAX (it
 * cannot fail on the data). 0, or -1 (logged) with out untouched: a
 * failed read is never zeros. */
#define STORE_DPLANE_TOTALS 5
int store_dplane_totals(store_t *st, int64_t out[STORE_DPLANE_TOTALS]);
int store_worker_set_stats(store_t *st, int64_t worker, const worker_stats_t *ws);
int store_worker_leave(store_t *st, int64_t worker);
/* The stored credential hash of a worker (live or gone) into hash (65
 * bytes, "" when it registered before credentials existed) and whether it
 * is live. A read; STORE_NOTFOUND when there is no such worker. */
int store_worker_secret(store_t *st, int64_t worker, char hash[65], int *live);
/* Lease renewals and heartbeat figures gathered in memory (api_worker.c),
 * written in one transaction: heartbeat_at never moves back; stats only
 * when has_stats. Gone workers are skipped. */
typedef struct worker_renew {
    int64_t id;
    int64_t heard_at;           /* unix microseconds of the worker's last call */
    int has_stats;
    worker_stats_t ws;
} worker_renew_t;
int store_worker_renew(store_t *st, const worker_renew_t *r, int n);
/* The worker's host tasks leased after `ack` (>= 0: the lease id of the
 * last answer it received, so everything up to it arrived), of live job
 * attempts, in seq order, and the stale attempts it must abort. *out
 * (malloc'd JSON text, *len bytes; the caller frees it) = {"jobs":[{"job",
 * "attempt", "key", "placement", "tasks": [TASK...]}...], "cancel":[{"job":
 * J, "attempt": A}, ...], "lease": L}: the tasks grouped by job attempt,
 * each group's placement once; L the newest lease id in the answer (else
 * ack). An answer lost on the way is delivered again: the worker's next
 * poll still acknowledges the older id. Delivery is a read (the dispatch
 * leased the tasks); only stale attempts take a write transaction (naming
 * them, or settling tasks of theirs the worker never received).
 * *any = 1 when either list is non-empty. *quiet = L when the answer came
 * from a read with no stale attempt pending (settled or named): then a
 * poll acknowledging L finds nothing until a commit concerning the worker
 * moves store_poll_gen(worker) (store.h's watch); else -1. */
int store_worker_poll(store_t *st, int64_t worker, int64_t ack, char **out, size_t *len,
                      int *any, int64_t *quiet);
/* Applies a host task's completion report, as prepared from its text by
 * the thread that received it (report_decode.h: p->e.status 0);
 * STORE_CONFLICT when the task is not leased to this worker (fencing); e
 * filled on a report the task refuses (400: an output array whose length
 * is not the task's shard count). */
/* *effects gets STORE_FX_* bits telling the caller whom to wake. */
#define STORE_FX_JOB_ENDED 1        /* a job failed or went back to the queue, devices
                                       were freed: wake the scheduler */
#define STORE_FX_TASKS_READY 2      /* blocked tasks became leased: wake pollers */
#define STORE_FX_FEED 4             /* a shared job progressed: wake the scheduler's feed */
#define STORE_FX_JOB_SUCCEEDED 8    /* a job succeeded: its devices were freed and nothing
                                       went back to the queue (wake its waiters; the
                                       scheduler only if a job waits for devices) */
struct report_prep;
int store_worker_report(store_t *st, int64_t worker, const struct report_prep *p, int *effects,
                        err_t *e);
/* One item's answer in a report batch. */
typedef struct store_report_result {
    int64_t task;
    int status;                 /* HTTP-like: 200, or the item's refusal */
    char *detail;               /* owned (store_report_results_clear): why it was
                                 * refused; NULL for 200 or when the store gave none */
} store_report_result_t;

/* Applies a batch's n prepared reports (report_parse_batch) in one
 * transaction; an item refused when it was prepared is answered so, and
 * one the store refuses writes nothing (each is refused before its first
 * write), so the others still apply. results[0..n) (the caller's) get
 * each item's answer, in order: no tree, since a chain's batch of 64
 * items cost the applier ~2.5K instructions an item in json_pack alone.
 * Returns STORE_OK, or STORE_ERR when the transaction itself failed
 * (results then hold nothing to free).
 * Batches are applied by one store thread (its connection stays warm),
 * several in one transaction when they queue together; st is used only
 * when that thread is not running. Thread-safe; blocks until applied. */
int store_worker_report_batch(store_t *st, int64_t worker, const struct report_prep *preps,
                              size_t n, store_report_result_t *results, int *effects);
/* Frees the details of results[0..n). */
void store_report_results_clear(store_report_result_t *results, size_t n);
/* Report transactions the applier committed (atoll_store_report_transactions_total:
 * with atoll_worker_report_requests_total, the requests a transaction). */
uint64_t store_report_transactions(void);
/* Writes the computations' progress carried in memory (comp_carry.h) that
 * fell due at now_us (util_mono_us; its first shards carried
 * COMP_CARRY_SHOW_US before) to their rows, in a write transaction of
 * st's; the report applier runs it as parts fall due. 0, or -1 (store
 * busy or failed: nothing written, try later). */
int store_reports_show_carried(store_t *st, int64_t now_us);
/* How long carried progress waits before the applier writes it as it
 * stands (default COMP_CARRY_SHOW_US, 100 ms); for tests that look at the
 * rows in between. */
void store_set_carry_show_us(int64_t us);
/* Computations whose progress is carried in memory now
 * (atoll_store_carried_computations). */
size_t store_carried_computations(void);
/* Carried parts the applier wrote as they stood, after COMP_CARRY_SHOW_US
 * (atoll_store_carried_shown_total). */
uint64_t store_carried_shown(void);
/* Stops the report applier thread once the queued batches are applied
 * (at shutdown, after the HTTP server stopped); later batches apply on
 * their callers' threads. */
void store_reports_stop(void);

/* ---- tenants (store_tenants.c) ---- */
/* Tenant id for an active token hash, or 0. */
int64_t store_tenant_by_hash(store_t *st, const char *hash);
/* The tenant id of a job: 0 when it has none, -1 when there is no job. */
int64_t store_job_tenant(store_t *st, int64_t job);
/* The name of job's slice holding device idx of island (into out, cap
 * bytes): STORE_OK, STORE_NOTFOUND when none does, STORE_ERR. */
int store_job_slice_at(store_t *st, int64_t job, const char *island, int64_t idx, char *out,
                       size_t cap);
/* A tenant's limits (schema/008_tenant_limits.sql). */
typedef struct tenant_limits {
    int64_t quota;              /* devices in use at most; 0 = no cap */
    int64_t share;              /* fair-share weight, >= 1 */
    int64_t max_queued;         /* jobs in state queued at most */
    int64_t max_priority;       /* highest priority it may submit at */
} tenant_limits_t;
/* STORE_NOTFOUND when no tenant has that id. */
int store_tenant_limits(store_t *st, int64_t tenant, tenant_limits_t *out);
/* STORE_CONFLICT when the name exists. */
int store_tenant_create(store_t *st, const char *name, const char *hash,
                        const tenant_limits_t *lim, int64_t *id);
int store_tenant_revoke(store_t *st, const char *name);     /* NOTFOUND if none active */
json_t *store_tenants_json(store_t *st);
/* GET /v1/stats/tenants (DESIGN Part D): device time each tenant's host
 * tasks used in the last `seconds` (busy spans clipped to the window),
 * with share and running/queued job counts. only_tenant > 0: that tenant
 * alone; 0: every tenant, plus each job without a tenant as its own
 * ("job-ID", share 1). New reference or NULL. */
json_t *store_tenant_stats(store_t *st, int64_t seconds, int64_t only_tenant);

/* ---- scheduler side (store_sched.c); called from the scheduler thread ---- */
/* A live shared job as the feed pass sees it (DESIGN Part D): its
 * computations dispatched and not finished, and those not dispatched yet. */
typedef struct sched_feed_job {
    int64_t id;
    int attempt;
    int64_t tenant;             /* 0 = none: the job counts as its own tenant */
    int64_t share;              /* the tenant's share; 1 without a tenant */
    int64_t island;             /* the island of its first slice */
    int inflight, undispatched;
    int fresh;                  /* none of its computations finished yet */
    double shard_us;            /* left 0 here: the feed sets it (store_sched_shard_us) */
} sched_feed_job_t;
/* Up to cap live shared jobs, by id. Count or -1. */
int store_sched_feed_jobs(store_t *st, sched_feed_job_t *out, int cap);
/* A job attempt's device time per shard over its last 16 finished host
 * tasks (the workers' own busy time): 0 when none finished, -1 on a store
 * error. */
double store_sched_shard_us(store_t *st, int64_t job, int attempt);
/* The island id and device indexes (shard order, *devices malloc'd) of a
 * job's slice. Count (0 when the stored list does not parse: the caller
 * finds it short), or -1 when the row is missing or on a store error. */
int store_sched_slice_devices(store_t *st, int64_t job, const char *slice, int64_t *island,
                              int64_t **devices);
/* How starved an island's shared devices were lately, from the workers'
 * own stamps (one clock per worker, so no skew between hosts): over the
 * island's newest STORE_IDLE_TASKS host tasks of shared jobs that
 * succeeded after since_us (wall clock), each worker's gaps between one
 * task's end and the next one's inputs ready (*idle_us: its devices were
 * not computing) and its first start to its last end (*span_us), summed
 * over workers; *ntasks how many tasks.
 * 0, or -1 on a store error. */
#define STORE_IDLE_TASKS 64
int store_sched_island_idle(store_t *st, int64_t island, int64_t since_us, int64_t *idle_us,
                            int64_t *span_us, int *ntasks);

/* A running job a higher-priority one may evict (DESIGN Part D). */
typedef struct sched_victim {
    int64_t job;
    int64_t priority;
    int shared;                 /* holds its devices beside others (device_holds) */
    int64_t bytes;              /* shared: the memory its hold takes on each device */
} sched_victim_t;
/* Up to cap preemptible jobs holding devices with priority below `below`,
 * exclusive and shared, lowest priority first, then the most recently
 * allocated. Count or -1. */
int store_sched_victims(store_t *st, int64_t below, sched_victim_t *out, int cap);
/* The devices shared job `job` holds (device_holds): up to cap (island id,
 * device index) pairs into island[] and idx[]. Count or -1. */
int store_sched_holds(store_t *st, int64_t job, int64_t *island, int64_t *idx, int cap);
/* Evicts victim for job `by` in its own transaction: requeued with
 * attempt + 1 and preemptions + 1 (not a retry), devices freed, leased
 * tasks aborted through the poll, a `preempted` event naming `by`. 0
 * done; 1 when the victim is no longer allocated or running (it ended,
 * was cancelled or requeued since the scheduler read it: nothing done, its
 * devices are free already); -1 on error. */
int store_sched_preempt(store_t *st, int64_t victim, int64_t by, int64_t by_priority);

typedef struct sched_dev {
    int64_t worker;             /* 0 = no live worker (down) */
    int local;                  /* worker-local device number */
    int64_t first;              /* the worker's first island device index */
    int count;                  /* the worker's device count */
    int64_t job;                /* 0 = not held by an exclusive job */
    int shared;                 /* shared jobs holding it (device_holds) */
    int64_t held_bytes;         /* the memory their holds take (device_holds.bytes) */
    int64_t cap_bytes;          /* the device's memory: its worker's object store cap
                                   over its devices; 0 = not reported yet (no bound) */
    char addr[64];              /* the worker's data_addr */
} sched_dev_t;
/* Fills devs[0..n-1] for the island (n = its device count). */
int store_sched_devices(store_t *st, int64_t island, sched_dev_t *devs, int64_t n);
/* Reads again devs[idx[i]] for the k devices idx[0..k) of the island
 * (store_devlog_since's answer), as store_sched_devices would fill them.
 * 0 or -1. */
int store_sched_devices_patch(store_t *st, int64_t island, sched_dev_t *devs, int64_t n,
                              const int64_t *idx, int k);

typedef struct sched_job {
    int64_t id;
    int attempt;
    int64_t tenant;             /* 0 = none */
    int64_t quota;              /* the tenant's device quota; 0 = none */
    int64_t priority;           /* filled by store_sched_tenant_page */
} sched_job_t;
/* Per-tenant queues. A tenant with queued jobs as the scheduler sees it at
 * the start of a round; id 0 stands for the jobs without a tenant. */
typedef struct sched_tenant {
    int64_t id;
    int64_t quota;              /* 0 = no cap */
    int64_t share;              /* >= 1 */
    int64_t used;               /* devices its jobs hold now */
} sched_tenant_t;
/* Devices held per tenant as store_sched_tenants last read them, reused
 * while store_devices_gen() has not moved. Owned by the caller (one per
 * thread that calls; zero-initialised before first use), emptied by
 * store_usage_free. */
typedef struct store_usage_row {
    int64_t tenant, devices;
} store_usage_row_t;
typedef struct store_usage {
    int valid;
    uint64_t gen;
    int n, cap;
    store_usage_row_t *rows;    /* owned */
} store_usage_t;
void store_usage_free(store_usage_t *u);
/* Every tenant with at least one queued job (malloc'd array in *out, the
 * caller frees), with the devices it holds from u (read again only when
 * store_devices_gen() moved): O(tenants), O(held devices) after a change,
 * never O(queue). A lone tenant without a quota gets used = 0: nothing
 * ranks or caps it. 0 or -1. */
int store_sched_tenants(store_t *st, store_usage_t *u, sched_tenant_t **out, int *n);
/* Up to cap queued jobs of one tenant (0: without a tenant) that come after
 * (after_prio, after_id) in its queue order (priority desc, then id); pass
 * after_id 0 and after_prio > any priority for its head. Jobs whose previous
 * attempt still holds a leased task are skipped. An index probe (migration
 * 008): the cost is the page, not the queue. Fills priority and the tenant's
 * quota. Returns the count, or -1. */
int store_sched_tenant_page(store_t *st, const sched_tenant_t *t, int64_t after_prio,
                            int64_t after_id, sched_job_t *jobs, int cap);
/* The job document as stored (new reference), or NULL. */
json_t *store_sched_job_doc(store_t *st, int64_t job);
int store_sched_set_reason(store_t *st, int64_t job, const char *reason);
/* Reserves `count` consecutive sequence numbers of an island (inside the
 * caller's transaction); returns the first, or -1. */
int64_t store_sched_take_seq(store_t *st, int64_t island, int count);
int store_sched_add_slice(store_t *st, int64_t job, const char *name, int64_t island,
                          const shape_t *shape, const int64_t *devices, int n);
/* Computations comp .. comp + ncomps - 1 (a run, schema/032: one write
 * for all) get their island and seqs seq .. seq + ncomps - 1, and are
 * dispatched unless they wait (sequential dispatch). The job's row is not
 * touched: its move to running is written once per transaction
 * (store_sched_mark_allocated, store_sched_dispatched). 0 or -1. */
int store_sched_set_comp(store_t *st, int64_t job, int comp, int ncomps, int64_t island,
                         int64_t seq, int dispatched);
/* One host task: computations comp .. comp + ncomps - 1 of the job attempt
 * (a run: consecutive in its dispatch order, on one slice, with seqs seq ..
 * seq + ncomps - 1; schema/032) for one worker, covering its `nshards`
 * shards of them. Strings borrowed. */
typedef struct sched_task {
    int64_t job;
    int attempt, comp, ncomps;
    int64_t island, worker, seq;
    const char *shards;         /* JSON array of shard indexes, increasing */
    int nshards;                /* >= 1 */
    int blocked;                /* sequential dispatch: waits for producers */
    const char *devices;        /* JSON array of the shards' worker-local devices */
} sched_task_t;
/* Writes host tasks t[0..n) (n >= 0; the rows of one computation, one per
 * worker, in the caller's order), STORE_TASK_ROWS to a statement. 0 or
 * -1. */
#define STORE_TASK_ROWS 8
int store_sched_add_tasks(store_t *st, const sched_task_t *t, int n);
/* What every host task of computation `comp` of the job attempt shares:
 * the TASK JSON text without "task", "shards" and "devices" (borrowed),
 * written once per computation; a poll splices each task's own fields in
 * (store_poll.c). 0 or -1. */
int store_sched_add_comp_payload(store_t *st, int64_t job, int attempt, int comp,
                                 const char *payload);
/* One device of an allocation: where, and the worker the round saw. */
typedef struct store_mark {
    int64_t island, idx, worker;
} store_mark_t;
/* Marks the job allocated (devices held by it: allocation runs, or for a
 * shared job device_holds rows of `bytes` each; pending_reason cleared),
 * or running when `running` (the caller writes its first host tasks in
 * this transaction), with dispatch_next = next (< 0: none), and stores
 * the attempt's placement (PLACEMENT JSON text, borrowed). The
 * devices are m[0..n), as the round read them; m is sorted in place. -1
 * when a device is no longer available to it or no longer on that worker
 * (the caller rolls back; the job is tried again next round). With
 * `current` the caller vouches that, inside this transaction, the devices
 * are as the round read them (sched_round_current: no other writer changed
 * any since), and the devices' workers are not read again (2,048 devices:
 * a scan of ~0.4 ms); that no other allocation holds them is checked
 * either way (two seeks per run). */
int store_sched_mark_allocated(store_t *st, int64_t job, int shared, int64_t bytes,
                               store_mark_t *m, int n, const char *placement, int current,
                               int running, int next);
/* An exclusive job with computations left to dispatch (jobs.dispatch_next,
 * schema/024_dispatch_chunks.sql): its attempt and the position, in its
 * topological order, of the next computation to dispatch (some of whose
 * host tasks may be written: store_sched_comp_written). Only the
 * scheduler sets dispatch_next (at allocation and per chunk); a job
 * leaving allocated/running (finished, cancelled, requeued) clears it
 * (store_job_finish, job_requeue), so it is non-NULL only while the
 * attempt that set it is live. */
typedef struct sched_more {
    int64_t id;
    int attempt;
    int next;
} sched_more_t;
/* Host tasks of the job went out in the caller's transaction: its
 * dispatch_next set (next >= 0) or cleared (next < 0), and an allocated
 * job moves to running. 0 or -1. */
int store_sched_dispatched(store_t *st, int64_t job, int next);
/* A shared job's computation was fed in the caller's transaction: an
 * allocated job moves to running. 0 or -1. */
int store_sched_started(store_t *st, int64_t job);
/* How many host tasks of computation comp of the job attempt are written
 * (a chunk may end inside a computation), and their seq into *seq when
 * any. Count or -1. */
int store_sched_comp_written(store_t *st, int64_t job, int attempt, int comp, int64_t *seq);
/* Up to cap jobs with computations left to dispatch, by id. Count or -1. */
int store_sched_dispatching(store_t *st, sched_more_t *out, int cap);
/* Fails a live job whose next chunk cannot be written (its allocation is
 * not what its plan needs), inside the caller's transaction. 0 or -1. */
int store_sched_fail_dispatch(store_t *st, int64_t job, const char *why);
/* The job attempt's dispatch_next now (inside the caller's transaction: it
 * may have ended since store_sched_dispatching read it); -1 when nothing is
 * left to dispatch for that attempt, -2 on error. */
int store_sched_dispatch_next(store_t *st, int64_t job, int attempt);
/* Fails a queued job that can no longer be compiled or placed. 0 done; 1
 * when it is no longer queued (cancelled meanwhile: nothing done); -1. */
int store_sched_fail(store_t *st, int64_t job, const char *why);
/* Expires live workers silent for longer than lease_us: their devices go
 * down and each job holding one is requeued (attempt+1, if retries are
 * left) or failed naming the worker. Returns the number of workers expired. */
int store_sched_expire(store_t *st, int64_t lease_us);
/* At controller start: give every live worker a fresh lease, so workers
 * that kept running while atolld was down are not declared lost. */
int store_sched_recover(store_t *st);


/* ---- users' programs (store_runs.c; DESIGN Part F) ---- */

#define STORE_RUN_LOG_KEEP ((int64_t)8 << 20)   /* bytes kept per process and stream */

typedef struct store_run_key {
    int64_t job;
    int attempt;
    int comp;
    int process;
} store_run_key_t;

/* STORE_OK when worker holds (or held) a host task of (job, attempt,
 * comp), a run computation (DESIGN Part F) that has a process `process`
 * (below its shard count); STORE_NOTFOUND when not. */
int store_run_owned(store_t *st, int64_t worker, int64_t job, int attempt, int comp,
                    int process);
/* A run of one stream's output (report_decode.h). */
typedef report_log_seg_t store_run_seg_t;
/* Appends output in order and trims each stream to its newest
 * STORE_RUN_LOG_KEEP bytes, in one transaction. */
int store_run_log_put(store_t *st, const store_run_key_t *k, const store_run_seg_t *segs,
                      int nsegs);
/* Process-state events of docs/worker-protocol.md (validated by the
 * caller), in one transaction. */
int store_run_procs_put(store_t *st, int64_t worker, const json_t *events);
/* The newest attempt with a state or output for that process; the job's
 * current attempt when none has (a follow waits for the process to start);
 * -1 when the job is unknown or on error. */
int store_run_latest_attempt(store_t *st, int64_t job, int comp, int process);
/* Chunks with id > after_id, both streams interleaved as received, until
 * about max bytes: *buf (caller frees; NULL when none), *len, *last_id. */
int store_run_log_read(store_t *st, const store_run_key_t *k, int64_t after_id, size_t max,
                       char **buf, size_t *len, int64_t *last_id);
/* Non-zero when the process ended, or its job attempt did (follow stops). */
int store_run_proc_ended(store_t *st, const store_run_key_t *k);
/* [{attempt, comp, process, worker, host, pid, state, exit_code?, signal?,
 * started_at_us, ended_at_us?}]; new reference, NULL on error. */
json_t *store_run_processes(store_t *st, int64_t job);

#endif
