/* test_store_reports.c - the workers' report batches queue for one
 * applier, which applies those that queued together in one transaction
 * (store_progress.c), on a real SQLite file: requests from many threads at
 * once each get their own answers, item for item and in order, none is
 * lost or answered twice, and nobody waits forever; after
 * store_reports_stop a batch still applies, on its caller's connection.
 * The items name tasks that do not exist, so each answer is a 404 of its
 * own task id: what is checked is who gets which answer. */
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

#include "support_store.h"
#include "util.h"

static const island_desc_t islands[] = {{"west", {2, {2, 4, 0, 0}}}};

#define THREADS 6
#define ROUNDS 150

typedef struct fixture {
    support_store_t d;          /* first: support_store_teardown */
    store_t *st;
    int64_t worker;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->st = support_store_open(&f->d, islands, 1);
    f->worker = support_store_register(f->st, "west", "127.0.0.1:1", 8);
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
    json_t *results = NULL;
    int effects = 0;
    int rc = store_worker_report_batch(st, worker, reports, &results, &effects);
    bad |= rc != STORE_OK || json_array_size(results) != (size_t)n;
    for (int k = 0; !bad && k < n; k++) {
        json_t *a = json_array_get(results, (size_t)k);
        bad |= json_integer_value(json_object_get(a, "task")) != task_id(t, r, k) ||
               json_integer_value(json_object_get(a, "status")) != 404;
    }
    json_decref(results);
    json_decref(reports);
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

int main(void)
{
    log_setup("test_store_reports", LOG_WARN, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_concurrent_batches, setup, support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
