/* api.h - request handlers of atolld, by resource. router.c maps method
 * and path to them; each validates its input and answers JSON or a
 * problem+json naming the field at fault. */
#ifndef ATOLL_API_H
#define ATOLL_API_H

#include "compiler.h"
#include "http.h"
#include "util.h"

typedef struct api_config {
    const island_desc_t *islands;
    int nislands;
    int64_t lease_us;
    const char *web_dir;
    const char *dispatch;           /* "parallel" | "sequential" */
    int allow_run;                  /* --allow-run: "run" computations accepted */
    /* The scheduler, as the handlers see it (atolld's main.c wires these;
     * server/ does not include scheduler/): wake_scheduler after a change
     * it cares about (a job arrived or ended, a worker came or went);
     * wake_scheduler_freed after a job succeeded (its devices freed,
     * nothing queued again: it wakes the scheduler only when a job waits
     * for devices);
     * job_ever_fits says whether a job could ever be placed (1, 0 never,
     * -1 error); scheduler_metrics appends its /metrics families
     * (util_appendf's contract). Any may be NULL (no scheduler: every job
     * fits). */
    void (*wake_scheduler)(void);
    void (*wake_scheduler_freed)(void);
    int (*job_ever_fits)(const job_plan_t *plan);
    size_t (*scheduler_metrics)(char *buf, size_t len, size_t cap);
    /* job_planned hands the scheduler a job just stored with its parsed
     * document (and its text's size) and compiled plan (it takes both:
     * owns and frees them), so that it does not read and compile the
     * document again. */
    void (*job_planned)(int64_t id, json_t *doc, job_plan_t *plan, size_t doc_bytes);
} api_config_t;

extern api_config_t api_cfg;

/* Wakes the scheduler through its hook (no-op without one). */
static inline void api_sched_notify(void)
{
    if (api_cfg.wake_scheduler)
        api_cfg.wake_scheduler();
}

/* api_durable.c: answers status with text (JSON, len bytes; taken) and
 * resp->location once every commit made before this call is on disk
 * (group commit): the request parks meanwhile, holding no thread, and
 * when the disk refuses the sync it answers 503 with the detail fail_fmt
 * formats instead. The router calls api_durable_rerun() before anything
 * else: on the request's next runs it sends the held answer (or parks
 * again) and returns 1, so the handler's write is never done twice, and
 * the request is not routed again (its access was decided in the run that
 * wrote). */
void api_answer_durable(http_req_t *req, http_resp_t *resp, int status, char *text, size_t len,
                        const char *fail_fmt, ...) __attribute__((format(printf, 6, 7)));
/* Asks for the sync round of what the handler just committed, before it
 * builds its answer: the round's fdatasync then runs while the handler
 * reads back (one request alone on a connection waits for both, not their
 * sum). api_answer_durable, called later, waits for that round. */
void api_durable_request(http_req_t *req);
int api_durable_rerun(http_req_t *req, http_resp_t *resp);
/* Each decided wait of an acknowledged write, from its request for a
 * round to its answer (a /metrics histogram). */
const util_hist_t *api_durable_histogram(void);

/* The router: the handler given to http_start(). */
void api_route(http_req_t *req, http_resp_t *resp);
/* Its gate (http_config_t): the refusals a request's headers decide (the
 * route's 4xx, its token; on a worker's own routes, its credential),
 * answered before its body is received. */
void api_route_gate(http_req_t *req, http_resp_t *resp);
/* 0 when the request names a live worker (the :id capture) whose
 * credential it carries, or one not live (its handler answers that);
 * else -1 with resp answered (401/403, or 404/503). api_worker.c. */
int api_worker_gate(http_req_t *req, http_resp_t *resp);

/* api_jobs.c */
void api_jobs_create(http_req_t *req, http_resp_t *resp);
void api_jobs_list(http_req_t *req, http_resp_t *resp);
void api_jobs_get(http_req_t *req, http_resp_t *resp);
void api_jobs_cancel(http_req_t *req, http_resp_t *resp);
void api_jobs_result(http_req_t *req, http_resp_t *resp);
/* api_access.c: the :id of /v1/jobs/:id if the caller may see that job
 * (this thread's store in *st); else answers 404/503 and returns 0. */
