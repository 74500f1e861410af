/* test_store_reports.c - the workers' report batches queue for one
 * applier, which applies those that queued together in one transaction
 * (store_progress.c), on a real SQLite file: requests from many threads at
 * once each get their own answers, item for item and in order, none is
 * lost or answered twice, and nobody waits forever; after
 * store_reports_stop a batch still applies, on its caller's connection.
 * The items name tasks that do not exist, so each answer is a 404 of its
 * own task id: what is checked is who gets which answer.
 *
 * The device time of a transaction's reports is summed and written at its
 * end (report_acc.c): per device and per job, without what a report whose
 * savepoint was rolled back added.
 *
 * A computation's host tasks reported in one batch complete it; a
 * failure that requeues the job after a success in the same batch leaves
 * the new attempt's computations at zero. Reported in several
 * transactions, its progress is carried in memory until the last
 * (comp_carry.h), or written as it stands once due; a failed job's rows
 * show every shard reported.
 *
 * A computation's success costs the same whatever the number of its job's
 * computations still waiting for their dispatch chunk (parallel dispatch:
 * waiting without a seq): it looks only for consumers blocked on it
 * (computations_blocked, schema 030). Counted in SQLite VM instructions.
 *
 * The report decoder's own bounds (report_decode.c), on bodies alone:
 * tensor sizes, tensors per output, output names, unreachable_peer, and a
 * batch's item count, envelope and tasks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_acc.h"
#include "report_decode.h"
#include "support_store.h"
#include "util.h"

static const island_desc_t islands[] = {{"west", {2, {2, 4, 0, 0}}}};

#define THREADS 6
#define ROUNDS 150

typedef support_worker_fixture_t fixture_t;

static int setup(void **state)
{
    /* The applier writes no carried part as it stands while a test looks
     * at the rows (test_carried_shown_when_due asks for it). */
    store_set_carry_show_us((int64_t)3600 * 1000000);
    fixture_t *f = support_worker_fixture(islands, 1, 8);
    *state = f;
    return 0;
}

/* Task id k of round r of thread t: distinct across all requests. */
static int64_t task_id(int t, int r, int k)
{
    return 1000000 + (int64_t)t * 100000 + (int64_t)r * 10 + k;
}

/* Sends one batch of 1 to 3 items on st; 0 when every answer is its own
 * item's 404, in order, else -1. */
static int one_batch(store_t *st, int64_t worker, int t, int r)
{
    int n = 1 + r % 3, bad = 0;
    json_t *reports = json_array();
    for (int k = 0; k < n; k++)
        json_array_append_new(reports, json_pack("{s:I, s:s}", "task", (json_int_t)task_id(t, r, k),
                                                 "state", "succeeded"));
    json_t *body = json_pack("{s:o}", "reports", reports);
    char *text = json_dumps(body, JSON_COMPACT);
    report_prep_t *preps = NULL;
    size_t np = 0;
    err_t e = {0};
    int effects = 0;
    store_report_result_t results[3];
    int rc = text ? report_parse_batch(text, strlen(text), &preps, &np, &e) : -1;
    if (rc == 0 && np == (size_t)n)
        rc = store_worker_report_batch(st, worker, preps, np, results, &effects);
    bad |= rc != STORE_OK || np != (size_t)n;
    for (int k = 0; !bad && k < n; k++)
        bad |= results[k].task != task_id(t, r, k) || results[k].status != 404;
    if (rc == STORE_OK)
        store_report_results_clear(results, np);
    for (size_t i = 0; i < np; i++)
        report_prep_clear(&preps[i]);
    free(preps);
    free(text);
    json_decref(body);
    return bad ? -1 : 0;
}

typedef struct sender {
    int t;
    int64_t worker;
    atomic_int *wrong;
} sender_t;

/* A thread of its own, with its own connection, as an HTTP thread. */
static void *sender_main(void *arg)
{
    sender_t *s = arg;
    store_t *st = store_thread();
    for (int r = 0; r < ROUNDS; r++)
        if (!st || one_batch(st, s->worker, s->t, r) != 0)
            atomic_fetch_add(s->wrong, 1);
    store_thread_close();
    return NULL;
}


static int64_t busy_of(store_t *st, int idx)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT busy_us FROM devices WHERE idx = %d AND island_id ="
             " (SELECT id FROM islands WHERE name = 'west')", idx);
    return support_store_int(st, sql);
}

/* The island's id, and the device time every tenant was charged. */
static int64_t west_id(store_t *st)
{
    return support_store_int(st, "SELECT id FROM islands WHERE name = 'west'");
}
static int64_t tenant_used(store_t *st)
{
    return support_store_int(st, "SELECT COALESCE(SUM(device_us), 0) FROM tenant_usage");
}

/* The fixture's store inside a transaction, for an accumulator test:
 * the island's id in *isl, the tenants' device time so far in *used0. */
static store_t *acc_begin(void **state, int64_t *isl, int64_t *used0)
{
    fixture_t *f = *state;
    *isl = west_id(f->st);
    *used0 = tenant_used(f->st);
    assert_int_equal(store_begin(f->st), 0);
    return f->st;
}

/* Writes what a gathered and ends the transaction; frees a. */
static void acc_commit(store_t *st, report_acc_t *a)
{
    assert_int_equal(report_acc_flush(st, a), 0);
    assert_int_equal(store_commit(st), 0);
    report_acc_free(a);
}

