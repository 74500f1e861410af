/* test_store_views.c - a job's summary, written as text (store_jobs.c:
 * job_summary_text), on a real SQLite file: it parses as JSON with the
 * stored values, strings escaped (quotes, backslashes, control characters,
 * non-ASCII kept as UTF-8), missing times null and set ones as RFC 3339;
 * the full object begins with the same fields; GET /v1/jobs's pages
 * (store_jobs_list_text) hold those summaries newest first, "next_before"
 * naming the last one shown while more are left; store_job_state reads the
 * state alone; store_job_counts counts jobs by state exactly, at a cost
 * that does not grow with the jobs ended; the admission histogram of
 * /metrics, kept as jobs are allocated, counts every allocation once and
 * never falls (requeues, deletes); a
 * page of any state but succeeded seeks its jobs whatever the history. */
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

#include "compiler.h"
#include "store.h"
#include "support_store.h"

static const island_desc_t islands[] = {{"west", {2, {2, 2, 0, 0}}}};

typedef struct fixture {
    support_store_t d;          /* first: support_store_teardown */
    store_t *st;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->st = support_store_open(&f->d, islands, 1);
    *state = f;
    return 0;
}

/* A job named "a \"q\" \\ é ✓" (the document's JSON escapes). */
#define ODD_NAME_DOC                                                                        \
    "{\"name\": \"a \\\"q\\\" \\\\ \\u00e9 \\u2713\", \"slices\": {\"s\": {\"shape\": [2]}},"     \
    " \"computations\": [{\"name\": \"a\", \"slice\": \"s\", \"ops\": [{\"op\": \"iota\","      \
    " \"out\": \"v\", \"shape\": [4]}], \"outputs\": [\"v\"]}]}"
#define ODD_NAME "a \"q\" \\ \xc3\xa9 \xe2\x9c\x93"

/* A view's text (len bytes, NUL-terminated; freed here), parsed strictly:
 * the whole text is one JSON value; never NULL. */
static json_t *parsed(char *text, size_t len, const char *what)
{
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    json_error_t e;
    json_t *j = json_loadb(text, len, 0, &e);
    if (!j)
        fail_msg("%s is not JSON (%s): %s", what, e.text, text);
    free(text);
    return j;
}

/* The summary of job id, parsed. */
static json_t *summary(store_t *st, int64_t id)
{
    size_t len = 0;
    char *text = store_job_summary_text(st, id, &len);
    return parsed(text, len, "summary");
}

static const char *str(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    assert_true(json_is_string(v));
    return json_string_value(v);
}

/* Strings escaped, nulls and times as the store holds them. */
static void test_summary_values(void **state)
{
    fixture_t *f = *state;
    int64_t id = support_store_submit(f->st, ODD_NAME_DOC, islands, 1);
    json_t *j = summary(f->st, id);
    assert_int_equal(json_integer_value(json_object_get(j, "id")), id);
    assert_string_equal(str(j, "name"), ODD_NAME);
    assert_string_equal(str(j, "state"), "queued");
    assert_int_equal(json_integer_value(json_object_get(j, "computations_total")), 1);
    assert_true(json_is_null(json_object_get(j, "error")));
    assert_true(json_is_null(json_object_get(j, "allocated_at")));
    assert_true(json_is_null(json_object_get(json_object_get(j, "times_us"), "allocated")));
    int64_t created = json_integer_value(json_object_get(json_object_get(j, "times_us"), "created"));
    assert_true(created > 0);
    /* created_at is the same instant in RFC 3339 UTC with microseconds. */
    const char *at = str(j, "created_at");
    assert_int_equal(strlen(at), strlen("2026-12-01T08:22:07.879863Z"));
    char us[8];
    snprintf(us, sizeof us, "%06lld", (long long)(created % 1000000));
    assert_memory_equal(at + 20, us, 6);
    assert_true(json_is_false(json_object_get(j, "preemptible")));
    assert_string_equal(str(j, "sharing"), "exclusive");
    json_decref(j);

    /* Control characters and quotes in the store's own text; set times,
     * a preemptible shared job. */
    support_store_write(f->st, "UPDATE jobs SET pending_reason = 'line1' || char(10) || 'tab'"
                               " || char(9) || 'bell' || char(7), error = 'he said \"no\" \\ ok',"
                               " allocated_at = 1796113327879863, preemptible = 1, shared = 1");
    j = summary(f->st, id);
    assert_string_equal(str(j, "pending_reason"), "line1\ntab\tbell\a");
    assert_string_equal(str(j, "error"), "he said \"no\" \\ ok");
    assert_string_equal(str(j, "allocated_at"), "2026-12-01T08:22:07.879863Z");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "times_us"),
                                                        "allocated")),
                     1796113327879863LL);
    assert_true(json_is_true(json_object_get(j, "preemptible")));
    assert_string_equal(str(j, "sharing"), "shared");
    json_decref(j);

    size_t len = 0;
    assert_null(store_job_summary_text(f->st, id + 1, &len));
    char st[16];
    assert_int_equal(store_job_state(f->st, id, st), STORE_OK);
    assert_string_equal(st, "queued");
    assert_int_equal(store_job_state(f->st, id + 1, st), STORE_NOTFOUND);
}

