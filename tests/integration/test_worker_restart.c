/* test_worker_restart.c - workers on fixed data addresses, restarted in
 * place (compose.yaml: a fixed ATOLL_DATA_LISTEN and restart), against a
 * real atolld (island west=2, lease LEASE_MS) and two real atoll-workers of
 * one device each, at 127.0.0.1:P0 and :P1.
 *
 * A job across both runs (a small all_reduce: eager messages; a 2 MiB
 * ppermute: pool reads), then each worker in turn is killed with SIGKILL
 * and started again on its port. While the dead one's registration is
 * still live its data_addr is refused to a newcomer (409 data_addr, here
 * on another island), so the restarted worker registers only once that
 * lease ran out: it must be up within about a lease. Then the same job
 * must succeed, well within the 60 s peer timeout: the surviving worker's
 * endpoint was made from the dead process's UCX address and must be
 * replaced (workers/dplane.c, "Peers that restart").
 *
 * Fails on the old code: the newcomer's registration was 201, and the job
 * after the restart failed after 60 s (the survivor's small sends went
 * into the dead process's shared memory and "completed"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "itest.h"
#include "support_faults.h"

/* Long enough that a loaded 2-core machine neither loses the surviving
 * worker nor lets the killed one's registration lapse before the test
 * has asked for its address again. */
#define LEASE_MS 4000
/* A job after a restart: far less than the workers' 60 s peer timeout. */
#define JOB_WAIT_MS 20000

static int ports[2];

/* A port free on 127.0.0.1 now (bound, read, closed), or 0. */
static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* Starts worker i on its fixed port (the worker reads ATOLL_DATA_LISTEN
 * from its environment); waits up to timeout_ms for its ready line. */