static void test_acc_sums(void **state)
{
    int64_t isl, used0;
    store_t *st = acc_begin(state, &isl, &used0);
    report_acc_t a = REPORT_ACC_INIT;
    assert_int_equal(report_acc_add(&a, isl, 4, "[0,1]", 5, 99, 10), 0);
    assert_int_equal(report_acc_add(&a, isl, 4, "[1]", 3, 99, 3), 0);
    /* Devices 1-2 gained the same time: one run (one UPDATE), bounded by
     * device 0 (nothing) and 3 (another time). */
    assert_int_equal(report_acc_add(&a, isl, 0, "[1,2]", 9, 99, 0), 0);
    assert_int_equal(report_acc_add(&a, isl, 0, "[3]", 4, 99, 0), 0);
    assert_int_equal(report_acc_add(&a, isl, 0, "[0,x]", 1000, 99, 1000), -1);
    assert_int_equal(report_acc_add(&a, isl, 0, "0", 1000, 99, 1000), -1);
    acc_commit(st, &a);
    /* The worker's block starts at island device 4: local 0 -> 4, 1 -> 5. */
    assert_int_equal(busy_of(st, 4), 5);
    assert_int_equal(busy_of(st, 5), 8);
    assert_int_equal(busy_of(st, 6), 0);
    assert_int_equal(busy_of(st, 0), 0);
    assert_int_equal(busy_of(st, 1), 9);
    assert_int_equal(busy_of(st, 2), 9);
    assert_int_equal(busy_of(st, 3), 4);
    assert_int_equal(tenant_used(st) - used0, 13);
}

/* A report on the devices of the one just before adds into its entries
 * (a worker's batch of a chain), and a job's time into its last entry:
 * what report_acc_flush sorts stays one entry per device and job, and the
 * sums are those of one entry per report. */
static void test_acc_merges_repeats(void **state)
{
    int64_t isl, used0;
    store_t *st = acc_begin(state, &isl, &used0);
    report_acc_t a = REPORT_ACC_INIT;
    for (int k = 1; k <= 3; k++)
        assert_int_equal(report_acc_add(&a, isl, 4, "[0,1]", k, 99, 2 * k), 0);
    assert_int_equal(a.ndev, 2);
    assert_int_equal(a.njob, 1);
    /* Another group in between: no merge across it. */
    assert_int_equal(report_acc_add(&a, isl, 4, "[0]", 10, 98, 10), 0);
    assert_int_equal(report_acc_add(&a, isl, 4, "[0,1]", 100, 99, 100), 0);
    assert_int_equal(a.ndev, 5);
    assert_int_equal(a.njob, 3);
    /* A malformed one adds nothing and leaves the last group mergeable. */
    assert_int_equal(report_acc_add(&a, isl, 4, "[0,x]", 1000, 99, 1000), -1);
    assert_int_equal(report_acc_add(&a, isl, 4, "[0,1]", 1000, 99, 1000), 0);
    assert_int_equal(a.ndev, 5);
    acc_commit(st, &a);
    assert_int_equal(busy_of(st, 4), 1 + 2 + 3 + 10 + 100 + 1000);
    assert_int_equal(busy_of(st, 5), 1 + 2 + 3 + 100 + 1000);
    assert_int_equal(tenant_used(st) - used0, 2 + 4 + 6 + 10 + 100 + 1000);
}

static int64_t job_int(fixture_t *f, const char *expr, int64_t job);
static char *chain_doc(int n);

static char *dup_text(const char *t)
{
    char *p = strdup(t);
    assert_non_null(p);
    return p;
}

/* Outputs rows queued in one transaction (19: statements of 8, 8 and 3
 * rows) are all written, each with its own meta and values (a row without
 * values stores NULL), and a computation's entries merge: shards summed,
 * the earliest start, the latest inputs-ready and finish. */
static void test_acc_outputs_and_comps(void **state)
{
    fixture_t *f = *state;
    store_t *st = f->st;
    char *doc = chain_doc(2);
    int64_t job = support_store_submit(st, doc, islands, 1);
    free(doc);
    report_acc_t a = REPORT_ACC_INIT;
    assert_int_equal(store_begin(st), 0);
    for (int k = 0; k < 19; k++) {
        char meta[64];
        snprintf(meta, sizeof meta, "[[%d,[1],%d,1]]", k, k);
        float *v = NULL;
        if (k % 2 == 0) {
            assert_non_null(v = malloc(sizeof *v));
            *v = (float)k;
        }
        assert_int_equal(report_acc_output(&a, job, k % 2, "x", k, dup_text(meta), strlen(meta),
                                           v, v ? sizeof *v : 0), 0);
    }
    assert_int_equal(report_acc_flush_outputs(st, &a), 0);
    assert_int_equal(a.nout, 0);
    assert_int_equal(report_acc_comp(&a, job, 0, 1, 0, 0, 2, 50, 60, 70), 0);
    assert_int_equal(report_acc_comp(&a, job, 0, 0, 0, 0, 1, 10, 20, 30), 0);
    assert_int_equal(report_acc_comp(&a, job, 0, 1, 0, 0, 3, 40, 65, 68), 0);
    assert_int_equal(report_acc_comp(&a, job, 1, 1, 0, 0, 1, 1, 1, 1), 0);   /* another attempt */
    assert_int_equal(store_commit(st), 0);
    assert_int_equal(a.ncomp, 3);
    assert_true(a.comp[0].comp == 1 && a.comp[0].shards == 5 && a.comp[0].t0 == 40 &&
                a.comp[0].t1 == 65 && a.comp[0].t2 == 70);
    assert_true(a.comp[1].comp == 0 && a.comp[1].shards == 1);
    assert_true(a.comp[2].attempt == 1 && a.comp[2].shards == 1);
    report_acc_free(&a);
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld", job), 19);
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld AND"
                            " vals IS NULL AND shard0 %% 2 = 1", job), 9);
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld AND"
                            " meta = '[[' || shard0 || ',[1],' || shard0 || ',1]]' AND"
                            " comp_idx = shard0 %% 2", job), 19);
    assert_int_equal(job_int(f, "SELECT length(vals) FROM outputs WHERE job_id = %lld AND"
                            " shard0 = 18", job), 4);
}

/* A chain of n computations on a 2-shard slice (each reads the previous). */
static char *chain_doc(int n)
{
    size_t cap = 256 + (size_t)n * 160;
    char *doc = malloc(cap);
    assert_non_null(doc);
    size_t len = (size_t)snprintf(doc, cap, "{\"slices\": {\"s\": {\"shape\": [2]}},"
                                  " \"computations\": [");
    for (int k = 0; k < n; k++) {
        if (k == 0)
            len += (size_t)snprintf(doc + len, cap - len, "{\"name\": \"c0\", \"slice\": \"s\","
                                    " \"ops\": [{\"op\": \"iota\", \"out\": \"x\", \"shape\": [4]}],"
                                    " \"outputs\": [\"x\"]}");
        else
            len += (size_t)snprintf(doc + len, cap - len, ", {\"name\": \"c%d\", \"slice\": \"s\","
                                    " \"ops\": [{\"op\": \"input\", \"out\": \"p\", \"from\": \"c%d.x\"},"
                                    " {\"op\": \"add\", \"out\": \"x\", \"args\": [\"p\", \"p\"]}],"
                                    " \"outputs\": [\"x\"]}", k, k - 1);
    }
    snprintf(doc + len, cap - len, "]}");
    return doc;
}

