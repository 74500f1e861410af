/* test_durable.c - group commit: no acknowledgement before the disk has it.
 *
 * With the default --durability group, every 201 of POST /v1/jobs and
 * every 200 of a cancel (DELETE) waits for an fdatasync of the WAL that began after
 * its commit. On one connection requests are sequential, so N submits need
 * N sync rounds at least: the counters in /metrics
 * (atoll_store_sync_waits_total, atoll_store_sync_rounds_total) must move
 * by that much. Deleting the wait from a handler, or letting a round that
 * began before a commit cover it, fails here. A request waits for its
 * round parked, holding no HTTP thread (store_sync.c runs the rounds on a
 * thread of its own): with its round held open (the group's atolld runs
 * with tests/integration/shim_syncgate.c preloaded) a submit is stored and
 * not answered, and once the round ends it is resumed (in a cluster with
 * nothing else that parks) and answered 201. With
 * --durability none no round runs at all, and a bad mode is refused at
 * start (exit 2, naming the flag).
 *
 * The two histograms in /metrics account for every round and every wait:
 * atoll_store_sync_seconds holds one entry per round, and
 * atoll_http_durable_wait_seconds one per acknowledged write, and since a
 * round's asker waited from before it began to after it ended, the waits'
 * sum is at least the rounds'. With --durability none both stay empty.
 *
 * atolld owns its database: a second atolld on the same file exits at once
 * (1), naming why, and the first goes on; an admin's GET /v1/admin/backup
 * is the online backup instead, a whole SQLite file holding every job
 * accepted before it.
 *
 * A disk that refuses a round (fdatasync fails: an atolld of its own with
 * tests/integration/shim_syncgate.c preloaded) gets the job's client a
 * 503 naming the job and the retry, and every later acknowledged write a
 * 503 too until atolld is restarted (the kernel may have dropped the
 * pages); nothing stored is lost: after the restart a retry with the same
 * Idempotency-Key answers the job stored before the refusal (200).
 *
 * Cluster: cold=2x2 with no worker (jobs stay queued; acceptance only). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "support_faults.h"

#define SUBMITS 6

static const char doc_q[] =
    "{'name':'d','slices':{'s':{'shape':[1,1],'island':'cold'}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";

/* While this file exists, the group's atolld holds its sync rounds open
 * (shim_syncgate.c). */
static char sync_gate[HX_PATH_MAX];

static int group_setup(void **state)
{
    (void)state;
    static const itest_island_t isl[] = {{"cold=2x2", "cold", 0, 0, NULL}};
    snprintf(sync_gate, sizeof sync_gate, "/tmp/atoll-syncgate-%ld", (long)getpid());
    int rc = fx_syncgate_env(1, sync_gate, NULL) == 0 ? itest_start(isl, 1) : -1;
    fx_syncgate_env(0, NULL, NULL);
    return rc;
}

static int group_teardown(void **state)
{
    unlink(sync_gate);
    return itest_group_teardown(state);
}

/* The sync figures of one scrape of /metrics: rounds_total, waits_total,
 * and the _count and _sum of the round and wait histograms (-1: missing). */
enum { SF_ROUNDS, SF_WAITS, SF_SYNC_N, SF_SYNC_S, SF_WAIT_N, SF_WAIT_S, SF_N };
static void sync_figures(hx_client_t *cl, double f[SF_N])
{
    static const char *const names[SF_N] = {
        "atoll_store_sync_rounds_total",          "atoll_store_sync_waits_total",
        "atoll_store_sync_seconds_count",         "atoll_store_sync_seconds_sum",
        "atoll_http_durable_wait_seconds_count",  "atoll_http_durable_wait_seconds_sum"};
    hx_resp_t r = {0};
    int ok = hx_request(cl, "GET", "/metrics", NULL, 0, &r) == 0 && r.status == 200 && r.body;
    for (int i = 0; i < SF_N; i++)
        f[i] = ok ? hx_metric_in(r.body, names[i]) : -1;
    hx_resp_clear(&r);
}

