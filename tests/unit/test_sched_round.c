/* test_sched_round.c - what the scheduler keeps between rounds
 * (sched_place.c's device mirror, the tenants' usage in store_sched.c), on
 * a real SQLite file: a round reads the island's devices again only after
 * a commit changed a device's holder, a shared hold or a worker (counted
 * by sched_round_device_reads); a report's busy time or a heartbeat does
 * not make it read; a round that recorded its own committed change keeps
 * its view without a read unless another connection committed a change
 * too; a round past its time places no more jobs, and the next one goes
 * on from there; and whatever changed is what the next round and the next
 * tenants' read see. Those writes go through store_begin/store_commit like every
 * writer in atolld. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"
#include "store_internal.h"
#include "support_store.h"
#include "support_sched.h"

static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}};
/* Holds west's devices lo..hi for job, as an allocation run. */
#define ALLOC_SQL(lo, hi, job)                                                             \
    "INSERT INTO allocations (island_id, lo, hi, job_id) SELECT id, " #lo ", " #hi ", " #job \
    " FROM islands WHERE name = 'west'"

typedef support_worker_fixture_t fixture_t;

static int setup(void **state)
{
    *state = support_sched_fixture(islands, 1, 4);
    return 0;
}

/* Loads a round; device k's allocator state and exclusive job. */
static void round_device(fixture_t *f, int k, int64_t *job, int64_t *worker)
{
    round_t r;
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(r.n, 1);
    *job = r.devs[0][k].job;
    *worker = r.devs[0][k].worker;
    sched_round_free(&r);
}

/* Refreshes of the mirror so far: whole-island reads and patches. */
static uint64_t refreshes(void)
{
    return sched_round_device_reads() + sched_round_device_patches();
}

static void test_mirror_reads_only_after_device_changes(void **state)
{
    fixture_t *f = *state;
    int64_t job, worker;
    round_device(f, 0, &job, &worker);
    uint64_t reads = refreshes(), full = sched_round_device_reads();
    assert_int_equal(worker, f->worker);
    assert_int_equal(job, 0);

    /* Nothing changed: the mirror answers. */
    round_device(f, 0, &job, &worker);
    assert_int_equal(refreshes(), reads);

    /* A report's device time and a heartbeat change other columns. */
    support_store_write(f->st, "UPDATE devices SET busy_us = busy_us + 5 WHERE idx = 0");
    support_store_write(f->st, "UPDATE workers SET heartbeat_at = heartbeat_at + 1");
    round_device(f, 0, &job, &worker);
    assert_int_equal(refreshes(), reads);

    /* An exclusive holder: that device read again (not the island), and
     * seen. A job row is needed for the foreign key; its document does not
     * matter here. */
    support_store_write(f->st,
                        "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total,"
                        " created_at) VALUES (77, 'x', 'running', 0, 0, 1, 0)");
    support_store_write(f->st, ALLOC_SQL(2, 2, 77));
    round_device(f, 2, &job, &worker);
    assert_int_equal(refreshes(), reads + 1);
    assert_int_equal(sched_round_device_reads(), full);
    assert_int_equal(job, 77);

    /* Released, then the worker gone (every device of it: the island is
     * read whole): each read again and seen. */
    support_store_write(f->st, "DELETE FROM allocations WHERE lo = 2");
    round_device(f, 2, &job, &worker);
    assert_int_equal(job, 0);
    assert_int_equal(refreshes(), reads + 2);
    support_store_write(f->st, "UPDATE workers SET state = 'gone'");
    round_device(f, 2, &job, &worker);
    assert_int_equal(worker, 0);
    assert_int_equal(refreshes(), reads + 3);
    assert_int_equal(sched_round_device_reads(), full + 1);

    /* A rolled-back change moves nothing. */
    assert_int_equal(store_begin(f->st), 0);
    assert_int_equal(sqlite3_exec(store_db(f->st), ALLOC_SQL(0, 3, 77), NULL,
                                  NULL, NULL), SQLITE_OK);
    store_rollback(f->st);
    round_device(f, 1, &job, &worker);
    assert_int_equal(job, 0);
    assert_int_equal(refreshes(), reads + 3);
}