static int count_vm(void *arg)
{
    (*(long *)arg)++;
    return 0;
}

/* SQLite VM instructions that the success of computation 0 of a running
 * chain of n computations (none dispatched but the first) costs. */
static long first_success_cost(fixture_t *f, int n)
{
    char *doc = chain_doc(n);
    int64_t job = support_store_submit(f->st, doc, islands, 1);
    free(doc);
    char sql[512];
    snprintf(sql, sizeof sql, "UPDATE jobs SET state = 'running' WHERE id = %lld;"
             " UPDATE computations SET state = 'dispatched', seq = 1, island_id ="
             " (SELECT id FROM islands WHERE name = 'west') WHERE job_id = %lld AND idx = 0;"
             " INSERT INTO host_tasks (job_id, attempt, comp_idx, island_id, worker_id, seq,"
             " shards, nshards, state, devices, leased_at) VALUES (%lld, 0, 0,"
             " (SELECT id FROM islands WHERE name = 'west'), %lld, 1, '[0,1]', 2, 'leased',"
             " '[0,1]', 5)", (long long)job, (long long)job, (long long)job,
             (long long)f->worker);
    support_store_write(f->st, sql);
    int64_t task = sqlite3_last_insert_rowid(store_db(f->st));
    json_t *body = json_pack("{s:s, s:I, s:I, s:I, s:{s:[{s:[i], s:f}, {s:[i], s:f}]}}",
                             "state", "succeeded", "started_us", (json_int_t)1,
                             "inputs_ready_us", (json_int_t)2, "finished_us", (json_int_t)3,
                             "outputs", "x", "shape", 4, "sum", 6.0, "shape", 4, "sum", 6.0);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    assert_non_null(text);
    report_prep_t p;
    assert_int_equal(report_parse_one(text, strlen(text), task, &p), 0);
    long steps = 0;
    int effects = 0;
    err_t e = {0};
    sqlite3_progress_handler(store_db(f->st), 1, count_vm, &steps);
    int rc = store_worker_report(f->st, f->worker, &p, &effects, &e);
    sqlite3_progress_handler(store_db(f->st), 0, NULL, NULL);
    report_prep_clear(&p);
    free(text);
    json_decref(body);
    assert_int_equal(rc, STORE_OK);
    snprintf(sql, sizeof sql, "SELECT comps_done FROM jobs WHERE id = %lld", (long long)job);
    assert_int_equal(support_store_int(f->st, sql), 1);
    return steps;
}

static void test_success_cost_flat_in_unfed(void **state)
{
    fixture_t *f = *state;
    long small = first_success_cost(f, 4), big = first_success_cost(f, 1000);
    /* Reading the 999 unfed computations costs thousands of instructions;
     * the rest of the report is the same for both. */
    print_message("first success: %ld VM instructions in a chain of 4, %ld in one of 1000\n",
                  small, big);
    if (big > small + small / 2)
        fail_msg("first success costs %ld VM instructions in a chain of 1000, %ld in one of 4",
                 big, small);
}

/* A running chain of 2 computations on slice [2] whose first `ncomps`
 * computations have two host tasks each (shard 0, shard 1) leased to the
 * fixture's worker: their ids in task[2 * comp + shard]. The job's id. */
static int64_t leased_chain(fixture_t *f, int ncomps, int64_t *task)
{
    char *doc = chain_doc(2);
    int64_t job = support_store_submit(f->st, doc, islands, 1);
    free(doc);
    char sql[640];
    snprintf(sql, sizeof sql, "UPDATE jobs SET state = 'running' WHERE id = %lld;"
             " UPDATE computations SET state = 'dispatched', seq = idx + 1, island_id ="
             " (SELECT id FROM islands WHERE name = 'west') WHERE job_id = %lld AND idx < %d",
             (long long)job, (long long)job, ncomps);
    support_store_write(f->st, sql);
    for (int c = 0; c < ncomps; c++)
        for (int k = 0; k < 2; k++) {
            snprintf(sql, sizeof sql, "INSERT INTO host_tasks (job_id, attempt, comp_idx,"
                     " island_id, worker_id, seq, shards, nshards, state, devices, leased_at)"
                     " VALUES (%lld, 0, %d, (SELECT id FROM islands WHERE name = 'west'), %lld,"
                     " %d, '[%d]', 1, 'leased', '[%d]', 5)", (long long)job, c,
                     (long long)f->worker, c + 1, k, k);
            support_store_write(f->st, sql);
            task[2 * c + k] = sqlite3_last_insert_rowid(store_db(f->st));
        }
    return job;
}

/* leased_chain with computation 0's two tasks leased: their ids in
 * task[0..1]. */
static int64_t two_task_job(fixture_t *f, int64_t task[2])
{
    return leased_chain(f, 1, task);
}

/* Applies the batch body (text) as the worker; each item's status into
 * status[] (at most 8). */
static void apply_batch(fixture_t *f, const char *body, int *status)
{
    report_prep_t *preps = NULL;
    size_t n = 0;
    err_t e = {0};
    int effects = 0;
    assert_int_equal(report_parse_batch(body, strlen(body), &preps, &n, &e), 0);
    store_report_result_t *results = calloc(n, sizeof *results);
    assert_non_null(results);
    assert_int_equal(store_worker_report_batch(f->st, f->worker, preps, n, results, &effects),
                     STORE_OK);
    for (size_t i = 0; i < n; i++) {
        if (i < 8)
            status[i] = results[i].status;
        report_prep_clear(&preps[i]);
    }
    store_report_results_clear(results, n);
    free(results);
    free(preps);
}