static int start_worker(int i, int timeout_ms)
{
    char listen[32], name[16];
    snprintf(listen, sizeof listen, "127.0.0.1:%d", ports[i]);
    snprintf(name, sizeof name, "worker-%d", i);
    setenv("ATOLL_DATA_LISTEN", listen, 1);
    int rc = fx_worker_start(&itest_cluster.workers[i], itest_cluster.dir, name,
                             itest_cluster.url, "west", 1, timeout_ms);
    unsetenv("ATOLL_DATA_LISTEN");
    return rc;
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2", "east=1"};
    int port = 0;
    if (hx_init() != 0)
        return -1;
    snprintf(itest_cluster.dir, sizeof itest_cluster.dir, "/tmp/atoll-wrestart.XXXXXX");
    if (!mkdtemp(itest_cluster.dir))
        return -1;
    itest_cluster.nworkers = 2;
    for (int i = 0; i < 2; i++)
        ports[i] = free_port();
    if (!ports[0] || !ports[1] || ports[0] == ports[1] ||
        fx_atolld_start(&itest_cluster.atolld, itest_cluster.dir, "atolld", 0, LEASE_MS, islands,
                        2, itest_cluster.url, sizeof itest_cluster.url, &port) != 0 ||
        start_worker(0, 15000) != 0 || start_worker(1, 15000) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_dump_logs(&itest_cluster, 4000);
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

/* Both workers' processes exchange: z = all_reduce(1 + i) over the two
 * shards (3 per element, 4 elements: sum 12 each); w = ppermute of
 * 524288 values of 1 + i (2 MiB, from the workers' shared-memory pools),
 * so each shard gets the other's: sums 2 * 524288 and 524288. */
static const char *JOB =
    "{'name': 'restart', 'slices': {'a': {'shape': [2]}},"
    " 'computations': [{'name': 'p', 'slice': 'a', 'ops': ["
    "   {'op': 'shard_index', 'out': 'i'},"
    "   {'op': 'fill', 'out': 'x', 'shape': [4], 'value': 1.0},"
    "   {'op': 'add', 'out': 'y', 'args': ['x', 'i']},"
    "   {'op': 'all_reduce', 'out': 'z', 'args': ['y'], 'reduce': 'sum'},"
    "   {'op': 'fill', 'out': 'b', 'shape': [524288], 'value': 1.0},"
    "   {'op': 'add', 'out': 'c', 'args': ['b', 'i']},"
    "   {'op': 'ppermute', 'out': 'w', 'args': ['c'], 'shift': 1}],"
    "  'outputs': ['z', 'w']}]}";

/* Runs JOB, which must succeed within JOB_WAIT_MS with the sums above. */
static void run_job(const char *when)
{
    int64_t id = itest_submit(JOB), t0 = hx_now_ms();
    json_t *job = NULL;
    int rc = hx_job_wait(&itest_client, id, JOB_WAIT_MS, ITEST_POLL_MS, &job);
    char st[32], err[300];
    const char *e = json_string_value(json_object_get(job, "error"));
    snprintf(st, sizeof st, "%s", job ? hx_job_state(job) : "(none)");
    snprintf(err, sizeof err, "%s", e ? e : "none");
    json_decref(job);
    T_CHECK(rc == 0 && strcmp(st, "succeeded") == 0,
            "job %lld %s is %s after %lld ms (error: %s)", (long long)id, when, st,
            (long long)(hx_now_ms() - t0), err);
    json_t *res = hx_job_result(&itest_client, id);
    T_CHECK(res != NULL, "no result for job %lld", (long long)id);
    double z0 = json_number_value(json_object_get(hx_result_shard(res, "p.z", 0), "sum"));
    double z1 = json_number_value(json_object_get(hx_result_shard(res, "p.z", 1), "sum"));
    double w0 = json_number_value(json_object_get(hx_result_shard(res, "p.w", 0), "sum"));
    double w1 = json_number_value(json_object_get(hx_result_shard(res, "p.w", 1), "sum"));
    json_decref(res);
    T_CHECK(z0 == 12 && z1 == 12 && w0 == 2.0 * 524288 && w1 == 524288,
            "job %lld %s: sums z %.1f %.1f, w %.1f %.1f", (long long)id, when, z0, z1, w0, w1);
}

/* A newcomer at data address addr on island east: must be 409 data_addr. */
static void expect_addr_refused(const char *addr)
{
    char doc[160];
    snprintf(doc, sizeof doc, "{'island':'east','devices':1,'data_addr':'%s',"
             "'ucx_address':'AQIDBA=='}", addr);
    char *text = hx_text_q(doc);
    hx_resp_t r;
    T_CHECK(text && hx_request(&itest_client, "POST", "/v1/workers", text, strlen(text), &r) == 0,
            "POST /v1/workers");
    free(text);
    const char *f = json_string_value(json_object_get(r.json, "field"));
    char field[64];
    snprintf(field, sizeof field, "%s", f ? f : "");
    long st = r.status;
    hx_resp_clear(&r);
    T_CHECK(st == 409 && strcmp(field, "data_addr") == 0,
            "a newcomer at %s (a live worker's data_addr) answered %ld (field '%s')", addr, st,
            field);
}

static void test_restart_in_place(void **state)
{
    (void)state;
    run_job("before any restart");
    for (int k = 0; k < 2; k++) {
        int i = 1 - k;                     /* the second worker first, then the first */
        char addr[32];
        snprintf(addr, sizeof addr, "127.0.0.1:%d", ports[i]);
        expect_addr_refused(addr);         /* live and well */
        fx_kill(&itest_cluster.workers[i]);
        int64_t t0 = hx_now_ms();
        expect_addr_refused(addr);         /* dead, its lease not run out */
        T_CHECK(start_worker(i, 4 * LEASE_MS + 5000) == 0,
                "worker %d not up again on port %d within %d ms", i, ports[i],
                4 * LEASE_MS + 5000);
        int64_t up = hx_now_ms() - t0;
        T_CHECK(up < 2 * LEASE_MS + 2000, "worker %d took %lld ms to come back (lease %d ms)", i,
                (long long)up, LEASE_MS);
        run_job(i ? "after the second worker's restart" : "after the first worker's restart");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_restart_in_place, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
