/* api_jobs.c - /v1/jobs: submit (validate + compile + store), list, get,
 * cancel, result. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "jtext.h"
#include "report_decode.h"
#include "store.h"
#include "util.h"

#define API_IDEM_KEY_MAX 128
#define API_LIST_MAX 500
/* Retry-After of a 429 (tenant queue full): about how long a slot takes to
 * open on a busy cluster; a hint, not a promise. */
#define API_QUEUE_FULL_RETRY_S "5"
/* Longest wait_ms of GET /v1/jobs/{id}: as long as a worker's poll parks. */
#define API_JOB_WAIT_MAX_MS 30000

/* A tenant's submission against its limits (DESIGN.md Part E): a priority
 * above max_priority is 403; a job alone needing more devices than the
 * quota could never be admitted: 422. Returns 1 when answered. The queue
 * cap (429) is checked by the store, in the insert's transaction. */
static int job_over_limits(const tenant_limits_t *lim, const job_plan_t *plan,
                           http_resp_t *resp)
{
    if (plan->priority > lim->max_priority) {
        http_problem(resp, 403, "priority", "priority %ld is above the tenant's max_priority %ld",
                     (long)plan->priority, (long)lim->max_priority);
        return 1;
    }
    int64_t need = 0;
    for (int s = 0; s < plan->nslices; s++)
        need += shape_numel(&plan->slices[s].shape);
    if (lim->quota > 0 && need > lim->quota) {
        http_problem(resp, 422, "slices", "the job needs %ld devices; the tenant's quota is %ld",
                     (long)need, (long)lim->quota);
        return 1;
    }
    return 0;
}

/* The hash of the canonical document (sorted keys, compact): a replayed
 * Idempotency-Key must bring the same document. 0 or -1 (out of memory). */
static int doc_hash(const json_t *doc, char hex[AUTH_HASH_HEX_LEN])
{
    char *text = json_dumps(doc, JSON_SORT_KEYS | JSON_COMPACT);
    if (!text)
        return -1;
    auth_hash_token(text, hex);
    free(text);
    return 0;
}

/* Answers a store refusal of a submission; id is the existing job for a
 * reused key. */
static void job_refused(int rc, int64_t id, const tenant_limits_t *lim, http_resp_t *resp)
{
    if (rc == STORE_MISMATCH) {
        http_problem(resp, 422, "Idempotency-Key",
                     "this key was used for job %ld with a different document", (long)id);
    } else if (rc == STORE_FULL) {
        snprintf(resp->retry_after, sizeof resp->retry_after, "%s", API_QUEUE_FULL_RETRY_S);
        http_problem(resp, 429, NULL, "the tenant has %ld jobs queued, its max_queued",
                     (long)lim->max_queued);
    } else {
        http_problem(resp, 503, NULL, "the job could not be stored; nothing was created");
    }
}

/* What is checked of a compiled job before it is stored: users' programs
 * allowed here, the slices placeable at all, the tenant's limits (read
 * into *lim; admin and auth-off callers, tenant 0, are not limited).
 * Returns 1 when it answered a refusal. */
static int job_refused_early(const http_req_t *req, store_t *st, const job_plan_t *plan,
                             tenant_limits_t *lim, http_resp_t *resp)
{
    for (int i = 0; i < plan->ncomps && !api_cfg.allow_run; i++) {
        if (plan->comps[i].run) {
            char field[48];
            snprintf(field, sizeof field, "computations[%d].run", i);
            http_problem(resp, 403, field, "this controller does not run users' programs "
                         "(start atolld with --allow-run)");
            return 1;
        }
    }
    int fits = api_cfg.job_ever_fits ? api_cfg.job_ever_fits(plan) : 1;
    if (fits < 0) {
        http_problem(resp, 500, NULL, "out of memory");
        return 1;
    }
    if (!fits) {
        http_problem(resp, 422, "slices",
                     "the job's %d slices can never be placed together on this cluster",
                     plan->nslices);
        return 1;
    }
    *lim = (tenant_limits_t){0, 1, 0, 0};
    if (req->tenant > 0 && store_tenant_limits(st, req->tenant, lim) != STORE_OK) {
        http_problem(resp, 503, NULL, "the tenant's limits could not be read; retry");
        return 1;
    }
    return req->tenant > 0 && job_over_limits(lim, plan, resp);
}

/* The view query of POST /v1/jobs and GET /v1/jobs/{id}: 0 for full (the
 * default), 1 for summary, -1 when answered 400. */
static int job_view_param(http_req_t *req, http_resp_t *resp)
{
    const char *view = http_query(req, "view");
    if (view && strcmp(view, "full") != 0 && strcmp(view, "summary") != 0) {
        http_problem(resp, 400, "view", "view must be full or summary");
        return -1;
    }
    return view && strcmp(view, "summary") == 0;
}

/* A job as a client asked to see it: in full, or with summary as GET
 * /v1/jobs lists it (one row: a client that submitted a large program, or
 * polls for its end, needs its id and state, not its echo: a
 * 128-computation chain's full object is 74 KB to build and to parse).
 * Malloc'd text (the caller frees), or NULL when it could not be read. */
