/* sched_metrics.c - the scheduler's /metrics families (Prometheus text):
 * allocation attempts, admission rounds, the job-success notices
 * (sched_notify_freed), the thread's real-time priority and rests, and
 * the pass histograms (wall and CPU time).
 * Reads the scheduler thread's counters (scheduler.c, sched_admit.c; any
 * thread may). */
#include "sched_internal.h"

#include "util.h"

static size_t metrics_allocations(char *buf, size_t len, size_t cap)
{
    uint64_t attempts, successes;
    sched_counters(&attempts, &successes);
    return util_appendf(buf, len, cap,
                        "# HELP atoll_allocation_attempts_total Gang allocation attempts.\n"
                        "# TYPE atoll_allocation_attempts_total counter\n"
                        "atoll_allocation_attempts_total %lu\n"
                        "# HELP atoll_allocations_total Gang allocations that succeeded.\n"
                        "# TYPE atoll_allocations_total counter\n"
                        "atoll_allocations_total %lu\n",
                        (unsigned long)attempts, (unsigned long)successes);
}

static size_t metrics_rounds(char *buf, size_t len, size_t cap)
{
    uint64_t rounds, round_us, round_max_us, woke, skipped;
    sched_round_stats(&rounds, &round_us, &round_max_us);
    sched_freed_counts(&woke, &skipped);
    len = util_appendf(buf, len, cap,
                       "# HELP atoll_sched_freed_notices_total Jobs that succeeded and freed "
                       "devices, by whether that woke the scheduler (woke=\"no\": no job "
                       "waited for devices).\n"
                       "# TYPE atoll_sched_freed_notices_total counter\n"
                       "atoll_sched_freed_notices_total{woke=\"yes\"} %lu\n"
                       "atoll_sched_freed_notices_total{woke=\"no\"} %lu\n",
                       (unsigned long)woke, (unsigned long)skipped);
    return util_appendf(buf, len, cap,
                        "# HELP atoll_sched_rounds_total Admission rounds run.\n"
                        "# TYPE atoll_sched_rounds_total counter\n"
                        "atoll_sched_rounds_total %lu\n"
                        "# HELP atoll_sched_round_seconds_sum Time spent in admission rounds.\n"
                        "# TYPE atoll_sched_round_seconds_sum counter\n"
                        "atoll_sched_round_seconds_sum %.6f\n"
                        "# HELP atoll_sched_round_seconds_max The longest admission round.\n"
                        "# TYPE atoll_sched_round_seconds_max gauge\n"
                        "atoll_sched_round_seconds_max %.6f\n",
                        (unsigned long)rounds, (double)round_us / 1e6,
                        (double)round_max_us / 1e6);
}

/* The shared jobs' lookahead per island (sched_feed.c): each island's
 * three figures are read together (one feed pass's), then written family
 * by family, as the text format wants each family's samples in one group. */
static size_t metrics_feed(char *buf, size_t len, size_t cap)
{
    static const char *const fam[3][2] = {
        {"atoll_feed_budget_seconds", "An island's lookahead for shared jobs: expected device"
                                      " time it lets be dispatched and not finished."},
        {"atoll_feed_inflight_seconds", "Expected device time of the shared jobs' computations"
                                        " dispatched and not finished, after the last feed."},
        {"atoll_feed_inflight", "Shared jobs' computations dispatched and not finished on an"
                                " island, after the last feed."}};
    double v[SCHED_MAX_ISLANDS][3];
    int n = sched_cfg.nislands < SCHED_MAX_ISLANDS ? sched_cfg.nislands : SCHED_MAX_ISLANDS;
    for (int i = 0; i < n; i++)
        v[i][2] = sched_feed_gauge(i, &v[i][0], &v[i][1]);
    for (int f = 0; f < 3; f++) {
        len = util_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s gauge\n", fam[f][0], fam[f][1],
                           fam[f][0]);
        for (int i = 0; i < n; i++)
            len = util_appendf(buf, len, cap, "%s{island=\"%s\"} %.*f\n", fam[f][0],
                               sched_cfg.islands[i].name, f == 2 ? 0 : 6, v[i][f]);
    }
    return len;
}

/* Whether the scheduler thread runs real-time (--sched-priority), and its
 * rests between passes when it does (scheduler.c). */
static size_t metrics_rt(char *buf, size_t len, size_t cap)
{
    sched_rt_stats_t rt = sched_rt_stats();
    return util_appendf(buf, len, cap,
                        "# HELP atoll_scheduler_rt_priority The SCHED_FIFO priority the "
                        "scheduler thread runs at; 0: the default policy.\n"
                        "# TYPE atoll_scheduler_rt_priority gauge\n"
                        "atoll_scheduler_rt_priority %d\n"
                        "# HELP atoll_scheduler_rt_rests_total Times the real-time scheduler "
                        "thread slept before its next pass, its passes having used more than "
                        "half of the time beyond a burst, leaving the core to other threads.\n"
                        "# TYPE atoll_scheduler_rt_rests_total counter\n"
                        "atoll_scheduler_rt_rests_total %lu\n"
                        "# HELP atoll_scheduler_rt_burst_seconds What the real-time scheduler "
                        "thread had left, after its last pass, of the time it may run back to "
                        "back before resting; negative: a debt it rests off.\n"
                        "# TYPE atoll_scheduler_rt_burst_seconds gauge\n"
                        "atoll_scheduler_rt_burst_seconds %.6f\n",
                        rt.priority, (unsigned long)rt.rests, (double)rt.burst_left_us / 1e6);
}

size_t sched_metrics(char *buf, size_t len, size_t cap)
{
    len = metrics_allocations(buf, len, cap);
    len = metrics_rounds(buf, len, cap);
    len = metrics_rt(buf, len, cap);
    len = metrics_feed(buf, len, cap);
    len = util_hist_prom(buf, len, cap, sched_pass_histogram(SCHED_PASS_WALL),
                         "atoll_scheduler_pass_seconds",
                         "Duration of each admission and dispatch pass of the scheduler thread.");
    return util_hist_prom(buf, len, cap, sched_pass_histogram(SCHED_PASS_CPU),
                          "atoll_scheduler_pass_cpu_seconds",
                          "CPU time the scheduler thread spent in each admission and dispatch"
                          " pass (its wall time less the waits for a CPU or a lock).");
}
