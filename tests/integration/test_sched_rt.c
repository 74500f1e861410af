/* test_sched_rt.c - --sched-priority: the scheduler thread under SCHED_FIFO.
 *
 * atolld started with --sched-priority 7 puts its scheduler thread
 * (atoll-sched) under SCHED_FIFO at priority 7 when the kernel lets it
 * (CAP_SYS_NICE and an RT budget: this test asks the kernel the same for
 * a thread of its own first, since atolld inherits its privileges):
 * /proc/PID/task/TID/stat shows policy 1 and rt_priority 7, and /metrics'
 * atoll_scheduler_rt_priority says 7. Refused, atolld runs on under the
 * default policy, says why in its log and reports 0. A real-time thread
 * meters its passes (the meter's rule: test_sched_rest.c): after its
 * passes, among them those of a job whose host tasks go out in several
 * chunks, atoll_scheduler_rt_burst_seconds shows what is left of its
 * burst, above 0 and below the whole SCHED_RT_BURST_US (each pass drew on
 * it); under the default policy nothing is metered (0, and no rest). The
 * job's values are exact either way. A priority outside 0..99 is refused
 * at start (exit 2, naming the flag).
 *
 * Cluster: rt=2x2, one cpu worker of 4 devices. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define PRIORITY 7
/* SCHED_RT_BURST_US (scheduler/sched_internal.h), in seconds. */
#define SCHED_BURST_S 0.005
/* Computations of the chain: 1 host task each on the one worker, more than
 * the first chunk's 32 (SCHED_CHUNK_FIRST_TASKS), so later chunks follow
 * in passes run at once after the allocation's. */
#define CHAIN 100

/* Whether this process may put a thread under SCHED_FIFO (atolld, its
 * child, may then too). */
static void *try_fifo(void *arg)
{
    struct sched_param sp = {.sched_priority = 1};
    *(int *)arg = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0;
    return NULL;
}