/* Another thread's connection, as the report applier or an API handler
 * would write: one transaction of sql. */
static void *other_writer(void *sql)
{
    store_t *st = store_thread();
    int ok = st && store_begin(st) == 0;
    ok = ok && sqlite3_exec(store_db(st), sql, NULL, NULL, NULL) == SQLITE_OK;
    ok = ok && store_commit(st) == 0;
    store_thread_close();
    return ok ? sql : NULL;
}

static void write_elsewhere(const char *sql)
{
    pthread_t t;
    void *ok = NULL;
    assert_int_equal(pthread_create(&t, NULL, other_writer, (void *)sql), 0);
    assert_int_equal(pthread_join(t, &ok), 0);
    assert_non_null(ok);
}

/* Running jobs 77 and 79, for the foreign keys of allocations; their
 * documents do not matter here. */
static void two_running_jobs(fixture_t *f)
{
    support_store_write(f->st,
                        "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total,"
                        " created_at) VALUES (77, 'x', 'running', 0, 0, 1, 0),"
                        " (79, 'z', 'running', 0, 0, 1, 0)");
}

/* A round that places a job commits the placement and records it in its
 * view (sched_round_take): kept, the next round reads nothing, and sees
 * it. A change another connection committed meanwhile is patched in by
 * the next round, alone (the devices it named), never a read of the
 * island: both seen. */
static void test_round_keeps_its_own_changes(void **state)
{
    fixture_t *f = *state;
    round_t r;
    two_running_jobs(f);
    assert_int_equal(sched_round_load(f->st, &r), 0);
    uint64_t reads = refreshes();
    r.devs[0][1].job = 77;
    support_store_write(f->st, ALLOC_SQL(1, 1, 77));
    sched_round_keep(f->st, &r);
    sched_round_free(&r);
    int64_t job, worker;
    round_device(f, 1, &job, &worker);
    assert_int_equal(job, 77);
    assert_int_equal(refreshes(), reads);

    assert_int_equal(sched_round_load(f->st, &r), 0);
    uint64_t whole = sched_round_device_reads();
    r.devs[0][2].job = 77;
    support_store_write(f->st, ALLOC_SQL(2, 2, 77));
    write_elsewhere(ALLOC_SQL(0, 0, 79));
    sched_round_keep(f->st, &r);
    sched_round_free(&r);
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 79);
    assert_int_equal(refreshes(), reads + 1);
    assert_int_equal(sched_round_device_reads(), whole);
    round_device(f, 2, &job, &worker);
    assert_int_equal(job, 77);
}

/* The round's own change that the record holds as "everything" (as a
 * whole-island allocation is: more devices than a transaction notes),
 * with another connection's change beside it: the next round patches in
 * the other's device and reads nothing, since the kept view holds its
 * own change already. An own commit after the view was kept is not in
 * it: the next round takes it in like anyone's. */
