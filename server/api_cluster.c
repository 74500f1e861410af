/* api_cluster.c - islands, workers, health and metrics. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"
#include "store.h"

void api_islands_list(http_req_t *req, http_resp_t *resp)
{
    (void)req;
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *v = store_islands_json(st);
    if (v)
        http_json(resp, 200, v);
    else
        http_problem(resp, 500, NULL, "could not read islands");
}

void api_islands_get(http_req_t *req, http_resp_t *resp)
{
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *v = store_island_json(st, req->params[0]);
    if (v)
        http_json(resp, 200, v);
    else
        http_problem(resp, 404, "name", "no island named '%.64s'", req->params[0]);
}

void api_workers_list(http_req_t *req, http_resp_t *resp)
{
    (void)req;
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *v = store_workers_json(st, api_cfg.lease_us);
    if (v)
        http_json(resp, 200, v);
    else
        http_problem(resp, 500, NULL, "could not read workers");
}

void api_healthz(http_req_t *req, http_resp_t *resp)
{
    (void)req;
    store_t *st = api_store(resp);
    if (!st)
        return;
    /* Healthy = serving HTTP and the database answers. */
    sqlite3_stmt *s = store_stmt(st, "SELECT COUNT(*) FROM islands");
    int ok = s && sqlite3_step(s) == SQLITE_ROW;
    if (s)
        sqlite3_reset(s);
    if (ok)
        http_json(resp, 200, json_pack("{s:s, s:s}", "status", "ok", "version", ATOLL_VERSION));
    else
        http_problem(resp, 503, "db", "database not answering");
}

void api_metrics(http_req_t *req, http_resp_t *resp)
{
    (void)req;
    store_t *st = api_store(resp);
    if (!st)
        return;
    char *text = store_metrics_text(st);
    if (!text) {
        http_problem(resp, 500, NULL, "could not build metrics");
        return;
    }
    uint64_t counts[6];
    http_counts(counts);
    size_t len = strlen(text), cap = len + 16384;
    char *all = realloc(text, cap);
    if (!all) {
        free(text);
        http_problem(resp, 500, NULL, "out of memory");
        return;
    }
    uint64_t attempts, successes;
    sched_counters(&attempts, &successes);
    len += (size_t)snprintf(all + len, cap - len,
                            "# HELP atoll_allocation_attempts_total Gang allocation attempts.\n"
                            "# TYPE atoll_allocation_attempts_total counter\n"
                            "atoll_allocation_attempts_total %lu\n"
                            "# HELP atoll_allocations_total Gang allocations that succeeded.\n"
                            "# TYPE atoll_allocations_total counter\n"
                            "atoll_allocations_total %lu\n",
                            (unsigned long)attempts, (unsigned long)successes);
    len += (size_t)snprintf(all + len, cap - len,
                            "# HELP atoll_http_responses Responses sent by status class.\n"
                            "# TYPE atoll_http_responses counter\n");
    for (int c = 1; c <= 5; c++)
        len += (size_t)snprintf(all + len, cap - len, "atoll_http_responses{code=\"%dxx\"} %lu\n",
                                c, (unsigned long)counts[c]);
    static _Thread_local uint64_t codes[HTTP_CODE_MAX];
    http_code_counts_get(codes);
    len += (size_t)snprintf(all + len, cap - len,
                            "# HELP atoll_http_requests_total Requests answered, by status code.\n"
                            "# TYPE atoll_http_requests_total counter\n");
    for (int c = 100; c < HTTP_CODE_MAX && len < cap; c++)
        if (codes[c])
            len += (size_t)snprintf(all + len, cap - len,
                                    "atoll_http_requests_total{code=\"%d\"} %lu\n", c,
                                    (unsigned long)codes[c]);
    free(resp->body);
    resp->body = all;
    resp->len = len;
    resp->status = 200;
    resp->content_type = "text/plain; version=0.0.4";
}
