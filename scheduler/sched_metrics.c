/* sched_metrics.c - the scheduler's /metrics families (Prometheus text):
 * allocation attempts, admission rounds and the pass latency histogram.
 * Reads the scheduler thread's counters (scheduler.c, sched_admit.c; any
 * thread may). */
#include "scheduler.h"

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
    uint64_t rounds, round_us, round_max_us;
    sched_round_stats(&rounds, &round_us, &round_max_us);
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

static size_t metrics_pass(char *buf, size_t len, size_t cap)
{
    static const double bounds[SCHED_PASS_NBUCKETS] = SCHED_PASS_BOUNDS_S;
    uint64_t cum[SCHED_PASS_NBUCKETS], count, sum_us;
    sched_pass_hist(cum, &count, &sum_us);
    len = util_appendf(buf, len, cap,
                       "# HELP atoll_scheduler_pass_seconds Duration of each admission and"
                       " dispatch pass of the scheduler thread.\n"
                       "# TYPE atoll_scheduler_pass_seconds histogram\n");
    for (int b = 0; b < SCHED_PASS_NBUCKETS; b++)
        len = util_appendf(buf, len, cap, "atoll_scheduler_pass_seconds_bucket{le=\"%g\"} %lu\n",
                           bounds[b], (unsigned long)cum[b]);
    return util_appendf(buf, len, cap,
                        "atoll_scheduler_pass_seconds_bucket{le=\"+Inf\"} %lu\n"
                        "atoll_scheduler_pass_seconds_sum %.6f\n"
                        "atoll_scheduler_pass_seconds_count %lu\n",
                        (unsigned long)count, (double)sum_us / 1e6, (unsigned long)count);
}

size_t sched_metrics(char *buf, size_t len, size_t cap)
{
    len = metrics_allocations(buf, len, cap);
    len = metrics_rounds(buf, len, cap);
    return metrics_pass(buf, len, cap);
}