static void test_round_leaves_out_its_own_everything(void **state)
{
    fixture_t *f = *state;
    round_t r;
    int64_t isl = store_island_id(f->st, "west"), job, worker;
    two_running_jobs(f);
    assert_int_equal(sched_round_load(f->st, &r), 0);
    uint64_t whole = sched_round_device_reads(), patches = sched_round_device_patches();
    r.devs[0][1].job = 77;
    support_store_write(f->st, ALLOC_SQL(1, 1, 77));
    store_devchg_t c = {.writer = store_devlog_writer(f->st)};
    store_devlog_note(&c, isl, -1);
    store_devlog_publish(&c);
    write_elsewhere(ALLOC_SQL(0, 0, 79));
    sched_round_keep(f->st, &r);
    sched_round_free(&r);
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 79);
    round_device(f, 1, &job, &worker);
    assert_int_equal(job, 77);
    assert_int_equal(sched_round_device_reads(), whole);
    assert_int_equal(sched_round_device_patches(), patches + 1);

    assert_int_equal(sched_round_load(f->st, &r), 0);
    r.devs[0][2].job = 77;
    support_store_write(f->st, ALLOC_SQL(2, 2, 77));
    write_elsewhere("DELETE FROM allocations WHERE job_id = 79");
    sched_round_keep(f->st, &r);
    sched_round_free(&r);
    support_store_write(f->st, ALLOC_SQL(3, 3, 79));   /* not in any round's view */
    round_device(f, 3, &job, &worker);
    assert_int_equal(job, 79);
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 0);
    round_device(f, 2, &job, &worker);
    assert_int_equal(job, 77);
}

/* Inside a write transaction, a round's view is current while only its
 * own commits moved the devices' generation: another connection's change
 * (committed and published before that connection let the write lock go)
 * makes it stale, and so does an eviction in the round. Only a current
 * view lets an allocation skip reading its devices' workers again. */
static void test_round_current_until_another_writer(void **state)
{
    fixture_t *f = *state;
    round_t r;
    two_running_jobs(f);
    assert_int_equal(sched_round_load(f->st, &r), 0);
    assert_int_equal(store_begin(f->st), 0);
    assert_true(sched_round_current(f->st, &r, 0));
    store_rollback(f->st);
    support_store_write(f->st, ALLOC_SQL(1, 1, 77));    /* the round's own */
    assert_int_equal(store_begin(f->st), 0);
    assert_true(sched_round_current(f->st, &r, 0));
    assert_false(sched_round_current(f->st, &r, 1));    /* no such island */
    store_rollback(f->st);
    r.evicted = 1;
    assert_false(sched_round_current(f->st, &r, 0));
    r.evicted = 0;
    write_elsewhere(ALLOC_SQL(0, 0, 79));
    assert_int_equal(store_begin(f->st), 0);
    assert_false(sched_round_current(f->st, &r, 0));
    store_rollback(f->st);
    sched_round_free(&r);
}

/* What a transaction rolled back is not published: a job freed inside one
 * (a report batch that failed after its job's end) still holds its
 * devices, and no reader is told otherwise; committed, it is. */
static void test_rolled_back_free_publishes_nothing(void **state)
{
    fixture_t *f = *state;
    int64_t isl = store_island_id(f->st, "west"), idx[8], job, worker;
    support_store_write(f->st,
                        "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total,"
                        " created_at) VALUES (77, 'x', 'running', 0, 0, 1, 0)");
    support_store_write(f->st, ALLOC_SQL(0, 3, 77));
    round_device(f, 0, &job, &worker);
    uint64_t g = store_devices_gen();
    assert_int_equal(store_begin(f->st), 0);
    assert_int_equal(store_job_finish(f->st, 77, "succeeded", NULL), 0);
    store_rollback(f->st);
    assert_int_equal(store_devices_gen(), g);
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 77);

    assert_int_equal(store_begin(f->st), 0);
    assert_int_equal(store_job_finish(f->st, 77, "succeeded", NULL), 0);
    assert_int_equal(store_commit(f->st), 0);
    store_devlog_view_t v = {.idx = idx, .cap = 8};
    assert_int_equal(store_devlog_since(g, isl, &v), 0);
    assert_int_equal(v.njobs, 1);
    assert_int_equal(v.jobs[0], 77);
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 0);
}

/* The record of changed devices: a commit's devices, by island, distinct;
 * "everything" for a worker's change; -1 past the caller's cap, and once
 * the ring no longer holds all of the range asked for. */
