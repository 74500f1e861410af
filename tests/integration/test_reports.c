/* test_reports.c - a worker's reports always fit the controller's body cap.
 *
 * A report carries every output tensor of every local shard, with values
 * up to 4096 elements each, so a few of them pass atolld's --max-body. A
 * batch over the cap used to be refused 413 and dropped: the job stayed
 * "running" for ever (found with 6 computations of 4 x 4096 values on a
 * 4-device worker at the default 1 MiB). Now the registration answer says
 * the cap ("max_body"), the worker batches reports under it, and a single
 * report above it goes without its values (sums and shapes kept).
 *
 * A report the controller refuses for its content is followed by a
 * "failed" report of its task, so the job ends (it waited for ever).
 *
 * A worker that registered under a larger cap than its controller's now
 * (atolld restarted with a smaller --max-body; the worker keeps its id)
 * learns the cap from the 413 ("max_body") and sends the batch again
 * under it: its tasks used to fail, refused "the whole batch".
 *
 * A worker holds the succeeded reports of an exclusive job while more of
 * it is queued there, and sends them with the attempt's last one there: a
 * chain costs one request per worker, and the job still ends as soon as
 * its last computation does. A shared job's reports are never held: the
 * scheduler feeds its next computations on them.
 *
 * Cluster: main=4 with one 4-device worker, spare=1 for a played worker,
 * hold=2 with two 1-device sim workers that would hold a report for 10
 * minutes (--report-hold-ms), so that any report held by mistake shows;
 * atolld at --max-body 65536 (64 KiB), so the cap cases happen at small
 * sizes (values travel as base64 f32: 5.3 bytes per element). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"
#include "support_faults.h"
#include "util.h"
#include "wclient.h"
#include "wreport.h"

#define REP_CAP "65536"
#define REP_COMPS 16

static json_int_t atoll_rep_cap(void)
{
    return (json_int_t)strtoll(REP_CAP, NULL, 10);
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"main=4", "spare=1", "hold=2"};
    static const char *const extra[] = {"--max-body", REP_CAP, NULL};
    static const char *const holding[] = {"--backend", "sim", "--report-hold-ms", "600000",
                                          NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 3, extra) != 0 ||
        hx_worker_start(&itest_cluster, "main", 4) != 0)
        return -1;
    for (int w = 0; w < 2; w++)
        if (hx_worker_start_args(&itest_cluster, "hold", 1, holding, 15000, 0) != 0)
            return -1;
    return hx_client_init(&itest_client, itest_cluster.url);
}

/* A job of `ncomp` independent computations on a [4] slice, each output
 * y = iota([n]) * 0.1 on every shard. Returns the document (caller frees). */
static char *iota_job(int ncomp, int n)
{
    size_t cap = 256 + (size_t)ncomp * 200, len = 0;
    char *doc = malloc(cap);
    if (!doc)
        return NULL;
    len += (size_t)snprintf(doc + len, cap - len,
                            "{\"name\":\"rep\",\"slices\":{\"s\":{\"shape\":[4]}},"
                            "\"computations\":[");
    for (int c = 0; c < ncomp; c++)
        len += (size_t)snprintf(doc + len, cap - len,
                                "%s{\"name\":\"c%d\",\"slice\":\"s\",\"ops\":["
                                "{\"op\":\"iota\",\"out\":\"x\",\"shape\":[%d]},"
                                "{\"op\":\"scale\",\"out\":\"y\",\"args\":[\"x\"],"
                                "\"factor\":0.1}],\"outputs\":[\"y\"]}",
                                c ? "," : "", c, n);
    snprintf(doc + len, cap - len, "]}");
    return doc;
}

/* Runs the job to success and returns its shard results (caller decrefs). */
static json_t *run_and_fetch(int ncomp, int n)
{
    char *doc = iota_job(ncomp, n);
    int64_t id = -1;
    T_CHECK(doc != NULL, "out of memory");
    int status = hx_job_submit(&itest_client, doc, &id, NULL);
    free(doc);
    T_CHECK(status == 201, "submit returned %d", status);
    json_decref(itest_wait_state(id, "succeeded"));
    json_t *res = hx_job_result(&itest_client, id);
    T_CHECK(res != NULL, "GET /v1/jobs/%" PRId64 "/result", id);
    json_t *outs = json_incref(json_object_get(res, "outputs"));
    json_decref(res);
    T_CHECK(json_object_size(outs) == (size_t)ncomp, "want %d outputs", ncomp);
    return outs;
}

/* Every shard of every output: shape [n], sum of 0.1 i, and (with
 * want_values) every value exact (the f32 product); without, no values. */
