/* api_access.c - which job a /v1/jobs/{id}/... call names, and whether
 * the caller may see it (DESIGN.md Part E: a tenant sees only its own
 * jobs; another tenant's job answers exactly as a missing one, 404). Used
 * by every handler under /v1/jobs/{id}. */
#include "api.h"

#include "store.h"

/* A tenant sees only its own jobs: another tenant's job is "not found". */
static int job_visible(store_t *st, const http_req_t *req, int64_t id)
{
    int64_t owner = store_job_tenant(st, id);
    return owner >= 0 && (req->tenant == 0 || owner == req->tenant);
}

/* Parses the :id of /v1/jobs/:id, answering 404 for a malformed one. */
static int64_t job_id_param(http_req_t *req, http_resp_t *resp)
{
    int64_t id = api_parse_id(req->params[0]);
    if (id < 1)
        http_problem(resp, 404, "id", "no job '%s'", req->params[0]);
    return id;
}

/* The :id of /v1/jobs/:id when the caller may see that job, with this
 * thread's store in *st; else answers (404/503) and returns 0. */
int64_t api_visible_job(http_req_t *req, http_resp_t *resp, store_t **st)
{
    int64_t id = job_id_param(req, resp);
    if (id < 1 || !(*st = api_store(resp)))
        return 0;
    if (!job_visible(*st, req, id)) {
        http_problem(resp, 404, "id", "no job %ld", (long)id);
        return 0;
    }
    return id;
}