/* store_devlog_since's devices into idx[0..cap): their count, or -1. */
static int since(uint64_t g, int64_t isl, int64_t *idx, int cap, uint64_t *upto)
{
    store_devlog_view_t v = {.idx = idx, .cap = cap};
    int rc = store_devlog_since(g, isl, &v);
    *upto = v.upto;
    return rc == 0 ? v.n : -1;
}

static void test_devlog_names_changed_devices(void **state)
{
    fixture_t *f = *state;
    int64_t isl = store_island_id(f->st, "west"), idx[8];
    uint64_t g0 = store_devices_gen(), upto = 0;
    support_store_write(f->st,
                        "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total,"
                        " created_at) VALUES (77, 'x', 'running', 0, 0, 1, 0)");
    assert_int_equal(since(g0, isl, idx, 8, &upto), 0);
    assert_int_equal(upto, g0);
    support_store_write(f->st, ALLOC_SQL(1, 1, 77));
    assert_int_equal(since(g0, isl, idx, 8, &upto), 1);
    assert_int_equal(idx[0], 1);
    assert_int_equal(upto, g0 + 1);
    support_store_write(f->st, "INSERT INTO device_holds (island_id, idx, job_id)"
                        " SELECT island_id, 3, 77 FROM devices WHERE idx = 3");
    support_store_write(f->st, "DELETE FROM allocations WHERE lo = 1");
    assert_int_equal(since(g0, isl, idx, 8, &upto), 2);
    assert_true((idx[0] == 1 && idx[1] == 3) || (idx[0] == 3 && idx[1] == 1));
    assert_int_equal(since(g0 + 2, isl, idx, 8, &upto), 1);
    assert_int_equal(since(g0, isl, idx, 1, &upto), -1);
    assert_int_equal(since(g0, isl + 1000, idx, 8, &upto), 0);
    uint64_t g1 = store_devices_gen();
    support_store_write(f->st, "UPDATE workers SET state = 'gone'");
    assert_int_equal(since(g1, isl, idx, 8, &upto), -1);

    /* One device per generation until the ring has dropped g2's. */
    uint64_t g2 = store_devices_gen();
    store_devchg_t c = {0};
    store_devlog_note(&c, isl, 0);
    store_devlog_publish(&c);
    assert_int_equal(since(g2, isl, idx, 8, &upto), 1);
    for (int i = 0; i < 20000; i++) {
        store_devlog_note(&c, isl + 1000, 0);
        store_devlog_publish(&c);
    }
    assert_int_equal(since(g2, isl, idx, 8, &upto), -1);
    assert_int_equal(since(store_devices_gen() - 5, isl, idx, 8, &upto), 0);
}

/* A reader naming a connection (skip_writer) is told the changes of every
 * other connection only: that connection's devices and its "everything"
 * are left out, the others' still count, and so does a range the ring
 * no longer holds. */
static void test_devlog_leaves_out_one_writer(void **state)
{
    fixture_t *f = *state;
    int64_t isl = store_island_id(f->st, "west"), idx[8];
    uint32_t me = store_devlog_writer(f->st);
    two_running_jobs(f);
    uint64_t g = store_devices_gen();
    support_store_write(f->st, ALLOC_SQL(1, 1, 77));
    write_elsewhere(ALLOC_SQL(0, 0, 79));
    store_devlog_view_t v = {.idx = idx, .cap = 8, .skip_writer = me};
    assert_int_equal(store_devlog_since(g, isl, &v), 0);
    assert_int_equal(v.n, 1);
    assert_int_equal(idx[0], 0);
    assert_int_equal(v.upto, g + 2);
    v.skip_writer = 0;
    assert_int_equal(store_devlog_since(g, isl, &v), 0);
    assert_int_equal(v.n, 2);

    uint64_t g1 = store_devices_gen();
    store_devchg_t c = {.writer = me};
    store_devlog_note(&c, isl, -1);
    store_devlog_publish(&c);
    v.skip_writer = me;
    assert_int_equal(store_devlog_since(g1, isl, &v), 0);
    assert_int_equal(v.n, 0);
    v.skip_writer = me + 1;
    assert_int_equal(store_devlog_since(g1, isl, &v), -1);
    for (int i = 0; i < 20000; i++) {
        c.writer = me;
        store_devlog_note(&c, isl, 0);
        store_devlog_publish(&c);
    }
    v.skip_writer = me;
    assert_int_equal(store_devlog_since(g1, isl, &v), -1);
}

