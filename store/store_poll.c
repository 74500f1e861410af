/* store_poll.c - task delivery to workers (docs/worker-protocol.md, "Life
 * of a worker"). The dispatch already leased a worker's host tasks, each
 * under a lease id (store_lease_id); a poll delivers those leased after the
 * id the worker acknowledges (`ack`, the newest it received), in seq order,
 * with a read: so an answer lost on the way comes again, and a worker's
 * poll never waits for the write lock or writes. Only stale attempts take
 * a write transaction: naming those the worker must abort, and settling
 * their tasks it never received. */
#include "store_internal.h"

#include <pthread.h>
#include <string.h>

#include "jtext.h"
#include "util.h"

/* How long a re-registered worker is told to abort what it held under its
 * expired lease (see poll_cancels). */
#define PRED_ABORT_US 2000000

/* Appends {"job": job, "attempt": attempt} to arr unless it is there. */
static void cancel_add(json_t *arr, json_int_t job, json_int_t attempt)
{
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
        if (json_integer_value(json_object_get(v, "job")) == job &&
            json_integer_value(json_object_get(v, "attempt")) == attempt)
            return;
    json_array_append_new(arr, json_pack("{s:I, s:I}", "job", job, "attempt", attempt));
}

/* Runs s (bound by the caller) and adds each (job_id, attempt) row. */
static void cancel_rows(sqlite3_stmt *s, json_t *arr)
{
    while (sqlite3_step(s) == SQLITE_ROW)
        cancel_add(arr, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1));
    sqlite3_reset(s);
}

/* The attempts, as {"job", "attempt"} entries, of which this worker still
 * holds tasks although their job ended (failed or cancelled) or moved to a
 * newer attempt: the worker aborts exactly those (and older attempts of
 * the job), never a newer attempt, so the job's current attempt may be
 * leased to the same worker at once. The first time a stale task is named,
 * abort_sent_at records it: a task still leased a lease period later was
 * never received and is settled (store_sched_expire), so the naming ends.
 * Inside the poll's transaction. */
static json_t *poll_cancels(store_t *st, int64_t worker)
{
    static const char mark_sql[] =
        "UPDATE host_tasks SET abort_sent_at = ?2 WHERE worker_id = ?1 AND state = 'leased'"
        " AND abort_sent_at IS NULL AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = host_tasks.job_id"
        " AND " STORE_ATTEMPT_STALE("j.state", "host_tasks.attempt", "j.attempt") ")";
    static const char sql[] =
        "SELECT DISTINCT t.job_id, t.attempt FROM host_tasks t JOIN jobs j ON j.id = t.job_id"
        " WHERE t.worker_id = ? AND t.state = 'leased'"
        " AND " STORE_ATTEMPT_STALE("j.state", "t.attempt", "j.attempt");
    /* The same process under an earlier, expired lease (a worker paused
     * past its lease registers again under a new id): the tasks it held
     * then were cancelled when it was lost, but it may still run them, and
     * a collective among aborted peers would hold its device until the peer
     * timeout. Name their attempts for PRED_ABORT_US after the first time
     * (its reports of them are refused, so nothing else ends the
     * repetition). Losing the worker requeued or ended their jobs, so these
     * attempts are stale; the attempt test only makes sure. */
    static const char pred_mark_sql[] =
        "UPDATE host_tasks SET abort_sent_at = ?2 WHERE abort_sent_at IS NULL AND state = 'cancelled'"
        " AND error = 'worker lost' AND worker_id IN (SELECT g.id FROM workers g"
        "  JOIN workers me ON me.id = ?1 WHERE g.state = 'gone' AND g.id <> me.id"
        "  AND g.pid = me.pid AND g.host = me.host AND g.data_addr = me.data_addr)";
    static const char pred_sql[] =
        "SELECT DISTINCT t.job_id, t.attempt FROM host_tasks t JOIN jobs j ON j.id = t.job_id"
        " WHERE t.state = 'cancelled' AND t.error = 'worker lost' AND t.abort_sent_at > ?2"
        " AND t.worker_id IN (SELECT g.id FROM workers g JOIN workers me ON me.id = ?1"
        "  WHERE g.state = 'gone' AND g.id <> me.id AND g.pid = me.pid AND g.host = me.host"
        "  AND g.data_addr = me.data_addr)"
        " AND " STORE_ATTEMPT_STALE("j.state", "t.attempt", "j.attempt");
    int64_t now = util_wall_us();
    json_t *arr = json_array();
    sqlite3_stmt *s = store_stmt(st, mark_sql);
    if (!arr || !s)
        return arr;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, now);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, pred_mark_sql)))
        return arr;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, now);
    if (store_step_done(s) != 0 || !(s = store_stmt(st, pred_sql)))
        return arr;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, now - PRED_ABORT_US);
    cancel_rows(s, arr);
    if (!(s = store_stmt(st, sql)))
        return arr;
    sqlite3_bind_int64(s, 1, worker);
    cancel_rows(s, arr);
    return arr;
}

