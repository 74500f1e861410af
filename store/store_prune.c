/* store_prune.c - job retention: an ended job is deleted, with every row
 * it owns, once it ended longer ago than atolld's --keep-jobs-s.
 *
 * Why: the store kept every job ever submitted, ~1.5 KB for a tiny job
 * (docs/operations.md), so a loop of tiny jobs at issue 9's 2,000 jobs/s
 * writes ~3 MB a second and fills any disk. What atolld runs each second
 * no longer grows with the history (schemas 035, 036); this bounds the
 * history itself. Deleted rows' pages go to SQLite's freelist and are
 * reused, so the file stops growing once the retained window is stored.
 *
 * Which jobs go (all in one BEGIN IMMEDIATE, so none changes meanwhile):
 *   - ended (succeeded, failed, cancelled), finished_at before the cutoff;
 *   - with no host task still leased: a worker that holds one is still
 *     told to abort it (the poll's `cancel`) until it reports or the
 *     poll settles it, and both need the job's rows;
 *   - not the owner of the newest row of jobs, host_tasks, events or
 *     run_logs. SQLite gives a new row the largest rowid + 1: deleting
 *     the largest would hand its id out again, and a client or a worker
 *     holding the old job or task id would then name someone else's.
 * Jobs are read oldest first (id order) and the read stops at the first
 * job created at or after the cutoff (a job ends after it is created), so
 * a call reads the jobs it deletes and the few old ones it keeps (live,
 * or ended within the window), never the whole history.
 *
 * What stays: job_counts follows the deletes through its trigger (schema
 * 035: atoll_jobs{state} counts stored jobs; atoll_jobs_pruned_total the
 * deleted ones); admission_buckets keeps the deleted jobs' admissions
 * (schema 037: a Prometheus histogram only grows); tenants' device time
 * (tenant_usage) and devices' busy time, and events without a job
 * (workers joining or lost). An idempotency key is free again once its
 * job is gone. */
#include "store.h"

#include <inttypes.h>
#include <stdatomic.h>

#include "util.h"

static _Atomic uint64_t prune_total;

/* Every table holding a job's rows, children first (their foreign keys
 * name jobs), jobs last. A table added later that references jobs makes
 * the last DELETE fail on its foreign key until it is listed here;
 * test_store_prune checks every table with a job_id column. Each
 * statement deletes a whole batch: ?1 is the batch's ids as a JSON array
 * of integers, and the planner looks each id up in the table's job_id
 * index (12 statements a batch, not 12 a job). */
#define PRUNE_IDS(col) " WHERE " col " IN (SELECT value FROM json_each(?1))"
static const char *const prune_delete_sql[] = {
    "DELETE FROM comp_payloads" PRUNE_IDS("job_id"),
    "DELETE FROM computations" PRUNE_IDS("job_id"),
    "DELETE FROM host_tasks" PRUNE_IDS("job_id"),
    "DELETE FROM outputs" PRUNE_IDS("job_id"),
    "DELETE FROM events" PRUNE_IDS("job_id"),
    "DELETE FROM job_docs" PRUNE_IDS("job_id"),
    "DELETE FROM run_logs" PRUNE_IDS("job_id"),
    "DELETE FROM run_procs" PRUNE_IDS("job_id"),
    "DELETE FROM slices" PRUNE_IDS("job_id"),
    "DELETE FROM device_holds" PRUNE_IDS("job_id"),
    "DELETE FROM allocations" PRUNE_IDS("job_id"),
    "DELETE FROM jobs" PRUNE_IDS("id"),
};
#define PRUNE_NDELETE ((int)(sizeof prune_delete_sql / sizeof prune_delete_sql[0]))

/* The jobs owning the newest row of each table whose ids are handed out. */
static const char *const prune_newest_sql[] = {
    "SELECT MAX(id) FROM jobs",
    "SELECT job_id FROM host_tasks ORDER BY id DESC LIMIT 1",
    "SELECT job_id FROM events ORDER BY id DESC LIMIT 1",
    "SELECT job_id FROM run_logs ORDER BY id DESC LIMIT 1",
};
#define PRUNE_NNEWEST ((int)(sizeof prune_newest_sql / sizeof prune_newest_sql[0]))