static char *job_view_text(store_t *st, int64_t id, int summary, size_t *len)
{
    return summary ? store_job_summary_text(st, id, len) : store_job_json_text(st, id, len);
}

void api_jobs_create(http_req_t *req, http_resp_t *resp)
{
    job_plan_t *plan = NULL;
    err_t e = {0};
    int summary = job_view_param(req, resp);
    if (summary < 0)
        return;
    json_t *doc = api_body_json(req, resp);
    char *job = NULL;
    size_t len = 0;
    store_t *st;
    if (!doc || !(st = api_store(resp)))
        goto cleanup;
    const char *idem = http_header(req, "Idempotency-Key");
    if (idem && (strlen(idem) == 0 || strlen(idem) > API_IDEM_KEY_MAX)) {
        http_problem(resp, 400, "Idempotency-Key", "must be 1 to %d characters", API_IDEM_KEY_MAX);
        goto cleanup;
    }
    if (compiler_job(doc, api_cfg.islands, api_cfg.nislands, &plan, &e) != 0) {
        http_problem(resp, e.status, e.field, "%s", e.detail);
        goto cleanup;
    }
    tenant_limits_t lim;
    if (job_refused_early(req, st, plan, &lim, resp))
        goto cleanup;
    /* Keys are per tenant: another tenant's key never finds this job. */
    char key[API_IDEM_KEY_MAX + 32], hash[AUTH_HASH_HEX_LEN];
    if (idem) {
        snprintf(key, sizeof key, "t%ld:%s", (long)req->tenant, idem);
        if (doc_hash(doc, hash) != 0) {
            http_problem(resp, 500, NULL, "out of memory");
            goto cleanup;
        }
    }
    store_job_new_t nj = {req->body, idem ? key : NULL, idem ? hash : NULL, req->tenant,
                          lim.max_queued};
    int64_t id = 0;
    int rc = store_job_create(st, plan, &nj, &id);
    if (rc != STORE_OK && rc != STORE_CONFLICT) {
        job_refused(rc, id, &lim, resp);
        goto cleanup;
    }
    api_durable_request(req);
    /* The sync round is asked for at once, so that its fdatasync runs
     * while this thread reads the job back, and the scheduler is woken:
     * its pass (allocation, dispatch) overlaps the sync instead of waiting
     * for it. Nothing is lost by a job that runs before it is on disk:
     * only power loss can drop the WAL's tail, and then the job's rows,
     * its allocation and its tasks go together, and its client, which
     * never got the 201, submits again.
     * 201 promises the job is on disk; a replay (200) waits too, in case
     * its first answer was lost to a failed sync. */
    if (rc == STORE_OK && api_cfg.job_planned) {
        api_cfg.job_planned(id, json_incref(doc), plan, req->body_len);
        plan = NULL;            /* the scheduler's now */
    }
    if (rc == STORE_OK)
        api_sched_notify();
    /* Read back now, not once the round is over: this connection's pages
     * are still the ones its commit just wrote (SQLite drops them once
     * another connection commits, and during the sync the scheduler
     * allocates the job), so the read costs ~40 us instead of ~165. The
     * answer is the job as stored, queued. */
    if (!(job = job_view_text(st, id, summary, &len))) {
        http_problem(resp, 500, NULL, "job %ld stored but could not be read back", (long)id);
        goto cleanup;
    }
    snprintf(resp->location, sizeof resp->location, "/v1/jobs/%ld", (long)id);
    /* A retried submission with the same key answers the first job, 200. */
    api_answer_durable(req, resp, rc == STORE_OK ? 201 : 200, job, len,
                       "job %ld was stored but the disk refused to sync it; retry with the"
                       " same Idempotency-Key", (long)id);
cleanup:
    job_plan_free(plan);
    json_decref(doc);
}

static const char *const job_states[] = {"queued", "allocated", "running", "succeeded",
                                         "failed", "cancelled", NULL};

void api_jobs_list(http_req_t *req, http_resp_t *resp)
{
    const char *state = http_query(req, "state");
    const char *limit_s = http_query(req, "limit"), *before_s = http_query(req, "before");
    if (state) {
        int ok = 0;
        for (int i = 0; job_states[i]; i++)
            ok |= strcmp(state, job_states[i]) == 0;
        if (!ok) {
            http_problem(resp, 400, "state", "unknown state '%s'", state);
            return;
        }
    }
    int64_t limit = limit_s ? api_parse_id(limit_s) : 50;
    if (limit < 1 || limit > API_LIST_MAX) {
        http_problem(resp, 400, "limit", "limit must be 1 to %d", API_LIST_MAX);
        return;
    }
    int64_t before = before_s ? api_parse_id(before_s) : 0;
    if (before_s && before < 1) {
        http_problem(resp, 400, "before", "before must be a job id");
        return;
    }
    store_t *st = api_store(resp);
    if (!st)
        return;
    size_t len;
    char *list = store_jobs_list_text(st, state, before, (int)limit, req->tenant, &len);
    if (!list)
        http_problem(resp, 500, NULL, "could not list jobs");
    else
        http_json_text(resp, 200, list, len);
}