/* The full object is the summary plus the job's parts. */
static void test_full_object_begins_with_summary(void **state)
{
    fixture_t *f = *state;
    int64_t id = support_store_submit(f->st, ODD_NAME_DOC, islands, 1);
    json_t *s = summary(f->st, id), *full = store_job_json(f->st, id);
    assert_non_null(full);
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
    {
        if (!json_equal(v, json_object_get(full, k)))
            fail_msg("the full object's \"%s\" differs from the summary's", k);
    }
    assert_int_equal(json_object_size(full), json_object_size(s) + 4);
    assert_true(json_is_array(json_object_get(full, "computations")));
    assert_true(json_is_object(json_object_get(full, "slices")));
    assert_true(json_is_array(json_object_get(full, "events")));
    assert_true(json_is_object(json_object_get(full, "document")));
    json_decref(s);
    json_decref(full);
}

/* One page of the list, parsed. */
static json_t *page(store_t *st, const char *state, int64_t before, int limit)
{
    size_t len = 0;
    char *text = store_jobs_list_text(st, state, before, limit, 0, &len);
    return parsed(text, len, "list");
}

/* The ids of a page's jobs, newest first, as "5,4"; *next its
 * next_before (0: null). */
static void page_ids(const json_t *p, char *out, size_t cap, int64_t *next)
{
    size_t i, n = 0;
    json_t *v;
    out[0] = '\0';
    json_array_foreach(json_object_get(p, "jobs"), i, v)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", i ? "," : "",
                              (long long)json_integer_value(json_object_get(v, "id")));
    const json_t *nb = json_object_get(p, "next_before");
    assert_true(json_is_null(nb) || json_is_integer(nb));
    *next = json_is_integer(nb) ? json_integer_value(nb) : 0;
}

static void test_list_pages(void **state)
{
    fixture_t *f = *state;
    int64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    assert_int_equal(ids[4], ids[0] + 4);
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE jobs SET state = 'cancelled' WHERE id = %lld",
             (long long)ids[1]);
    support_store_write(f->st, sql);
    char got[64], want[64];
    int64_t next = 0;
    json_t *p = page(f->st, NULL, 0, 2);
    page_ids(p, got, sizeof got, &next);
    snprintf(want, sizeof want, "%lld,%lld", (long long)ids[4], (long long)ids[3]);
    assert_string_equal(got, want);
    assert_int_equal(next, ids[3]);
    /* Each entry is the job's summary. */
    json_t *s = summary(f->st, ids[4]);
    assert_true(json_equal(json_array_get(json_object_get(p, "jobs"), 0), s));
    json_decref(s);
    json_decref(p);
    p = page(f->st, NULL, next, 2);
    page_ids(p, got, sizeof got, &next);
    snprintf(want, sizeof want, "%lld,%lld", (long long)ids[2], (long long)ids[1]);
    assert_string_equal(got, want);
    assert_int_equal(next, ids[1]);
    json_decref(p);
    p = page(f->st, NULL, next, 2);
    page_ids(p, got, sizeof got, &next);
    snprintf(want, sizeof want, "%lld", (long long)ids[0]);
    assert_string_equal(got, want);
    assert_int_equal(next, 0);
    json_decref(p);
    p = page(f->st, "cancelled", 0, 10);
    page_ids(p, got, sizeof got, &next);
    snprintf(want, sizeof want, "%lld", (long long)ids[1]);
    assert_string_equal(got, want);
    json_decref(p);
    p = page(f->st, "failed", 0, 10);
    page_ids(p, got, sizeof got, &next);
    assert_string_equal(got, "");
    assert_int_equal(next, 0);
    json_decref(p);
}

