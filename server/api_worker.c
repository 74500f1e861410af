/* api_worker.c - the worker protocol (docs/worker-protocol.md). */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"
#include "store.h"
#include "util.h"

#define WORKER_MAX_DEVICES 4096
#define POLL_WAIT_MAX_MS 30000

/* A string field of at most max bytes; answers 400 naming it otherwise. */
static const char *str_field(json_t *body, const char *key, size_t max, int required,
                             http_resp_t *resp)
{
    json_t *v = json_object_get(body, key);
    if (!v && !required)
        return "";
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max) {
        http_problem(resp, 400, key, "%s must be a string of 1 to %zu characters", key, max);
        return NULL;
    }
    return json_string_value(v);
}

/* data_addr is "host:port" (what peers dial): host of [A-Za-z0-9.:_[]-]
 * (names, IPv4, bracketed IPv6), port 1..65535. Anything else would be
 * handed to every peer worker as an address it cannot connect to. */
static int data_addr_ok(const char *addr)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1] || strlen(colon + 1) > 5)
        return 0;
    for (const char *p = addr; p < colon; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_' || c == ':' || c == '[' || c == ']'))
            return 0;
    }
    long port = 0;
    for (const char *p = colon + 1; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        port = port * 10 + (*p - '0');
    }
    return port >= 1 && port <= 65535;
}

void api_worker_register(http_req_t *req, http_resp_t *resp)
{
    static const char *const allowed[] = {"island", "devices", "backend", "data_addr", "host",
                                          "pid", NULL};
    json_t *body = api_body_json(req, resp), *out = NULL;
    if (!body)
        return;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            ok |= strcmp(key, allowed[i]) == 0;
        if (!ok) {
            http_problem(resp, 400, key, "unknown field '%s'", key);
            goto cleanup;
        }
    }
    worker_reg_t reg = {0};
    json_t *nd = json_object_get(body, "devices"), *pid = json_object_get(body, "pid");
    if (!(reg.island = str_field(body, "island", NAME_MAX_LEN - 1, 1, resp)) ||
        !(reg.data_addr = str_field(body, "data_addr", 63, 1, resp)) ||
        !(reg.backend = str_field(body, "backend", 16, 0, resp)) ||
        !(reg.host = str_field(body, "host", 255, 0, resp)))
        goto cleanup;
    if (!data_addr_ok(reg.data_addr)) {
        http_problem(resp, 400, "data_addr", "data_addr must be host:port (port 1..65535)");
        goto cleanup;
    }
    if (!*reg.backend)
        reg.backend = "cpu";
    if (strcmp(reg.backend, "cpu") != 0 && strcmp(reg.backend, "sim") != 0) {
        http_problem(resp, 400, "backend", "backend must be cpu or sim");
        goto cleanup;
    }
    if (!json_is_integer(nd) || json_integer_value(nd) < 1 ||
        json_integer_value(nd) > WORKER_MAX_DEVICES) {
        http_problem(resp, 400, "devices", "devices must be an integer 1..%d", WORKER_MAX_DEVICES);
        goto cleanup;
    }
    if (pid && !json_is_integer(pid)) {
        http_problem(resp, 400, "pid", "pid must be an integer");
        goto cleanup;
    }
    reg.ndevices = (int)json_integer_value(nd);
    reg.pid = pid ? json_integer_value(pid) : 0;
    store_t *st = api_store(resp);
    if (!st)
        goto cleanup;
    int rc = store_worker_register(st, &reg, api_cfg.lease_us, &out);
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "island", "no island named '%s'", reg.island);
    else if (rc == STORE_FULL)
        http_problem(resp, 409, "devices", "island %s has no free block of %d devices",
                     reg.island, reg.ndevices);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "registration could not be stored; retry");
    else {
        log_info("worker %ld registered on %s (%d devices, data %s)",
                 (long)json_integer_value(json_object_get(out, "id")), reg.island, reg.ndevices,
                 reg.data_addr);
        sched_notify();
        http_json(resp, 201, out);
    }
cleanup:
    json_decref(body);
}

static int64_t worker_param(http_req_t *req, http_resp_t *resp)
{
    int64_t id = api_parse_id(req->params[0]);
    if (id < 1)
        http_problem(resp, 404, "id", "no worker '%.32s'", req->params[0]);
    return id;
}