/* Jobs placed (allocated, or running once their tasks were leased). */
static int jobs_allocated(fixture_t *f)
{
    return (int)support_store_int(f->st, "SELECT COUNT(*) FROM jobs"
                                         " WHERE state IN ('allocated', 'running')");
}

/* A job's end frees its devices as one entry naming the job: the next
 * round frees them in its mirror without reading anything, and the
 * devices another job holds stay held. */
static void test_freed_job_reaches_mirror_without_read(void **state)
{
    fixture_t *f = *state;
    int64_t isl = store_island_id(f->st, "west"), idx[8], job, worker;
    support_store_write(f->st,
                        "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total,"
                        " created_at) VALUES (77, 'x', 'running', 0, 0, 1, 0),"
                        " (78, 'y', 'running', 0, 0, 1, 0)");
    support_store_write(f->st, ALLOC_SQL(0, 2, 77));
    support_store_write(f->st, ALLOC_SQL(3, 3, 78));
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 77);
    uint64_t g = store_devices_gen(), reads = sched_round_device_reads(),
             patches = sched_round_device_patches();

    assert_int_equal(store_begin(f->st), 0);
    assert_int_equal(store_job_finish(f->st, 77, "succeeded", NULL), 0);
    assert_int_equal(store_commit(f->st), 0);
    store_devlog_view_t v = {.idx = idx, .cap = 8};
    assert_int_equal(store_devlog_since(g, isl, &v), 0);
    assert_int_equal(v.n, 0);                   /* no device named */
    assert_int_equal(v.njobs, 1);
    assert_int_equal(v.jobs[0], 77);
    assert_int_equal(v.upto, g + 1);

    for (int k = 0; k < 3; k++) {
        round_device(f, k, &job, &worker);
        assert_int_equal(job, 0);
    }
    round_device(f, 3, &job, &worker);
    assert_int_equal(job, 78);
    assert_int_equal(sched_round_device_reads(), reads);
    assert_int_equal(sched_round_device_patches(), patches + 1);
}

/* An allocation names the devices it took (its statement's triggers are
 * quiet; store_step_devices notes the run), so another reader patches
 * exactly those. */
static void test_allocation_names_its_devices(void **state)
{
    fixture_t *f = *state;
    int64_t isl = store_island_id(f->st, "west"), idx[8];
    uint64_t g = store_devices_gen(), upto = 0;
    support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    sched_admit(f->st);
    assert_int_equal(jobs_allocated(f), 1);
    assert_int_equal(since(g, isl, idx, 8, &upto), 2);
    assert_true(idx[0] != idx[1] && idx[0] >= 0 && idx[0] < 4 && idx[1] >= 0 && idx[1] < 4);
    assert_int_equal(support_store_int(f->st, "SELECT SUM(hi - lo + 1) FROM allocations"), 2);
}

/* Offers job id its own document, compiled as the API compiles it, as
 * a text of `bytes`. */
static void offer_sized(int64_t id, size_t bytes)
{
    json_error_t jerr;
    json_t *doc = json_loads(SUPPORT_STORE_JOB_DOC, 0, &jerr);
    job_plan_t *plan = NULL;
    err_t e = {0};
    assert_non_null(doc);
    assert_int_equal(compiler_job(doc, islands, 1, &plan, &e), 0);
    sched_plan_offer(id, doc, plan, bytes);
}

static void offer(int64_t id)
{
    offer_sized(id, strlen(SUPPORT_STORE_JOB_DOC));
}