/* Delivery: host tasks leased to worker ?1 after the lease id it
 * acknowledged (?2), of their job's live attempt and not named for abort,
 * while the worker is live (a parked long poll may outlive its lease, and
 * a fenced worker must get nothing; losing a worker cancels its leased
 * tasks in the same transaction, so one statement sees both or neither).
 * A task of a stale attempt is never delivered: its attempt is named in
 * "cancel" instead. */
#define POLL_DELIVER_WHERE                                                                 \
    " t.worker_id = ?1"                                                                    \
    " AND t.state = 'leased' AND t.leased_at > ?2 AND t.abort_sent_at IS NULL"           \
    " AND j.attempt = t.attempt AND j.state IN ('allocated', 'running')"                 \
    " AND EXISTS (SELECT 1 FROM workers w WHERE w.id = ?1 AND w.state = 'live')"
/* A task of worker ?1 still leased although its attempt is stale. */
#define POLL_STALE(t)                                                                      \
    " EXISTS (SELECT 1 FROM jobs j WHERE j.id = " t ".job_id"                             \
    " AND " STORE_ATTEMPT_STALE("j.state", t ".attempt", "j.attempt") ")"

/* What a poll must do: POLL_DELIVER (tasks to hand over), POLL_STALE_ANY
 * (stale attempts to name or settle, or an earlier registration of the same
 * process whose jobs to name; the same conditions as poll_cancels, a little
 * wider), or neither (0); PROBE_GONE when the worker is not live, -1 on
 * error. One statement: one snapshot, no transaction to open. The stale
 * half scans every task the worker holds leased (a long chain's hundreds),
 * so it runs only when stale_memo cannot vouch for it (stale = 0). */
#define POLL_DELIVER 1
#define POLL_STALE_ANY 2
#define PROBE_GONE (-2)
#define PROBE_LIVE_DELIVER                                                                 \
    "SELECT (SELECT state = 'live' FROM workers WHERE id = ?1),"                           \
    " EXISTS (SELECT 1 FROM host_tasks t JOIN jobs j ON j.id = t.job_id WHERE"             \
    POLL_DELIVER_WHERE ")"
static int poll_probe(store_t *st, int64_t worker, int64_t ack, int stale)
{
    static const char sql_deliver[] = PROBE_LIVE_DELIVER ", 0";
    static const char sql[] =
        PROBE_LIVE_DELIVER ","
        " EXISTS (SELECT 1 FROM host_tasks t WHERE t.worker_id = ?1 AND t.state = 'leased'"
        "  AND" POLL_STALE("t") ")"
        " OR EXISTS (SELECT 1 FROM host_tasks t WHERE t.state = 'cancelled' AND t.error = 'worker lost'"
        "  AND (t.abort_sent_at IS NULL OR t.abort_sent_at > ?3)"
        "  AND t.worker_id IN (SELECT g.id FROM workers g JOIN workers me ON me.id = ?1"
        "   WHERE g.state = 'gone' AND g.id <> me.id AND g.pid = me.pid AND g.host = me.host"
        "   AND g.data_addr = me.data_addr))";
    sqlite3_stmt *s = store_stmt(st, stale ? sql : sql_deliver);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, ack);
    if (stale)
        sqlite3_bind_int64(s, 3, util_wall_us() - PRED_ABORT_US);
    int rc = -1;
    if (sqlite3_step(s) == SQLITE_ROW)
        rc = sqlite3_column_int(s, 0) != 1 ? PROBE_GONE
           : (sqlite3_column_int(s, 1) ? POLL_DELIVER : 0) |
             (sqlite3_column_int(s, 2) ? POLL_STALE_ANY : 0);
    sqlite3_reset(s);
    return rc;
}

/* Per worker (slot by id), the stale generation (store_stale_gen) at which
 * its probe last found nothing stale. Nothing can become stale for that
 * worker without moving the generation (the watch triggers, and a
 * dispatch's check at its commit: store.c), and
 * the generation moves after the commit is visible, so a probe whose read
 * began after the generation was read sees every commit that moved it up
 * to there: a memo equal to the current generation vouches that the stale
 * half would still answer 0. A slot taken by another worker vouches for
 * nothing. */