struct store;
int64_t api_visible_job(http_req_t *req, http_resp_t *resp, struct store **st);
/* api_program.c: global programs (DESIGN Part C) */
void api_jobs_program(http_req_t *req, http_resp_t *resp);
/* Replaces, in a result object (store_job_result()), each output of a
 * global computation by its assembled global value. 0 or -1. */
int api_result_global(struct store *st, int64_t id, json_t *res);
/* api_runs.c: users' programs (DESIGN Part F) */
void api_worker_logs(http_req_t *req, http_resp_t *resp);
void api_worker_procs(http_req_t *req, http_resp_t *resp);
void api_jobs_logs(http_req_t *req, http_resp_t *resp);
void api_jobs_processes(http_req_t *req, http_resp_t *resp);
/* Resumes parked log follows (new output or state, or the sampler tick). */
void api_runs_notify(void);
/* Ends every log follow (shutdown). */
void api_runs_stop(void);
/* api_worker.c: the worker a /v1/workers/{id}/... call speaks for, checked
 * against its credential and alive (this thread's store in *st); else
 * answers (404, 401, 403, 409, 503) and returns 0. */
int64_t api_worker_caller(http_req_t *req, http_resp_t *resp, struct store **st);
/* api_cluster.c */
void api_islands_list(http_req_t *req, http_resp_t *resp);
void api_islands_get(http_req_t *req, http_resp_t *resp);
void api_workers_list(http_req_t *req, http_resp_t *resp);
void api_healthz(http_req_t *req, http_resp_t *resp);
void api_metrics(http_req_t *req, http_resp_t *resp);
/* api_worker.c (worker protocol, docs/worker-protocol.md) */
void api_worker_register(http_req_t *req, http_resp_t *resp);
void api_worker_heartbeat(http_req_t *req, http_resp_t *resp);
void api_worker_poll(http_req_t *req, http_resp_t *resp);
/* Polls that parked, and polls' reads of the store, since start (/metrics). */
void api_worker_poll_counts(uint64_t *parks, uint64_t *reads);
/* http_config_t's tick: writes the workers' lease book when due (on the
 * ticker thread, with its own store connection). */
void api_worker_tick(void);
/* Worker report requests and the report items they carried (/metrics). */
void api_worker_report_counts(uint64_t *requests, uint64_t *items);
void api_worker_report(http_req_t *req, http_resp_t *resp);
void api_worker_report_batch(http_req_t *req, http_resp_t *resp);
void api_worker_leave(http_req_t *req, http_resp_t *resp);
void api_worker_peer(http_req_t *req, http_resp_t *resp);
/* api_admin.c (admin): GET /v1/admin/backup */
void api_admin_backup(http_req_t *req, http_resp_t *resp);
/* api_tenants.c (admin) */
void api_tenants_create(http_req_t *req, http_resp_t *resp);
void api_tenants_list(http_req_t *req, http_resp_t *resp);
void api_tenants_revoke(http_req_t *req, http_resp_t *resp);
/* api_web.c */
void api_web_file(http_req_t *req, http_resp_t *resp);
/* api_stream.c (dashboard): SSE feed and utilization series. The notifiers
 * are the sampler's callbacks; api_stream_stop() ends every stream (call it
 * before http_stop(): MHD must not stop with suspended connections). */
void api_events_stream(http_req_t *req, http_resp_t *resp);
void api_stats_utilization(http_req_t *req, http_resp_t *resp);
void api_stats_tenants(http_req_t *req, http_resp_t *resp);
void api_stream_changed(void);
void api_stream_sampled(void);
void api_stream_stop(void);

/* Shared helpers (router.c). */
/* Parses a decimal integer in 1..INT64_MAX (digits only); 0 when it is
 * not one (the caller answers 400 or 404). */
int64_t api_parse_id(const char *text);
/* Parses the body as a JSON object, else answers 400/415 and returns NULL.
 * New reference. */
json_t *api_body_json(http_req_t *req, http_resp_t *resp);
/* Whether the body's Content-Type may carry JSON (anything but multipart),
 * else answers 415 and returns 0: for endpoints that read the text
 * themselves (the workers' reports, report_decode.h). */
int api_body_type_ok(http_req_t *req, http_resp_t *resp);
/* 503 problem when the thread has no database connection. */
struct store *api_store(http_resp_t *resp);

#endif