/* A plan the API offered is taken instead of reading and compiling the
 * stored document (here made unreadable: read, the job cannot be planned);
 * an offer pushed out by SCHED_OFFERS newer ones is not, nor one pushed
 * out by newer documents over SCHED_OFFER_BUDGET_BYTES together, nor one
 * of a document over the whole budget, and their jobs' documents are read
 * as before; a document far over 64 KiB (a 1,000-computation chain's
 * ~280 KiB) is kept. */
static void test_offered_plan_used_instead_of_document(void **state)
{
    fixture_t *f = *state;
    int64_t a = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    int64_t b = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    offer(a);
    support_store_write(f->st, "UPDATE job_docs SET doc = '{'");
    plan_entry_t *pe = sched_plan_get(f->st, a);
    assert_non_null(pe);
    assert_int_equal(pe->plan->nslices, 1);
    assert_non_null(json_object_get(pe->doc, "computations"));
    assert_null(sched_plan_get(f->st, b));      /* no offer: read, unreadable */

    int64_t c = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    support_store_write(f->st, "UPDATE job_docs SET doc = '{'");
    offer(c);
    for (int i = 0; i < SCHED_OFFERS; i++)
        offer(1000 + i);                        /* jobs that never come */
    assert_null(sched_plan_get(f->st, c));

    /* A document over the whole budget is not kept: read as before. */
    int64_t d = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    support_store_write(f->st, "UPDATE job_docs SET doc = '{'");
    offer_sized(d, SCHED_OFFER_BUDGET_BYTES + 1);
    assert_null(sched_plan_get(f->st, d));

    /* Large documents are kept while they fit the budget together: a
     * taken one's bytes leave it (g[2] fits exactly beside g[1] only so),
     * and one that does not fit pushes out the oldest (g[2], by bytes,
     * with two offers waiting: not by count). */
    int64_t g[4];
    for (int i = 0; i < 4; i++) {
        g[i] = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
        support_store_write(f->st, "UPDATE job_docs SET doc = '{'");
    }
    offer_sized(g[0], 280 * 1024);
    offer_sized(g[1], SCHED_OFFER_BUDGET_BYTES / 2);
    assert_non_null(sched_plan_get(f->st, g[0]));
    offer_sized(g[2], SCHED_OFFER_BUDGET_BYTES / 2);
    assert_non_null(sched_plan_get(f->st, g[1]));
    offer_sized(g[3], SCHED_OFFER_BUDGET_BYTES / 4 * 3);
    assert_null(sched_plan_get(f->st, g[2]));
    assert_non_null(sched_plan_get(f->st, g[3]));
}

/* A mirror that shows devices free that are not (here a freed job was
 * published while the job still holds them, as a publish that named a job
 * it did not free would leave it): the allocation that tries them fails
 * its re-check (the allocation runs are always checked), and the next
 * round reads the island again, so the job waits with the true reason
 * instead of failing round after round. */
static void test_stale_mirror_read_again_after_failed_allocation(void **state)
{
    fixture_t *f = *state;
    int64_t job, worker;
    support_store_write(f->st,
                        "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total,"
                        " created_at) VALUES (77, 'x', 'running', 0, 0, 1, 0)");
    support_store_write(f->st, ALLOC_SQL(0, 3, 77));
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 77);
    store_devchg_t c = {0};
    store_devlog_note_freed(&c, 77);
    store_devlog_publish(&c);
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 0);                   /* stale */

    int64_t q = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    uint64_t reads = sched_round_device_reads();
    sched_admit(f->st);                         /* tries, fails its re-check */
    assert_int_equal(jobs_allocated(f), 1);     /* 77 alone */
    sched_admit(f->st);
    assert_int_equal(sched_round_device_reads(), reads + 1);
    round_device(f, 0, &job, &worker);
    assert_int_equal(job, 77);
    json_t *jq = store_job_json(f->st, q);
    assert_string_equal(json_string_value(json_object_get(jq, "state")), "queued");
    json_decref(jq);
}