#define STALE_MEMO_SLOTS 1024
typedef struct stale_memo {
    int64_t worker;             /* 0: empty */
    uint64_t gen;
} stale_memo_t;
static stale_memo_t stale_memo[STALE_MEMO_SLOTS];
static pthread_mutex_t stale_memo_mu = PTHREAD_MUTEX_INITIALIZER;

static int stale_memo_vouches(int64_t worker, uint64_t gen)
{
    pthread_mutex_lock(&stale_memo_mu);
    stale_memo_t m = stale_memo[(uint64_t)worker % STALE_MEMO_SLOTS];
    pthread_mutex_unlock(&stale_memo_mu);
    return m.worker == worker && m.gen == gen;
}

static void stale_memo_set(int64_t worker, uint64_t gen)
{
    pthread_mutex_lock(&stale_memo_mu);
    stale_memo[(uint64_t)worker % STALE_MEMO_SLOTS] = (stale_memo_t){worker, gen};
    pthread_mutex_unlock(&stale_memo_mu);
}

/* One (job, attempt) of a poll answer: its placement and its tasks, as
 * JSON text. The stored texts are spliced in, never parsed: an answer with
 * a whole job's host tasks is built in one pass over them. */
typedef struct poll_group {
    int64_t job, attempt;
    char *placement;            /* owned: JSON text, NULL for none */
    store_buf_t tasks;          /* owned: the task objects, comma-separated */
} poll_group_t;

/* The groups of one answer, in order of first appearance (seq order). */
typedef struct poll_groups {
    poll_group_t *g;            /* owned */
    int n, cap;
} poll_groups_t;

static void poll_groups_free(poll_groups_t *gs)
{
    for (int i = 0; i < gs->n; i++) {
        free(gs->g[i].placement);
        free(gs->g[i].tasks.p);
    }
    free(gs->g);
}

/* The group of (job, attempt), added (with its attempt's placement, read
 * then) when absent; NULL on OOM or a failed read. Groups are few (the
 * jobs with work on one worker), so a scan is enough. */
static poll_group_t *poll_group(store_t *st, poll_groups_t *gs, int64_t job, int64_t attempt)
{
    static const char sql[] = "SELECT placement FROM jobs WHERE id = ?";
    for (int i = 0; i < gs->n; i++)
        if (gs->g[i].job == job && gs->g[i].attempt == attempt)
            return &gs->g[i];
    if (gs->n == gs->cap) {
        int cap = gs->cap ? gs->cap * 2 : 4;
        poll_group_t *g = realloc(gs->g, sizeof *g * (size_t)cap);
        if (!g)
            return NULL;
        gs->g = g;
        gs->cap = cap;
    }
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return NULL;
    sqlite3_bind_int64(s, 1, job);
    int step = sqlite3_step(s);
    const char *pl = step == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
    poll_group_t *g = &gs->g[gs->n];
    *g = (poll_group_t){job, attempt, pl ? strdup(pl) : NULL, store_buf_new(1024)};
    sqlite3_reset(s);
    if (step != SQLITE_ROW || (pl && !g->placement) || g->tasks.failed) {
        free(g->placement);
        free(g->tasks.p);
        return NULL;
    }
    gs->n++;
    return g;
}

/* Appends one task to g: computation payload pay (n bytes: its stored
 * JSON object, the TASK without "task", "shards" and "devices") with the
 * host task's own "task", "shards" and "devices" (columns 0, 4 and 5 of
 * poll_read's row t) put first. The task's own fields are only known per
 * row, so they join the shared text here rather than being stored with a
 * copy of it. 0, or -1 (OOM, or a payload that is no object). */
static int poll_task_text(poll_group_t *g, sqlite3_stmt *t, const char *pay, int n)
{
    const char *shards = (const char *)sqlite3_column_text(t, 4);
    const char *devices = (const char *)sqlite3_column_text(t, 5);
    if (!pay || !shards || !devices || n < 2 || pay[0] != '{' || pay[n - 1] != '}')
        return -1;
    store_buf_t *b = &g->tasks;
    if (b->len)
        STORE_BUF_LIT(b, ",");
    STORE_BUF_LIT(b, "{\"task\":");
    store_buf_int(b, sqlite3_column_int64(t, 0));
    STORE_BUF_LIT(b, ",\"shards\":");
    store_buf_put(b, shards, (size_t)sqlite3_column_bytes(t, 4));
    STORE_BUF_LIT(b, ",\"devices\":");
    store_buf_put(b, devices, (size_t)sqlite3_column_bytes(t, 5));
    if (n > 2)
        STORE_BUF_LIT(b, ",");
    store_buf_put(b, pay + 1, (size_t)n - 1);
    return g->tasks.failed ? -1 : 0;
}

