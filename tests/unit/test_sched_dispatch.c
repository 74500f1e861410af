/* test_sched_dispatch.c - an exclusive job's dispatch in chunks
 * (scheduler/sched_dispatch.c), on a real SQLite file and a real round: a
 * long chain's allocation writes only its first chunk, each later pass the
 * next (doubling), with sequence numbers that keep following the job's
 * topological order across chunks; sequential dispatch still writes every
 * computation at once; a job that ended or was requeued between chunks
 * gets nothing more; one whose allocation no longer reads back fails; a
 * gang of more workers than a chunk holds is written over several passes,
 * each computation under one sequence number; a small first chunk goes
 * with its allocation even when its pass has no time left; jobs whose
 * plans all compile in one pass (after a restart) each continue from
 * their own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"
#include "util.h"
#include "support_store.h"

/* One worker holds all of west, so every computation of a [2,2] slice is
 * one host task: chunks are counted in computations. */
static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}};

/* A chain of CHAIN computations: c0 fills 1, each next one scales its
 * predecessor's value by 1. Chunks: 32 host tasks first, then as many as
 * already dispatched: [0,32) [32,64) [64,100). */
#define CHAIN 100

typedef struct fixture {
    support_store_t d;          /* first: support_store_teardown */
    store_t *st;
    int64_t job;
} fixture_t;

/* The chain's document (malloc'd JSON text). */
static char *chain_doc(void)
{
    json_t *comps = json_array();
    for (int k = 0; k < CHAIN; k++) {
        char name[16], from[24];
        snprintf(name, sizeof name, "c%d", k);
        snprintf(from, sizeof from, "c%d.x", k - 1);
        json_t *ops = k == 0 ? json_pack("[{s:s, s:s, s:[], s:f}]", "op", "fill", "out", "x",
                                         "shape", "value", 1.0)
                             : json_pack("[{s:s, s:s, s:s}, {s:s, s:s, s:[s], s:f}]", "op",
                                         "input", "out", "p", "from", from, "op", "scale", "out",
                                         "x", "args", "p", "factor", 1.0);
        json_array_append_new(comps, json_pack("{s:s, s:s, s:o, s:[s]}", "name", name, "slice",
                                               "s", "ops", ops, "outputs", "x"));
    }
    json_t *doc = json_pack("{s:s, s:{s:{s:[i,i]}}, s:o}", "name", "chain", "slices", "s",
                            "shape", 2, 2, "computations", comps);
    char *text = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    assert_non_null(text);
    return text;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->st = support_store_open(&f->d, islands, 1);
    /* Chunks sized by doubling alone: writing is never too slow here. */
    sched_cfg = (sched_config_t){.islands = islands, .nislands = 1, .lease_us = 60 * 1000000LL,
                                 .chunk_us = INT64_MAX / 2};
    support_store_register(f->st, "west", "127.0.0.1:1", 4);
    char *doc = chain_doc();
    f->job = support_store_submit(f->st, doc, islands, 1);
    free(doc);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    sched_plans_free_all();
    sched_dispatch_forget();
    sched_dispatch_pass(0);     /* a test that failed inside a pass leaves none open */
    return support_store_teardown(state);
}

/* wide=2x64: 128 workers of one device each, so every computation of a
 * whole-island job is 128 host tasks, more than a chunk holds. */
static const island_desc_t wide[] = {{"wide", {2, {2, 64, 0, 0}}}};

/* A job of two computations on all of wide: c0 fills, c1 scales c0's x. */
static const char wide_doc[] =
    "{\"name\":\"gang\",\"slices\":{\"s\":{\"shape\":[2,64]}},\"computations\":["
    "{\"name\":\"c0\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"
    "\"value\":1.0}],\"outputs\":[\"x\"]},"
    "{\"name\":\"c1\",\"slice\":\"s\",\"ops\":[{\"op\":\"input\",\"out\":\"p\",\"from\":\"c0.x\"},"
    "{\"op\":\"scale\",\"out\":\"x\",\"args\":[\"p\"],\"factor\":2.0}],\"outputs\":[\"x\"]}]}";

/* The same job on half of wide ([1,64]: 64 host tasks per computation),
 * so that two fit at once. */
static const char half_doc[] =
    "{\"name\":\"half\",\"slices\":{\"s\":{\"shape\":[1,64]}},\"computations\":["
    "{\"name\":\"c0\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"
    "\"value\":1.0}],\"outputs\":[\"x\"]},"
    "{\"name\":\"c1\",\"slice\":\"s\",\"ops\":[{\"op\":\"input\",\"out\":\"p\",\"from\":\"c0.x\"},"
    "{\"op\":\"scale\",\"out\":\"x\",\"args\":[\"p\"],\"factor\":2.0}],\"outputs\":[\"x\"]}]}";

/* Six computations on two slices of wide, a chain through both: c0-c2 on
 * a, c3 on b, c4-c5 on a. */
static const char two_slice_doc[] =
    "{\"name\":\"two\",\"slices\":{\"a\":{\"shape\":[1,2]},\"b\":{\"shape\":[1,2]}},"
    "\"computations\":["
    "{\"name\":\"c0\",\"slice\":\"a\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"
    "\"value\":1.0}],\"outputs\":[\"x\"]}"
