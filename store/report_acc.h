/* report_acc.h - device time of the reports applied in one transaction,
 * summed in memory and written once at its end.
 *
 * Why: every succeeded host task adds its busy time to each of its
 * devices and to its job's tenant. Written per report, a batch of a
 * chain's 64 reports from one worker of 4 devices rewrote the same 4
 * device rows and the same tenant row 64 times each. Summed, they are
 * written once per transaction (report_acc_flush), in the transaction, so
 * what readers see is unchanged.
 *
 * A report adds to it only once nothing can refuse it any more
 * (store_progress.c's report_apply); a store failure drops the whole
 * transaction, and the accumulator with it.
 *
 * Ownership: the accumulator owns its arrays; report_acc_free() releases
 * them (also after a failed flush). Not thread-safe: one per transaction,
 * on the thread that runs it. */
#ifndef ATOLL_REPORT_ACC_H
#define ATOLL_REPORT_ACC_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

typedef struct report_acc_dev {
    int64_t island, idx, us;
} report_acc_dev_t;

typedef struct report_acc_job {
    int64_t job, us;
} report_acc_job_t;

typedef struct report_acc {
    report_acc_dev_t *dev;
    size_t ndev, capdev;
    report_acc_job_t *job;
    size_t njob, capjob;
} report_acc_t;

#define REPORT_ACC_INIT {NULL, 0, 0, NULL, 0, 0}

/* Adds us to island devices first + d for each d of devices_txt (a JSON
 * array of non-negative worker-local device numbers, as the scheduler
 * wrote it), and job_us to the job's tenant. 0, or -1 (OOM or a
 * malformed devices text: nothing added). */
int report_acc_add(report_acc_t *a, int64_t island, int64_t first, const char *devices_txt,
                   int64_t us, int64_t job, int64_t job_us);
/* Writes the sums (one UPDATE per device, one tenant upsert per job) in
 * the caller's transaction and empties a. 0 or -1. */
int report_acc_flush(store_t *st, report_acc_t *a);
void report_acc_free(report_acc_t *a);

#endif