/* store_job_counts against a count of the jobs table itself, state by
 * state. */
static void assert_counts_exact(store_t *st)
{
    int64_t got[STORE_JOB_NSTATES];
    assert_int_equal(store_job_counts(st, got), 0);
    for (int i = 0; i < STORE_JOB_NSTATES; i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM jobs WHERE state = '%s'",
                 store_job_states[i]);
        int64_t want = support_store_int(st, sql);
        if (got[i] != want)
            fail_msg("%s: %lld counted, %lld in jobs", store_job_states[i], (long long)got[i],
                     (long long)want);
    }
}

static void set_state(store_t *st, int64_t id, const char *state)
{
    char sql[96];
    snprintf(sql, sizeof sql, "UPDATE jobs SET state = '%s' WHERE id = %lld", state,
             (long long)id);
    support_store_write(st, sql);
}

/* The ended states' counts are kept by triggers (schema 035) through every
 * change of a job's state, a cancel through the API included, and through
 * an insert or delete of an ended job; live states are counted. */
static void test_job_counts_follow_states(void **state)
{
    fixture_t *f = *state;
    int64_t ids[6];
    for (int i = 0; i < 6; i++)
        ids[i] = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    assert_counts_exact(f->st);
    char was[16];
    assert_int_equal(store_job_cancel(f->st, ids[0], was), STORE_OK);
    assert_counts_exact(f->st);
    assert_int_equal(support_store_int(f->st, "SELECT n FROM job_counts"
                                              " WHERE state = 'cancelled'"), 1);
    set_state(f->st, ids[1], "allocated");
    set_state(f->st, ids[2], "running");
    set_state(f->st, ids[3], "running");
    set_state(f->st, ids[3], "succeeded");
    set_state(f->st, ids[4], "failed");
    assert_counts_exact(f->st);
    set_state(f->st, ids[2], "queued");            /* a requeue */
    set_state(f->st, ids[4], "succeeded");         /* ended to ended: both rows move */
    set_state(f->st, ids[5], "queued");            /* no change: no count moves */
    assert_counts_exact(f->st);
    set_state(f->st, ids[0], "queued");            /* no code path revives a job; */
    assert_counts_exact(f->st);                    /* if one did, it would count */
    set_state(f->st, ids[0], "cancelled");
    support_store_write(f->st, "INSERT INTO jobs (name, state, priority, max_retries,"
                               " comps_total, created_at) VALUES ('ended', 'failed', 0, 0, 1, 1)");
    assert_counts_exact(f->st);
    /* No code path deletes a job; if one did, its count goes with it. */
    assert_int_equal(sqlite3_exec(store_db(f->st), "PRAGMA foreign_keys=OFF", NULL, NULL, NULL),
                     SQLITE_OK);
    char sql[64];
    snprintf(sql, sizeof sql, "DELETE FROM jobs WHERE id = %lld", (long long)ids[3]);
    support_store_write(f->st, sql);
    assert_int_equal(sqlite3_exec(store_db(f->st), "PRAGMA foreign_keys=ON", NULL, NULL, NULL),
                     SQLITE_OK);
    assert_counts_exact(f->st);
    int64_t c[STORE_JOB_NSTATES];
    assert_int_equal(store_job_counts(f->st, c), 0);
    assert_int_equal(c[0] + c[1] + c[2] + c[3] + c[4] + c[5], 6);
}

/* Writes 5,000 ended jobs straight into jobs, their state the SQL
 * expression `state_sql` of i (1..5000). */
static void add_ended_jobs(store_t *st, const char *state_sql)
{
    char sql[512];
    snprintf(sql, sizeof sql, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
             " WHERE i < 5000) INSERT INTO jobs (name, state, priority, max_retries,"
             " comps_total, created_at) SELECT 'ended', %s, 0, 0, 1, i FROM n", state_sql);
    support_store_write(st, sql);
}

/* SQLite VM instructions of one store_job_counts. */
static long counts_cost(store_t *st)
{
    long steps;
    int64_t c[STORE_JOB_NSTATES];
    support_store_vm_meter_on(st, &steps);
    int rc = store_job_counts(st, c);
    support_store_vm_meter_off(st);
    assert_int_equal(rc, 0);
    return steps;
}