#define TWO_STEP(k, sl, prev)                                                                 \
    ",{\"name\":\"c" #k "\",\"slice\":\"" sl "\",\"ops\":[{\"op\":\"input\",\"out\":\"p\","          \
    "\"from\":\"c" #prev ".x\"},{\"op\":\"scale\",\"out\":\"x\",\"args\":[\"p\"],\"factor\":2.0}],"  \
    "\"outputs\":[\"x\"]}"
    TWO_STEP(1, "a", 0) TWO_STEP(2, "a", 1) TWO_STEP(3, "b", 2) TWO_STEP(4, "a", 3)
    TWO_STEP(5, "a", 4) "]}";
#undef TWO_STEP

/* A job of two computations on [1,4] of wide: 8 host tasks in all. */
static const char small_doc[] =
    "{\"name\":\"small\",\"slices\":{\"s\":{\"shape\":[1,4]}},\"computations\":["
    "{\"name\":\"c0\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"
    "\"value\":1.0}],\"outputs\":[\"x\"]},"
    "{\"name\":\"c1\",\"slice\":\"s\",\"ops\":[{\"op\":\"input\",\"out\":\"p\",\"from\":\"c0.x\"},"
    "{\"op\":\"scale\",\"out\":\"x\",\"args\":[\"p\"],\"factor\":2.0}],\"outputs\":[\"x\"]}]}";

/* wide with its 128 workers, and wide_doc submitted as f->job when
 * `submit`. */
static int setup_wide_with(void **state, int submit)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->st = support_store_open(&f->d, wide, 1);
    sched_cfg = (sched_config_t){.islands = wide, .nislands = 1, .lease_us = 60 * 1000000LL,
                                 .chunk_us = INT64_MAX / 2};
    for (int w = 0; w < 128; w++) {
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", 2000 + w);
        support_store_register(f->st, "wide", addr, 1);
    }
    if (submit)
        f->job = support_store_submit(f->st, wide_doc, wide, 1);
    *state = f;
    return 0;
}

static int setup_wide(void **state)
{
    return setup_wide_with(state, 1);
}

static int setup_wide_idle(void **state)
{
    return setup_wide_with(state, 0);
}

/* Places job `id` as an admission round would and writes its allocation;
 * sched_dispatch_job's answer. */
static int allocate_job(fixture_t *f, int64_t id)
{
    round_t r;
    assert_int_equal(sched_round_load(f->st, &r), 0);
    plan_entry_t *pe = sched_plan_get(f->st, id);
    assert_non_null(pe);
    int n = pe->plan->nslices;
    assert_true(n >= 1 && n <= 4);
    alloc_request_t req[4];
    for (int s = 0; s < n; s++)
        req[s] = (alloc_request_t){pe->plan->slices[s].shape, NULL};
    alloc_placement_t pl[4];
    sched_gang_t g = {req, n, 0, 0};
    int by_memory;
    assert_int_equal(sched_place(&r, &g, pl, &by_memory), ALLOC_OK);
    sched_round_take(&r, pl, &g, id);
    sched_job_t job = {id, 0, 0, 0, 0};
    int rc = sched_dispatch_job(f->st, &job, pe->plan, pe->doc, &r, pl, 0);
    alloc_placements_release(pl, n);
    sched_round_free(&r);
    return rc;
}

static int allocate(fixture_t *f)
{
    return allocate_job(f, f->job);
}

/* One continuation pass; returns jobs still left, *wrote as given back. */
static int more(fixture_t *f, int *wrote)
{
    round_t r;
    assert_int_equal(sched_round_load(f->st, &r), 0);
    int left = sched_dispatch_more(f->st, &r, wrote);
    sched_round_free(&r);
    return left;
}

/* How many of the job's computations have a sequence number, and whether
 * their numbers increase with their index (the chain's topological order). */
static int dispatched(fixture_t *f, int *in_order)
{
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(f->st),
                                        "SELECT idx, seq FROM computations WHERE job_id = ?"
                                        " AND seq IS NOT NULL ORDER BY idx", -1, &s, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(s, 1, f->job);
    int n = 0;
    int64_t last = -1;
    *in_order = 1;
    while (sqlite3_step(s) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(s, 1);
        if (sqlite3_column_int(s, 0) != n || seq <= last)
            *in_order = 0;
        last = seq;
        n++;
    }
    sqlite3_finalize(s);
    return n;
}

/* The allocation writes the first 32 computations; each pass the next
 * chunk, twice as large as the first, then the rest; the numbers follow
 * the chain across chunks. */
static void test_chunks_double(void **state)
{
    fixture_t *f = *state;
    int wrote = 0, in_order = 0;
    assert_int_equal(allocate(f), 1);
    assert_int_equal(dispatched(f, &in_order), 32);
    assert_int_equal(more(f, &wrote), 1);
    assert_int_equal(wrote, 1);
    assert_int_equal(dispatched(f, &in_order), 64);
    assert_int_equal(more(f, &wrote), 0);
    assert_int_equal(dispatched(f, &in_order), CHAIN);
    assert_true(in_order);
    /* Nothing left: a further pass writes nothing. */
    assert_int_equal(more(f, &wrote), 0);
    assert_int_equal(wrote, 0);
    assert_int_equal(dispatched(f, &in_order), CHAIN);
}