/* The optional heartbeat body {"store": {"objects","bytes","cap_bytes"}}. */
static int heartbeat_stats(http_req_t *req, http_resp_t *resp, worker_stats_t *ws)
{
    if (req->body_len == 0)
        return 0;
    json_t *body = api_body_json(req, resp);
    if (!body)
        return -1;
    int rc = -1;
    const char *key;
    json_t *v, *store = NULL;
    json_object_foreach(body, key, v) {
        if (strcmp(key, "store") != 0) {
            http_problem(resp, 400, key, "unknown field '%s'", key);
            goto cleanup;
        }
        store = v;
    }
    if (store) {
        int64_t *dst[] = {&ws->objects, &ws->bytes, &ws->cap_bytes};
        const char *names[] = {"objects", "bytes", "cap_bytes"};
        const char *fields[] = {"store.objects", "store.bytes", "store.cap_bytes"};
        if (!json_is_object(store) || json_object_size(store) > 3) {
            http_problem(resp, 400, "store", "store is {objects, bytes, cap_bytes}");
            goto cleanup;
        }
        for (int i = 0; i < 3; i++) {
            json_t *n = json_object_get(store, names[i]);
            if (n && (!json_is_integer(n) || json_integer_value(n) < 0)) {
                http_problem(resp, 400, fields[i], "%s must be a non-negative integer",
                             fields[i]);
                goto cleanup;
            }
            *dst[i] = n ? json_integer_value(n) : 0;
        }
    }
    rc = 0;
cleanup:
    json_decref(body);
    return rc;
}

void api_worker_heartbeat(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    store_t *st;
    if (id < 1 || !(st = api_store(resp)))
        return;
    worker_stats_t ws = {0};
    if (heartbeat_stats(req, resp, &ws) != 0)
        return;
    int rc = store_worker_heartbeat(st, id);
    if (rc == STORE_OK)
        rc = store_worker_set_stats(st, id, &ws);
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "id", "worker %ld is not registered (lease expired?)", (long)id);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "heartbeat not stored; retry");
    else
        http_json(resp, 200, json_pack("{s:I}", "lease_ms", (json_int_t)(api_cfg.lease_us / 1000)));
}

void api_worker_poll(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    if (id < 1)
        return;
    const char *w = http_query(req, "wait_ms");
    int64_t wait_ms = w ? api_parse_id(w) : 1000;
    if (w && strcmp(w, "0") == 0)
        wait_ms = 0;
    else if (wait_ms < 1 || wait_ms > POLL_WAIT_MAX_MS) {
        http_problem(resp, 400, "wait_ms", "wait_ms must be 0..%d", POLL_WAIT_MAX_MS);
        return;
    }
    store_t *st = api_store(resp);
    if (!st)
        return;
    if (req->runs == 0 && store_worker_heartbeat(st, id) == STORE_NOTFOUND) {
        http_problem(resp, 404, "id", "worker %ld is not registered", (long)id);
        return;
    }
    json_t *out = NULL;
    int any = 0;
    int rc = store_worker_poll(st, id, &out, &any);
    if (rc == STORE_NOTFOUND) {
        /* The lease expired while this poll was parked: register again. */
        http_problem(resp, 404, "id", "worker %ld is not registered", (long)id);
        return;
    }
    if (rc != STORE_OK) {
        http_problem(resp, 503, NULL, "tasks could not be leased; retry");
        return;
    }
    if (!any && util_mono_us() - req->first_us < wait_ms * 1000) {
        json_decref(out);
        resp->park = 1;     /* long poll: run again on http_wake() or the tick */
        return;
    }
    http_json(resp, 200, out);
}

/* Structure of a report's outputs that the store does not check: each key
 * a value name ([A-Za-z0-9_-], 1..NAME_MAX_LEN-1, as the compiler allows)
 * and each listed value a number or null (null = non-finite). The store
 * checks shapes, sums and counts. 0, or -1 with a 400 answered. */
