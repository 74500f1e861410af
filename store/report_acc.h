/* report_acc.h - what the reports applied in one transaction write,
 * gathered in memory and written once, in the transaction, before it
 * commits.
 *
 * Why: a chain's reports come in batches (a worker holds them), and the
 * applier combines the batches that queued into one transaction. Written
 * per report, the 4 reports of one computation (one per worker) updated
 * its progress row 4 times and read it back 4 times, each report's output
 * was an INSERT of its own, and a batch of 64 reports from one worker of
 * 4 devices rewrote the same 4 device rows and the same tenant row 64
 * times each, and every computation that succeeded rewrote its job's row.
 * Gathered, a computation's progress is at most one UPDATE per
 * transaction (and with its carry across transactions, comp_carry.h, one
 * per computation), a job's count of succeeded computations one UPDATE, outputs
 * go in multi-row INSERTs, device time and tenant usage one UPDATE per
 * device run and per job.
 *
 * Order: report_acc_flush_outputs() and the caller's flush of the
 * computations (store_progress.c, progress_flush) must run before anything
 * in the transaction that reads or resets what they write: a job's failure
 * or requeue (which deletes its outputs and zeroes its computations), and
 * the commit. Successes commute (sums, MIN and MAX of stamps), so holding
 * them until then changes no result; store_progress.c flushes them before
 * every failed report it applies.
 *
 * A report adds to it only once nothing can refuse it any more
 * (store_progress.c's report_apply); a store failure drops the whole
 * transaction, and the accumulator with it.
 *
 * Ownership: the accumulator owns its arrays and each output's meta and
 * values; an output's value name is borrowed from the report it came from,
 * which outlives the transaction. report_acc_free() releases everything
 * (also after a failed flush). Not thread-safe: one per transaction, on
 * the thread that runs it. */