/* The host tasks covering computation comp so far (a run's row covers
 * each of its computations, schema/032): how many, on how many distinct
 * workers, and the smallest and largest seq they give it (-1 when none). */
typedef struct comp_rows {
    int n, workers;
    int64_t seq_min, seq_max;
} comp_rows_t;

static comp_rows_t comp_rows_of(fixture_t *f, int64_t job, int comp)
{
    sqlite3_stmt *s = NULL;
    comp_rows_t c = {0, 0, -1, -1};
    assert_int_equal(sqlite3_prepare_v2(store_db(f->st),
                                        "SELECT COUNT(*), COUNT(DISTINCT worker_id),"
                                        " IFNULL(MIN(seq + ?2 - comp_idx), -1),"
                                        " IFNULL(MAX(seq + ?2 - comp_idx), -1) FROM host_tasks"
                                        " WHERE job_id = ?1 AND comp_idx <= ?2"
                                        " AND ?2 < comp_idx + ncomps",
                                        -1, &s, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, comp);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    c = (comp_rows_t){sqlite3_column_int(s, 0), sqlite3_column_int(s, 1),
                      sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3)};
    sqlite3_finalize(s);
    return c;
}

static comp_rows_t comp_rows(fixture_t *f, int comp)
{
    return comp_rows_of(f, f->job, comp);
}

static void expect_rows(fixture_t *f, int n0, int n1)
{
    comp_rows_t c0 = comp_rows(f, 0), c1 = comp_rows(f, 1);
    assert_int_equal(c0.n, n0);
    assert_int_equal(c0.workers, n0);       /* one host task per worker */
    assert_int_equal(c1.n, n1);
    assert_int_equal(c1.workers, n1);
    assert_true(c0.seq_min == c0.seq_max);  /* one computation, one seq */
    assert_true(c1.seq_min == c1.seq_max);
    if (n1 > 0)
        assert_true(c1.seq_min > c0.seq_max);
}

/* A worker address that would need escaping in the placement's JSON (the
 * API never registers one) is refused rather than written: the
 * allocation fails and the job stays queued. */
static void test_unplain_address_refused(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(sqlite3_exec(store_db(f->st), "UPDATE workers SET data_addr = '1.2.3.4:5\"'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(allocate(f), -1);
    json_t *job = store_job_json(f->st, f->job);
    assert_string_equal(json_string_value(json_object_get(job, "state")), "queued");
    json_decref(job);
}

/* Sequential dispatch releases blocked computations from reports in seq
 * order (store_progress.c): all of them are written at allocation. */
/* The job's host tasks as runs (schema/032): "first:ncomps@seq" per
 * distinct run, in computation order, into buf. */
static void runs_of(fixture_t *f, int64_t job, char *buf, size_t len)
{
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(f->st),
                                        "SELECT group_concat(r, ' ') FROM (SELECT DISTINCT"
                                        " comp_idx || ':' || ncomps || '@' || seq AS r"
                                        " FROM host_tasks WHERE job_id = ? ORDER BY comp_idx)",
                                        -1, &s, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(s, 1, job);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    snprintf(buf, len, "%s", sqlite3_column_text(s, 0) ? (const char *)sqlite3_column_text(s, 0)
                                                        : "");
    sqlite3_finalize(s);
}

/* Under parallel dispatch each chunk of the chain goes out as one run: one
 * row for its 32, 32 and 36 computations, numbered from its first one's
 * seq (the chain's seqs are 1..100). */
static void test_chain_chunks_are_runs(void **state)
{
    fixture_t *f = *state;
    int wrote = 0;
    char runs[256];
    assert_int_equal(allocate(f), 1);
    assert_int_equal(more(f, &wrote), 1);
    assert_int_equal(more(f, &wrote), 0);
    runs_of(f, f->job, runs, sizeof runs);
    assert_string_equal(runs, "0:32@1 32:32@33 64:36@65");
}

static void test_sequential_writes_all(void **state)
{
    fixture_t *f = *state;
    int in_order = 0, wrote = 0;
    sched_cfg.sequential = 1;
    int rc = allocate(f);
    sched_cfg.sequential = 0;
    assert_int_equal(rc, 0);
    assert_int_equal(dispatched(f, &in_order), CHAIN);
    assert_true(in_order);
    assert_int_equal(more(f, &wrote), 0);
    assert_int_equal(wrote, 0);
    /* Each computation waits for its producer's report: no runs. */
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM host_tasks"
                                              " WHERE ncomps = 1"), CHAIN);
}

/* c0 fills, c1 scales c0's x, c2 fills again: c2 reads nothing, yet it
 * follows c1 in the job's order on the same island. */