/* Appends the computations of host task row t (a run: comp_idx ..
 * comp_idx + ncomps - 1) to g, in index order: the payloads' key order,
 * so no sort. (Payloads are written with their host tasks, in the same
 * transaction, and never deleted.) 0 or -1. */
static int poll_run_text(store_t *st, poll_group_t *g, sqlite3_stmt *t)
{
    static const char sql[] =
        "SELECT payload FROM comp_payloads WHERE job_id = ?1 AND attempt = ?2"
        " AND comp_idx BETWEEN ?3 AND ?3 + ?4 - 1";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, sqlite3_column_int64(t, 1));
    sqlite3_bind_int64(s, 2, sqlite3_column_int64(t, 2));
    sqlite3_bind_int64(s, 3, sqlite3_column_int64(t, 6));
    sqlite3_bind_int64(s, 4, sqlite3_column_int64(t, 7));
    int rc = 0;
    while (rc == 0 && sqlite3_step(s) == SQLITE_ROW)
        rc = poll_task_text(g, t, (const char *)sqlite3_column_text(s, 0),
                            sqlite3_column_bytes(s, 0));
    sqlite3_reset(s);
    return rc;
}

/* Reads the tasks to deliver (POLL_DELIVER_WHERE) into groups by (job,
 * attempt) in seq order, each with its attempt's placement. *lease: the
 * newest lease id among them, if newer. Returns the number of host tasks,
 * or -1. The host tasks come sorted, then each one's computations and
 * each group's placement are read apart: one statement joining them sorted
 * every computation's payload too (SQLite's sorter copies whole rows),
 * and re-read the placement for every computation; apart, a computation
 * costs about half (stop 74). One snapshot all the same: outside a
 * transaction, SQLite keeps the read transaction that the first statement
 * opened until the last active one is reset, and the host tasks'
 * statement stays active until every row is taken. */
static int poll_read(store_t *st, int64_t worker, int64_t ack, poll_groups_t *gs,
                     int64_t *lease)
{
    static const char sql[] =
        "SELECT t.id, t.job_id, t.attempt, t.leased_at, t.shards, t.devices, t.comp_idx,"
        " t.ncomps FROM host_tasks t JOIN jobs j ON j.id = t.job_id WHERE"
        POLL_DELIVER_WHERE " ORDER BY t.seq, t.id";
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, ack);
    int n = 0;
    while (sqlite3_step(s) == SQLITE_ROW) {
        if (sqlite3_column_int64(s, 3) > *lease)
            *lease = sqlite3_column_int64(s, 3);
        poll_group_t *g = poll_group(st, gs, sqlite3_column_int64(s, 1),
                                     sqlite3_column_int64(s, 2));
        if (!g || poll_run_text(st, g, s) != 0) {
            sqlite3_reset(s);
            return -1;
        }
        n++;
    }
    sqlite3_reset(s);
    return n;
}

/* The answer (docs/worker-protocol.md): {"jobs": [{"job", "attempt",
 * "key", "placement", "tasks"}], "cancel": cancels (NULL: []), "lease":
 * lease}.
 * malloc'd text (length in *len), or NULL on OOM. */
