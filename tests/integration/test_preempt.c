/* test_preempt.c - preemption (DESIGN Part D) on real workers.
 *
 * Island west=2x2 covered by one cpu worker of 4 devices. A job that cannot
 * be placed evicts the fewest, lowest-priority preemptible jobs of lower
 * priority that make room: they go back to `queued` with attempt + 1,
 * count `preemptions` (not `retries`), get a `preempted` event naming the
 * job that took their devices, and run again to success. Jobs that are not
 * preemptible, or not of lower priority, are never evicted. Shared jobs
 * are evicted too; a shared device frees only when all its holders go. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"

/* A job of one slice `shape` on west that computes for `us` µs; `shared`
 * makes it a shared job (it holds its devices beside other shared jobs). */
static int64_t submit_job(const char *name, const char *shape, int64_t us, int priority,
                          int preemptible, int shared)
{
    char doc[768];
    snprintf(doc, sizeof doc,
             "{'name':'%s','priority':%d,%s%s'slices':{'s':{'shape':%s,'island':'west'}},"
             "'computations':[{'name':'c','slice':'s','ops':[{'op':'compute','out':'b',"
             "'us':%lld},{'op':'shard_index','out':'i'}],'outputs':['i']}]}",
             name, priority, preemptible ? "'preemptible':true," : "",
             shared ? "'sharing':'shared'," : "", shape, (long long)us);
    return itest_submit(doc);
}

static int64_t submit_busy(const char *name, const char *shape, int64_t us, int priority,
                           int preemptible)
{
    return submit_job(name, shape, us, priority, preemptible, 0);
}

static int64_t jint(const json_t *j, const char *k)
{
    return json_integer_value(json_object_get(j, k));
}

/* Does the job have an event of `kind` whose detail contains `needle`? */
static int has_event(const json_t *job, const char *kind, const char *needle)
{
    json_t *evs = json_object_get(job, "events"), *e;
    size_t i;
    json_array_foreach(evs, i, e) {
        const char *k = json_string_value(json_object_get(e, "kind"));
        const char *d = json_string_value(json_object_get(e, "detail"));
        if (k && strcmp(k, kind) == 0 && d && strstr(d, needle))
            return 1;
    }
    return 0;
}

static void wait_running(int64_t id)
{
    json_t *job = NULL;
    int rc = hx_job_wait_leave(&itest_client, id, "queued", 20000, ITEST_POLL_MS, &job);
    int ok = rc == 0 && job && !hx_state_terminal(hx_job_state(job));
    json_decref(job);
    T_CHECK(ok, "job %lld was not admitted", (long long)id);
}

/* A high-priority job needing the whole island evicts the preemptible job
 * holding it, starts at once, and the evicted job runs again. */
static void test_preempts_lower_priority(void **state)
{
    (void)state;
    int64_t low = submit_busy("low", "[2,2]", 6000000, 0, 1);
    wait_running(low);
    int64_t high = submit_busy("high", "[2,2]", 100000, 10, 0);
    json_t *hj = itest_wait_state(high, "succeeded");
    int64_t waited_us = hx_job_time_us(hj, "allocated") - hx_job_time_us(hj, "created");
    json_decref(hj);
    json_t *lj = itest_wait_state(low, "succeeded");
    char who[32];
    snprintf(who, sizeof who, "job %lld", (long long)high);
    int ok = jint(lj, "attempt") == 1 && jint(lj, "preemptions") == 1 &&
             jint(lj, "retries") == 0 && has_event(lj, "preempted", who) &&
             json_is_true(json_object_get(lj, "preemptible"));
    json_decref(lj);
    /* The low job would hold the island 6 s: the high one must not wait
     * for it (generous bound for a loaded machine). */
    T_CHECK(waited_us >= 0 && waited_us < 3000000,
            "the high-priority job waited %lld us for the island", (long long)waited_us);
    T_CHECK(ok, "the evicted job should be requeued once (attempt 1, preemptions 1, retries 0)"
            " with a preempted event naming %s", who);
}