static const char waits_doc[] =
    "{\"name\":\"waits\",\"slices\":{\"s\":{\"shape\":[2,2]}},\"computations\":["
    "{\"name\":\"c0\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"
    "\"value\":1.0}],\"outputs\":[\"x\"]},"
    "{\"name\":\"c1\",\"slice\":\"s\",\"ops\":[{\"op\":\"input\",\"out\":\"p\",\"from\":\"c0.x\"},"
    "{\"op\":\"scale\",\"out\":\"x\",\"args\":[\"p\"],\"factor\":2.0}],\"outputs\":[\"x\"]},"
    "{\"name\":\"c2\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"
    "\"value\":3.0}],\"outputs\":[\"x\"]}]}";

/* Under sequential dispatch a computation with inputs waits blocked for
 * its producers' reports, and so does every later one on its island, even
 * one without inputs: were c2 handed out at once, a worker could start it before c1,
 * which another worker of the island may be running first (two collectives
 * met in different orders deadlock). The first waits for nobody: it is
 * leased at once. */
static void test_sequential_later_comps_wait(void **state)
{
    fixture_t *f = *state;
    int64_t id = support_store_submit(f->st, waits_doc, islands, 1);
    char sql[160];
    sched_cfg.sequential = 1;
    int rc = allocate_job(f, id);
    sched_cfg.sequential = 0;
    assert_int_equal(rc, 0);
    static const char *const want[] = {"leased", "blocked", "blocked"};
    for (int c = 0; c < 3; c++) {
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM host_tasks WHERE job_id = %lld"
                 " AND comp_idx = %d AND state = '%s'", (long long)id, c, want[c]);
        assert_int_equal(support_store_int(f->st, sql), 1);
    }
}

/* A job cancelled between two chunks gets no more host tasks. */
static void test_cancelled_job_not_continued(void **state)
{
    fixture_t *f = *state;
    int wrote = 0, in_order = 0;
    char was[16];
    assert_int_equal(allocate(f), 1);
    assert_int_equal(store_job_cancel(f->st, f->job, was), STORE_OK);
    assert_int_equal(more(f, &wrote), 0);
    assert_int_equal(wrote, 0);
    /* The cancel cleared the seq numbers of the computations it ended. */
    assert_true(dispatched(f, &in_order) <= 32);
    sched_more_t m[1];
    assert_int_equal(store_sched_dispatching(f->st, m, 1), 0);
}

/* A job requeued between two chunks (here preempted) is not continued
 * under its old attempt: its new attempt starts from its first chunk. */
static void test_requeued_job_not_continued(void **state)
{
    fixture_t *f = *state;
    int wrote = 0;
    assert_int_equal(allocate(f), 1);
    assert_int_equal(store_sched_preempt(f->st, f->job, 999, 5), 0);
    assert_int_equal(more(f, &wrote), 0);
    assert_int_equal(wrote, 0);
    sched_more_t m[1];
    assert_int_equal(store_sched_dispatching(f->st, m, 1), 0);
    assert_int_equal(store_sched_dispatch_next(f->st, f->job, 0), -1);
}

/* Runs sql on the file under a job allocated and in mid-dispatch, then a
 * chunk pass: the job has failed, and nothing is left in mid-dispatch. */
static void corrupt_then_expect_failed(fixture_t *f, const char *sql)
{
    int wrote = 0;
    assert_int_equal(sqlite3_exec(store_db(f->st), sql, NULL, NULL, NULL), SQLITE_OK);
    assert_int_equal(more(f, &wrote), 0);
    json_t *job = store_job_json(f->st, f->job);
    assert_non_null(job);
    assert_string_equal(json_string_value(json_object_get(job, "state")), "failed");
    json_decref(job);
    sched_more_t m[1];
    assert_int_equal(store_sched_dispatching(f->st, m, 1), 0);
}

/* corrupt_then_expect_failed on the job's slice row, its devices set to
 * `devices` (JSON text). */
static void corrupt_slice_then_expect_failed(fixture_t *f, const char *devices)
{
    assert_int_equal(allocate(f), 1);
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE slices SET devices = '%s' WHERE job_id = %lld", devices,
             (long long)f->job);
    corrupt_then_expect_failed(f, sql);
}

/* A job whose allocation no longer reads back as its plan needs (here its
 * slice row names one device) fails with a reason instead of holding up
 * every other job's next chunk (one transaction writes them all). */
static void test_unreadable_allocation_fails_job(void **state)
{
    corrupt_slice_then_expect_failed(*state, "[0]");
}

/* A dispatch position read back from the file past the plan's end is
 * refused before it indexes anything: the job fails. */
static void test_position_off_plan_fails_job(void **state)
{
    fixture_t *f = *state;
    assert_int_equal(allocate(f), 1);
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE jobs SET dispatch_next = %d WHERE id = %lld", CHAIN + 7,
             (long long)f->job);
    corrupt_then_expect_failed(f, sql);
}

/* So is a device index off the island (west has 4): it would index the
 * round's device array. */
static void test_device_off_island_fails_job(void **state)
{
    corrupt_slice_then_expect_failed(*state, "[0,1,2,4]");
}