/* Counting jobs reads the live ones, not every job ever ended: the
 * sampler counts them every second, and a loop of tiny jobs ends a
 * million in minutes. */
static void test_job_counts_cost_flat_in_ended(void **state)
{
    fixture_t *f = *state;
    int64_t ids[2];
    for (int i = 0; i < 2; i++)
        ids[i] = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    set_state(f->st, ids[1], "succeeded");
    long small = counts_cost(f->st);
    add_ended_jobs(f->st, "CASE i % 3 WHEN 0 THEN 'succeeded' WHEN 1 THEN 'failed'"
                          " ELSE 'cancelled' END");
    long big = counts_cost(f->st);
    assert_counts_exact(f->st);
    print_message("job counts: %ld VM instructions with 1 ended job, %ld with 5001\n", small, big);
    if (big > small + small / 2)
        fail_msg("counting jobs costs %ld VM instructions with 5001 ended jobs, %ld with 1",
                 big, small);
}

/* SQLite VM instructions of one page of `state`, whose ids (newest first)
 * go to got. */
static long list_cost(store_t *st, const char *state, char *got, size_t cap)
{
    long steps;
    int64_t next = 0;
    size_t len = 0;
    support_store_vm_meter_on(st, &steps);
    char *text = store_jobs_list_text(st, state, 0, 10, 0, &len);
    support_store_vm_meter_off(st);
    json_t *p = parsed(text, len, "list");
    page_ids(p, got, cap, &next);
    json_decref(p);
    return steps;
}

/* A page of queued or failed jobs seeks them (jobs_unsucceeded, schema
 * 036) rather than read the succeeded history newest first: the
 * dashboard asks for the queue on every refresh. */
static void test_list_cost_flat_in_succeeded(void **state)
{
    fixture_t *f = *state;
    int64_t ids[2];
    for (int i = 0; i < 2; i++)
        ids[i] = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    set_state(f->st, ids[1], "failed");
    char got[64], want[64];
    long queued_small = list_cost(f->st, "queued", got, sizeof got);
    long failed_small = list_cost(f->st, "failed", got, sizeof got);
    add_ended_jobs(f->st, "'succeeded'");
    long queued_big = list_cost(f->st, "queued", got, sizeof got);
    snprintf(want, sizeof want, "%lld", (long long)ids[0]);
    assert_string_equal(got, want);
    long failed_big = list_cost(f->st, "failed", got, sizeof got);
    snprintf(want, sizeof want, "%lld", (long long)ids[1]);
    assert_string_equal(got, want);
    print_message("a page: queued %ld -> %ld, failed %ld -> %ld VM instructions (1 -> 5001"
                  " succeeded jobs)\n", queued_small, queued_big, failed_small, failed_big);
    if (queued_big > queued_small + queued_small / 2 || failed_big > failed_small + failed_small / 2)
        fail_msg("a page reads the succeeded history: queued %ld -> %ld, failed %ld -> %ld",
                 queued_small, queued_big, failed_small, failed_big);
    /* Succeeded jobs page the table: newest first, as before. */
    list_cost(f->st, "succeeded", got, sizeof got);
    int64_t newest = support_store_int(f->st, "SELECT MAX(id) FROM jobs");
    snprintf(want, sizeof want, "%lld,", (long long)newest);
    assert_int_equal(strncmp(got, want, strlen(want)), 0);
}

/* The admission histogram's lines of /metrics for admissions of these
 * latencies (us), in the format and at the bounds the scan of every job
 * wrote them before schema 035: cumulative buckets, the sum and count. */
static char *admission_expected(const int64_t *lat_us, int n)
{
    static const double le[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60, 300};
    enum { NB = sizeof le / sizeof le[0] };
    int64_t counts[NB] = {0};
    double sum = 0;
    for (int j = 0; j < n; j++) {
        double v = (double)lat_us[j] / 1e6;
        for (int i = 0; i < NB; i++)
            counts[i] += v <= le[i];
        sum += v;
    }
    static char out[2048];
    size_t len = 0;
    for (int i = 0; i < NB; i++)
        len += (size_t)snprintf(out + len, sizeof out - len,
                                "atoll_admission_latency_seconds_bucket{le=\"%g\"} %ld\n", le[i],
                                (long)counts[i]);
    snprintf(out + len, sizeof out - len, "atoll_admission_latency_seconds_bucket{le=\"+Inf\"}"
             " %ld\natoll_admission_latency_seconds_sum %.6f\n"
             "atoll_admission_latency_seconds_count %ld\n", (long)n, sum, (long)n);
    return out;
}

