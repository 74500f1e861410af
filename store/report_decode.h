/* report_decode.h - the pure decoding of a worker's host-task reports
 * (docs/worker-protocol.md, "Report" and "Batch"): everything that needs
 * no store, run by the thread that received the request (api_worker.c),
 * applied by store_progress.c, and fuzzed on its own
 * (tests/fuzz/fuzz_report.c).
 *
 * Every function returns 0 or an HTTP status with e filled; none keeps a
 * reference to its input. */
#ifndef ATOLL_REPORT_DECODE_H
#define ATOLL_REPORT_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gspmd.h"
#include "tensor.h"

/* Most reports in one batch (POST /v1/workers/{id}/reports). */
#define REPORT_BATCH_MAX 1024
/* Most listed values in one output: a piece of a global value (gspmd.h
 * "full_values"); the shards view lists only tensors of at most
 * GSPMD_SHARD_VALUES_MAX. One source for both limits: gspmd.h. */
#define REPORT_VALUES_MAX GSPMD_GLOBAL_VALUES_MAX

/* Most tensors in one output array (one per shard of the host task), and
 * so the most devices a worker may register with (api_worker.c). */
#define REPORT_SHARDS_MAX 4096

/* The largest stamp a report may carry (unix µs, 2^52: the year 2112).
 * Bounded so that the controller's arithmetic on stamps (busy times, the
 * feed's sums of idle gaps over 64 tasks) cannot overflow. */
#define REPORT_TIME_MAX_US ((int64_t)1 << 52)

/* One decoded output {"shape": [..], "sum": number|null, "values_f32"?:
 * base64 of the f32 elements (f32b64.h)}. */
typedef struct report_output {
    shape_t shape;              /* rank 0..TENSOR_MAX_RANK, dims >= 1 */
    int64_t numel;              /* <= TENSOR_MAX_ELEMS */
    int has_sum;                /* 0: the sum was null (non-finite) */
    double sum;
    float *values;              /* owned, numel of them; NULL when not listed */
} report_output_t;

/* Output name's tensor count n against the host task's nshards: 0, or
 * 400 naming "outputs.NAME". */
int report_output_count(const char *name, size_t n, int nshards, err_t *e);

/* The text of one shard's outputs-row meta entry after its shard id
 * (schema/023_task_outputs.sql: [shard, shape, sum or null, nvals]):
 * "[d0,..],SUM,NVALS]", SUM printed with 17 digits (the double comes back
 * bit for bit). */
#define REPORT_TAIL_MAX 160

/* One output of a prepared report: its tensors decoded, one per shard of
 * the host task, each with its meta tail. */
typedef struct report_prep_out {
    char *name;                 /* owned: a value name */
    int n;
    report_output_t *t;         /* owned, n of them */
    char (*tail)[REPORT_TAIL_MAX]; /* owned, n of them */
} report_prep_out_t;

/* 0 when a succeeded report's outputs out[0..nout) are exactly those of
 * its computation, `sig` (schema/031_comp_outputs.sql: "name:d0,d1;" per
 * output; NULL: not known, nothing checked): each name once, none other,
 * each tensor of the shape written there ("?": any). Else -1 with e set:
 * 400 naming `outputs` (one missing), `outputs.NAME` (not the
 * computation's) or `outputs.NAME[I].shape`; 500 when sig is not of that
 * form. */
int report_outputs_check(const char *sig, const report_prep_out_t *out, int nout, err_t *e);

/* A report checked and decoded as far as it can be without the store:
 * everything but the checks against its host task (fencing, the tensor
 * count per shard). Prepared by the thread that received it, so that the
 * store's one report applier (store_progress.c) spends its write turn on
 * SQL alone. */
typedef struct report_prep {
    int64_t task;
    int has_comp;               /* "comp" given: the computation of a run it is of */
    int32_t comp;               /* (schema/032); else 0 */
    const char *state;          /* "succeeded", "failed" or "cancelled" (static);
                                   NULL when refused */
    int64_t started_us, inputs_ready_us, finished_us;   /* 0 when not given */
    char *error;                /* owned: the report's "error", or NULL */
    char *unreachable_peer;     /* owned, or NULL */
    int nout;
    report_prep_out_t *out;     /* owned: the outputs of a succeeded report, else none */
    err_t e;                    /* e.status 400 (malformed) or 500 (out of memory):
                                   refused, nothing to apply; 0: prepared */
} report_prep_t;

/* Reading a report body (docs/worker-protocol.md, "Report" and "Batch").
 * The text is read in one pass by jscan.h, straight into report_prep_t:
 * fields known, *_us integers in 0..REPORT_TIME_MAX_US, a state of
 * succeeded/failed/cancelled, error a string, unreachable_peer a data
 * address of 1..63 bytes, outputs an object of value names
 * ([A-Za-z0-9_-], 1..NAME_MAX_LEN-1) each an array of 1..REPORT_SHARDS_MAX
 * tensors (one per shard of the task), each tensor decoded (shape, sum,
 * values_f32 of exactly its elements) with its meta tail printed; a
 * succeeded report keeps its outputs. Where a report has several faults,
 * the one answered is the first of: task, an unknown or bad field, state,
 * error, unreachable_peer, outputs' structure, a tensor (those only for a
 * succeeded report). Whenever anything is refused, jansson judges the
 * whole text as the router parses bodies (JSON_REJECT_DUPLICATES): text
 * it refuses is the body's 400 (field "body"), as for any endpoint; so a
 * body is refused as JSON exactly when jansson refuses it. */

/* A batch body {"reports": [1..REPORT_BATCH_MAX items]}, each item a
 * report with "task" (a positive integer). Returns 0 with *preps (n of
 * them: each prepared or refused alone; report_prep_clear each, then
 * free), or the body's refusal (400, e filled: field "body" or "reports";
 * 500 on OOM) with *preps NULL. */
int report_parse_batch(const char *body, size_t len, report_prep_t **preps, size_t *n,
                       err_t *e);

/* A single report body (no "task": the URL names it) for task. Returns
 * p->e.status: 0 (prepared), 400 (the body or a field) or 500. */
int report_parse_one(const char *body, size_t len, int64_t task, report_prep_t *p);

void report_prep_clear(report_prep_t *p);

/* Most segments in one logs body (POST /v1/workers/{id}/logs). */
#define REPORT_LOG_SEGS_MAX 4096
/* A log upload's body at most (a worker sends up to 512 KiB a request:
 * RUNLOG_POST_BYTES, workers/runlog.h). */
#define REPORT_LOG_BODY_MAX ((size_t)512 << 10)

/* A run of one stream's output (1 stdout, 2 stderr); data borrowed from
 * the body it was split from. */
typedef struct report_log_seg {
    int stream;
    const void *data;
    size_t len;
} report_log_seg_t;

/* Splits a logs body (docs/worker-protocol.md: segments [stream u8 1|2]
 * [length u32 LE][bytes]) into at most max segments, in order, covering
 * the body exactly. Returns the count (0..max; an empty body has none),
 * or -1 when a header or a length runs past the end, a stream is not 1 or
 * 2, or there are more than max. */
int report_log_segments(const void *body, size_t len, report_log_seg_t *segs, int max);

#endif