/* A gang of 128 workers: the allocation writes 32 of c0's host tasks; the
 * passes after it 32 and 64 (c0 complete), then all of c1 (128, as many
 * as written so far); each computation keeps the seq its first part took,
 * and every worker gets exactly one host task of each. Once a pass found
 * no job in mid-dispatch, the passes after it do not look again. */
static void test_gang_split_across_passes(void **state)
{
    fixture_t *f = *state;
    int wrote = 0, in_order = 0;
    assert_int_equal(allocate(f), 1);
    expect_rows(f, 32, 0);
    assert_int_equal(dispatched(f, &in_order), 1);
    assert_int_equal(more(f, &wrote), 1);
    expect_rows(f, 64, 0);
    assert_int_equal(more(f, &wrote), 1);
    expect_rows(f, 128, 0);
    assert_int_equal(more(f, &wrote), 0);
    assert_int_equal(wrote, 1);
    expect_rows(f, 128, 128);
    assert_int_equal(dispatched(f, &in_order), 2);
    assert_true(in_order);
    sched_more_t m[1];
    assert_int_equal(store_sched_dispatching(f->st, m, 1), 0);
    uint64_t looks = sched_dispatch_looks();
    assert_int_equal(more(f, &wrote), 0);
    assert_int_equal(more(f, &wrote), 0);
    assert_int_equal(sched_dispatch_looks(), looks + 1);
}

/* When writing host tasks is slow (here: a chunk may take 1 µs, less than
 * any host task), chunks stay at SCHED_CHUNK_FIRST_TASKS instead of
 * doubling: each pass writes 32 of the gang's host tasks. */
static void test_chunks_bounded_by_time(void **state)
{
    fixture_t *f = *state;
    int wrote = 0;
    sched_cfg.chunk_us = 1;
    assert_int_equal(allocate(f), 1);
    expect_rows(f, 32, 0);
    for (int k = 2; k <= 4; k++) {
        assert_int_equal(more(f, &wrote), 1);
        expect_rows(f, 32 * k, 0);
    }
    for (int k = 1; k <= 4; k++) {
        assert_int_equal(more(f, &wrote), k < 4);
        expect_rows(f, 128, 32 * k);
    }
}

/* 1 when the job is in state `state`, started (started_at set) or not
 * as `started` says. */
static int job_is(fixture_t *f, int64_t job, const char *state, int started)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT state = '%s' AND (started_at IS NOT NULL) = %d FROM jobs WHERE id = %lld",
             state, started, (long long)job);
    return (int)support_store_int(f->st, sql);
}

/* A job allocated once its pass's time for host tasks is up gets no task
 * yet: its first chunk is the next pass's, which sched_dispatch_job's
 * answer (1: chunks left) asks for; it stays allocated until that chunk
 * is written, and runs from then. Allocated with time left in its pass,
 * a job gets its first chunk at once, and runs from its admission. */
static void test_first_chunk_waits_for_next_pass(void **state)
{
    fixture_t *f = *state;
    int wrote = 0;
    int64_t late = support_store_submit(f->st, half_doc, wide, 1);
    int64_t early = support_store_submit(f->st, half_doc, wide, 1);
    sched_cfg.chunk_us = 1;
    sched_dispatch_pass(util_mono_us() - 1000);
    assert_int_equal(allocate_job(f, late), 1);
    sched_dispatch_pass(0);
    sched_cfg.chunk_us = INT64_MAX / 2;
    assert_int_equal(comp_rows_of(f, late, 0).n, 0);
    assert_true(job_is(f, late, "allocated", 0));
    sched_dispatch_pass(util_mono_us());
    assert_int_equal(allocate_job(f, early), 1);
    sched_dispatch_pass(0);
    assert_int_equal(comp_rows_of(f, early, 0).n, 32);
    assert_true(job_is(f, early, "running", 1));
    assert_int_equal(more(f, &wrote), 2);
    assert_int_equal(wrote, 2);
    assert_int_equal(comp_rows_of(f, late, 0).n, 32);
    assert_true(job_is(f, late, "running", 1));
}

/* A pass whose chunks used the round's time places nothing: the next job
 * waits for the first pass that writes no chunk, or whose chunks leave it
 * time. Two half-island gangs of 128 host tasks (chunks 32, 32, 64); a
 * round's time of 1 µs. */
static void test_placing_waits_behind_chunks(void **state)
{
    fixture_t *f = *state;
    int64_t a = support_store_submit(f->st, half_doc, wide, 1);
    int64_t b = support_store_submit(f->st, half_doc, wide, 1);
    sched_cfg.round_admit_us = 1;
    sched_admit(f->st);             /* places a (first chunk), then its time is up */
    int a_placed = job_is(f, a, "running", 1), b_waits[3];
    for (int pass = 0; pass < 3; pass++) {
        b_waits[pass] = job_is(f, b, "queued", 0);
        sched_admit(f->st);         /* a's chunks 2 and 3, then no chunk: b */
    }
    int b_placed = !job_is(f, b, "queued", 0);
    sched_cfg.round_admit_us = 0;
    assert_true(a_placed);
    assert_true(b_waits[0] && b_waits[1] && b_waits[2]);
    assert_true(b_placed);
}