/* Fills keep[] with the jobs owning a newest row (0 where none). 0 or -1. */
static int prune_newest(store_t *st, int64_t keep[PRUNE_NNEWEST])
{
    for (int i = 0; i < PRUNE_NNEWEST; i++) {
        sqlite3_stmt *s = store_stmt(st, prune_newest_sql[i]);
        if (!s)
            return -1;
        int rc = sqlite3_step(s);
        keep[i] = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
        sqlite3_reset(s);
        if (rc != SQLITE_ROW && rc != SQLITE_DONE)
            return -1;
    }
    return 0;
}

static int prune_kept(const int64_t keep[PRUNE_NNEWEST], int64_t id)
{
    for (int i = 0; i < PRUNE_NNEWEST; i++)
        if (keep[i] == id)
            return 1;
    return 0;
}

/* Up to cap jobs that may go (above) into ids; their number, or -1. */
static int prune_pick(store_t *st, int64_t cutoff_us, int64_t *ids, int cap)
{
    static const char sql[] =
        "SELECT id, created_at, state, finished_at, EXISTS (SELECT 1 FROM host_tasks t"
        " WHERE t.job_id = jobs.id AND t.state = 'leased') FROM jobs ORDER BY id";
    int64_t keep[PRUNE_NNEWEST];
    if (prune_newest(st, keep) != 0)
        return -1;
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    int n = 0, rc = SQLITE_DONE;
    while (n < cap && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (sqlite3_column_int64(s, 1) >= cutoff_us)
            break;      /* created since: every later job too, near enough */
        int64_t id = sqlite3_column_int64(s, 0);
        if (store_state_is_terminal((const char *)sqlite3_column_text(s, 2)) &&
            sqlite3_column_type(s, 3) != SQLITE_NULL && sqlite3_column_int64(s, 3) < cutoff_us &&
            !sqlite3_column_int(s, 4) && !prune_kept(keep, id))
            ids[n++] = id;
    }
    int failed = n < cap && rc != SQLITE_ROW && rc != SQLITE_DONE;
    sqlite3_reset(s);
    return failed ? -1 : n;
}

/* Largest text of a batch's ids: "[" then each id (at most 19 digits) and
 * its separator, then "]". */
#define PRUNE_IDS_TEXT (2 + STORE_PRUNE_BATCH_MAX * 20)

/* Deletes jobs ids[0..n) and every row they own. 0 or -1. */
static int prune_jobs(store_t *st, const int64_t *ids, int n)
{
    char text[PRUNE_IDS_TEXT];
    size_t len = util_appendf(text, 0, sizeof text, "[");
    for (int i = 0; i < n; i++)
        len = util_appendf(text, len, sizeof text, "%s%" PRId64, i ? "," : "", ids[i]);
    len = util_appendf(text, len, sizeof text, "]");
    for (int i = 0; i < PRUNE_NDELETE; i++) {
        sqlite3_stmt *s = store_stmt(st, prune_delete_sql[i]);
        if (!s)
            return -1;
        sqlite3_bind_text(s, 1, text, (int)len, SQLITE_TRANSIENT);
        if (store_step_done(s) != 0)
            return -1;
    }
    return 0;
}

int store_jobs_prune(store_t *st, int64_t cutoff_us, int batch)
{
    int64_t ids[STORE_PRUNE_BATCH_MAX];
    if (batch < 1 || batch > STORE_PRUNE_BATCH_MAX)
        batch = STORE_PRUNE_BATCH_MAX;
    if (store_begin(st) != 0)
        return -1;
    int n = prune_pick(st, cutoff_us, ids, batch);
    if (n < 0 || (n > 0 && prune_jobs(st, ids, n) != 0))
        goto fail;
    if (store_commit(st) != 0)
        goto fail;
    atomic_fetch_add(&prune_total, (uint64_t)n);
    return n;
fail:
    store_rollback(st);
    return -1;
}

uint64_t store_jobs_pruned(void) { return atomic_load(&prune_total); }