static char *poll_answer(const poll_groups_t *gs, const json_t *cancels, int64_t lease,
                         size_t *len)
{
    size_t cancel_len = 0;
    char *cancel_text = cancels ? jtext_dump(cancels, &cancel_len) : NULL;
    /* Pieces put, not printed: a placement of a 2,048-device slice is tens
     * of KiB, which vsnprintf wrote twice whenever it did not fit, the
     * second time a byte at a time (5 % of atolld's samples in
     * bench_passes). */
    store_buf_t b = store_buf_new(4096);
    STORE_BUF_LIT(&b, "{\"jobs\":[");
    for (int i = 0; i < gs->n; i++) {
        const poll_group_t *g = &gs->g[i];
        char key[STORE_KEY_HEX_LEN];
        store_attempt_key(g->job, (int32_t)g->attempt, key);
        if (i)
            STORE_BUF_LIT(&b, ",");
        STORE_BUF_LIT(&b, "{\"job\":");
        store_buf_int(&b, g->job);
        STORE_BUF_LIT(&b, ",\"attempt\":");
        store_buf_int(&b, g->attempt);
        STORE_BUF_LIT(&b, ",\"key\":\"");
        store_buf_put(&b, key, strlen(key));
        STORE_BUF_LIT(&b, "\",\"placement\":");
        if (g->placement)
            store_buf_put(&b, g->placement, strlen(g->placement));
        else
            STORE_BUF_LIT(&b, "null");
        STORE_BUF_LIT(&b, ",\"tasks\":[");
        store_buf_put(&b, g->tasks.p, g->tasks.len);
        STORE_BUF_LIT(&b, "]}");
    }
    STORE_BUF_LIT(&b, "],\"cancel\":");
    if (cancel_text)
        store_buf_put(&b, cancel_text, cancel_len);
    else
        STORE_BUF_LIT(&b, "[]");
    STORE_BUF_LIT(&b, ",\"lease\":");
    store_buf_int(&b, lease);
    STORE_BUF_LIT(&b, "}");
    int failed = b.failed || (cancels && !cancel_text);
    free(cancel_text);
    if (failed) {
        free(b.p);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

/* Inside the poll's write transaction: the worker's tasks of stale
 * attempts leased after its ack never reached it (everything it received
 * is at or before the ack), so they end here, 'cancelled', rather than
 * being named to a worker that cannot report them. 0 or -1. */
static int poll_settle(store_t *st, int64_t worker, int64_t ack)
{
    static const char sql[] =
        "UPDATE host_tasks SET state = 'cancelled', error = 'never delivered'"
        " WHERE worker_id = ?1 AND state = 'leased' AND leased_at > ?2 AND"
        POLL_STALE("host_tasks");
    sqlite3_stmt *s = store_stmt(st, sql);
    if (!s)
        return -1;
    sqlite3_bind_int64(s, 1, worker);
    sqlite3_bind_int64(s, 2, ack);
    return store_step_done(s);
}

/* Builds the answer from the groups read (cancels NULL: none); *any when it
 * holds anything. */
static int poll_finish(poll_groups_t *gs, const json_t *cancels, int64_t lease, char **out,
                       size_t *len, int *any)
{
    *any = gs->n > 0 || json_array_size(cancels) > 0;
    *out = poll_answer(gs, cancels, lease, len);
    return *out ? STORE_OK : STORE_ERR;
}

/* A poll with stale attempts: settles and names them, and delivers, in one
 * write transaction. */
static int poll_stale(store_t *st, int64_t worker, int64_t ack, char **out, size_t *len,
                      int *any)
{
    int rc = STORE_ERR;
    int64_t lease = ack;
    poll_groups_t gs = {NULL, 0, 0};
    json_t *cancels = NULL;
    if (store_begin(st) != 0)
        goto fail;
    int live = store_worker_is_live(st, worker);
    if (live <= 0) {
        rc = live == 0 ? STORE_NOTFOUND : STORE_ERR;
        goto fail;
    }
    if (poll_settle(st, worker, ack) != 0 || !(cancels = poll_cancels(st, worker)) ||
        poll_read(st, worker, ack, &gs, &lease) < 0 ||
        poll_finish(&gs, cancels, lease, out, len, any) != STORE_OK)
        goto fail;
    if (store_commit(st) != 0) {
        free(*out);
        *out = NULL;
        goto fail;
    }
    json_decref(cancels);
    poll_groups_free(&gs);
    return STORE_OK;
fail:
    store_rollback(st);
    json_decref(cancels);
    poll_groups_free(&gs);
    *any = 0;
    return rc;
}

int store_worker_poll(store_t *st, int64_t worker, int64_t ack, char **out, size_t *len,
                      int *any, int64_t *quiet)
{
    *any = 0;
    *out = NULL;
    *quiet = -1;
    uint64_t sgen = store_stale_gen(worker);    /* before the probe's read */
    int stale = !stale_memo_vouches(worker, sgen);
    int work = poll_probe(st, worker, ack, stale);
    if (stale && work >= 0 && !(work & POLL_STALE_ANY))
        stale_memo_set(worker, sgen);
    if (work < 0)
        return work == PROBE_GONE ? STORE_NOTFOUND : STORE_ERR;
    if (work & POLL_STALE_ANY)
        return poll_stale(st, worker, ack, out, len, any);
    /* Delivery, or nothing: a read, no transaction (one statement). */
    poll_groups_t gs = {NULL, 0, 0};
    int64_t lease = ack;
    int rc = STORE_ERR;
    if (!(work & POLL_DELIVER) || poll_read(st, worker, ack, &gs, &lease) >= 0)
        rc = poll_finish(&gs, NULL, lease, out, len, any);
    if (rc == STORE_OK)
        *quiet = lease;
    poll_groups_free(&gs);
    return rc;
}