/* Two computations on [1,2] of wide: c1 reads c0.x twice and c0.y once. */
static const char edges_doc[] =
    "{\"name\":\"edges\",\"slices\":{\"a\":{\"shape\":[1,2]}},\"computations\":["
    "{\"name\":\"c0\",\"slice\":\"a\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[3],"
    "\"value\":1.0},{\"op\":\"scale\",\"out\":\"y\",\"args\":[\"x\"],\"factor\":2.0}],"
    "\"outputs\":[\"x\",\"y\"]},"
    "{\"name\":\"c1\",\"slice\":\"a\",\"ops\":[{\"op\":\"input\",\"out\":\"p\",\"from\":\"c0.x\"},"
    "{\"op\":\"input\",\"out\":\"q\",\"from\":\"c0.x\"},{\"op\":\"input\",\"out\":\"r\","
    "\"from\":\"c0.y\"},{\"op\":\"add\",\"out\":\"s\",\"args\":[\"p\",\"q\"]}],"
    "\"outputs\":[\"s\"]}]}";

/* Computation comp's stored payload (comp_payloads), parsed with duplicate
 * keys refused; new reference. */
static json_t *payload_of(fixture_t *f, int64_t job, int comp)
{
    sqlite3_stmt *s = NULL;
    assert_int_equal(sqlite3_prepare_v2(store_db(f->st),
                                        "SELECT payload FROM comp_payloads WHERE job_id = ?1"
                                        " AND comp_idx = ?2", -1, &s, NULL), SQLITE_OK);
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int(s, 2, comp);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    json_t *j = json_loads((const char *)sqlite3_column_text(s, 0), JSON_REJECT_DUPLICATES, NULL);
    sqlite3_finalize(s);
    assert_non_null(j);
    return j;
}

/* The payload every host task of a computation shares (TASK without
 * "task", "shards", "devices"): its ids and seq, its slice, the
 * computation as the document wrote it, each input edge's shape once
 * however many ops read it, and one send per `input` op that reads one of
 * its outputs, in plan order. */
static void test_payload_text(void **state)
{
    fixture_t *f = *state;
    int64_t job = support_store_submit(f->st, edges_doc, wide, 1);
    assert_int_equal(allocate_job(f, job), 0);
    json_t *doc = json_loads(edges_doc, 0, NULL), *p0 = payload_of(f, job, 0),
           *p1 = payload_of(f, job, 1);
    json_t *want0 = json_pack("{s:I, s:i, s:i, s:s, s:[i,i], s:O, s:{}, s:["
                              "{s:s, s:i, s:i, s:s}, {s:s, s:i, s:i, s:s}, {s:s, s:i, s:i, s:s}]}",
                              "job", (json_int_t)job, "attempt", 0, "comp", 0, "slice", "a",
                              "slice_shape", 1, 2, "computation",
                              json_array_get(json_object_get(doc, "computations"), 0),
                              "input_shapes", "sends",
                              "value", "x", "comp", 1, "op", 0, "slice", "a",
                              "value", "x", "comp", 1, "op", 1, "slice", "a",
                              "value", "y", "comp", 1, "op", 2, "slice", "a");
    assert_true(json_is_integer(json_object_get(p0, "seq")));
    json_int_t seq0 = json_integer_value(json_object_get(p0, "seq"));
    json_object_del(p0, "seq");     /* drawn from the island: checked against c1's */
    assert_true(json_equal(p0, want0));
    assert_int_equal(json_integer_value(json_object_get(p1, "seq")), seq0 + 1);
    json_t *shapes = json_object_get(p1, "input_shapes");
    assert_int_equal(json_object_size(shapes), 2);
    json_t *want_shapes = json_pack("{s:[i], s:[i]}", "c0.x", 3, "c0.y", 3);
    assert_true(json_equal(shapes, want_shapes));
    assert_int_equal(json_array_size(json_object_get(p1, "sends")), 0);
    assert_true(json_equal(json_object_get(p1, "computation"),
                           json_array_get(json_object_get(doc, "computations"), 1)));
    json_decref(want_shapes);
    json_decref(want0);
    json_decref(p1);
    json_decref(p0);
    json_decref(doc);
}

/* A job whose first chunk is small (SCHED_CHUNK_INLINE_TASKS host tasks
 * at most) gets it with its allocation even when its pass's time is up:
 * no pass of its own for it. */
static void test_small_first_chunk_at_once(void **state)
{
    fixture_t *f = *state;
    int64_t small = support_store_submit(f->st, small_doc, wide, 1);
    sched_cfg.chunk_us = 1;
    sched_dispatch_pass(util_mono_us() - 1000);
    assert_int_equal(allocate_job(f, small), 0);        /* nothing left to dispatch */
    sched_dispatch_pass(0);
    sched_cfg.chunk_us = INT64_MAX / 2;
    assert_int_equal(comp_rows_of(f, small, 0).n, 4);
    assert_int_equal(comp_rows_of(f, small, 1).n, 4);
}

/* Submits doc on wide, allocates it (its first chunk is all of it) and
 * checks its runs (runs_of) are `want`. The job's id. */