/* Not preemptible: the high-priority job waits for it instead. */
static void test_spares_non_preemptible(void **state)
{
    (void)state;
    int64_t hold = submit_busy("hold", "[2,2]", 1500000, 0, 0);
    wait_running(hold);
    int64_t high = submit_busy("high2", "[2,2]", 100000, 10, 0);
    json_t *hj = itest_wait_state(high, "succeeded");
    json_t *oj = itest_wait_state(hold, "succeeded");
    int ok = jint(oj, "attempt") == 0 && jint(oj, "preemptions") == 0 &&
             hx_job_time_us(hj, "allocated") >= hx_job_time_us(oj, "finished");
    json_decref(hj);
    json_decref(oj);
    T_CHECK(ok, "a job that is not preemptible must not be evicted");
}

/* Two preemptible halves of the island; a job needing one half evicts only
 * the lower-priority one. Equal priority never preempts: `peer` (priority
 * -5, like a) waits for a free half. */
static void test_evicts_fewest_lowest(void **state)
{
    (void)state;
    int64_t a = submit_busy("half-a", "[1,2]", 3000000, -5, 1);
    int64_t b = submit_busy("half-b", "[1,2]", 3000000, -1, 1);
    wait_running(a);
    wait_running(b);
    /* Equal to a, below b: evicts neither, waits. */
    int64_t peer = submit_busy("peer", "[1,2]", 100000, -5, 0);
    int64_t h = submit_busy("half-h", "[1,2]", 100000, 5, 0);
    json_decref(itest_wait_state(h, "succeeded"));
    json_decref(itest_wait_state(peer, "succeeded"));
    json_t *aj = itest_wait_state(a, "succeeded"), *bj = itest_wait_state(b, "succeeded");
    int64_t pa = jint(aj, "preemptions"), pb = jint(bj, "preemptions");
    json_decref(aj);
    json_decref(bj);
    T_CHECK(pa == 1 && pb == 0,
            "only the lowest-priority half should be evicted (a: %lld, b: %lld preemptions)",
            (long long)pa, (long long)pb);
}

/* Shared jobs are preemptible too: two of them hold all of west side by
 * side; an exclusive job needing west evicts both (a shared device frees
 * only when every holder goes), starts at once, and they run again. */
static void test_evicts_shared(void **state)
{
    (void)state;
    int64_t a = submit_job("shared-a", "[2,2]", 6000000, 0, 1, 1);
    int64_t b = submit_job("shared-b", "[2,2]", 6000000, 0, 1, 1);
    wait_running(a);
    wait_running(b);
    int64_t high = submit_busy("over-shared", "[2,2]", 100000, 10, 0);
    json_t *hj = itest_wait_state(high, "succeeded");
    int64_t waited_us = hx_job_time_us(hj, "allocated") - hx_job_time_us(hj, "created");
    json_decref(hj);
    json_t *aj = itest_wait_state(a, "succeeded"), *bj = itest_wait_state(b, "succeeded");
    char who[32];
    snprintf(who, sizeof who, "job %lld", (long long)high);
    int ok = jint(aj, "preemptions") == 1 && jint(bj, "preemptions") == 1 &&
             has_event(aj, "preempted", who) && has_event(bj, "preempted", who) &&
             jint(aj, "retries") == 0 && jint(bj, "retries") == 0;
    json_decref(aj);
    json_decref(bj);
    T_CHECK(waited_us >= 0 && waited_us < 3000000,
            "the high-priority job waited %lld us for west held by shared jobs",
            (long long)waited_us);
    T_CHECK(ok, "both shared jobs should be evicted once, with a preempted event naming %s",
            who);
}

/* Waits (20 s at most) until job id shows a pending_reason: the scheduler
 * has tried it, and whatever that pass evicted is committed. */
static void wait_pending_reason(int64_t id)
{
    int64_t t0 = hx_now_ms();
    for (;;) {
        json_t *j = hx_job_get(&itest_client, id);
        int seen = json_is_string(json_object_get(j, "pending_reason"));
        json_decref(j);
        if (seen)
            return;
        T_CHECK(hx_now_ms() - t0 < 20000, "job %lld never got a pending_reason", (long long)id);
        hx_sleep_ms(ITEST_POLL_MS);
    }
}