/* The wait_ms query of GET /v1/jobs/{id}: 0 when absent, -1 when
 * answered 400. */
static int64_t job_wait_param(http_req_t *req, http_resp_t *resp)
{
    const char *w = http_query(req, "wait_ms");
    int64_t ms = w ? api_parse_id(w) : 0;      /* api_parse_id: 0 when not digits */
    if (w && ((ms == 0 && strcmp(w, "0") != 0) || ms > API_JOB_WAIT_MAX_MS)) {
        http_problem(resp, 400, "wait_ms", "wait_ms must be 0..%d", API_JOB_WAIT_MAX_MS);
        return -1;
    }
    return ms;
}

/* GET /v1/jobs/{id}[?view=summary][&wait_ms=N]. With wait_ms, a job not
 * yet succeeded, failed or cancelled is answered when it gets there or
 * after N ms, whichever comes first: a client following a job parks here
 * instead of polling. Parked, the request re-reads the job only after a
 * commit that moved store_job_gen(id) (this job ended or was requeued),
 * woken by http_wake or the park tick. */
void api_jobs_get(http_req_t *req, http_resp_t *resp)
{
    store_t *st = NULL;
    int64_t id = api_visible_job(req, resp, &st);
    if (id < 1)
        return;
    int summary = job_view_param(req, resp);
    if (summary < 0)
        return;
    int64_t wait_ms = job_wait_param(req, resp);
    if (wait_ms < 0)
        return;
    int64_t until = req->first_us + wait_ms * 1000;
    int waiting = wait_ms > 0 && util_mono_us() < until;
    if (waiting && req->runs > 0 && store_job_gen(id) == req->user_gen) {
        /* Nothing that ends this job committed since the last look. */
        http_park_until(resp, store_job_gen, id, req->user_gen, until);
        return;
    }
    req->user_gen = store_job_gen(id);  /* before the read: a later commit is seen next run */
    /* A summary is one row: what a client polling for the end needs,
     * without the cost of every computation and the document. A waiter
     * looks at the state alone (most runs find the job not ended yet and
     * park again); the object is read only to answer, and a state once
     * terminal stays so. */
    char state[16];
    if (waiting && store_job_state(st, id, state) == STORE_OK && !store_state_is_terminal(state)) {
        http_park_until(resp, store_job_gen, id, req->user_gen, until);
        return;
    }
    size_t len;
    char *text = job_view_text(st, id, summary, &len);
    if (text)
        http_json_text(resp, 200, text, len);
    else
        http_problem(resp, 404, "id", "no job %ld", (long)id);
}

void api_jobs_cancel(http_req_t *req, http_resp_t *resp)
{
    store_t *st = NULL;
    int64_t id = api_visible_job(req, resp, &st);
    if (id < 1)
        return;
    char state[16] = "";
    int rc = store_job_cancel(st, id, state);
    if (rc == STORE_NOTFOUND) {
        http_problem(resp, 404, "id", "no job %ld", (long)id);
        return;
    }
    if (rc == STORE_CONFLICT) {
        http_problem(resp, 409, "state", "job %ld already %s", (long)id, state);
        return;
    }
    if (rc != STORE_OK) {
        http_problem(resp, 503, NULL, "job %ld could not be cancelled now; retry", (long)id);
        return;
    }
    api_durable_request(req);
    api_sched_notify();
    http_wake();    /* workers holding its tasks learn of it on their poll */
    size_t len;
    char *text = store_job_json_text(st, id, &len);
    if (text)
        api_answer_durable(req, resp, 200, text, len,
                           "job %ld was cancelled but the disk refused to sync it", (long)id);
    else
        http_problem(resp, 500, NULL, "job %ld cancelled but could not be read back", (long)id);
}

void api_jobs_result(http_req_t *req, http_resp_t *resp)
{
    store_t *st = NULL;
    int64_t id = api_visible_job(req, resp, &st);
    if (id < 1)
        return;
    char state[16] = "";
    json_t *res = NULL;
    const char *view = http_query(req, "view");
    if (view && strcmp(view, "global") != 0 && strcmp(view, "shards") != 0) {
        http_problem(resp, 400, "view", "view must be global or shards");
        return;
    }
    int global = view && strcmp(view, "global") == 0;
    /* The global view assembles whole pieces a per-shard answer omits. */
    int rc = store_job_result(st, id, global ? REPORT_VALUES_MAX : GSPMD_SHARD_VALUES_MAX, &res,
                              state);
    if (rc == STORE_OK && global && api_result_global(st, id, res) != 0) {
        json_decref(res);
        http_problem(resp, 500, NULL, "could not assemble the global results of job %ld",
                     (long)id);
        return;
    }
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "id", "no job %ld", (long)id);
    else if (rc == STORE_CONFLICT)
        http_problem(resp, 409, "state", "job %ld is %s; results exist once it succeeded",
                     (long)id, state);
    else if (rc != STORE_OK)
        http_problem(resp, 500, NULL, "could not read results of job %ld", (long)id);
    else
        http_json(resp, 200, res);
}