static int64_t expect_runs(fixture_t *f, const char *doc, const char *want)
{
    int64_t job = support_store_submit(f->st, doc, wide, 1);
    char runs[256];
    assert_int_equal(allocate_job(f, job), 0);
    runs_of(f, job, runs, sizeof runs);
    assert_string_equal(runs, want);
    return job;
}

/* A run is a row of computations on one slice: a chain that leaves the
 * slice ends its run there, and one that comes back starts another; each
 * worker of a gets one row per run, b's workers one for c3. Sequence
 * numbers follow the chain: 1-3, 4, 5-6. */
static void test_runs_end_at_slice_changes(void **state)
{
    fixture_t *f = *state;
    int64_t job = expect_runs(f, two_slice_doc, "0:3@1 3:1@4 4:2@5");
    assert_int_equal(comp_rows_of(f, job, 1).n, 2);     /* a: two workers */
    assert_int_equal(comp_rows_of(f, job, 3).n, 2);     /* b: two others */
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM host_tasks"), 6);
}

/* A users' program (a run computation, DESIGN Part F) goes alone: its
 * processes start and report apart. The ops computations around it form
 * runs of their own. */
static const char program_doc[] =
    "{\"name\":\"prog\",\"slices\":{\"s\":{\"shape\":[1,2]}},\"computations\":["
#define FILL_STEP(k)                                                                          \
    "{\"name\":\"c" #k "\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"  \
    "\"value\":1.0}],\"outputs\":[\"x\"]}"
    FILL_STEP(0) "," FILL_STEP(1) ",{\"name\":\"c2\",\"slice\":\"s\",\"run\":{\"command\":"
    "[\"/bin/true\"]},\"outputs\":[]}," FILL_STEP(3) "," FILL_STEP(4) "]}";
#undef FILL_STEP

static void test_program_runs_alone(void **state)
{
    expect_runs(*state, program_doc, "0:2@1 2:1@3 3:2@4");
}

/* A run covers consecutive computation indexes (its row names the first
 * and a count): a chain whose document lists its computations out of
 * their order (c0 reads c1, c2 reads c0) goes out one computation a row. */
static const char reversed_doc[] =
    "{\"name\":\"rev\",\"slices\":{\"s\":{\"shape\":[1,2]}},\"computations\":["
    "{\"name\":\"c0\",\"slice\":\"s\",\"ops\":[{\"op\":\"input\",\"out\":\"p\","
    "\"from\":\"c1.x\"},{\"op\":\"scale\",\"out\":\"x\",\"args\":[\"p\"],\"factor\":2.0}],"
    "\"outputs\":[\"x\"]},"
    "{\"name\":\"c1\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"
    "\"value\":1.0}],\"outputs\":[\"x\"]},"
    "{\"name\":\"c2\",\"slice\":\"s\",\"ops\":[{\"op\":\"input\",\"out\":\"p\","
    "\"from\":\"c0.x\"},{\"op\":\"scale\",\"out\":\"x\",\"args\":[\"p\"],\"factor\":2.0}],"
    "\"outputs\":[\"x\"]}]}";

static void test_runs_follow_indexes(void **state)
{
    expect_runs(*state, reversed_doc, "0:1@2 1:1@1 2:1@3");
}

/* A chain of 40 computations on [1,3] of wide: 3 host tasks each, so a
 * chunk's 32 host tasks end inside a computation. None is split between
 * chunks (only one that alone fills a chunk is): the chunks hold 10, 10
 * and 20 whole computations (30, then at least SCHED_CHUNK_FIRST_TASKS,
 * then as many as written so far), each one run per worker, and no
 * computation goes out as rows of its own. */
static void test_chunks_keep_computations_whole(void **state)
{
    fixture_t *f = *state;
    char doc[16384], runs[256];
    int len = snprintf(doc, sizeof doc, "{\"name\":\"c3\",\"slices\":{\"s\":{\"shape\":"
                       "[1,3]}},\"computations\":[{\"name\":\"c0\",\"slice\":\"s\","
                       "\"ops\":[{\"op\":\"fill\",\"out\":\"x\",\"shape\":[],"
                       "\"value\":1.0}],\"outputs\":[\"x\"]}");
    for (int c = 1; c < 40; c++)
        len += snprintf(doc + len, sizeof doc - (size_t)len,
                        ",{\"name\":\"c%d\",\"slice\":\"s\",\"ops\":[{\"op\":\"input\","
                        "\"out\":\"p\",\"from\":\"c%d.x\"},{\"op\":\"scale\",\"out\":"
                        "\"x\",\"args\":[\"p\"],\"factor\":2.0}],\"outputs\":[\"x\"]}",
                        c, c - 1);
    snprintf(doc + len, sizeof doc - (size_t)len, "]}");
    int64_t job = support_store_submit(f->st, doc, wide, 1);
    int wrote = 0;
    assert_int_equal(allocate_job(f, job), 1);
    assert_int_equal(more(f, &wrote), 1);
    assert_int_equal(more(f, &wrote), 0);
    runs_of(f, job, runs, sizeof runs);
    assert_string_equal(runs, "0:10@1 10:10@11 20:20@21");
    assert_int_equal(support_store_int(f->st, "SELECT COUNT(*) FROM host_tasks"), 9);
}