static int64_t job_int(fixture_t *f, const char *expr, int64_t job)
{
    char sql[256];
    snprintf(sql, sizeof sql, expr, (long long)job);
    return support_store_int(f->st, sql);
}

/* Reports two_task_job's tasks in one batch: the first succeeded, the
 * second as `second` says (a report's fields after its "task", as text);
 * both must be accepted. The job's id. */
static int64_t report_both(fixture_t *f, const char *second)
{
    int64_t task[2];
    int64_t job = two_task_job(f, task);
    char body[512];
    int status[8] = {0};
    snprintf(body, sizeof body, "{\"reports\":[{\"task\":%lld,\"state\":\"succeeded\","
             "\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}},{\"task\":%lld,%s}]}",
             (long long)task[0], (long long)task[1], second);
    apply_batch(f, body, status);
    assert_int_equal(status[0], 200);
    assert_int_equal(status[1], 200);
    return job;
}

/* A success must carry exactly its computation's outputs (each shard's
 * shape as compiled): another name, one missing, an extra one or another
 * shape is refused (400) and writes nothing, so the same task's right
 * report after them is taken. */
static void test_outputs_must_be_the_computations(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    int64_t job = two_task_job(f, task);
    static const char *const outs[] = {
        "{\"y\":[{\"shape\":[4],\"sum\":6}]}",                                   /* renamed */
        "{}",                                                                    /* none */
        "{\"x\":[{\"shape\":[4],\"sum\":6}],\"y\":[{\"shape\":[4],\"sum\":6}]}", /* extra */
        "{\"x\":[{\"shape\":[7],\"sum\":6}]}",                                   /* shape */
        "{\"x\":[{\"shape\":[],\"sum\":6}]}",                                    /* rank */
        "{\"x\":[{\"shape\":[4],\"sum\":6}]}",                                   /* right */
    };
    char body[2048];
    size_t len = (size_t)snprintf(body, sizeof body, "{\"reports\":[");
    for (int i = 0; i < 6; i++)
        len += (size_t)snprintf(body + len, sizeof body - len, "%s{\"task\":%lld,\"state\":"
                                "\"succeeded\",\"outputs\":%s}", i ? "," : "",
                                (long long)task[0], outs[i]);
    snprintf(body + len, sizeof body - len, "]}");
    int status[8] = {0};
    apply_batch(f, body, status);
    for (int i = 0; i < 5; i++)
        assert_int_equal(status[i], 400);
    assert_int_equal(status[5], 200);
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld", job), 1);
}

/* A computation's host tasks reported in one transaction: it succeeds. */
static void test_batch_completes_computation(void **state)
{
    fixture_t *f = *state;
    int64_t job = report_both(f, "\"state\":\"succeeded\","
                                 "\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}");
    assert_int_equal(job_int(f, "SELECT shards_done FROM computations WHERE job_id = %lld"
                            " AND idx = 0", job), 2);
    assert_int_equal(job_int(f, "SELECT state = 'succeeded' FROM computations WHERE job_id = %lld"
                            " AND idx = 0", job), 1);
    assert_int_equal(job_int(f, "SELECT comps_done FROM jobs WHERE id = %lld", job), 1);
}

/* Both computations of a chain reported in one transaction: each
 * succeeds, the job counts both (one write of its row: comps_done + 2) and
 * ends. */
static void test_batch_ends_job(void **state)
{
    fixture_t *f = *state;
    int64_t task[4];
    int64_t job = leased_chain(f, 2, task);
    char body[1024];
    size_t len = (size_t)snprintf(body, sizeof body, "{\"reports\":[");
    for (int t = 0; t < 4; t++)
        len += (size_t)snprintf(body + len, sizeof body - len, "%s{\"task\":%lld,\"state\":"
                                "\"succeeded\",\"outputs\":{\"x\":[{\"shape\":[4],"
                                "\"sum\":6}]}}", t ? "," : "", (long long)task[t]);
    snprintf(body + len, sizeof body - len, "]}");
    int status[8] = {0};
    apply_batch(f, body, status);
    for (int t = 0; t < 4; t++)
        assert_int_equal(status[t], 200);
    assert_int_equal(job_int(f, "SELECT comps_done FROM jobs WHERE id = %lld", job), 2);
    assert_int_equal(job_int(f, "SELECT state = 'succeeded' FROM jobs WHERE id = %lld", job), 1);
    assert_int_equal(job_int(f, "SELECT count(*) FROM computations WHERE job_id = %lld"
                            " AND state = 'succeeded'", job), 2);
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld", job), 4);
}

/* A failure that requeues the job, after a success in the same
 * transaction: the success's progress and output are the old attempt's,
 * and the requeue starts the computations over (the new attempt starts at
 * 0, with no outputs). */
static void test_requeue_after_success(void **state)
{
    fixture_t *f = *state;
    int64_t job = report_both(f, "\"state\":\"failed\",\"error\":\"peer gone\","
                                 "\"unreachable_peer\":\"127.0.0.1:1\"");
    assert_int_equal(job_int(f, "SELECT attempt FROM jobs WHERE id = %lld", job), 1);
    assert_int_equal(job_int(f, "SELECT shards_done FROM computations WHERE job_id = %lld"
                            " AND idx = 0", job), 0);
    assert_int_equal(job_int(f, "SELECT started_at IS NULL FROM computations WHERE job_id = %lld"
                            " AND idx = 0", job), 1);
    /* The success's output row was written before the requeue deleted the
     * attempt's outputs (report_acc.h, Order), not after. */
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld", job), 0);
}

/* A running chain of n computations on slice [2] dispatched as runs
 * (schema/032): two host tasks, one per shard, each covering computations
 * 0 .. n-1 (seqs 1 .. n), leased to the fixture's worker; their ids in
 * task[shard]. The job's id. */
