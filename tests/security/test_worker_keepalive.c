/* test_worker_keepalive.c - a saturated listener does not cut the workers
 * off (issue 16, finding 2: "workers' heartbeats must keep working while
 * the public listener is saturated").
 *
 * atolld runs with a small connection cap (--max-connections 48) and a 2 s
 * lease; two workers of 2 devices serve west=2x2. A flood of idle
 * connections fills the cap for three leases while a job that needs both
 * workers runs. Workers keep one connection per calling thread alive
 * (workers/wclient.c), so their heartbeats, polls and reports go on over
 * connections atolld accepted before the flood: no worker is lost and the
 * job ends right. The test also proves the listener was saturated: a new
 * connection's /healthz fails during the flood. With a fresh connection per
 * call (the old worker client) both workers are lost within a lease. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"
#include "test_front_raw.h"

#define CAP 48
#define FLOOD 200
#define LEASE_MS 2000

static int port;

static int setup(void **state)
{
    (void)state;
    if (raw_raise_nofile() < FLOOD + 256)
        return -1;
    static const char *const islands[] = {"west=2x2"};
    static const char *const extra[] = {"--lease-ms", "2000", "--max-connections", "48",
                                        "--header-timeout-ms", "30000", NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    if (hx_worker_start(&itest_cluster, "west", 2) != 0 ||
        hx_worker_start(&itest_cluster, "west", 2) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    port = raw_port(itest_cluster.url);
    raw_timeout_ms = 2000;
    return 0;
}

/* Live worker ids (ascending, as the API lists them) into ids; how many. */
static int live_ids(int64_t ids[4])
{
    hx_resp_t r;
    int n = 0;
    if (hx_request(&itest_client, "GET", "/v1/workers", NULL, 0, &r) != 0)
        return -1;
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(r.json, "workers"), i, w) {
        const char *st = json_string_value(json_object_get(w, "state"));
        if (st && strcmp(st, "live") == 0 && n < 4)
            ids[n++] = json_integer_value(json_object_get(w, "id"));
    }
    hx_resp_clear(&r);
    return n;
}

static void test_flood_keeps_workers(void **state)
{
    (void)state;
    /* warm up: every worker thread and this client hold a connection */
    json_decref(itest_run_ok("{'slices':{'a':{'shape':[2,2]}},'computations':[{'name':'c',"
                             "'slice':'a','ops':[{'op':'fill','out':'x','shape':[4],'value':1},"
                             "{'op':'all_reduce','out':'y','args':['x'],'reduce':'sum'}],"
                             "'outputs':['y']}]}", NULL));
    int64_t before[4], after[4];
    T_CHECK(live_ids(before) == 2, "two live workers before the flood");
    /* a job that spans both workers and outlasts the flood's start */
    int64_t id = itest_submit("{'slices':{'a':{'shape':[2,2]}},'computations':[{'name':'c',"
                              "'slice':'a','ops':[{'op':'compute','out':'t','us':1500000},"
                              "{'op':'fill','out':'x','shape':[4],'value':2},"
                              "{'op':'all_reduce','out':'y','args':['x'],'reduce':'sum'}],"
                              "'outputs':['y']}]}");
    int fds[FLOOD], nfd = 0, refused = 0, probes = 0;
    for (int i = 0; i < FLOOD; i++)
        if ((fds[nfd] = raw_connect(port)) >= 0)
            nfd++;
    int64_t end = raw_now_ms() + 3 * LEASE_MS;
    while (raw_now_ms() < end) {        /* each probe waits up to raw_timeout_ms */
        raw_resp_t r;
        probes++;
        if (raw_request(port, "GET", "/healthz", NULL, NULL, &r) != 200)
            refused++;
    }
    int live = live_ids(after);
    for (int i = 0; i < nfd; i++)
        close(fds[i]);
    fprintf(stderr, "flood: %d connections, %d of %d new-connection probes failed, %d live\n",
            nfd, refused, probes, live);
    T_CHECK(refused > 0, "the listener was never saturated (cap %d, %d connections)", CAP, nfd);
    T_CHECK(live == 2 && after[0] == before[0] && after[1] == before[1],
            "workers lost while the listener was full: %d live", live);
    json_t *job = itest_wait_state(id, "succeeded");
    json_decref(job);
    json_t *res = hx_job_result(&itest_client, id);
    T_CHECK(res != NULL, "result of job %" PRId64, id);
    for (int k = 0; k < 4; k++) {
        json_t *sh = hx_result_shard(res, "c.y", k);
        double v = json_real_value(json_array_get(json_object_get(sh, "values"), 0));
        if (v != 8.0)
            json_decref(res);
        T_CHECK(v == 8.0, "shard %d: %g, expected 8", k, v);
    }
    json_decref(res);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flood_keeps_workers),
    };
    return cmocka_run_group_tests(tests, setup, itest_group_teardown);
}