static void test_each_ack_waits_for_its_own_round(void **state)
{
    (void)state;
    double f0[SF_N], f1[SF_N];
    sync_figures(&itest_client, f0);
    double r0 = hx_metric(&itest_client, "atoll_store_sync_rounds_total");
    double w0 = hx_metric(&itest_client, "atoll_store_sync_waits_total");
    T_CHECK(r0 >= 0 && w0 >= 0, "sync counters missing from /metrics");
    int64_t last = 0;
    for (int i = 0; i < SUBMITS; i++)
        last = itest_submit(doc_q);
    double r1 = hx_metric(&itest_client, "atoll_store_sync_rounds_total");
    double w1 = hx_metric(&itest_client, "atoll_store_sync_waits_total");
    T_CHECK(w1 - w0 == SUBMITS, "%.0f acknowledged submits waited for a sync, expected %d",
            w1 - w0, SUBMITS);
    T_CHECK(r1 - r0 >= SUBMITS, "%.0f sync rounds for %d sequential submits", r1 - r0,
            SUBMITS);
    /* A submit whose round is held open is stored, not answered, and
     * parked (nothing else parks in this cluster): it is resumed once the
     * round ends. The gate is let go only once it parked: let go between
     * its request for a round and its parking, the round may end first,
     * and the handler then answers at once, as it should (under load this
     * test used to see that as "0 resumes"). */
    double p0 = hx_metric(&itest_client, "atoll_http_park_resumes_total");
    T_CHECK(p0 >= 0 && itest_touch(sync_gate) == 0, "cannot create %s", sync_gate);
    char *doc = hx_text_q(doc_q);
    hx_client_t cl;         /* its own: itest_client asks /metrics meanwhile */
    int ok = doc && hx_client_init(&cl, itest_cluster.url) == 0;
    itest_call_t held = {.cl = &cl, .method = "POST", .path = "/v1/jobs", .body = doc};
    int stored = ok && itest_call_start(&held) && itest_sync_waits_reach(w1 + 1) &&
                 itest_metric_reach("atoll_http_parked", 1);
    int unanswered = !atomic_load(&held.answered);
    unlink(sync_gate);
    itest_call_join(&held);
    double p1 = hx_metric(&itest_client, "atoll_http_park_resumes_total");
    if (ok)
        hx_client_cleanup(&cl);
    free(doc);
    T_CHECK(stored && unanswered, "a submit with its round held open: stored %d, unanswered %d",
            stored, unanswered);
    T_CHECK(held.status == 201 && p1 - p0 >= 1,
            "the held submit answered %ld after %.0f resumes, expected 201 after one",
            held.status, p1 - p0);
    w1 += 1;
    r1 = hx_metric(&itest_client, "atoll_store_sync_rounds_total");

    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, last);
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0 && r.status == 200,
            "cancel answered %ld", r.status);
    hx_resp_clear(&r);
    double r2 = hx_metric(&itest_client, "atoll_store_sync_rounds_total");
    double w2 = hx_metric(&itest_client, "atoll_store_sync_waits_total");
    T_CHECK(w2 - w1 == 1 && r2 - r1 >= 1, "cancel: %.0f waits, %.0f rounds", w2 - w1, r2 - r1);
    /* Nothing is pending now: every round and every wait is in its
     * histogram, and the waits (each round's asker among them) took at
     * least as long as the rounds. */
    sync_figures(&itest_client, f1);
    for (int i = 0; i < SF_N; i++)
        T_CHECK(f0[i] >= 0 && f1[i] >= 0, "sync figure %d missing from /metrics", i);
    double rounds = f1[SF_ROUNDS] - f0[SF_ROUNDS], waits = f1[SF_WAITS] - f0[SF_WAITS];
    T_CHECK(f1[SF_SYNC_N] - f0[SF_SYNC_N] == rounds && f1[SF_WAIT_N] - f0[SF_WAIT_N] == waits,
            "histograms: %.0f rounds and %.0f waits, counters %.0f and %.0f",
            f1[SF_SYNC_N] - f0[SF_SYNC_N], f1[SF_WAIT_N] - f0[SF_WAIT_N], rounds, waits);
    double sync_s = f1[SF_SYNC_S] - f0[SF_SYNC_S], wait_s = f1[SF_WAIT_S] - f0[SF_WAIT_S];
    T_CHECK(sync_s > 0 && wait_s >= sync_s, "rounds took %g s, the waits for them %g s", sync_s,
            wait_s);
}

static void test_none_runs_no_round(void **state)
{
    (void)state;
    hx_cluster_t c;
    static const char *const islands[] = {"cold=2x2"};
    static const char *const extra[] = {"--durability", "none", NULL};
    T_CHECK(hx_cluster_start_args(&c, islands, 1, extra) == 0, "atolld --durability none");
    hx_client_t cl;
    T_CHECK(hx_client_init(&cl, c.url) == 0, "client");
    char *doc = hx_text_q(doc_q);
    int64_t id = 0;
    int st = doc ? hx_job_submit(&cl, doc, &id, NULL) : -1;
    double f[SF_N];
    sync_figures(&cl, f);
    free(doc);
    hx_client_cleanup(&cl);
    int unclean = hx_cluster_stop(&c);
    T_CHECK(st == 201 && f[SF_ROUNDS] == 0, "submit %d, %.0f rounds with --durability none", st,
            f[SF_ROUNDS]);
    T_CHECK(f[SF_SYNC_N] == 0 && f[SF_WAIT_N] == 0,
            "--durability none: %.0f rounds and %.0f waits in the histograms", f[SF_SYNC_N],
            f[SF_WAIT_N]);
    T_CHECK(unclean == 0, "atolld did not stop cleanly");
}