/* A shared device is freed only when every holder is evicted: beside a
 * shared job that is not preemptible, evicting the preemptible one frees
 * nothing, so it keeps running while the exclusive job waits (it was
 * evicted for nothing when a device counted as freed with any one holder),
 * and the exclusive job is placed only after the other's end. */
static void test_shared_needs_every_holder(void **state)
{
    (void)state;
    int64_t keep = submit_job("shared-keep", "[2,2]", 6000000, 0, 0, 1);
    int64_t pre = submit_job("shared-pre", "[2,2]", 1000000, 0, 1, 1);
    wait_running(keep);
    wait_running(pre);
    int64_t high = submit_busy("over-keep", "[2,2]", 100000, 10, 0);
    wait_pending_reason(high);
    json_t *now = hx_job_get(&itest_client, pre);
    int spared = jint(now, "attempt") == 0 && jint(now, "preemptions") == 0;
    json_decref(now);
    json_t *hj = itest_wait_state(high, "succeeded");
    json_t *kj = itest_wait_state(keep, "succeeded");
    json_decref(itest_wait_state(pre, "succeeded"));
    int64_t allocated = hx_job_time_us(hj, "allocated");
    int64_t keep_end = hx_job_time_us(kj, "finished");
    int kept = jint(kj, "preemptions") == 0;
    json_decref(hj);
    json_decref(kj);
    T_CHECK(spared, "the preemptible shared job was evicted while a non-preemptible one still"
            " held the devices (no room made)");
    T_CHECK(kept && allocated >= keep_end, "the exclusive job was placed at %lld while a"
            " non-preemptible shared job held west until %lld", (long long)allocated,
            (long long)keep_end);
}

/* A shared job preempts too, and only what it must: an exclusive
 * preemptible job on one half of west is evicted for a shared job needing
 * all of it, while the shared job on the other half stays (the new one
 * joins it there). */
static void test_shared_job_preempts(void **state)
{
    (void)state;
    int64_t ex = submit_job("ex-half", "[1,2]", 6000000, 0, 1, 0);
    wait_running(ex);
    int64_t sh = submit_job("sh-half", "[1,2]", 6000000, 0, 1, 1);
    wait_running(sh);
    int64_t high = submit_job("shared-high", "[2,2]", 100000, 10, 0, 1);
    json_t *hj = itest_wait_state(high, "succeeded");
    int64_t waited_us = hx_job_time_us(hj, "allocated") - hx_job_time_us(hj, "created");
    json_decref(hj);
    json_t *ej = itest_wait_state(ex, "succeeded"), *sj = itest_wait_state(sh, "succeeded");
    int64_t pe = jint(ej, "preemptions"), ps = jint(sj, "preemptions");
    json_decref(ej);
    json_decref(sj);
    T_CHECK(waited_us >= 0 && waited_us < 3000000,
            "the shared high-priority job waited %lld us", (long long)waited_us);
    T_CHECK(pe == 1 && ps == 0, "only the exclusive half should be evicted (exclusive: %lld,"
            " shared: %lld preemptions)", (long long)pe, (long long)ps);
}

static void test_bad_field(void **state)
{
    (void)state;
    itest_submit_bad("{'preemptible':'yes','slices':{'s':{'shape':[1]}},'computations':"
                     "[{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'}]}]}",
                     "preemptible");
}

static int group_setup(void **state)
{
    (void)state;
    static const itest_island_t isl[] = {{"west=2x2", "west", 1, 4, NULL}};
    /* Debug logs (kept only when a test fails): under very heavy load a
     * requeued attempt's host task was seen leased and never started, 4
     * times in many runs, not reproduced since; the worker's debug lines
     * (each poll answer, each task queued, started and ended) say where it
     * stopped next time. Children inherit the environment. */
    setenv("ATOLL_LOG_LEVEL", "debug", 1);
    int rc = itest_start(isl, 1);
    unsetenv("ATOLL_LOG_LEVEL");
    return rc;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_preempts_lower_priority, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_spares_non_preemptible, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_evicts_fewest_lowest, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_evicts_shared, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_shared_needs_every_holder, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_shared_job_preempts, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_bad_field, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
