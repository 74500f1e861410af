/* test_durable.c - group commit: no acknowledgement before the disk has it.
 *
 * With the default --durability group, every 201 of POST /v1/jobs and
 * every 200 of a cancel (DELETE) waits for an fdatasync of the WAL that began after
 * its commit. On one connection requests are sequential, so N submits need
 * N sync rounds at least: the counters in /metrics
 * (atoll_store_sync_waits_total, atoll_store_sync_rounds_total) must move
 * by that much. Deleting the store_durable() call from a handler, or
 * letting a round that began before a commit cover it, fails here. With
 * --durability none no round runs at all, and a bad mode is refused at
 * start (exit 2, naming the flag).
 *
 * Cluster: cold=2x2 with no worker (jobs stay queued; acceptance only). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define SUBMITS 6

static const char doc_q[] =
    "{'name':'d','slices':{'s':{'shape':[1,1],'island':'cold'}},'computations':["
    "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}";

static int group_setup(void **state)
{
    (void)state;
    static const itest_island_t isl[] = {{"cold=2x2", "cold", 0, 0}};
    return itest_start(isl, 1);
}

static int group_teardown(void **state)
{
    (void)state;
    return itest_stop();
}

static void test_each_ack_waits_for_its_own_round(void **state)
{
    (void)state;
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

    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, last);
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0 && r.status == 200,
            "cancel answered %ld", r.status);
    hx_resp_clear(&r);
    double r2 = hx_metric(&itest_client, "atoll_store_sync_rounds_total");
    double w2 = hx_metric(&itest_client, "atoll_store_sync_waits_total");
    T_CHECK(w2 - w1 == 1 && r2 - r1 >= 1, "cancel: %.0f waits, %.0f rounds", w2 - w1, r2 - r1);
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
    double rounds = hx_metric(&cl, "atoll_store_sync_rounds_total");
    free(doc);
    hx_client_cleanup(&cl);
    int unclean = hx_cluster_stop(&c);
    T_CHECK(st == 201 && rounds == 0, "submit %d, %.0f rounds with --durability none", st,
            rounds);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_ack_waits_for_its_own_round),
        cmocka_unit_test(test_none_runs_no_round),
        cmocka_unit_test(test_bad_mode_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