static int report_outputs_ok(const json_t *body, http_resp_t *resp)
{
    json_t *outs = json_object_get(body, "outputs"), *o;
    const char *name;
    if (!outs)
        return 0;
    if (!json_is_object(outs)) {
        http_problem(resp, 400, "outputs", "outputs must be an object");
        return -1;
    }
    json_object_foreach(outs, name, o) {
        size_t n = strlen(name);
        int ok = n >= 1 && n < NAME_MAX_LEN;
        for (size_t i = 0; ok && i < n; i++) {
            char c = name[i];
            ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-';
        }
        if (!ok) {
            http_problem(resp, 400, "outputs", "output names are value names (1 to %d "
                         "characters [A-Za-z0-9_-])", NAME_MAX_LEN - 1);
            return -1;
        }
        json_t *vals = json_object_get(o, "values"), *v;
        size_t i;
        json_array_foreach(vals, i, v) {
            if (!json_is_number(v) && !json_is_null(v)) {
                http_problem(resp, 400, "outputs", "output '%s': values must be numbers "
                             "(null for non-finite)", name);
                return -1;
            }
        }
    }
    return 0;
}

void api_worker_report(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    int64_t task = api_parse_id(req->params[1]);
    if (id < 1)
        return;
    if (task < 1) {
        http_problem(resp, 404, "task", "no task '%.32s'", req->params[1]);
        return;
    }
    json_t *body = api_body_json(req, resp);
    store_t *st;
    if (!body || report_outputs_ok(body, resp) != 0 || !(st = api_store(resp))) {
        json_decref(body);
        return;
    }
    err_t e = {0};
    int effects = 0;
    int rc = store_worker_report(st, id, task, body, &effects, &e);
    json_decref(body);
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "task", "no task %ld", (long)task);
    else if (rc == STORE_CONFLICT)
        http_problem(resp, 409, "task", "task %ld is not leased to worker %ld (already reported"
                     " or reassigned)", (long)task, (long)id);
    else if (rc != STORE_OK && e.status >= 400 && e.status < 500)
        http_problem(resp, e.status, e.field, "%s", e.detail);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "report could not be stored; retry");
    else {
        if (effects & STORE_FX_JOB_ENDED)
            sched_notify();
        if (effects & (STORE_FX_TASKS_READY | STORE_FX_JOB_ENDED))
            http_wake();
        http_json(resp, 200, json_pack("{s:b}", "accepted", 1));
    }
}

#define REPORT_BATCH_MAX 1024

/* POST /v1/workers/:id/reports {"reports": [{"task": N, ...report}, ...]}:
 * many reports in one request and one transaction, answered per item. A
 * worker sends whatever its queue holds, so a computation's shards on one
 * worker cost one round trip. */
void api_worker_report_batch(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    if (id < 1)
        return;
    json_t *body = api_body_json(req, resp), *results = NULL;
    store_t *st;
    if (!body)
        return;
    json_t *reports = json_object_get(body, "reports");
    if (json_object_size(body) != 1 || !json_is_array(reports) || json_array_size(reports) == 0 ||
        json_array_size(reports) > REPORT_BATCH_MAX) {
        http_problem(resp, 400, "reports", "body is {\"reports\": [1..%d reports]}",
                     REPORT_BATCH_MAX);
        goto cleanup;
    }
    size_t i;
    json_t *item;
    json_array_foreach(reports, i, item) {
        http_resp_t scratch = {0};
        int bad = report_outputs_ok(item, &scratch);
        free(scratch.body);
        if (bad) {
            http_problem(resp, 400, "reports", "report %zu: outputs must map value names to"
                         " {shape, sum, values?} with numeric values", i);
            goto cleanup;
        }
    }
    if (!(st = api_store(resp)))
        goto cleanup;
    int effects = 0;
    if (store_worker_report_batch(st, id, reports, &results, &effects) != STORE_OK) {
        http_problem(resp, 503, NULL, "reports could not be stored; retry");
        goto cleanup;
    }
    if (effects & STORE_FX_JOB_ENDED)
        sched_notify();
    if (effects & (STORE_FX_TASKS_READY | STORE_FX_JOB_ENDED))
        http_wake();
    http_json(resp, 200, json_pack("{s:o}", "results", results));
cleanup:
    json_decref(body);
}

void api_worker_leave(http_req_t *req, http_resp_t *resp)
{
    int64_t id = worker_param(req, resp);
    store_t *st;
    if (id < 1 || !(st = api_store(resp)))
        return;
    int rc = store_worker_leave(st, id);
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "id", "worker %ld is not registered", (long)id);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "could not record the departure; retry");
    else {
        sched_notify();
        http_wake();
        http_json(resp, 200, json_pack("{s:b}", "left", 1));
    }
}
