/* sampler.h - a thread in atolld that watches the store for the dashboard.
 *
 * Every SAMPLER_WATCH_MS it asks SQLite whether another connection committed
 * (PRAGMA data_version); only then it hashes what the dashboard shows (live
 * jobs with their progress and pending reasons, their computations, the
 * newest event id) and calls on_change() when that hash moved. Worker
 * heartbeats therefore do not count as changes, job progress does.
 *
 * Every interval_ms it records one utilization sample (busy and down devices
 * per island, jobs per state) in the `samples` table (schema/003_samples.sql),
 * prunes rows older than retain_s and calls on_sample(). Then, when
 * keep_jobs_s > 0, it deletes the jobs that ended more than keep_jobs_s
 * ago (store_jobs_prune), in batches of SAMPLER_PRUNE_BATCH jobs, each
 * its own write transaction, for at most SAMPLER_PRUNE_BUDGET_MS a round:
 * a backlog (a first start with a long history) goes over several rounds
 * and other writers take turns between the batches.
 *
 * The callbacks run on the sampler thread and must be quick. */
#ifndef ATOLL_SAMPLER_H
#define ATOLL_SAMPLER_H

#include <jansson.h>
#include <stdint.h>

#include "store.h"

#define SAMPLER_WATCH_MS 200
#define SAMPLER_PRUNE_BATCH 64
#define SAMPLER_PRUNE_BUDGET_MS 250

typedef struct sampler_config {
    int interval_ms;                /* between samples (1000) */
    int retain_s;                   /* samples kept (3600) */
    int64_t keep_jobs_s;            /* ended jobs kept this long; 0: forever */
    void (*on_change)(void);        /* may be NULL */
    void (*on_sample)(void);        /* may be NULL */
} sampler_config_t;

int sampler_start(const sampler_config_t *cfg);   /* 0 or -1 */
void sampler_stop(void);                          /* joins the thread; idempotent */

/* Writes one sample round at time `at_us` and prunes rows older than
 * at_us - retain_s. 0 or -1. (The thread calls it; exposed for tests.) */
int sampler_record(store_t *st, int64_t at_us, int retain_s);

/* The samples newer than since_us, oldest first:
 * [{"t": us, "busy": {island: n}, "down": {island: n}, "jobs": {state: n}}].
 * New reference, NULL on error. */
json_t *sampler_series(store_t *st, int64_t since_us);

#endif
