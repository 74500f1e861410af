/* router.c - where a request goes: route_core.c decides (row, access),
 * this file runs the row's handler or answers the refusal. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "jscan.h"
#include "route_core.h"
#include "store.h"

api_config_t api_cfg;

/* Handlers by row of routes.def (route_core.c holds the rest of each row). */
static const http_handler_fn handlers[] = {
#define ROUTE(method, pattern, handler, access, flags) handler,
#include "routes.def"
#undef ROUTE
};

/* auth_tenant_fn over this thread's store connection. */
static int64_t tenant_lookup(void *ctx, const char *hash)
{
    (void)ctx;
    store_t *st = store_thread();
    return st ? store_tenant_by_hash(st, hash) : -1;
}

/* Decides req's route into d, its captures in buf (cap bytes), and sets
 * req's tenant and params from it. */
static void route_of(http_req_t *req, char *buf, size_t cap, route_decision_t *d)
{
    route_input_t in = {route_decide_method(req->method, req->path), req->path, req->raw_target,
                        http_header(req, "Authorization"), http_query(req, "access_token"),
                        tenant_lookup, NULL};
    route_decide(&in, buf, cap, d);
    req->tenant = d->tenant;
    memcpy(req->params, d->params, sizeof d->params);
}

/* Answers d's refusal (d->status not 0). */
static void route_refuse(http_req_t *req, http_resp_t *resp, const route_decision_t *d)
{
    switch (d->status) {
    case 400:
        http_problem(resp, 400, d->field, "the path holds a control character");
        return;
    case 401:
        http_problem(resp, 401, d->field, "a valid bearer token is required");
        return;
    case 403:
        http_problem(resp, 403, d->field, "this token may not %s %s", req->method, req->path);
        return;
    case 405:
        http_problem(resp, 405, d->field, "%s is not allowed on %s", req->method, req->path);
        memcpy(resp->allow, d->allow, sizeof resp->allow);
        return;
    case 503:
        http_problem(resp, 503, NULL, "database unavailable");
        return;
    default:
        http_problem(resp, 404, d->field, "no such resource: %s", req->path);
        return;
    }
}

void api_route(http_req_t *req, http_resp_t *resp)
{
    /* Captures must outlive parked re-runs of the handler: kept per thread
     * and refilled on every run, since the path does not change. */
    static _Thread_local char buf[512];
    /* A write stored in an earlier run, its answer waiting for the disk
     * (api_durable.c), is answered as it stands. Routed again, its token
     * would be checked again: one revoked during the sync round turned the
     * 201 of a job already stored into a 401. */
    if (api_durable_rerun(req, resp))
        return;
    route_decision_t d;
    route_of(req, buf, sizeof buf, &d);
    if (d.status != 0)
        route_refuse(req, resp, &d);
    else if (d.row == ROUTE_WEB_FILE)
        api_web_file(req, resp);
    else
        handlers[d.row](req, resp);
}

void api_route_gate(http_req_t *req, http_resp_t *resp)
{
    char buf[512];
    route_decision_t d;
    route_of(req, buf, sizeof buf, &d);
    if (d.status != 0)
        route_refuse(req, resp, &d);
    else if (d.row != ROUTE_WEB_FILE && strncmp(route_pattern(d.row), "/v1/workers/:id", 15) == 0)
        api_worker_gate(req, resp);
}

int64_t api_parse_id(const char *text)
{
    /* Every positive int64 (a cap of 18 digits refused ids and bounds of
     * 10^18 and above that the API documents as int64), none past it. */
    if (!text || !*text)
        return 0;
    int64_t v = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - (*p - '0')) / 10)
            return 0;
        v = v * 10 + (*p - '0');
    }
    return v;
}

int api_body_type_ok(http_req_t *req, http_resp_t *resp)
{
    /* curl -d sends application/x-www-form-urlencoded unless told
     * otherwise; the body is still JSON, so only multipart is refused. */
    const char *type = http_header(req, "Content-Type");
    if (type && strncasecmp(type, "multipart/", 10) == 0) {    /* media types are caseless */
        http_problem(resp, 415, "Content-Type", "send application/json, not %s", type);
        return 0;
    }
    return 1;
}

json_t *api_body_json(http_req_t *req, http_resp_t *resp)
{
    if (!api_body_type_ok(req, resp))
        return NULL;
    json_error_t jerr;
    /* JSON_REJECT_DUPLICATES: {"a":1,"a":2} is ambiguous, refuse it. */
    json_t *doc = jscan_load(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
    if (!doc) {
        http_problem(resp, 400, "body", "invalid JSON at line %d column %d: %s", jerr.line,
                     jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        http_problem(resp, 400, "body", "the body must be a JSON object");
        return NULL;
    }
    return doc;
}

struct store *api_store(http_resp_t *resp)
{
    store_t *st = store_thread();
    if (!st)
        http_problem(resp, 503, NULL, "database unavailable");
    return st;
}