static void test_bad_mode_refused(void **state)
{
    (void)state;
    char bin[HX_PATH_MAX], db[HX_PATH_MAX];
    snprintf(bin, sizeof bin, "%s/atolld", hx_bin_dir());
    snprintf(db, sizeof db, "%s/bad.db", itest_cluster.dir);
    char *argv[] = {bin, "--durability", "sometimes", "--db", db, "--listen", "127.0.0.1:0",
                    NULL};
    hx_proc_t p = {0};
    snprintf(p.name, sizeof p.name, "atolld-bad");
    snprintf(p.log_path, sizeof p.log_path, "%s/bad.err", itest_cluster.dir);
    T_CHECK(hx_proc_spawn(&p, argv, 0) == 0, "cannot start %s", bin);
    int st = hx_proc_stop(&p, 0, 10000);
    T_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d, expected 2",
            st);
    FILE *f = fopen(p.log_path, "r");
    char line[512] = "";
    size_t n = f ? fread(line, 1, sizeof line - 1, f) : 0;
    line[n] = '\0';
    if (f)
        fclose(f);
    T_CHECK(strstr(line, "--durability") != NULL, "stderr does not name the flag: %s", line);
}

/* The whole stderr of a stopped process (at most cap - 1 bytes). */
static void read_log(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
}

static void test_second_controller_refused(void **state)
{
    (void)state;
    char bin[HX_PATH_MAX], db[HX_PATH_MAX];
    snprintf(bin, sizeof bin, "%s/atolld", hx_bin_dir());
    snprintf(db, sizeof db, "%s/atoll.db", itest_cluster.dir);
    char *argv[] = {bin, "--db", db, "--listen", "127.0.0.1:0", "--island", "cold=2x2", NULL};
    hx_proc_t p = {0};
    snprintf(p.name, sizeof p.name, "atolld-second");
    snprintf(p.log_path, sizeof p.log_path, "%s/second.err", itest_cluster.dir);
    T_CHECK(hx_proc_spawn(&p, argv, 0) == 0, "cannot start %s", bin);
    int st = hx_proc_stop(&p, 0, 10000);     /* waits for it to exit by itself */
    char log[2048];
    read_log(p.log_path, log, sizeof log);
    T_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 1,
            "a second atolld on the same database: status %d, expected exit 1; stderr: %s", st,
            log);
    T_CHECK(strstr(log, "in use by another process") != NULL, "stderr does not say why: %s",
            log);
    T_CHECK(itest_submit(doc_q) > 0, "the first atolld stopped accepting jobs");
}

/* Rows of the one-integer query sql on the SQLite file path; -1 when it
 * does not open or answer. */
static long long copy_int(const char *path, const char *sql, char *text, size_t cap)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    long long v = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW) {
        v = sqlite3_column_int64(s, 0);
        if (text)
            snprintf(text, cap, "%s", (const char *)sqlite3_column_text(s, 0));
    }
    sqlite3_finalize(s);
    sqlite3_close(db);
    return v;
}

static void test_backup_holds_every_accepted_job(void **state)
{
    (void)state;
    int64_t last = 0;
    for (int i = 0; i < 3; i++)
        last = itest_submit(doc_q);
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/v1/admin/backup", NULL, 0, &r) == 0 &&
                r.status == 200, "GET /v1/admin/backup: %ld", r.status);
    int typed = strcmp(r.ctype, "application/vnd.sqlite3") == 0;
    char path[HX_PATH_MAX];
    snprintf(path, sizeof path, "%s/backup.db", itest_cluster.dir);
    FILE *f = fopen(path, "wb");
    size_t wrote = f ? fwrite(r.body, 1, r.len, f) : 0;
    if (f)
        fclose(f);
    size_t len = r.len;
    hx_resp_clear(&r);
    T_CHECK(typed && wrote == len && len > 0, "backup: %zu bytes written of %zu, typed %d", wrote,
            len, typed);
    char ok[32] = "";
    copy_int(path, "PRAGMA integrity_check", ok, sizeof ok);
    long long newest = copy_int(path, "SELECT max(id) FROM jobs", NULL, 0);
    long long queued = copy_int(path, "SELECT count(*) FROM jobs WHERE state = 'queued'", NULL, 0);
    unlink(path);
    T_CHECK(strcmp(ok, "ok") == 0, "the copy's integrity check: '%s'", ok);
    T_CHECK(newest == last, "the copy's newest job is %lld, the last accepted %" PRId64, newest,
            last);
    T_CHECK(queued >= 3, "the copy holds %lld queued jobs, at least 3 expected", queued);
}

