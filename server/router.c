/* router.c - where a request goes: method + path pattern -> handler. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "store.h"

api_config_t api_cfg;

typedef struct route {
    const char *method;
    const char *pattern;        /* segments; ":x" captures one segment */
    http_handler_fn fn;
    auth_access_t access;       /* who may call it (auth.h) */
} route_t;

static const route_t routes[] = {
    {"POST", "/v1/jobs", api_jobs_create, ACCESS_SUBMIT},
    {"GET", "/v1/jobs", api_jobs_list, ACCESS_READ},
    {"GET", "/v1/jobs/:id", api_jobs_get, ACCESS_READ},
    {"DELETE", "/v1/jobs/:id", api_jobs_cancel, ACCESS_SUBMIT},
    {"GET", "/v1/jobs/:id/result", api_jobs_result, ACCESS_READ},
    {"GET", "/v1/islands", api_islands_list, ACCESS_READ},
    {"GET", "/v1/islands/:name", api_islands_get, ACCESS_READ},
    {"GET", "/v1/workers", api_workers_list, ACCESS_READ},
    {"POST", "/v1/workers", api_worker_register, ACCESS_WORKER},
    {"POST", "/v1/workers/:id/heartbeat", api_worker_heartbeat, ACCESS_WORKER},
    {"GET", "/v1/workers/:id/tasks", api_worker_poll, ACCESS_WORKER},
    {"POST", "/v1/workers/:id/tasks/:task", api_worker_report, ACCESS_WORKER},
    {"POST", "/v1/workers/:id/reports", api_worker_report_batch, ACCESS_WORKER},
    {"DELETE", "/v1/workers/:id", api_worker_leave, ACCESS_WORKER},
    {"GET", "/healthz", api_healthz, ACCESS_PUBLIC},
    {"GET", "/metrics", api_metrics, ACCESS_READ},
    {"GET", "/v1/events/stream", api_events_stream, ACCESS_READ},
    {"GET", "/v1/stats/utilization", api_stats_utilization, ACCESS_READ},
    {"POST", "/v1/tenants", api_tenants_create, ACCESS_ADMIN},
    {"GET", "/v1/tenants", api_tenants_list, ACCESS_ADMIN},
    {"DELETE", "/v1/tenants/:name", api_tenants_revoke, ACCESS_ADMIN},
};

/* Matches path against pattern, capturing ":x" segments into params.
 * Segments are compared in place; captures point into a copy in buf. */
static int route_match(const char *pattern, const char *path, char *buf, size_t len,
                       const char **params)
{
    int np = 0;
    size_t used = 0;
    while (*pattern && *path) {
        if (*pattern != '/' || *path != '/')
            return 0;
        pattern++;
        path++;
        size_t pl = strcspn(pattern, "/"), sl = strcspn(path, "/");
        if (pattern[0] == ':') {
            if (sl == 0 || np == HTTP_MAX_PARAMS || used + sl + 1 > len)
                return 0;
            memcpy(buf + used, path, sl);
            buf[used + sl] = '\0';
            params[np++] = buf + used;
            used += sl + 1;
        } else if (pl != sl || strncmp(pattern, path, pl) != 0) {
            return 0;
        }
        pattern += pl;
        path += sl;
    }
    return *pattern == '\0' && *path == '\0';
}

/* Identifies the caller (Authorization header, or ?access_token= for
 * clients such as EventSource that cannot set headers) and checks the
 * route's access. Answers 401/403 and returns 0 when refused. Sets
 * req->tenant: the tenant whose jobs the caller may see (0 = all). */
static int route_authorize(http_req_t *req, http_resp_t *resp, auth_access_t access)
{
    auth_who_t who;
    req->tenant = 0;
    if (access == ACCESS_PUBLIC && !auth_enabled())
        return 1;
    store_t *st = access == ACCESS_PUBLIC ? NULL : api_store(resp);
    if (access != ACCESS_PUBLIC && !st)
        return 0;
    const char *header = http_header(req, "Authorization");
    char bearer[256];
    const char *q = http_query(req, "access_token");
    if (!header && q && strlen(q) < sizeof bearer - 8) {
        snprintf(bearer, sizeof bearer, "Bearer %s", q);
        header = bearer;
    }
    auth_identify(st, header, &who);
    if (auth_allows(&who, access)) {
        req->tenant = who.role == AUTH_TENANT ? who.tenant : 0;
        return 1;
    }
    if (who.role == AUTH_NONE)
        http_problem(resp, 401, "Authorization", "a valid bearer token is required");
    else
        http_problem(resp, 403, "Authorization", "this token may not %s %s", req->method,
                     req->path);
    return 0;
}

void api_route(http_req_t *req, http_resp_t *resp)
{
    /* Captures must outlive parked re-runs of the handler: kept per thread
     * and refilled on every run, since the path does not change. */
    static _Thread_local char buf[512];
    int path_known = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const char *params[HTTP_MAX_PARAMS] = {0};
        if (!route_match(routes[i].pattern, req->path, buf, sizeof buf, params))
            continue;
        path_known = 1;
        if (strcmp(routes[i].method, req->method) != 0)
            continue;
        memcpy(req->params, params, sizeof params);
        if (!route_authorize(req, resp, routes[i].access))
            return;
        routes[i].fn(req, resp);
        return;
    }
    if (path_known) {
        http_problem(resp, 405, "method", "%s is not allowed on %s", req->method, req->path);
        return;
    }
    if (strcmp(req->method, "GET") == 0 && strncmp(req->path, "/v1/", 4) != 0) {
        api_web_file(req, resp);
        return;
    }
    http_problem(resp, 404, "path", "no such resource: %s", req->path);
}

int64_t api_parse_id(const char *text)
{
    if (!text || !*text || strlen(text) > 18)
        return 0;
    for (const char *p = text; *p; p++)
        if (*p < '0' || *p > '9')
            return 0;
    return strtoll(text, NULL, 10);
}

json_t *api_body_json(http_req_t *req, http_resp_t *resp)
{
    /* curl -d sends application/x-www-form-urlencoded unless told
     * otherwise; the body is still JSON, so only multipart is refused. */
    const char *type = http_header(req, "Content-Type");
    if (type && strncmp(type, "multipart/", 10) == 0) {
        http_problem(resp, 415, "Content-Type", "send application/json, not %s", type);
        return NULL;
    }
    json_error_t jerr;
    /* JSON_REJECT_DUPLICATES: {"a":1,"a":2} is ambiguous, refuse it. */
    json_t *doc = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
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