/* Two jobs in mid-dispatch and time for one chunk per pass (a chunk may
 * take 1 µs): each pass advances one job, the one after the job the last
 * pass served, so both go on in turn; the one left over counts as left. */
/* Two half-island jobs, a then b, allocated b first: each in mid-dispatch
 * with the first 32 of its first computation's 64 host tasks. */
static void two_halves(fixture_t *f, int64_t *a, int64_t *b)
{
    *a = support_store_submit(f->st, half_doc, wide, 1);
    *b = support_store_submit(f->st, half_doc, wide, 1);
    assert_int_equal(allocate_job(f, *b), 1);
    assert_int_equal(allocate_job(f, *a), 1);
    assert_int_equal(comp_rows_of(f, *a, 0).n, 32);
    assert_int_equal(comp_rows_of(f, *b, 0).n, 32);
}

static void test_pass_time_shared_in_turn(void **state)
{
    fixture_t *f = *state;
    int wrote = 0;
    int64_t a, b;
    two_halves(f, &a, &b);
    sched_cfg.chunk_us = 1;
    assert_int_equal(more(f, &wrote), 2);
    assert_int_equal(wrote, 1);
    assert_int_equal(comp_rows_of(f, a, 0).n, 64);
    assert_int_equal(comp_rows_of(f, b, 0).n, 32);
    assert_int_equal(more(f, &wrote), 2);
    assert_int_equal(comp_rows_of(f, b, 0).n, 64);
    assert_int_equal(comp_rows_of(f, a, 1).n, 0);
    assert_int_equal(more(f, &wrote), 2);
    assert_int_equal(comp_rows_of(f, a, 1).n, 32);
    assert_int_equal(comp_rows_of(f, b, 1).n, 0);
}

/* After a restart every job in mid-dispatch compiles in the same pass, and
 * compiling one may grow the plans' array under the entries got before it
 * (64 entries, then 128): each job still gets its next chunk from its own
 * plan. (Read through a stale entry, this is a use after free: the
 * sanitizer build stops on it.) */
static void test_plans_compiled_together(void **state)
{
    fixture_t *f = *state;
    int wrote = 0;
    int64_t a, b;
    two_halves(f, &a, &b);
    sched_plans_free_all();             /* as a restarted atolld: no entry yet */
    assert_non_null(sched_plan_get(f->st, f->job));
    for (int k = 0; k < 62; k++)        /* 63 entries: a's makes 64, b's grows them */
        assert_non_null(sched_plan_get(f->st, support_store_submit(f->st, small_doc, wide, 1)));
    assert_null(sched_plan_find(a));
    assert_int_equal(more(f, &wrote), 2);
    assert_int_equal(wrote, 2);
    assert_int_equal(comp_rows_of(f, a, 0).n, 64);
    assert_int_equal(comp_rows_of(f, b, 0).n, 64);
}

/* A position whose computation has every host task written already was
 * not written by this scheduler: the job fails rather than write twice. */
static void test_written_position_fails_job(void **state)
{
    fixture_t *f = *state;
    int wrote = 0;
    assert_int_equal(allocate(f), 1);
    assert_int_equal(more(f, &wrote), 1);
    assert_int_equal(more(f, &wrote), 1);
    expect_rows(f, 128, 0);
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE jobs SET dispatch_next = 0 WHERE id = %lld",
             (long long)f->job);
    corrupt_then_expect_failed(f, sql);
    assert_int_equal(comp_rows(f, 0).n, 128);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chunks_double, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequential_writes_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sequential_later_comps_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chain_chunks_are_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancelled_job_not_continued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_requeued_job_not_continued, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unreadable_allocation_fails_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_position_off_plan_fails_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_off_island_fails_job, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gang_split_across_passes, setup_wide, teardown),
        cmocka_unit_test_setup_teardown(test_written_position_fails_job, setup_wide, teardown),
        cmocka_unit_test_setup_teardown(test_chunks_bounded_by_time, setup_wide, teardown),
        cmocka_unit_test_setup_teardown(test_first_chunk_waits_for_next_pass, setup_wide,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_small_first_chunk_at_once, setup_wide,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pass_time_shared_in_turn, setup_wide, teardown),
        cmocka_unit_test_setup_teardown(test_placing_waits_behind_chunks, setup_wide_idle,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_payload_text, setup_wide_idle, teardown),
        cmocka_unit_test_setup_teardown(test_plans_compiled_together, setup_wide, teardown),
        cmocka_unit_test_setup_teardown(test_runs_end_at_slice_changes, setup_wide, teardown),
        cmocka_unit_test_setup_teardown(test_program_runs_alone, setup_wide, teardown),
        cmocka_unit_test_setup_teardown(test_runs_follow_indexes, setup_wide, teardown),
        cmocka_unit_test_setup_teardown(test_chunks_keep_computations_whole, setup_wide,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_unplain_address_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