static void check_outputs(const json_t *outs, int n, int want_values)
{
    double want_sum = 0.1 * (double)n * (double)(n - 1) / 2;
    const char *name;
    json_t *shards;
    json_object_foreach((json_t *)outs, name, shards) {
        T_CHECK(json_array_size(shards) == 4, "%s: 4 shards", name);
        for (size_t s = 0; s < 4; s++) {
            const json_t *t = json_array_get(shards, s);
            const json_t *vals = json_object_get(t, "values");
            double sum = json_number_value(json_object_get(t, "sum"));
            T_CHECK(json_integer_value(json_array_get(json_object_get(t, "shape"), 0)) == n,
                    "%s[%zu]: shape", name, s);
            T_CHECK(fabs(sum - want_sum) <= 1e-5 * want_sum, "%s[%zu]: sum %g, want %g", name,
                    s, sum, want_sum);
            T_CHECK(want_values ? json_array_size(vals) == (size_t)n : vals == NULL,
                    "%s[%zu]: values %s expected", name, s, want_values ? "" : "not");
            for (int i = 0; want_values && i < n; i++)
                T_CHECK(json_number_value(json_array_get(vals, (size_t)i)) ==
                            (double)((float)i * 0.1f),
                        "%s[%zu][%d] wrong", name, s, i);
        }
    }
}

/* 16 reports of ~22 KB each (4 shards x 1024 values) are ready at once:
 * sent whole in one batch they would be ~350 KB, over the cap. */
static void test_batches_fit_the_cap(void **state)
{
    (void)state;
    json_t *outs = run_and_fetch(REP_COMPS, 1024);
    check_outputs(outs, 1024, 1);
    json_decref(outs);
}

/* One report of ~87 KB (4 shards x 4096 values), alone above the cap:
 * the job still succeeds, with sums and shapes and without values. */
static void test_oversize_report_keeps_sums(void **state)
{
    (void)state;
    json_t *outs = run_and_fetch(1, 4096);
    check_outputs(outs, 4096, 0);
    json_decref(outs);
}

/* The first host task the played worker wc is given (waits up to 10 s). */
static int64_t poll_one_task(wclient_t *wc)
{
    int64_t task = 0, t0 = hx_now_ms();
    while (task < 1 && hx_now_ms() - t0 < 10000) {
        jtext_w_t text = {0};
        int st = wclient_poll(wc, wclient_id(wc), 500, 0, NULL, &text);
        json_t *ans = text.len ? json_loadb(text.p, text.len, 0, NULL) : NULL;
        jtext_drop(&text);
        json_t *group = json_array_get(json_object_get(ans, "jobs"), 0);
        task = json_integer_value(json_object_get(
            json_array_get(json_object_get(group, "tasks"), 0), "task"));
        json_decref(ans);
        T_CHECK(st == 200, "poll answered %d", st);
    }
    T_CHECK(task > 0, "the played worker got no task within 10 s");
    return task;
}

/* A worker played by the test on the spare island (one device, nobody
 * else there), registered with the worker's own client (workers/wclient.c). */
static wclient_t *spare_worker(void)
{
    wclient_reg_req_t req = {"spare", 1, "sim", "127.0.0.1:1", NULL};
    wclient_t *wc = wclient_new(itest_cluster.url, &req);
    T_CHECK(wc != NULL, "out of memory");
    int st = wclient_register(wc, NULL);
    T_CHECK(st == 201, "registration on spare answered %d", st);
    return wc;
}

/* Stops the played worker's reporter (sending what it holds) and leaves. */
static void spare_worker_leave(wclient_t *wc, wreport_t *wr)
{
    wreport_stop(wr, 5000);
    wclient_leave(wc, wclient_id(wc));
    wclient_free(wc);
}

/* A report the controller can never accept (its outputs are not an
 * object: 400 for that item) used to be dropped by the worker and its job
 * stayed "running"; the worker's own reporter now sends a "failed" report
 * naming the refusal. Played on the spare island with the worker's client
 * and reporter (workers/wclient.c, wreport.c); the worker leaves after. */
static void test_refused_report_fails_task(void **state)
{
    (void)state;
    wclient_t *wc = spare_worker();
    int64_t job = itest_submit("{'name':'refused','slices':{'s':{'shape':[1],"
                               "'island':'spare'}},'computations':[{'name':'c','slice':'s',"
                               "'ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}");
    int64_t task = poll_one_task(wc);
    wreport_t *wr = wreport_start(wc, 0);
    T_CHECK(wr != NULL, "reporter did not start");
    wreport_push(wr, task, 0, strdup("{\"state\":\"succeeded\",\"outputs\":[]}"));
    json_t *j = itest_wait_state(job, "failed");
    const char *err = json_string_value(json_object_get(j, "error"));
    int named = err && strstr(err, "refused this task's report") && strstr(err, "outputs");
    char copy[300];
    snprintf(copy, sizeof copy, "%s", err ? err : "(none)");
    json_decref(j);
    spare_worker_leave(wc, wr);
    T_CHECK(named, "the job's error should name the refusal: %s", copy);
}

