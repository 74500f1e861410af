/* router.c - where a request goes: method + path pattern -> handler. */
#include "api.h"

#include <stdlib.h>
#include <string.h>

#include "store.h"

api_config_t api_cfg;

typedef struct route {
    const char *method;
    const char *pattern;        /* segments; ":x" captures one segment */
    http_handler_fn fn;
} route_t;

static const route_t routes[] = {
    {"POST", "/v1/jobs", api_jobs_create},
    {"GET", "/v1/jobs", api_jobs_list},
    {"GET", "/v1/jobs/:id", api_jobs_get},
    {"DELETE", "/v1/jobs/:id", api_jobs_cancel},
    {"GET", "/v1/jobs/:id/result", api_jobs_result},
    {"GET", "/v1/islands", api_islands_list},
    {"GET", "/v1/islands/:name", api_islands_get},
    {"GET", "/v1/workers", api_workers_list},
    {"POST", "/v1/workers", api_worker_register},
    {"POST", "/v1/workers/:id/heartbeat", api_worker_heartbeat},
    {"GET", "/v1/workers/:id/tasks", api_worker_poll},
    {"POST", "/v1/workers/:id/tasks/:task", api_worker_report},
    {"DELETE", "/v1/workers/:id", api_worker_leave},
    {"GET", "/healthz", api_healthz},
    {"GET", "/metrics", api_metrics},
    {"GET", "/v1/events/stream", api_events_stream},
    {"GET", "/v1/stats/utilization", api_stats_utilization},
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
