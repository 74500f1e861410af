/* test_preempt.c - preemption (DESIGN Part D) on real workers.
 *
 * Island west=2x2 covered by one cpu worker of 4 devices. A job that cannot
 * be placed evicts the fewest, lowest-priority preemptible jobs of lower
 * priority that make room: they go back to `queued` with attempt + 1,
 * count `preemptions` (not `retries`), get a `preempted` event naming the
 * job that took their devices, and run again to success. Jobs that are not
 * preemptible, or not of lower priority, are never evicted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"

/* A job of one slice `shape` on west that computes for `us` µs. */
static int64_t submit_busy(const char *name, const char *shape, int64_t us, int priority,
                           int preemptible)
{
    char doc[768];
    snprintf(doc, sizeof doc,
             "{'name':'%s','priority':%d,%s'slices':{'s':{'shape':%s,'island':'west'}},"
             "'computations':[{'name':'c','slice':'s','ops':[{'op':'compute','out':'b',"
             "'us':%lld},{'op':'shard_index','out':'i'}],'outputs':['i']}]}",
             name, priority, preemptible ? "'preemptible':true," : "", shape, (long long)us);
    return itest_submit(doc);
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
    static const itest_island_t isl[] = {{"west=2x2", "west", 1, 4}};
    return itest_start(isl, 1);
}

static int group_teardown(void **state)
{
    (void)state;
    return itest_stop();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_preempts_lower_priority, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_spares_non_preemptible, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_evicts_fewest_lowest, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_bad_field, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