/* No report leaves before its due time (wreport.h): a `sim` worker's host
 * runs ahead of its devices, and the controller must not learn of an end
 * before it happened. Played on the spare island: a job of two
 * computations (one host task), the first one's report due at once, the
 * second's 1.5 s after it is queued. Long-polls of the job until 0.3 s
 * before that must not see it end (sent with the first, it would end
 * within milliseconds), and it ends after. */
static void test_report_waits_for_due(void **state)
{
    (void)state;
    wclient_t *wc = spare_worker();
    int64_t job = itest_submit("{'name':'due','slices':{'s':{'shape':[1],'island':'spare'}},"
                               "'computations':[{'name':'c0','slice':'s','ops':[{'op':"
                               "'shard_index','out':'i'}],'outputs':['i']},{'name':'c1',"
                               "'slice':'s','ops':[{'op':'shard_index','out':'i'}],"
                               "'outputs':['i']}]}");
    int64_t task = poll_one_task(wc);
    wreport_t *wr = wreport_start(wc, 0);
    T_CHECK(wr != NULL, "reporter did not start");
    int64_t due = util_mono_us() + 1500000, wall = util_wall_us();
    for (int c = 0; c < 2; c++) {
        char body[320];
        int64_t fin = c ? wall + 1500000 : wall;
        snprintf(body, sizeof body, "{\"state\":\"succeeded\",\"started_us\":%lld,"
                 "\"inputs_ready_us\":%lld,\"finished_us\":%lld,\"outputs\":{\"i\":"
                 "[{\"shape\":[],\"sum\":0.0}]}}", (long long)wall, (long long)wall,
                 (long long)fin);
        wreport_exec_fn(wr, task, c, strdup(body), 0, c ? due : 0);
    }
    /* Long-polls again after each change (the first report's progress
     * may answer one early) until 0.3 s before the due time. */
    char seen[32] = "";
    int64_t back = util_mono_us(), until = due - 300000;
    while (strcmp(seen, "succeeded") != 0 && back < until) {
        char path[96];
        snprintf(path, sizeof path, "/v1/jobs/%lld?view=summary&wait_ms=%lld", (long long)job,
                 (long long)((until - back) / 1000 + 1));
        hx_resp_t r;
        T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0 && r.status == 200,
                "GET %s answered %ld", path, r.status);
        snprintf(seen, sizeof seen, "%s", hx_job_state(r.json));
        back = util_mono_us();
        hx_resp_clear(&r);
    }
    json_t *j = itest_wait_state(job, "succeeded");
    json_decref(j);
    spare_worker_leave(wc, wr);
    T_CHECK(back >= due || strcmp(seen, "succeeded") != 0,
            "the job ended %lld ms before its last report was due",
            (long long)((due - back) / 1000));
}

/* The cap workers batch by is in the registration answer (a played
 * worker on the spare island; it never polls, nothing runs there). */
/* ---- held reports (island hold) ---- */

#define HOLD_CHAIN 8

/* A chain of n computations of `us` µs each on the hold island's [2]
 * slice (both workers), exclusive or shared. */
static int64_t hold_submit(int n, int64_t us, int shared)
{
    char *doc = hx_compute_chain_doc("hold", n, us, shared, "hold", 2, 0);
    int64_t id = -1;
    T_CHECK(doc != NULL, "out of memory");
    int status = hx_job_submit(&itest_client, doc, &id, NULL);
    free(doc);
    T_CHECK(status == 201, "submit returned %d", status);
    return id;
}

/* An exclusive chain: each worker holds its reports until its last task
 * of the job, which takes them all in one request; the job succeeds long
 * before any hold (10 minutes) could expire, with every result stored. */
static void test_held_reports_leave_together(void **state)
{
    (void)state;
    double req0 = hx_metric(&itest_client, "atoll_worker_report_requests_total");
    double items0 = hx_metric(&itest_client, "atoll_worker_report_items_total");
    int64_t id = hold_submit(HOLD_CHAIN, 0, 0);
    json_decref(itest_wait_state(id, "succeeded"));
    double req = hx_metric(&itest_client, "atoll_worker_report_requests_total") - req0;
    double items = hx_metric(&itest_client, "atoll_worker_report_items_total") - items0;
    T_CHECK(items == 2 * HOLD_CHAIN, "%g report items, want %d", items, 2 * HOLD_CHAIN);
    T_CHECK(req == 2, "%g report requests for %d computations on 2 workers, want 2", req,
            HOLD_CHAIN);
    json_t *res = hx_job_result(&itest_client, id);
    for (int c = 0; c < HOLD_CHAIN; c++) {
        char key[16];
        snprintf(key, sizeof key, "c%d.b", c);
        for (int k = 0; k < 2; k++)
            T_CHECK(json_is_array(json_object_get(hx_result_shard(res, key, k), "shape")),
                    "no result for shard %d of %s", k, key);
    }
    json_decref(res);
}