static int64_t leased_run(fixture_t *f, int n, int64_t task[2])
{
    char *doc = chain_doc(n);
    int64_t job = support_store_submit(f->st, doc, islands, 1);
    free(doc);
    char sql[640];
    snprintf(sql, sizeof sql, "UPDATE jobs SET state = 'running' WHERE id = %lld;"
             " UPDATE computations SET state = 'dispatched', seq = idx + 1, island_id ="
             " (SELECT id FROM islands WHERE name = 'west') WHERE job_id = %lld",
             (long long)job, (long long)job);
    support_store_write(f->st, sql);
    for (int k = 0; k < 2; k++) {
        snprintf(sql, sizeof sql, "INSERT INTO host_tasks (job_id, attempt, comp_idx, ncomps,"
                 " island_id, worker_id, seq, shards, nshards, state, devices, leased_at)"
                 " VALUES (%lld, 0, 0, %d, (SELECT id FROM islands WHERE name = 'west'), %lld,"
                 " 1, '[%d]', 1, 'leased', '[%d]', 5)", (long long)job, n,
                 (long long)f->worker, k, k);
        support_store_write(f->st, sql);
        task[k] = sqlite3_last_insert_rowid(store_db(f->st));
    }
    return job;
}

/* One report of a run's test batch: of task[shard], naming computation
 * comp (-1: none), in `state`, and the status it must get. */
typedef struct run_rep {
    int shard, comp;
    const char *state;
    int want;
} run_rep_t;

/* Appends the report of r to the batch text in b (len so far), with its
 * output when succeeded. The new length. */
static size_t run_item(char *b, size_t cap, size_t len, const int64_t task[2], const run_rep_t *r)
{
    len += (size_t)snprintf(b + len, cap - len, "%s{\"task\":%lld,", len > 12 ? "," : "",
                            (long long)task[r->shard]);
    if (r->comp >= 0)
        len += (size_t)snprintf(b + len, cap - len, "\"comp\":%d,", r->comp);
    if (strcmp(r->state, "succeeded") == 0)
        return len + (size_t)snprintf(b + len, cap - len, "\"state\":\"succeeded\","
                                      "\"inputs_ready_us\":10,\"finished_us\":15,"
                                      "\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}}");
    return len + (size_t)snprintf(b + len, cap - len, "\"state\":\"%s\"}", r->state);
}

/* Applies reports r[0..n) (n <= 8) in one batch and checks each status. */
static void apply_runs(fixture_t *f, const int64_t task[2], const run_rep_t *r, int n)
{
    char body[4096];
    size_t len = (size_t)snprintf(body, sizeof body, "{\"reports\":[");
    for (int i = 0; i < n; i++)
        len = run_item(body, sizeof body, len, task, &r[i]);
    snprintf(body + len, sizeof body - len, "]}");
    int status[8] = {0};
    apply_batch(f, body, status);
    for (int i = 0; i < n; i++)
        assert_int_equal(status[i], r[i].want);
}

/* Whether host task `task`'s row meets SQL condition cond. */
static int row_is(fixture_t *f, int64_t task, const char *cond)
{
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT %s FROM host_tasks WHERE id = %lld", cond, (long long)task);
    return support_store_int(f->st, sql) == 1;
}

/* Reports task's success (computation 0's one output) as the worker in a
 * batch of its own; its status. */
static int report_success(fixture_t *f, int64_t task)
{
    char body[256];
    int status[8] = {0};
    snprintf(body, sizeof body, "{\"reports\":[{\"task\":%lld,\"state\":\"succeeded\","
             "\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}}]}", (long long)task);
    apply_batch(f, body, status);
    return status[0];
}

/* Fencing: a report is taken only from the task's holder while it is
 * live, and only while the task is leased (so once); a success of an
 * attempt the job has left is taken but moves nothing (no output, no
 * shard counted). Each refusal is 409 and writes nothing. */
static void test_report_fencing(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    int64_t job = two_task_job(f, task);
    char sql[256];
    /* Leased to another worker. */
    snprintf(sql, sizeof sql, "UPDATE host_tasks SET worker_id = %lld WHERE id = %lld",
             (long long)(f->worker + 1), (long long)task[1]);
    support_store_write(f->st, sql);
    assert_int_equal(report_success(f, task[1]), 409);
    assert_true(row_is(f, task[1], "state = 'leased'"));
    /* Reported already. */
    assert_int_equal(report_success(f, task[0]), 200);
    assert_true(row_is(f, task[0], "state = 'succeeded'"));
    assert_int_equal(report_success(f, task[0]), 409);
    /* Carried, then written as it stands (comp_carry.h): one shard. */
    assert_int_equal(store_reports_show_carried(f->st, INT64_MAX), 0);
    assert_int_equal(job_int(f, "SELECT shards_done FROM computations WHERE job_id = %lld"
                            " AND idx = 0", job), 1);
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld", job), 1);
    /* Back to this worker, but the job is on its next attempt. */
    snprintf(sql, sizeof sql, "UPDATE host_tasks SET worker_id = %lld WHERE id = %lld;"
             " UPDATE jobs SET attempt = 1 WHERE id = %lld", (long long)f->worker,
             (long long)task[1], (long long)job);
    support_store_write(f->st, sql);
    assert_int_equal(report_success(f, task[1]), 200);
    assert_true(row_is(f, task[1], "state = 'succeeded'"));
    assert_int_equal(job_int(f, "SELECT shards_done FROM computations WHERE job_id = %lld"
                            " AND idx = 0", job), 1);
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld", job), 1);
    /* A holder that is no longer live. */
    int64_t other[2];
    int64_t job2 = two_task_job(f, other);
    snprintf(sql, sizeof sql, "UPDATE workers SET state = 'gone' WHERE id = %lld",
             (long long)f->worker);
    support_store_write(f->st, sql);
    assert_int_equal(report_success(f, other[0]), 409);
    assert_true(row_is(f, other[0], "state = 'leased'"));
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld", job2), 0);
}

/* A success's device time is finished_us - inputs_ready_us on each of
 * its devices; stamps out of order (the decoder takes each on its own)
 * count as none, never as time taken back. */