/* POST /v1/jobs doc_q with Idempotency-Key `key` on cl: the status, the
 * job id (200/201) and the problem's detail (else) into detail. */
static long submit_keyed(hx_client_t *cl, const char *key, int64_t *id, char *detail, size_t cap)
{
    char hdr[96], *doc = hx_text_q(doc_q);
    snprintf(hdr, sizeof hdr, "Idempotency-Key: %s", key);
    const char *const hdrs[] = {hdr, "Content-Type: application/json", NULL};
    hx_resp_t r;
    long status = doc && hx_request_h(cl, "POST", "/v1/jobs", doc, strlen(doc), hdrs, &r) == 0
                      ? r.status : 0;
    free(doc);
    *id = 0;
    detail[0] = '\0';
    if (status) {
        const char *d = json_string_value(json_object_get(r.json, "detail"));
        snprintf(detail, cap, "%s", d ? d : "");
        *id = json_integer_value(json_object_get(r.json, "id"));
        hx_resp_clear(&r);
    }
    return status;
}

static void test_refused_sync_answers_503_and_keeps_the_job(void **state)
{
    (void)state;
    static const char *const islands[] = {"cold=2x2"};
    char dir[HX_DIR_MAX], fail[HX_DIR_MAX + 16], url[HX_URL_MAX], detail[512];
    snprintf(dir, sizeof dir, "/tmp/atoll-eio-XXXXXX");
    T_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(fail, sizeof fail, "%s/sync-fail", dir);
    hx_proc_t p = {0};
    int port = 0;
    int up = fx_syncgate_env(1, NULL, fail) == 0 &&
             fx_atolld_start(&p, dir, "atolld-eio", 0, 5000, islands, 1, url, sizeof url,
                             &port) == 0;
    fx_syncgate_env(0, NULL, NULL);
    hx_client_t cl;
    T_CHECK(up && hx_client_init(&cl, url) == 0, "cannot start atolld with the sync shim");
    int64_t id = 0, first = 0;
    T_CHECK(submit_keyed(&cl, "eio-0", &first, detail, sizeof detail) == 201 && first > 0,
            "before the refusal: %s", detail);
    FILE *f = fopen(fail, "w");
    T_CHECK(f != NULL, "cannot create %s", fail);
    fclose(f);
    /* The refused round: the job is stored, its client told so. */
    long s1 = submit_keyed(&cl, "eio-1", &id, detail, sizeof detail);
    char want[64];
    snprintf(want, sizeof want, "job %" PRId64 " was stored", first + 1);
    T_CHECK(s1 == 503 && strstr(detail, want) && strstr(detail, "Idempotency-Key"),
            "a refused sync answered %ld '%s', expected 503 naming %s and the retry", s1,
            detail, want);
    /* Sticky: the disk is "back", but what it dropped cannot be known. */
    unlink(fail);
    long s2 = submit_keyed(&cl, "eio-2", &id, detail, sizeof detail);
    T_CHECK(s2 == 503, "after a refused sync, a submit answered %ld (%s), expected 503", s2,
            detail);
    /* Restarted (no shim): the first refused job is there for its retry. */
    T_CHECK(fx_term(&p, 15000) == 1, "atolld did not exit 0 on SIGTERM after the refusal");
    T_CHECK(fx_atolld_start(&p, dir, "atolld-eio2", port, 5000, islands, 1, url, sizeof url,
                            &port) == 0, "atolld did not start again on its database");
    long s3 = submit_keyed(&cl, "eio-1", &id, detail, sizeof detail);
    T_CHECK(s3 == 200 && id == first + 1, "the retry answered %ld with job %" PRId64
            ", expected 200 with job %" PRId64 " (%s)", s3, id, first + 1, detail);
    long s4 = submit_keyed(&cl, "eio-3", &id, detail, sizeof detail);
    T_CHECK(s4 == 201 && id > first + 1, "a new submit after the restart answered %ld", s4);
    hx_client_cleanup(&cl);
    fx_term(&p, 15000);
    char cmd[HX_DIR_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    T_CHECK(system(cmd) == 0, "cannot remove %s", dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_ack_waits_for_its_own_round),
        cmocka_unit_test(test_none_runs_no_round),
        cmocka_unit_test(test_bad_mode_refused),
        cmocka_unit_test(test_second_controller_refused),
        cmocka_unit_test(test_backup_holds_every_accepted_job),
        cmocka_unit_test(test_refused_sync_answers_503_and_keeps_the_job),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
