/* wclient.h - the worker's HTTP client to the controller (libcurl + Jansson).
 *
 * One call = one HTTP exchange of docs/worker-protocol.md; calls return the
 * HTTP status, or -1 when the controller could not be reached (connection
 * refused, timeout, aborted). Retrying is the caller's policy, helped by
 * wclient_sleep_backoff() and wclient_reregister().
 *
 * Thread safety: every function may be called from any thread (each call
 * uses its own curl handle; curl_global_init() must have run first).
 * The current registration (id, lease) is guarded by a mutex. */
#ifndef ATOLL_WCLIENT_H
#define ATOLL_WCLIENT_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdint.h>

#include "jtext.h"

/* atolld's default --max-body: assumed until the registration answer says. */
#define WCLIENT_MAX_BODY_DEFAULT ((size_t)1 << 20)

typedef struct wclient_reg_req {
    const char *island;
    int devices;
    const char *backend;
    const char *data_addr;
    const char *ucx_address;    /* base64 of the data plane's UCX worker address; NULL: none */
} wclient_reg_req_t;

typedef struct wclient wclient_t;

/* Copies base_url (trailing '/' removed) and the registration request.
 * NULL on OOM. */
wclient_t *wclient_new(const char *base_url, const wclient_reg_req_t *req);
/* Optional: a bearer token sent with every request and a CA file for
 * https://. Strings are copied. Returns 0 or -1 (out of memory). */
int wclient_set_auth(wclient_t *wc, const char *token, const char *ca_file);
void wclient_free(wclient_t *wc);

/* Generic exchange: body (borrowed, may be NULL) is sent as JSON; a JSON
 * answer is parsed into *resp (new reference, NULL when none or not JSON;
 * resp may be NULL). abort_flag (may be NULL) cuts the transfer short once
 * it becomes non-zero. */
int wclient_call(wclient_t *wc, const char *method, const char *path, const json_t *body,
                 long timeout_ms, const atomic_int *abort_flag, json_t **resp);

/* POST /v1/workers. On 201 records id, lease_ms, max_body and the worker's own
 * credential ("secret", sent as X-Atoll-Worker-Secret by the calls below
 * when their id is the current one) and, when resp is not NULL, hands over
 * the answer (new reference). Other statuses: *resp is the problem
 * document if any. */
int wclient_register(wclient_t *wc, json_t **resp);
/* The backoff before the next registration try, after an answer (status,
 * problem document): *delay as it stands, except when a live worker holds
 * our data_addr (409, field "data_addr"), usually our own previous process
 * (restarted on a fixed --data-listen) whose lease runs out within
 * seconds: then at most WCLIENT_ADDR_HELD_RETRY_MS, not the backoff's 5 s,
 * so the worker comes up about a lease after its predecessor's last call.
 * Returns whether the address was held. */
#define WCLIENT_ADDR_HELD_RETRY_MS 500
int wclient_register_backoff(int status, const json_t *resp, int *delay);
/* Registers again unless another thread already replaced stale_id; retries
 * with backoff (wclient_register_backoff) until it succeeds or *stop becomes
 * non-zero. Returns 0 when registered, -1 when stopped. */
int wclient_reregister(wclient_t *wc, int64_t stale_id, const atomic_int *stop);

int64_t wclient_id(wclient_t *wc);         /* -1 before registration */
int wclient_lease_ms(wclient_t *wc);
/* The controller's request body cap from the registration answer
 * ("max_body"), WCLIENT_MAX_BODY_DEFAULT until then or when it said none. */
size_t wclient_max_body(wclient_t *wc);

/* body (borrowed; NULL = {}) is e.g. {"store": {"objects", "bytes", "cap_bytes"}}. */
int wclient_heartbeat(wclient_t *wc, int64_t id, const json_t *body);
/* GET tasks; on 200, *answer holds the answer's text, {"jobs": [...],
 * "cancel": [...], "lease": L}, unparsed (the caller's to read, and to
 * jtext_drop() whatever the status). ack: the "lease" of the last answer
 * received (0 before any): tasks of answers lost on the way come again
 * (docs/worker-protocol.md). */
int wclient_poll(wclient_t *wc, int64_t id, int wait_ms, int64_t ack,
                 const atomic_int *abort_flag, jtext_w_t *answer);
/* POSTs many reports at once: body is the JSON text {"reports": [{"task":
 * N, ...report}, ...]} of `count` reports (len bytes, borrowed; the caller
 * serialized each report once). Returns the HTTP status of the whole
 * request (-1 transport failure); per-item refusals are final and logged.
 * On 200, *refused is a new array of the items refused for their content
 * ({"task", "status", "detail"}; not 404/409, which say the task is no
 * longer this worker's), or NULL when none; the caller decrefs it. */
int wclient_report_batch(wclient_t *wc, int64_t id, const char *body, size_t len,
                         size_t count, json_t **refused);
int wclient_leave(wclient_t *wc, int64_t id);
/* POST as the current registration: path_fmt_id is a printf format with
 * one %lld, the worker id ("/v1/workers/%lld/logs?..."). Sends raw bytes
 * (application/octet-stream) when raw is not NULL, else body as JSON.
 * Returns the HTTP status, -1 when unregistered or unreachable. */
int wclient_worker_post(wclient_t *wc, const char *path_fmt_id, const json_t *body,
                        const void *raw, size_t rawlen, long timeout_ms, json_t **resp);

/* The data-plane directory (GET /v1/workers/{id}/peers?addr=, as the
 * current registration): the UCX worker address the live worker at
 * data_addr `addr` registered, decoded (malloc'd, *len bytes, 1..max;
 * caller frees). NULL when unregistered, unknown there, unreachable or
 * not a valid address. Any thread. */
void *wclient_peer_address(wclient_t *wc, const char *addr, size_t max, size_t *len);

/* Sleeps *delay_ms (in small steps, returning early once *stop is set,
 * stop may be NULL), then doubles *delay_ms up to 5000. Returns non-zero
 * when stopped. */
int wclient_sleep_backoff(int *delay_ms, const atomic_int *stop);

/* The "detail" (or "title") of a problem document, or "". */
const char *wclient_problem_detail(const json_t *resp);

#endif