static int fifo_allowed(void)
{
    int ok = 0;
    pthread_t t;
    if (pthread_create(&t, NULL, try_fifo, &ok) != 0)
        return 0;
    pthread_join(t, NULL);
    return ok;
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"rt=2x2"};
    static const char *const extra[] = {"--sched-priority", "7", NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    if (hx_worker_start(&itest_cluster, "rt", 4) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

/* The scheduler thread's rt_priority and policy (fields 40 and 41 of
 * /proc/PID/task/TID/stat); 0, or -1 when it was not found. */
static int sched_thread_policy(pid_t pid, int *rt_prio, int *policy)
{
    char dir[64], path[384], comm[32];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    struct dirent *de;
    int rc = -1;
    while (d && rc != 0 && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s/comm", dir, de->d_name);
        FILE *f = fopen(path, "r");
        int named = f && fgets(comm, sizeof comm, f) && strcmp(comm, "atoll-sched\n") == 0;
        if (f)
            fclose(f);
        if (!named)
            continue;
        char stat[1024] = "";
        snprintf(path, sizeof path, "%s/%s/stat", dir, de->d_name);
        if ((f = fopen(path, "r"))) {
            size_t n = fread(stat, 1, sizeof stat - 1, f);
            stat[n] = '\0';
            fclose(f);
        }
        /* Fields after the ")" that ends comm: field 3 is the first. */
        char *p = strrchr(stat, ')');
        for (int field = 2; p && field < 40; field++)
            p = strchr(p + 1, ' ');
        if (p && sscanf(p + 1, "%d %d", rt_prio, policy) == 2)
            rc = 0;
    }
    if (d)
        closedir(d);
    return rc;
}

/* Whether atolld's log holds text. */
static int log_has(const char *text)
{
    char buf[65536];
    FILE *f = fopen(itest_cluster.atolld.log_path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    return strstr(buf, text) != NULL;
}

static void test_scheduler_thread_is_fifo(void **state)
{
    (void)state;
    int allowed = fifo_allowed(), prio = -1, policy = -1;
    T_CHECK(sched_thread_policy(itest_cluster.atolld.pid, &prio, &policy) == 0,
            "no atoll-sched thread in atolld");
    double gauge = hx_metric(&itest_client, "atoll_scheduler_rt_priority");
    if (allowed) {
        T_CHECK(policy == SCHED_FIFO && prio == PRIORITY,
                "scheduler thread policy %d priority %d, expected SCHED_FIFO %d", policy, prio,
                PRIORITY);
        T_CHECK(gauge == PRIORITY, "atoll_scheduler_rt_priority %.0f", gauge);
    } else {
        T_CHECK(policy == SCHED_OTHER, "scheduler thread policy %d without the privilege",
                policy);
        T_CHECK(gauge == 0, "atoll_scheduler_rt_priority %.0f although refused", gauge);
        T_CHECK(log_has("SCHED_FIFO priority 7 refused"), "the refusal is not logged");
    }
}

/* c0 = 1, c(k) = c(k-1) + 1 on every shard of a 2x2 slice: the last is
 * CHAIN on each. */
static char *chain_doc(void)
{
    size_t cap = 256 + (size_t)CHAIN * 200, len = 0;
    char *d = malloc(cap);
    if (!d)
        return NULL;
    len += (size_t)snprintf(d + len, cap - len,
                            "{\"name\":\"rt-chain\",\"slices\":{\"s\":{\"shape\":[2,2]}},"
                            "\"computations\":[");
    for (int k = 0; k < CHAIN; k++) {
        if (k == 0)
            len += (size_t)snprintf(d + len, cap - len,
                                    "{\"name\":\"c0\",\"slice\":\"s\",\"ops\":[{\"op\":\"fill\","
                                    "\"out\":\"x\",\"shape\":[],\"value\":1}],"
                                    "\"outputs\":[\"x\"]}");
        else
            len += (size_t)snprintf(d + len, cap - len,
                                    ",{\"name\":\"c%d\",\"slice\":\"s\",\"ops\":[{\"op\":"
                                    "\"input\",\"out\":\"p\",\"from\":\"c%d.x\"},{\"op\":"
                                    "\"fill\",\"out\":\"one\",\"shape\":[],\"value\":1},"
                                    "{\"op\":\"add\",\"out\":\"x\",\"args\":[\"p\",\"one\"]}],"
                                    "\"outputs\":[\"x\"]}", k, k - 1);
    }
    snprintf(d + len, cap - len, "]}");
    return d;
}

static void test_passes_are_metered(void **state)
{
    (void)state;
    int allowed = fifo_allowed();
    char *doc = chain_doc();
    int64_t id = 0;
    T_CHECK(doc && hx_job_submit(&itest_client, doc, &id, NULL) == 201, "submit failed");
    free(doc);
    json_t *job = itest_wait_state(id, "succeeded");
    json_decref(job);
    json_t *res = hx_job_result(&itest_client, id);
    char key[32];
    snprintf(key, sizeof key, "c%d.x", CHAIN - 1);
    for (int shard = 0; shard < 4; shard++) {
        json_t *t = hx_result_shard(res, key, shard);
        double v = json_number_value(json_array_get(json_object_get(t, "values"), 0));
        T_CHECK(t && v == (double)CHAIN, "%s shard %d is %g, expected %d", key, shard, v,
                CHAIN);
    }
    json_decref(res);
    /* On a slow machine the chunks' passes may end in debt (a rest pays
     * it off); the passes the idle scheduler still runs (one a second at
     * least) earn the burst back. */
    double left = hx_metric(&itest_client, "atoll_scheduler_rt_burst_seconds");
    for (int64_t until = hx_now_ms() + 15000; allowed && left <= 0 && hx_now_ms() < until;) {
        hx_sleep_ms(ITEST_POLL_MS);
        left = hx_metric(&itest_client, "atoll_scheduler_rt_burst_seconds");
    }
    double rests = hx_metric(&itest_client, "atoll_scheduler_rt_rests_total");
    if (allowed)
        T_CHECK(left > 0 && left < SCHED_BURST_S,
                "burst left %.6f s after the passes (whole: %.3f s)", left, SCHED_BURST_S);
    else
        T_CHECK(left == 0 && rests == 0, "metered (%.6f s left, %.0f rests) under the default"
                " policy", left, rests);
}

/* atolld --sched-priority VALUE must exit 2 naming the flag. */
static void refused(const char *value)
{
    char bin[HX_PATH_MAX], db[HX_PATH_MAX], err[512] = "";
    snprintf(bin, sizeof bin, "%s/atolld", hx_bin_dir());
    snprintf(db, sizeof db, "%s/bad.db", itest_cluster.dir);
    char *argv[] = {bin, "--sched-priority", (char *)value, "--db", db, "--listen",
                    "127.0.0.1:0", "--island", "x=1x1", NULL};
    hx_proc_t p = {0};
    snprintf(p.name, sizeof p.name, "atolld-bad");
    snprintf(p.log_path, sizeof p.log_path, "%s/bad.err", itest_cluster.dir);
    T_CHECK(hx_proc_spawn(&p, argv, 0) == 0, "cannot start %s", bin);
    int st = hx_proc_stop(&p, 0, 10000);
    T_CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 2,
            "--sched-priority %s: exit status %d, expected 2", value, st);
    FILE *f = fopen(p.log_path, "r");
    size_t n = f ? fread(err, 1, sizeof err - 1, f) : 0;
    err[n] = '\0';
    if (f)
        fclose(f);
    T_CHECK(strstr(err, "--sched-priority") != NULL, "stderr does not name the flag: %s", err);
}

static void test_bad_priority_refused(void **state)
{
    (void)state;
    refused("100");
    refused("-1");
    refused("high");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scheduler_thread_is_fifo),
        cmocka_unit_test(test_passes_are_metered),
        cmocka_unit_test(test_bad_priority_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