#ifndef ATOLL_REPORT_ACC_H
#define ATOLL_REPORT_ACC_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* A host task's row as the applier read it under its report's
 * transaction (store_progress.c's task_take), with its job's state;
 * report_row_clear() it once taken. */
typedef struct report_row {
    int64_t job, attempt, comp, island, job_attempt;
    int64_t first, ncomps, done;    /* its run (schema/032): comp_idx, ncomps, done */
    int64_t total;              /* comp's shards_total, once a success's outputs were
                                 * checked (store_progress.c); else 0 */
    int nshards;
    int shared;                 /* the job's `shared` */
    int64_t *shards;            /* owned: nshards shard indexes, increasing */
    char *shards_txt;           /* owned: the same as JSON text, for messages */
    char *devices_txt;          /* owned: the worker-local devices of the shards (JSON) */
    char job_state[16];
} report_row_t;

/* Frees what r owns and empties it. */
void report_row_clear(report_row_t *r);
/* A deep copy of src into dst. 0, or -1 (OOM: dst empty). */
int report_row_copy(report_row_t *dst, const report_row_t *src);

/* A run (schema/032) of which this transaction took reports without
 * ending it: its row, `done` advanced past them, and the first report's
 * started and inputs-ready stamps. The row is read once per transaction
 * and its progress written once, at the flush (store_progress.c), not a
 * read and a write per computation. */
typedef struct report_acc_run {
    int64_t task, worker;
    report_row_t row;           /* owned */
    int64_t t0, t1;
} report_acc_run_t;

typedef struct report_acc_dev {
    int64_t island, idx, us;
} report_acc_dev_t;

typedef struct report_acc_job {
    int64_t job, us;
} report_acc_job_t;

/* A computation's progress from this transaction's reports of one job
 * attempt: shards done, the earliest start and the latest inputs-ready
 * and finish stamps. */
typedef struct report_acc_comp {
    int64_t job, attempt, comp;
    int unblocks;               /* its success may release blocked computations:
                                 * not a shared job's (fed), nor one of a run (a
                                 * run is written only for an exclusive job under
                                 * parallel dispatch, which blocks none) */
    int64_t total;              /* the computation's shards_total; 0: not known */
    int64_t shards;
    int64_t t0, t1, t2;
    int64_t busy_us;            /* sum over its reports of (t2 - t1) x their shards */
} report_acc_comp_t;

/* Computations of a job that succeeded in this transaction (counted into
 * jobs.comps_done once per job, not once per computation). */
typedef struct report_acc_done {
    int64_t job, comps;
} report_acc_done_t;

/* One outputs row (schema/023_task_outputs.sql) waiting to be written. */
typedef struct report_acc_out {
    int64_t job, comp, shard0;
    const char *value;          /* borrowed from the report */
    char *meta;                 /* owned, NUL-terminated */
    size_t meta_len;
    void *vals;                 /* owned, or NULL */
    size_t vals_len;
} report_acc_out_t;

typedef struct report_acc {
    report_acc_dev_t *dev;
    size_t ndev, capdev;
    size_t grp_at, grp_n;       /* the last report's devices: dev[grp_at..grp_at+grp_n) */
    report_acc_job_t *job;
    size_t njob, capjob;
    report_acc_comp_t *comp;    /* in order of first report */
    size_t ncomp, capcomp;
    report_acc_out_t *out;      /* in order of report */
    size_t nout, capout;
    report_acc_done_t *done;    /* in order of first success */
    size_t ndone, capdone;
    report_acc_run_t *run;      /* runs taken in part, unordered */
    size_t nrun, caprun;
} report_acc_t;

#define REPORT_ACC_INIT {NULL, 0, 0, 0, 0, NULL, 0, 0, NULL, 0, 0, NULL, 0, 0, NULL, 0, 0, NULL, 0, 0}

/* Adds us to island devices first + d for each d of devices_txt (a JSON
 * array of non-negative worker-local device numbers, as the scheduler
 * wrote it), and job_us to the job's tenant. 0, or -1 (OOM or a
 * malformed devices text: nothing added). A report on the same devices
 * as the one added just before (a worker's batch of a chain: every
 * computation on its same devices) adds into that one's entries, and a
 * job's time into its last entry when that is the same job: a batch of
 * 50 computations on 4 devices keeps 4 entries, not 200, for
 * report_acc_flush to sort. */
int report_acc_add(report_acc_t *a, int64_t island, int64_t first, const char *devices_txt,
                   int64_t us, int64_t job, int64_t job_us);
/* Adds nshards done and the stamps to computation comp of job attempt
 * (one entry per computation and attempt; total is its shards_total, 0
 * when not known), and the report's device time, (t2 - t1) x nshards,
 * saturating. 0, or -1 (OOM: nothing added). */
int report_acc_comp(report_acc_t *a, int64_t job, int64_t attempt, int64_t comp, int unblocks,
                    int64_t total, int64_t nshards, int64_t t0, int64_t t1, int64_t t2);
/* Counts one more succeeded computation of job. 0, or -1 (OOM). */
int report_acc_job_done(report_acc_t *a, int64_t job);
/* Queues an outputs row; takes meta and vals (malloc'd) whatever it
 * returns. 0, or -1 (OOM: nothing added, both freed). */
int report_acc_output(report_acc_t *a, int64_t job, int64_t comp, const char *value,
                      int64_t shard0, char *meta, size_t meta_len, void *vals, size_t vals_len);
/* Writes the queued outputs rows (INSERT OR REPLACE, several rows a
 * statement) and empties that queue. 0 or -1. */
int report_acc_flush_outputs(store_t *st, report_acc_t *a);
/* Writes the device and tenant sums (one UPDATE per device run, one
 * tenant upsert per job) in the caller's transaction and empties them.
 * Outputs and computations must have been flushed before. 0 or -1. */
int report_acc_flush(store_t *st, report_acc_t *a);
/* The run entry of (task, worker), or NULL. */
report_acc_run_t *report_acc_run_find(report_acc_t *a, int64_t task, int64_t worker);
/* Adds the run entry of (task, worker): a copy of row, with stamps t0 and
 * t1. 0, or -1 (OOM: nothing added). */
int report_acc_run_add(report_acc_t *a, int64_t task, int64_t worker, const report_row_t *row,
                       int64_t t0, int64_t t1);
/* Removes entry r (one of a's), freeing its row. */
void report_acc_run_drop(report_acc_t *a, report_acc_run_t *r);
void report_acc_free(report_acc_t *a);

#endif
