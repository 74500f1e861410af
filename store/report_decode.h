/* report_decode.h - the pure decoding of a worker's host-task report
 * (docs/worker-protocol.md, "Report" and "Batch"): structure checks that
 * need no store, shared by api_worker.c (outputs' names and values, the
 * batch envelope) and store_progress.c (fields, state, outputs' shapes and
 * values), and fuzzed on their own (tests/fuzz/fuzz_report.c).
 *
 * Every function returns 0 or an HTTP status with e filled; none keeps a
 * reference to its input. */
#ifndef ATOLL_REPORT_DECODE_H
#define ATOLL_REPORT_DECODE_H

#include <jansson.h>
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

/* The batch envelope {"reports": [1..REPORT_BATCH_MAX items]}: sets
 * *reports (borrowed from body) or returns 400. */
int report_batch_envelope(const json_t *body, const json_t **reports, err_t *e);

/* One batch item: its task id (positive) and the report without "task" (a
 * shallow copy, new reference), or NULL with e filled (400, or 500 on OOM). */
json_t *report_batch_item(const json_t *item, int64_t *task, err_t *e);

/* Most tensors in one output array (one per shard of the host task), and
 * so the most devices a worker may register with (api_worker.c). */
#define REPORT_SHARDS_MAX 4096

/* The report's "outputs" as far as names and value types go: each key a
 * value name ([A-Za-z0-9_-], 1..NAME_MAX_LEN-1, as the compiler allows),
 * each entry an array of 1..REPORT_SHARDS_MAX tensors (one per shard of
 * the host task, in the order of its "shards") and each listed value a
 * number or null (null = non-finite). 0 or 400. The length against the
 * task's shard count is report_output_count's (it needs the task). */
int report_outputs_check(const json_t *body, err_t *e);

/* The largest stamp a report may carry (unix µs, 2^52: the year 2112).
 * Bounded so that the controller's arithmetic on stamps (busy times, the
 * feed's sums of idle gaps over 64 tasks) cannot overflow. */
#define REPORT_TIME_MAX_US ((int64_t)1 << 52)

/* The report's fields: only known ones, *_us integers in
 * 0..REPORT_TIME_MAX_US, a state of succeeded/failed/cancelled (*state
 * points into body), error a string, unreachable_peer a data address. 0 or
 * 400. */
int report_validate(const json_t *body, const char **state, err_t *e);

/* One decoded output {"shape": [..], "sum": number|null, "values_f32"?:
 * base64 of the f32 elements (f32b64.h)}. */
typedef struct report_output {
    shape_t shape;              /* rank 0..TENSOR_MAX_RANK, dims >= 1 */
    int64_t numel;              /* <= TENSOR_MAX_ELEMS */
    int has_sum;                /* 0: the sum was null (non-finite) */
    double sum;
    float *values;              /* owned, numel of them; NULL when not listed */
} report_output_t;

/* Decodes tensor o, element `index` of output `name`'s array, into out
 * (report_output_clear() it in every case). Returns 0, 400 (e filled,
 * field "outputs.NAME[INDEX]") or -1 on OOM. */
int report_output_decode(const char *name, int index, const json_t *o, report_output_t *out,
                         err_t *e);
void report_output_clear(report_output_t *out);

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
    const char *name;           /* borrowed from the prepared body */
    int n;
    report_output_t *t;         /* owned, n of them */
    char (*tail)[REPORT_TAIL_MAX]; /* owned, n of them */
} report_prep_out_t;

/* A report checked and decoded as far as it can be without the store:
 * everything but the checks against its host task (fencing, the tensor
 * count per shard). Prepared by the thread that received it, so that the
 * store's one report applier (store_progress.c) spends its write turn on
 * SQL alone. */
typedef struct report_prep {
    int64_t task;
    json_t *body;               /* owned: the report without "task"; NULL when refused
                                   before it could be read */
    const char *state;          /* points into body */
    int nout;
    report_prep_out_t *out;     /* owned: the outputs of a succeeded report, else none */
    err_t e;                    /* e.status 400 (malformed) or 500 (out of memory):
                                   refused, nothing to apply; 0: prepared */
} report_prep_t;

/* Prepares a report for task: takes body (one reference; NULL: out of
 * memory) and checks its fields and state (report_validate) and outputs
 * (report_outputs_check), then, for a succeeded report, decodes every
 * tensor (report_output_decode) and prints its meta tail. Returns
 * p->e.status: 0, 400 or 500. report_prep_clear() p in every case. */
int report_prepare(json_t *body, int64_t task, report_prep_t *p);
/* A batch item ({"task": N, ...}): report_batch_item, then report_prepare. */
int report_prepare_item(const json_t *item, report_prep_t *p);
void report_prep_clear(report_prep_t *p);

/* Most segments in one logs body (POST /v1/workers/{id}/logs). */
#define REPORT_LOG_SEGS_MAX 4096

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