/* A job that found no room is not tried again while the devices stay as
 * they were (the generation did not move): the next round skips the
 * allocator for it (no attempt counted) and it keeps its reason; once a
 * job's end frees devices, it is tried and placed. Each round says
 * whether devices freed after it matter (sched_admit's result,
 * sched_notify_freed). */
static void test_unplaced_job_waits_for_a_device_change(void **state)
{
    fixture_t *f = *state;
    uint64_t attempts0, attempts, ok;
    /* No round is cut short by its time (a loaded machine's would be, and
     * answer 1 for that). */
    sched_cfg.round_admit_us = INT64_MAX;
    two_running_jobs(f);
    support_store_write(f->st, ALLOC_SQL(0, 3, 77));
    int64_t q = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    /* q waits: devices a job's success frees matter to the next round
     * (sched_notify_freed wakes the scheduler for them). */
    assert_int_equal(sched_admit(f->st), 1);
    sched_counters(&attempts0, &ok);
    assert_int_equal(jobs_allocated(f), 2);         /* 77 and 79 */
    assert_int_equal(sched_admit(f->st), 1);
    sched_admit(f->st);
    sched_counters(&attempts, &ok);
    assert_int_equal(attempts, attempts0);
    json_t *jq = store_job_json(f->st, q);
    assert_non_null(json_object_get(jq, "pending_reason"));
    json_decref(jq);

    assert_int_equal(store_begin(f->st), 0);
    assert_int_equal(store_job_finish(f->st, 77, "succeeded", NULL), 0);
    assert_int_equal(store_commit(f->st), 0);
    /* The round places q and leaves nothing queued: the next success need
     * not wake the scheduler (the next job's arrival will). */
    assert_int_equal(sched_admit(f->st), 0);
    sched_counters(&attempts, &ok);
    assert_int_equal(attempts, attempts0 + 1);
    assert_int_equal(jobs_allocated(f), 2);         /* 79 and q */
    jq = store_job_json(f->st, q);
    assert_string_not_equal(json_string_value(json_object_get(jq, "state")), "queued");
    json_decref(jq);
}

/* A shared job gets no host task at its admission: it is allocated, and
 * runs (started_at set) from the feed pass that dispatches its first
 * computation, which ends the same round (sched_feed.c,
 * store_sched_started). */
static void test_shared_job_runs_from_its_first_feed(void **state)
{
    fixture_t *f = *state;
    static const char shared_doc[] =
        "{\"sharing\": \"shared\", \"slices\": {\"s\": {\"shape\": [2]}}, \"computations\":"
        " [{\"name\": \"a\", \"slice\": \"s\", \"ops\": [{\"op\": \"iota\", \"out\": \"v\","
        " \"shape\": [4]}], \"outputs\": [\"v\"]}]}";
    int64_t job = support_store_submit(f->st, shared_doc, islands, 1);
    char sql[200];
    sched_admit(f->st);
    snprintf(sql, sizeof sql,
             "SELECT state = 'running' AND started_at IS NOT NULL FROM jobs WHERE id = %lld",
             (long long)job);
    assert_int_equal(support_store_int(f->st, sql), 1);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM host_tasks WHERE job_id = %lld",
             (long long)job);
    assert_int_equal(support_store_int(f->st, sql), 1);
}

/* With a round's time for placing jobs at 1 µs, each round places one of
 * the two queued jobs that fit (the oldest first), and the next round the
 * other: a long queue is placed over short rounds, not in one. */
static void test_round_stops_placing_past_its_time(void **state)
{
    fixture_t *f = *state;
    int64_t a = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    sched_cfg.round_admit_us = 1;
    sched_admit(f->st);
    int first = jobs_allocated(f);
    json_t *ja = store_job_json(f->st, a);
    const char *sa = json_string_value(json_object_get(ja, "state"));
    int oldest = sa && (strcmp(sa, "allocated") == 0 || strcmp(sa, "running") == 0);
    json_decref(ja);
    sched_admit(f->st);
    int second = jobs_allocated(f);
    sched_cfg.round_admit_us = 0;
    assert_int_equal(first, 1);
    assert_true(oldest);
    assert_int_equal(second, 2);
}