/* A shared chain of 4 computations of 10 s, all four dispatched at once
 * (the feed's window). The scheduler feeds a shared job on its reports,
 * so each is sent at once: the first computation is seen succeeded after
 * about 10 s. Held, its report would leave with the fourth one's, after
 * 40 s. */
static void test_shared_reports_not_held(void **state)
{
    (void)state;
    int64_t id = hold_submit(4, 10000000, 1);
    json_t *job = itest_wait_comp_state(id, 0, "succeeded", 25000);
    int seen = job != NULL;
    json_decref(job);
    T_CHECK(seen, "computation 0 of shared job %" PRId64 " not seen succeeded within 25 s", id);
    itest_cancel(id);
}

static void test_register_says_cap(void **state)
{
    (void)state;
    hx_resp_t r;
    char *reg = hx_text_q("{'island':'spare','devices':1,'data_addr':'127.0.0.1:1'}");
    T_CHECK(reg && hx_request(&itest_client, "POST", "/v1/workers", reg, strlen(reg), &r) == 0,
            "POST /v1/workers");
    free(reg);
    long st = r.status;
    json_int_t cap = json_integer_value(json_object_get(r.json, "max_body"));
    hx_resp_clear(&r);
    T_CHECK(st == 201 && cap == atoll_rep_cap(), "registered %ld with max_body %lld", st,
            (long long)cap);
}

/* The restart case, on its own cluster: atolld at the default cap with a
 * 4-device worker, then restarted on its database at REP_CAP; the worker
 * keeps its id and its old cap, so its first batch of 16 reports (~350 KB)
 * is refused 413. The job must still succeed, every value exact. */
static void test_cap_shrunk_by_restart(void **state)
{
    (void)state;
    char dir[] = "/tmp/atoll-rep-restart.XXXXXX", url[128];
    static const char *const islands[] = {"main=4"};
    hx_proc_t a, w;
    hx_client_t cl = {0};
    int port = 0;
    T_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    T_CHECK(fx_atolld_start(&a, dir, "atolld", 0, 30000, islands, 1, url, sizeof url, &port) ==
                    0 &&
                fx_worker_start(&w, dir, "worker", url, "main", 4, 20000) == 0,
            "cannot start the restart cluster");
    T_CHECK(fx_term(&a, 10000), "atolld did not stop cleanly");
    setenv("ATOLL_MAX_BODY", REP_CAP, 1);
    int up = fx_atolld_start(&a, dir, "atolld", port, 30000, islands, 1, url, sizeof url,
                             &port) == 0;
    unsetenv("ATOLL_MAX_BODY");
    T_CHECK(up && hx_client_init(&cl, url) == 0, "atolld did not restart at --max-body %s",
            REP_CAP);
    char *doc = iota_job(REP_COMPS, 1024);
    int64_t id = -1;
    T_CHECK(doc && hx_job_submit(&cl, doc, &id, NULL) == 201, "submit");
    free(doc);
    json_t *job = NULL;
    int rc = hx_job_wait(&cl, id, 60000, 50, &job);
    char st[32];
    snprintf(st, sizeof st, "%s", job ? hx_job_state(job) : "(none)");
    json_decref(job);
    T_CHECK(rc == 0 && strcmp(st, "succeeded") == 0, "job %" PRId64 " is %s", id, st);
    json_t *res = hx_job_result(&cl, id);
    T_CHECK(res != NULL, "no result");
    check_outputs(json_object_get(res, "outputs"), 1024, 1);
    json_decref(res);
    hx_client_cleanup(&cl);
    fx_term(&w, 10000);
    fx_term(&a, 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_batches_fit_the_cap, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_oversize_report_keeps_sums, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_refused_report_fails_task, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_report_waits_for_due, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_held_reports_leave_together, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_shared_reports_not_held, itest_cancel_leftovers),
        cmocka_unit_test(test_register_says_cap),
    };
    const struct CMUnitTest restart[] = {
        cmocka_unit_test(test_cap_shrunk_by_restart),
    };
    int failed = cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
    return failed | cmocka_run_group_tests_name("restart", restart, NULL, NULL);
}
