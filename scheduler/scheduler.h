/* scheduler.h - the scheduler thread of atolld.
 *
 * One thread owns admission: it merges the heads of the tenants' queues
 * (each tenant's next jobs by priority then age; across tenants priority,
 * then fair share, then age), looking at most SCHED_LOOKAHEAD waiting jobs
 * per tenant per round, so a round's cost does not grow with the queue; it
 * gang-allocates all slices of a job at once (alloc.h), gives every
 * computation an island sequence number, and writes the job's placement and
 * all its host tasks (one per computation and worker holding some of its
 * shards) in one transaction (parallel asynchronous dispatch: every host
 * task is pending at once; in sequential mode a computation's host tasks
 * stay blocked until its producers succeeded). It also expires worker leases. Other
 * threads only call sched_notify() after changing something it cares about. */
#ifndef ATOLL_SCHEDULER_H
#define ATOLL_SCHEDULER_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "util.h"

/* Islands one controller schedules, at most (atolld refuses more). */
#define SCHED_MAX_ISLANDS 16

typedef struct sched_config {
    const island_desc_t *islands;   /* borrowed; must outlive the scheduler */
    int nislands;                   /* 1..SCHED_MAX_ISLANDS */
    int64_t lease_us;               /* worker heartbeat lease */
    int sequential;                 /* 1: --dispatch sequential */
    void (*on_dispatch)(void);      /* called after host tasks became pending */
    int64_t round_admit_us;         /* a round stops placing jobs past this (µs) once it
                                     * placed one; 0: SCHED_ROUND_ADMIT_US (sched_admit.c) */
    int64_t chunk_us;               /* a pass writes host tasks for about this long (µs)
                                     * from its start; 0: SCHED_CHUNK_US (sched_internal.h) */
    int vtimes_max;                 /* the feed's virtual times kept at most (tenants, or
                                     * jobs without one); 0 or more than VT_MAX: VT_MAX
                                     * (sched_feed.c) */
    int rt_priority;                /* 1..99: the scheduler thread runs under SCHED_FIFO at
                                     * this priority (--sched-priority; needs
                                     * CAP_SYS_NICE, else a warning and the default
                                     * policy); 0: the default policy */
} sched_config_t;

int sched_start(const sched_config_t *cfg);
/* 1 when the job's slices could be placed together on the empty islands,
 * 0 when never (the API answers 422: it would wait forever), -1 out of
 * memory. Any thread, after sched_start(). */
int sched_ever_fits(const job_plan_t *plan);
/* Wakes the scheduler: a job arrived or ended, a worker came or went. */
void sched_notify(void);
/* A job succeeded: its devices were freed and nothing went back to the
 * queue. Wakes the scheduler only when its last round left a job waiting
 * (or could not tell: a store error, a round cut short, shared jobs live,
 * host tasks left to write), else the next job's own arrival wakes it.
 * Any thread. */
void sched_notify_freed(void);
/* Calls of sched_notify_freed that woke the scheduler and that did not,
 * since start; for /metrics (atoll_sched_freed_notices_total). */
void sched_freed_counts(uint64_t *woke, uint64_t *skipped);
/* A job just stored, with its document (doc_bytes: the size of its text)
 * and the plan compiled from it (as the scheduler would compile it: same
 * islands): the scheduler takes both (owns and frees them) and uses them
 * when it first looks at the job instead of reading and compiling the
 * document again (a 2,048-device job's compile was 0.3-1 ms of a
 * scheduler pass; a 1,000-computation chain of ~280 KiB cost the
 * scheduler thread 137-152 ms of CPU per job with it read and compiled
 * again, 130-132 ms without). Any thread. Offers wait in memory, so they are bounded by their
 * documents' text together (SCHED_OFFER_BUDGET_BYTES: a parsed document is
 * several times its text) and by count (SCHED_OFFERS); past either the
 * oldest are dropped, a document larger than the whole budget is refused,
 * and a dropped or refused job is compiled when its turn comes. */
#define SCHED_OFFERS 64
#define SCHED_OFFER_BUDGET_BYTES (4 * 1024 * 1024)
void sched_plan_offer(int64_t id, json_t *doc, job_plan_t *plan, size_t doc_bytes);
/* Allocation attempts (alloc_gang calls for queued jobs) and how many
 * succeeded, since start; for /metrics. */
void sched_counters(uint64_t *attempts, uint64_t *successes);
/* Admission rounds since start, their total and longest duration (µs);
 * for /metrics (atoll_sched_round_*). */
void sched_round_stats(uint64_t *rounds, uint64_t *total_us, uint64_t *max_us);
/* The scheduler-pass histograms (/metrics atoll_scheduler_pass_seconds,
 * SCHED_PASS_WALL; atoll_scheduler_pass_cpu_seconds, SCHED_PASS_CPU): each
 * pass is one admission and dispatch round of the scheduler thread, timed
 * from its first read to its last commit, in wall time and in the
 * thread's CPU time; buckets from 50 µs to 1 s. Any thread may read them
 * (util_hist_read); static, never freed. */
#define SCHED_PASS_WALL 0
#define SCHED_PASS_CPU 1
const util_hist_t *sched_pass_histogram(int which);
/* The scheduler thread's real-time state, for /metrics: the SCHED_FIFO
 * priority it runs at (0 under the default policy: none asked, or
 * refused), how many times it rested between two passes so as not to hold
 * a core, and what was left of its burst after its last pass (µs;
 * negative: a debt it rests off; 0 under the default policy, which meters
 * nothing). scheduler.c; any thread. */
typedef struct sched_rt_stats {
    int priority;
    uint64_t rests;
    int64_t burst_left_us;
} sched_rt_stats_t;
sched_rt_stats_t sched_rt_stats(void);
/* Appends the scheduler's /metrics families (Prometheus text: allocation
 * attempts, rounds, the pass histogram) to buf at len, capacity cap;
 * returns the new length (util_appendf). Any thread. sched_metrics.c */
size_t sched_metrics(char *buf, size_t len, size_t cap);
/* Stops admission and joins the thread. */
void sched_stop(void);

#endif
