/* test_store_sync.c - group commit's rounds (store_sync.c) on a real file:
 * a request names the round it needs (its ticket), which is pending until
 * a round begun after the request has finished its fdatasync, then done;
 * the rounds run on the sync thread, which runs the hook after each, and
 * a request made while the thread is busy waits for the next round, not
 * the one that was running. In the other durability modes nothing waits.
 * A refused sync (here: a WAL that cannot be opened) fails every ticket
 * from then on, the ones already done included. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "support_store.h"

static support_store_t dir;

/* The hook holds the sync thread after a round until the test lets it go
 * (gate). */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_closed, gate_held;

static void hook(void)
{
    pthread_mutex_lock(&gate_mu);
    gate_held = 1;
    pthread_cond_broadcast(&gate_cv);
    while (gate_closed)
        pthread_cond_wait(&gate_cv, &gate_mu);
    gate_held = 0;
    pthread_mutex_unlock(&gate_mu);
}

static void gate_set(int closed)
{
    pthread_mutex_lock(&gate_mu);
    gate_closed = closed;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_mu);
}

/* Waits until the sync thread sits in the hook. */
static void gate_wait_held(void)
{
    pthread_mutex_lock(&gate_mu);
    while (!gate_held)
        pthread_cond_wait(&gate_cv, &gate_mu);
    pthread_mutex_unlock(&gate_mu);
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(support_store_make(&dir), 0);
    char wal[sizeof dir.db + 8];
    snprintf(wal, sizeof wal, "%s-wal", dir.db);
    int fd = open(wal, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "wal", 3), 3);
    close(fd);
    store_sync_hook(hook);
    return 0;
}

static void test_other_modes_wait_for_nothing(void **state)
{
    (void)state;
    store_sync_setup(dir.db, STORE_DURABLE_NONE);
    uint64_t rounds = store_sync_rounds();
    assert_int_equal(store_sync_request(), 0);
    assert_int_equal(store_sync_check(0), 1);
    assert_int_equal(store_sync_gen(0), 1);
    assert_int_equal(store_sync_wait(store_sync_request()), 0);
    assert_int_equal(store_sync_rounds(), rounds);
}

static void test_ticket_pending_until_its_round(void **state)
{
    (void)state;
    store_sync_setup(dir.db, STORE_DURABLE_GROUP);
    uint64_t rounds = store_sync_rounds(), waits = store_sync_waits();
    gate_set(1);
    uint64_t t1 = store_sync_request();
    assert_true(t1 >= 1);
    gate_wait_held();               /* t1's round ran; the thread is in the hook */
    assert_int_equal(store_sync_check(t1), 1);
    assert_int_equal(store_sync_gen((int64_t)t1), 1);
    /* Asked now, while the thread is busy: the next round, not one done. */
    uint64_t t2 = store_sync_request();
    assert_int_equal(t2, t1 + 1);
    assert_int_equal(store_sync_check(t2), 0);
    assert_int_equal(store_sync_gen((int64_t)t2), 0);
    gate_set(0);
    assert_int_equal(store_sync_wait(t2), 0);
    assert_int_equal(store_sync_check(t2), 1);
    assert_true(store_sync_rounds() - rounds >= 2);
    assert_int_equal(store_sync_waits() - waits, 2);
    assert_int_equal(store_sync_wait(store_sync_request()), 0);
}

/* Last: the refusal is sticky for the rest of the process. */
static void test_refused_sync_fails_every_ticket(void **state)
{
    (void)state;
    char gone[sizeof dir.db + 8];
    snprintf(gone, sizeof gone, "%s.gone", dir.db);
    uint64_t before = store_sync_request();
    assert_int_equal(store_sync_wait(before), 0);
    store_sync_close();
    store_sync_setup(gone, STORE_DURABLE_GROUP);    /* no such WAL: the open fails */
    uint64_t t = store_sync_request();
    assert_int_equal(store_sync_wait(t), -1);
    assert_int_equal(store_sync_check(t), -1);
    assert_int_equal(store_sync_gen((int64_t)t), 1);   /* decided: a parked request runs */
    assert_int_equal(store_sync_check(before), -1);
    assert_int_equal(store_sync_wait(store_sync_request()), -1);
    store_sync_stop();
}

static int teardown(void **state)
{
    (void)state;
    support_store_remove(dir.dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_other_modes_wait_for_nothing),
        cmocka_unit_test(test_ticket_pending_until_its_round),
        cmocka_unit_test(test_refused_sync_fails_every_ticket),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
