/* test_store_gather.c - report batches marked "held" wait for their peers
 * (store_progress.c, combine_gather), on a real SQLite file and the real
 * applier thread.
 *
 * A chain's workers each send the reports they held at about the same
 * computation; applied apart, each batch was a transaction of its own. A
 * held batch that finds the applier idle now waits (up to the hold window)
 * for more, and a batch that is not held ends the wait at once: here a
 * held batch with one worker task's success waits until the other task's
 * batch (not held) comes, and both are applied in one write transaction,
 * completing their computation. The window is made long (30 s), so that
 * nothing but the second batch can end the wait; the test waits on the
 * applier's state, not on time. Alone in its executable: the applier
 * thread keeps the connection to the first database it served. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report_decode.h"
#include "support_store.h"
#include "util.h"

static const island_desc_t islands[] = {{"west", {2, {2, 4, 0, 0}}}};

typedef support_worker_fixture_t fixture_t;

static int setup(void **state)
{
    *state = support_worker_fixture(islands, 1, 8);
    return 0;
}

/* A running one-computation job on a 2-shard slice whose two host tasks
 * (one shard each) are leased to the fixture's worker: their ids in
 * task[0..1]. The job's id. */
static int64_t two_tasks(fixture_t *f, int64_t task[2])
{
    static const char doc[] =
        "{\"slices\": {\"s\": {\"shape\": [2]}}, \"computations\": [{\"name\": \"c0\","
        " \"slice\": \"s\", \"ops\": [{\"op\": \"iota\", \"out\": \"x\", \"shape\": [4]}],"
        " \"outputs\": [\"x\"]}]}";
    int64_t job = support_store_submit(f->st, doc, islands, 1);
    char sql[640];
    snprintf(sql, sizeof sql, "UPDATE jobs SET state = 'running' WHERE id = %lld;"
             " UPDATE computations SET state = 'dispatched', seq = 1, island_id ="
             " (SELECT id FROM islands WHERE name = 'west') WHERE job_id = %lld",
             (long long)job, (long long)job);
    support_store_write(f->st, sql);
    for (int k = 0; k < 2; k++) {
        snprintf(sql, sizeof sql, "INSERT INTO host_tasks (job_id, attempt, comp_idx,"
                 " island_id, worker_id, seq, shards, nshards, state, devices, leased_at)"
                 " VALUES (%lld, 0, 0, (SELECT id FROM islands WHERE name = 'west'), %lld,"
                 " 1, '[%d]', 1, 'leased', '[%d]', 5)", (long long)job, (long long)f->worker,
                 k, k);
        support_store_write(f->st, sql);
        task[k] = sqlite3_last_insert_rowid(store_db(f->st));
    }
    return job;
}

typedef struct batch {
    store_t *st;                /* the sender's connection; NULL: a thread's own */
    int64_t worker, task;
    int held;
    int status;                 /* the item's answer */
} batch_t;

/* Sends one success of b->task as a batch (held or not) on b->st or this
 * thread's own connection (used only if the applier thread is not
 * running). */
static void *send_main(void *arg)
{
    batch_t *b = arg;
    char body[256];
    snprintf(body, sizeof body, "{\"reports\":[{\"task\":%lld,\"state\":\"succeeded\","
             "\"outputs\":{\"x\":[{\"shape\":[4],\"sum\":6}]}}]%s}", (long long)b->task,
             b->held ? ",\"held\":true" : "");
    report_prep_t *preps = NULL;
    size_t n = 0;
    err_t e = {0};
    int held = -1, effects = 0;
    store_report_result_t res = {0};
    store_t *st = b->st ? b->st : store_thread();
    if (st && report_parse_batch(body, strlen(body), &preps, &n, &held, &e) == 0 && n == 1 &&
        held == b->held &&
        store_worker_report_batch(st, b->worker, preps, n, held, &res, &effects) == STORE_OK)
        b->status = res.status;
    store_report_results_clear(&res, 1);
    for (size_t i = 0; i < n; i++)
        report_prep_clear(&preps[i]);
    free(preps);
    if (!b->st)
        store_thread_close();
    return NULL;
}

static void test_held_batch_waits_for_peer(void **state)
{
    fixture_t *f = *state;
    int64_t task[2];
    int64_t job = two_tasks(f, task);
    store_reports_set_hold_us(30 * 1000000);
    batch_t held = {NULL, f->worker, task[0], 1, 0}, prompt = {f->st, f->worker, task[1], 0, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, send_main, &held), 0);
    int64_t deadline = util_mono_us() + 60 * 1000000;
    const struct timespec ms = {0, 1000000};
    while (!store_reports_gathering() && util_mono_us() < deadline)
        nanosleep(&ms, NULL);
    assert_true(store_reports_gathering());
    /* Counted from here: the held batch is in the applier's hands, and
     * nothing else writes. */
    uint64_t txns = store_write_transactions();
    send_main(&prompt);
    pthread_join(th, NULL);
    assert_int_equal(held.status, 200);
    assert_int_equal(prompt.status, 200);
    assert_int_equal(store_write_transactions() - txns, 1);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT shards_done * 10 + (state = 'succeeded') FROM computations"
             " WHERE job_id = %lld", (long long)job);
    assert_int_equal(support_store_int(f->st, sql), 21);
    store_reports_set_hold_us(2000);
}

int main(void)
{
    log_setup("test_store_gather", LOG_WARN, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_held_batch_waits_for_peer, setup,
                                        support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