static void test_stamps_out_of_order(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    two_task_job(f, task);
    int64_t used0 = tenant_used(f->st);
    char body[512];
    int status[8] = {0};
    snprintf(body, sizeof body, "{\"reports\":[{\"task\":%lld,\"state\":\"succeeded\","
             "\"started_us\":100,\"inputs_ready_us\":500,\"finished_us\":200,"
             "\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}},{\"task\":%lld,"
             "\"state\":\"succeeded\",\"started_us\":100,\"inputs_ready_us\":500,"
             "\"finished_us\":800,\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}}]}",
             (long long)task[0], (long long)task[1]);
    apply_batch(f, body, status);
    assert_int_equal(status[0], 200);
    assert_int_equal(status[1], 200);
    assert_int_equal(busy_of(f->st, 0), 0);     /* task[0]: device 0 */
    assert_int_equal(busy_of(f->st, 1), 300);   /* task[1]: device 1 */
    assert_int_equal(tenant_used(f->st) - used0, 300);
}

/* A run's computations are reported in order, each once, naming itself:
 * the next one is taken (the row stays leased until the last), one again
 * or one ahead is 409, a success of a run that names none is 400 (field
 * comp); each computation succeeds when both shards' runs reported it, and
 * the job when its last did. Its device time is kept per computation. */
static void test_run_reports_in_order(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    int64_t job = leased_run(f, 3, task);
    static const run_rep_t first[] = {
        {0, 0, "succeeded", 200}, {0, 0, "succeeded", 409},     /* again */
        {0, 2, "succeeded", 409},                               /* ahead */
        {0, -1, "succeeded", 400},                              /* unnamed */
        {0, 1, "succeeded", 200}, {0, 3, "succeeded", 409},     /* past its end */
    };
    apply_runs(f, task, first, 6);
    assert_true(row_is(f, task[0], "state = 'leased' AND done = 2"));
    /* The job's view counts the shards reported per computation from the
     * runs' rows: shard 0's run has reported computations 0 and 1. */
    json_t *view = store_job_json(f->st, job);
    json_t *comps = json_object_get(view, "computations");
    for (int c = 0; c < 3; c++)
        assert_int_equal(json_integer_value(json_object_get(json_array_get(comps, (size_t)c),
                                                            "shards_reported")), c < 2);
    json_decref(view);
    assert_int_equal(job_int(f, "SELECT count(*) FROM computations WHERE job_id = %lld"
                            " AND state = 'succeeded'", job), 0);
    static const run_rep_t rest[] = {
        {1, 0, "succeeded", 200}, {1, 1, "succeeded", 200}, {1, 2, "succeeded", 200},
        {0, 2, "succeeded", 200},
    };
    apply_runs(f, task, rest, 4);
    assert_int_equal(job_int(f, "SELECT state = 'succeeded' AND comps_done = 3 FROM jobs"
                            " WHERE id = %lld", job), 1);
    assert_int_equal(job_int(f, "SELECT count(*) FROM host_tasks WHERE job_id = %lld"
                            " AND state = 'succeeded' AND done = 3", job), 2);
    assert_int_equal(job_int(f, "SELECT count(*) FROM outputs WHERE job_id = %lld", job), 6);
    assert_int_equal(job_int(f, "SELECT SUM(busy_us = 10 AND shards_done = 2) FROM computations"
                            " WHERE job_id = %lld", job), 3);
}

/* A failure or cancel ends a run, naming any computation of it not yet
 * reported (a cancel reaches the queued ones before the one running) or
 * none; the computations reported before it stay succeeded. One naming a
 * computation already reported is 409. */
static void test_run_ended_by_failure(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    int64_t job = leased_run(f, 3, task);
    static const run_rep_t reps[] = {
        {0, 0, "succeeded", 200}, {0, 0, "cancelled", 409},     /* reported */
        {0, 2, "cancelled", 200}, {1, -1, "failed", 200},
    };
    apply_runs(f, task, reps, 4);
    assert_true(row_is(f, task[0], "state = 'cancelled' AND done = 1"));
    assert_int_equal(job_int(f, "SELECT state = 'failed' FROM jobs WHERE id = %lld", job), 1);
}

/* A run's progress within a transaction waits in memory (report_acc's run
 * entries) and is written before a failure applies and at the end: a
 * computation reported after another run's failure in the same batch sees
 * the job failed (no progress counted for it), and the row keeps every
 * computation it took. */
static void test_run_after_failure_in_batch(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    int64_t job = leased_run(f, 3, task);
    static const run_rep_t reps[] = {
        {0, 0, "succeeded", 200}, {1, -1, "failed", 200}, {0, 1, "succeeded", 200},
    };
    apply_runs(f, task, reps, 3);
    assert_true(row_is(f, task[0], "state = 'leased' AND done = 2"));
    assert_int_equal(job_int(f, "SELECT state = 'failed' FROM jobs WHERE id = %lld", job), 1);
    assert_int_equal(job_int(f, "SELECT shards_done FROM computations WHERE job_id = %lld"
                            " AND idx = 0", job), 1);
    assert_int_equal(job_int(f, "SELECT shards_done FROM computations WHERE job_id = %lld"
                            " AND idx = 1", job), 0);
}

/* Reports task's success with stamps t0 (started), t1 (inputs ready),
 * t2 (finished) in a batch of its own: one transaction. */
static void report_stamped(fixture_t *f, int64_t task, int t0, int t1, int t2)
{
    char body[320];
    int status[8] = {0};
    snprintf(body, sizeof body, "{\"reports\":[{\"task\":%lld,\"state\":\"succeeded\","
             "\"started_us\":%d,\"inputs_ready_us\":%d,\"finished_us\":%d,"
             "\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}}]}", (long long)task, t0, t1,
             t2);
    apply_batch(f, body, status);
    assert_int_equal(status[0], 200);
}

/* Computation 0's row of job as "shards_done state started_at
 * inputs_ready_at finished_at busy_us" (NULL stamps as -1). */