/* The same lines of store_metrics_text, in one string. */
static void admission_kept(store_t *st, char *out, size_t cap)
{
    char *text = store_metrics_text(st, 0);
    assert_non_null(text);
    size_t len = 0;
    out[0] = '\0';
    for (char *line = text; *line;) {
        char *nl = strchr(line, '\n');
        size_t l = nl ? (size_t)(nl - line) + 1 : strlen(line);
        if (strncmp(line, "atoll_admission_latency_seconds", 31) == 0 && len + l < cap) {
            memcpy(out + len, line, l);
            out[len += l] = '\0';
        }
        line += l;
    }
    free(text);
}

static void assert_admissions(store_t *st, const int64_t *lat_us, int n)
{
    char kept[2048];
    admission_kept(st, kept, sizeof kept);
    assert_string_equal(kept, admission_expected(lat_us, n));
}

static void set_allocated(store_t *st, int64_t id, const char *latency_us)
{
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE jobs SET allocated_at = created_at + %s WHERE id = %lld",
             latency_us, (long long)id);
    support_store_write(st, sql);
}

/* The admission histogram kept by triggers counts every allocation once,
 * exactly (latencies on and beside the bounds, negative ones from a clock
 * step, past the last bound; an insert of an allocated job), and never
 * falls, as a Prometheus histogram must not: a requeue (allocated_at back
 * to NULL) leaves it and the next allocation adds one (schema 038), so
 * does an allocation over another; a change of created_at leaves it; a
 * deleted job's admissions stay (schema 037, retention). */
static void test_admissions_counted_once(void **state)
{
    fixture_t *f = *state;
    static const char *const lat[] = {"0", "1000", "1001", "-5", "60000000", "400000000",
                                      "4999", "5000"};
    enum { NJ = sizeof lat / sizeof lat[0] };
    int64_t ids[NJ], want[NJ + 3];
    int n = 0;
    for (int i = 0; i < NJ; i++)
        ids[i] = support_store_submit(f->st, SUPPORT_STORE_JOB_DOC, islands, 1);
    assert_admissions(f->st, want, n);
    for (int i = 0; i < NJ; i++) {
        set_allocated(f->st, ids[i], lat[i]);
        want[n++] = strtoll(lat[i], NULL, 10);
    }
    assert_admissions(f->st, want, n);
    set_allocated(f->st, ids[2], "NULL");          /* requeued: its admission stays */
    assert_admissions(f->st, want, n);
    set_allocated(f->st, ids[2], "3000");          /* and its next one counts */
    want[n++] = 3000;
    set_allocated(f->st, ids[3], "250000");        /* allocated over another */
    want[n++] = 250000;
    assert_admissions(f->st, want, n);
    char sql[160];
    snprintf(sql, sizeof sql, "UPDATE jobs SET created_at = created_at - 7000000 WHERE id = %lld",
             (long long)ids[4]);
    support_store_write(f->st, sql);
    assert_admissions(f->st, want, n);
    support_store_write(f->st, "INSERT INTO jobs (name, state, priority, max_retries,"
                               " comps_total, created_at, allocated_at) VALUES"
                               " ('ended', 'succeeded', 0, 0, 1, 10, 20010)");
    want[n++] = 20000;
    assert_admissions(f->st, want, n);
    assert_int_equal(sqlite3_exec(store_db(f->st), "PRAGMA foreign_keys=OFF", NULL, NULL, NULL),
                     SQLITE_OK);
    snprintf(sql, sizeof sql, "DELETE FROM jobs WHERE id = %lld", (long long)ids[1]);
    support_store_write(f->st, sql);
    assert_int_equal(sqlite3_exec(store_db(f->st), "PRAGMA foreign_keys=ON", NULL, NULL, NULL),
                     SQLITE_OK);
    assert_admissions(f->st, want, n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_summary_values, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_full_object_begins_with_summary, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_list_pages, setup, support_store_teardown),
        cmocka_unit_test_setup_teardown(test_job_counts_follow_states, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_job_counts_cost_flat_in_ended, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_admissions_counted_once, setup,
                                        support_store_teardown),
        cmocka_unit_test_setup_teardown(test_list_cost_flat_in_succeeded, setup,
                                        support_store_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