/* A stream of placements cannot stop every round early: after 32 rounds
 * in a row stopped by their time, the next one places every job that fits
 * (and so sweeps the plans of jobs that left the queues). Island 8x16, one
 * worker of 128 devices, 40 jobs of 2 devices. */
static const island_desc_t wide[] = {{"wide", {2, {8, 16, 0, 0}}}};

static int setup_wide(void **state)
{
    fixture_t *f = support_worker_fixture(wide, 1, 128);
    sched_cfg = (sched_config_t){.islands = wide, .nislands = 1, .lease_us = 60 * 1000000LL,
                                 .round_admit_us = 1};
    *state = f;
    return 0;
}

static void test_rounds_cut_short_at_most_32_in_a_row(void **state)
{
    fixture_t *f = *state;
    for (int i = 0; i < 40; i++)
        support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, wide, 1);
    for (int i = 0; i < 32; i++)
        sched_admit(f->st);
    int cut = jobs_allocated(f);
    sched_admit(f->st);
    int all = jobs_allocated(f);
    sched_cfg.round_admit_us = 0;
    assert_int_equal(cut, 32);
    assert_int_equal(all, 40);
}

/* Devices held per tenant follow the commits that move them. */
static void test_tenant_usage_follows_holders(void **state)
{
    fixture_t *f = *state;
    store_usage_t u = {0};
    sched_tenant_t *ts = NULL;
    int n = 0;
    support_store_write(f->st, "INSERT INTO tenants (id, name, token_hash, share, created_at)"
                        " VALUES (5, 't', 'th', 1, 0), (6, 'u', 'th6', 1, 0)");
    support_store_write(f->st,
                        "INSERT INTO jobs (id, name, state, priority, max_retries, comps_total,"
                        " created_at, tenant_id) VALUES (80, 'q', 'queued', 0, 0, 1, 0, 5),"
                        " (81, 'r', 'running', 0, 0, 1, 0, 5), (82, 's', 'queued', 0, 0, 1, 0, 6)");
    assert_int_equal(store_sched_tenants(f->st, &u, &ts, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ts[0].id, 5);
    assert_int_equal(ts[0].used, 0);
    free(ts);

    support_store_write(f->st, ALLOC_SQL(0, 1, 81));
    assert_int_equal(store_sched_tenants(f->st, &u, &ts, &n), 0);
    assert_int_equal(ts[0].used, 2);
    free(ts);

    support_store_write(f->st, "DELETE FROM allocations WHERE lo = 0; " ALLOC_SQL(1, 1, 81));
    assert_int_equal(store_sched_tenants(f->st, &u, &ts, &n), 0);
    assert_int_equal(ts[0].used, 1);
    free(ts);
    store_usage_free(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_mirror_reads_only_after_device_changes, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_round_keeps_its_own_changes, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_round_current_until_another_writer, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_rolled_back_free_publishes_nothing, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_round_stops_placing_past_its_time, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_unplaced_job_waits_for_a_device_change, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_devlog_names_changed_devices, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_devlog_leaves_out_one_writer, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_round_leaves_out_its_own_everything, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_rounds_cut_short_at_most_32_in_a_row, setup_wide,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_tenant_usage_follows_holders, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_freed_job_reaches_mirror_without_read, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_allocation_names_its_devices, setup, support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_shared_job_runs_from_its_first_feed, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_offered_plan_used_instead_of_document, setup,
                                        support_sched_teardown),
        cmocka_unit_test_setup_teardown(test_stale_mirror_read_again_after_failed_allocation,
                                        setup, support_sched_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