static void comp_row(fixture_t *f, int64_t job, char *out, size_t cap)
{
    char sql[320];
    snprintf(sql, sizeof sql, "SELECT shards_done || ' ' || state || ' ' ||"
             " COALESCE(started_at, -1) || ' ' || COALESCE(inputs_ready_at, -1) || ' ' ||"
             " COALESCE(finished_at, -1) || ' ' || busy_us FROM computations"
             " WHERE job_id = %lld AND idx = 0", (long long)job);
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(f->st), sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    snprintf(out, cap, "%s", (const char *)sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
}

/* A computation reported by its shards' tasks in two transactions: the
 * first one's progress is carried in memory (its row untouched), and the
 * last one writes the row once, with both: shards, the earliest start,
 * the latest inputs-ready and finish, the sum of device time. */
static void test_carried_until_last(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    char row[128];
    int64_t job = two_task_job(f, task);
    /* A new database: nothing carried from the earlier tests' jobs (whose
     * ids this one's reuse). */
    assert_int_equal(store_carried_computations(), 0);
    report_stamped(f, task[0], 5, 10, 20);
    comp_row(f, job, row, sizeof row);
    assert_string_equal(row, "0 dispatched -1 -1 -1 0");
    assert_int_equal(store_carried_computations(), 1);
    report_stamped(f, task[1], 7, 12, 30);
    comp_row(f, job, row, sizeof row);
    assert_string_equal(row, "2 succeeded 5 12 30 28");
    assert_int_equal(store_carried_computations(), 0);
    assert_int_equal(job_int(f, "SELECT comps_done FROM jobs WHERE id = %lld", job), 1);
}

/* A carried part is written as it stands once due (the applier's wait,
 * COMP_CARRY_SHOW_US), not before, and the last report adds to it; a part
 * whose job moved to another attempt is dropped, never written to the
 * new attempt's row. */
static void test_carried_shown_when_due(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    char row[128];
    int64_t job = two_task_job(f, task);
    int64_t before = util_mono_us();
    report_stamped(f, task[0], 5, 10, 20);
    assert_int_equal(store_reports_show_carried(f->st, before), 0);
    comp_row(f, job, row, sizeof row);
    assert_string_equal(row, "0 dispatched -1 -1 -1 0");
    assert_int_equal(store_reports_show_carried(f->st, INT64_MAX), 0);
    comp_row(f, job, row, sizeof row);
    assert_string_equal(row, "1 dispatched 5 10 20 10");
    report_stamped(f, task[1], 7, 12, 30);
    comp_row(f, job, row, sizeof row);
    assert_string_equal(row, "2 succeeded 5 12 30 28");

    int64_t again[2];
    int64_t job2 = two_task_job(f, again);
    size_t carried0 = store_carried_computations();     /* the first job's, written */
    report_stamped(f, again[0], 5, 10, 20);
    assert_int_equal(store_carried_computations(), carried0 + 1);
    char sql[128];
    snprintf(sql, sizeof sql, "UPDATE jobs SET attempt = 1 WHERE id = %lld", (long long)job2);
    support_store_write(f->st, sql);
    assert_int_equal(store_reports_show_carried(f->st, INT64_MAX), 0);
    comp_row(f, job2, row, sizeof row);
    assert_string_equal(row, "0 dispatched -1 -1 -1 0");
    assert_int_equal(store_carried_computations(), carried0);
}

/* A report transaction that fails after its carry was staged (here the
 * device time's write) is rolled back with it: the same report taken
 * again is the computation's first shard, not its second. */
static void test_carry_rolled_back(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    char row[128], body[320];
    int64_t job = two_task_job(f, task);
    support_store_write(f->st, "CREATE TRIGGER test_fail BEFORE UPDATE OF busy_us ON devices"
                               " BEGIN SELECT RAISE(ABORT, 'test: store failure'); END");
    snprintf(body, sizeof body, "{\"reports\":[{\"task\":%lld,\"state\":\"succeeded\","
             "\"started_us\":5,\"inputs_ready_us\":10,\"finished_us\":20,"
             "\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}}]}", (long long)task[0]);
    report_prep_t *preps = NULL;
    size_t n = 0;
    err_t e = {0};
    int effects = 0;
    store_report_result_t res[1];
    assert_int_equal(report_parse_batch(body, strlen(body), &preps, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_int_equal(store_worker_report_batch(f->st, f->worker, preps, n, res, &effects),
                     STORE_ERR);
    report_prep_clear(&preps[0]);
    free(preps);
    support_store_write(f->st, "DROP TRIGGER test_fail");
    assert_true(row_is(f, task[0], "state = 'leased'"));
    report_stamped(f, task[0], 5, 10, 20);
    comp_row(f, job, row, sizeof row);
    assert_string_equal(row, "0 dispatched -1 -1 -1 0");
    report_stamped(f, task[1], 7, 12, 30);
    comp_row(f, job, row, sizeof row);
    assert_string_equal(row, "2 succeeded 5 12 30 28");
}

static void test_concurrent_batches(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(one_batch(f->st, f->worker, THREADS, 0), 0);      /* alone */
    atomic_int wrong = 0;
    sender_t s[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        s[t] = (sender_t){t, f->worker, &wrong};
        assert_int_equal(pthread_create(&th[t], NULL, sender_main, &s[t]), 0);
    }
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    assert_int_equal(atomic_load(&wrong), 0);
    /* After the stop (shutdown), batches apply on their callers' connections. */
    store_reports_stop();
    for (int r = 1; r < 4; r++)
        assert_int_equal(one_batch(f->st, f->worker, THREADS, r), 0);
}

/* ---- the decoder's bounds (report_decode.c), no store needed ---- */

/* report_parse_one of text for task 1: its status; the refusal's field
 * and detail are checked against want_field and a part of the detail
 * (NULL: any). */
static void expect_one(const char *text, int want, const char *want_field, const char *detail)
{
    report_prep_t p;
    int rc = report_parse_one(text, strlen(text), 1, &p);
    int ok = rc == want && (!want_field || strcmp(p.e.field, want_field) == 0) &&
             (!detail || strstr(p.e.detail, detail));
    char got[ERR_FIELD_MAX + ERR_DETAIL_MAX + 16];
    snprintf(got, sizeof got, "%d at '%s': %s", rc, p.e.field, p.e.detail);
    report_prep_clear(&p);
    if (!ok)
        fail_msg("want %d at '%s' (%s), got %s\n  body: %.200s", want,
                 want_field ? want_field : "-", detail ? detail : "-", got, text);
}

/* "{"reports":[" n copies of item "]}" (caller frees). */
static char *batch_of(const char *item, int n, const char *after)
{
    size_t li = strlen(item), cap = 32 + (li + 1) * (size_t)n + strlen(after);
    char *b = malloc(cap);
    assert_non_null(b);
    size_t len = (size_t)snprintf(b, cap, "{\"reports\":[");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(b + len, cap - len, "%s%s", i ? "," : "", item);
    snprintf(b + len, cap - len, "]%s}", after);
    return b;
}

/* report_parse_batch of text: its status; with want_field, the body's
 * refusal names it. */
static void expect_batch(const char *text, int want, const char *want_field)
{
    report_prep_t *preps = NULL;
    size_t n = 0;
    err_t e = {0};
    int rc = report_parse_batch(text, strlen(text), &preps, &n, &e);
    for (size_t i = 0; i < n; i++)
        report_prep_clear(&preps[i]);
    free(preps);
    if (rc != want || (want_field && strcmp(e.field, want_field) != 0))
        fail_msg("want %d at '%s', got %d at '%s': %s\n  body: %.200s", want,
                 want_field ? want_field : "-", rc, e.field, e.detail, text);
}

/* Each bound of a report is the decoder's own: the store's checks behind
 * it (the computation's outputs, one tensor per shard) would refuse some
 * of these too, but later, after a tensor of any size was decoded, and
 * under another field. Every case fails when its check is deleted. */
static void test_decode_bounds(void **state)
{
    (void)state;
    /* A tensor's elements are counted before they are multiplied. */
    expect_one("{\"state\":\"succeeded\",\"outputs\":{\"x\":[{\"shape\":[4096,4097],\"sum\":0}]}}",
               400, "outputs.x[0]", "too large");
    expect_one("{\"state\":\"succeeded\",\"outputs\":{\"x\":[{\"shape\":[4096,4096],\"sum\":0}]}}",
               0, NULL, NULL);
    /* values_f32 is decoded only for a tensor of at most REPORT_VALUES_MAX
     * elements (it is not allocated for more). */
    char text[256];
    snprintf(text, sizeof text, "{\"state\":\"succeeded\",\"outputs\":{\"x\":[{\"shape\":[%d],"
             "\"sum\":0,\"values_f32\":\"AAAAAA==\"}]}}", REPORT_VALUES_MAX + 1);
    expect_one(text, 400, "outputs.x[0]", "at most");
    /* An output lists 1..REPORT_SHARDS_MAX tensors. */
    expect_one("{\"state\":\"succeeded\",\"outputs\":{\"x\":[]}}", 400, "outputs",
               "array of 1 to");
    size_t cap = 64 + 22 * (REPORT_SHARDS_MAX + 1);      /* 20 bytes a tensor, and a "," */
    char *many = malloc(cap);
    assert_non_null(many);
    for (int n = REPORT_SHARDS_MAX; n <= REPORT_SHARDS_MAX + 1; n++) {
        size_t len = (size_t)snprintf(many, cap, "{\"state\":\"succeeded\",\"outputs\":{\"x\":[");
        for (int i = 0; i < n; i++)
            len += (size_t)snprintf(many + len, cap - len, "%s{\"shape\":[],\"sum\":0}",
                                    i ? "," : "");
        snprintf(many + len, cap - len, "]}}");
        if (n > REPORT_SHARDS_MAX)
            expect_one(many, 400, "outputs", "array of 1 to");
        else
            expect_one(many, 0, NULL, NULL);
    }
    free(many);
    /* Output names are value names. */
    expect_one("{\"state\":\"succeeded\",\"outputs\":"
               "{\"no such name!\":[{\"shape\":[],\"sum\":0}]}}", 400, "outputs", "value names");
    /* unreachable_peer is a data address: 1..63 bytes. */
    expect_one("{\"state\":\"failed\",\"unreachable_peer\":"
               "\"hh23456789012345678901234567890123456789012345678901234567890:99\"}",
               400, "unreachable_peer", NULL);
    expect_one("{\"state\":\"failed\",\"unreachable_peer\":"
               "\"hh2345678901234567890123456789012345678901234567890123456789:99\"}",
               0, NULL, NULL);

    /* A batch: 1..REPORT_BATCH_MAX items, nothing beside "reports", each
     * item naming its task. */
    expect_batch("{\"reports\":[]}", 400, "reports");
    char *b = batch_of("{\"task\":1,\"state\":\"failed\"}", REPORT_BATCH_MAX, "");
    expect_batch(b, 0, NULL);
    free(b);
    b = batch_of("{\"task\":1,\"state\":\"failed\"}", REPORT_BATCH_MAX + 1, "");
    expect_batch(b, 400, "reports");
    free(b);
    b = batch_of("{\"task\":1,\"state\":\"failed\"}", 1, ",\"extra\":1");
    expect_batch(b, 400, "reports");
    free(b);
    report_prep_t *preps = NULL;
    size_t n = 0;
    err_t e = {0};
    static const char untasked[] = "{\"reports\":[{\"state\":\"failed\"}]}";
    assert_int_equal(report_parse_batch(untasked, strlen(untasked), &preps, &n, &e), 0);
    assert_int_equal(n, 1);
    int item = preps[0].e.status;
    char field[ERR_FIELD_MAX];
    snprintf(field, sizeof field, "%s", preps[0].e.field);
    report_prep_clear(&preps[0]);
    free(preps);
    assert_int_equal(item, 400);
    assert_string_equal(field, "task");
}

int main(void)
{
    log_setup("test_store_reports", LOG_WARN, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_batches, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_acc_sums, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_acc_merges_repeats, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_acc_outputs_and_comps, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_success_cost_flat_in_unfed, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_outputs_must_be_the_computations, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_batch_completes_computation, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_batch_ends_job, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_requeue_after_success, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_report_fencing, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_stamps_out_of_order, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_run_reports_in_order, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_run_ended_by_failure, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_run_after_failure_in_batch, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_carried_until_last, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_carried_shown_when_due, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_carry_rolled_back, setup, support_store_teardown),
        cmocka_unit_test(test_decode_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
