/* wreport.h - the reporting thread: task reports leave the device threads
 * through a queue, so a slow or restarting controller never stalls a
 * device. Reports are sent in order, in batches of what the queue holds
 * (POST /v1/workers/{id}/reports), each batch's body under the controller's
 * cap ("max_body" of the registration answer); a single report above it is
 * sent without its tensors' values (sums and shapes kept) rather than
 * refused, so its job still ends. A batch that cannot be delivered because
 * the controller is unreachable (or answers 5xx) is retried with backoff;
 * 4xx answers are final: 404/409 (no longer ours, already reported) are
 * logged; a report refused for its content (400, 413, 422) is followed by
 * a "failed" report of its task naming the refusal, so its job ends
 * instead of waiting for a report that can never be accepted.
 *
 * Holding: a report the executor marks as one that may wait (a succeeded
 * task whose attempt says "hold_reports" and which has a later task of the
 * attempt queued here: exec_report_fn) stays queued until a report that
 * may not wait arrives, WREPORT_BATCH_MAX are queued, or it waited
 * hold_ms. A chain of computations so costs one request per batch, not one
 * per computation, while the last report of an attempt here, every
 * failure and every cancellation go at once (the queue stays in order, so
 * they take what is held with them).
 *
 * Due times: no report leaves before its due time, when its task ends on
 * its devices (a `sim` worker's host runs up to EXEC_SIM_AHEAD_US ahead of
 * them), so the controller never learns of an end before it happened; the
 * queue waits for its oldest report's due time, keeping the order. A
 * stopping reporter sends what it holds at once.
 *
 * Ownership: wreport_push() and wreport_exec_fn() take the body: the
 * report as compact JSON text (an object without "task" and "comp", which
 * are added when it is sent), malloc'd; the reporter frees it. */
#ifndef ATOLL_WREPORT_H
#define ATOLL_WREPORT_H

#include <jansson.h>
#include <stdint.h>

#include "wclient.h"

typedef struct wreport wreport_t;

/* wc is borrowed and must outlive the reporter; hold_ms: how long a held
 * report may wait (0: none waits). NULL on failure. */
wreport_t *wreport_start(wclient_t *wc, int64_t hold_ms);
/* Queues a report of task (its computation comp, named in the report
 * when >= 0) to send at once (body taken; NULL is ignored). */
void wreport_push(wreport_t *wr, int64_t task, int32_t comp, char *body);
/* exec_report_fn adapter (ctx: the wreport_t): queues the report, held
 * when `hold`, due at due_us (monotonic; 0: at once). */
void wreport_exec_fn(void *ctx, int64_t task, int32_t comp, char *body, int hold,
                     int64_t due_us);
/* Sends what is queued for at most timeout_ms, then stops the thread and
 * frees; undelivered reports are logged and dropped. */
void wreport_stop(wreport_t *wr, int64_t timeout_ms);

#endif
