/* api_tenants.c - /v1/tenants (admin only): create a tenant and hand out
 * its token once, list tenants with their usage, revoke. */
#include "api.h"

#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "store.h"

#define TENANT_QUOTA_MAX 1000000
#define TENANT_SHARE_MAX 1000
/* DESIGN.md Part E defaults. */
#define TENANT_MAX_QUEUED_DEFAULT 1000
#define TENANT_MAX_QUEUED_MAX 100000
#define TENANT_MAX_PRIORITY_DEFAULT 0

static const char *const tenant_fields[] = {"name", "quota_devices", "share", "max_queued",
                                            "max_priority", NULL};

static int tenant_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n >= NAME_MAX_LEN)
        return 0;
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Reads an optional integer field in [lo, hi]; answers 400 otherwise. */
static int int_field(json_t *body, const char *key, int64_t lo, int64_t hi, int64_t *out,
                     http_resp_t *resp)
{
    json_t *v = json_object_get(body, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        http_problem(resp, 400, key, "%s must be an integer %ld..%ld", key, (long)lo, (long)hi);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

/* Answers v (taken) as JSON text once it is on disk (api_answer_durable);
 * fail: the 503's detail if the disk refuses. */
static void answer_durable_json(http_req_t *req, http_resp_t *resp, int status, json_t *v,
                                const char *fail)
{
    char *text = v ? json_dumps(v, JSON_COMPACT) : NULL;
    json_decref(v);
    if (!text) {
        http_problem(resp, 500, NULL, "out of memory");
        return;
    }
    api_answer_durable(req, resp, status, text, strlen(text), "%s", fail);
}

void api_tenants_create(http_req_t *req, http_resp_t *resp)
{
    json_t *body = api_body_json(req, resp);
    store_t *st;
    if (!body || !(st = api_store(resp)))
        goto cleanup;
    const char *key;
    json_t *v;
    json_object_foreach(body, key, v) {
        int known = 0;
        for (int i = 0; tenant_fields[i]; i++)
            known |= strcmp(key, tenant_fields[i]) == 0;
        if (!known) {
            http_problem(resp, 400, key, "unknown field '%s'", key);
            goto cleanup;
        }
    }
    const char *name = json_string_value(json_object_get(body, "name"));
    if (!name || !tenant_name_ok(name)) {
        http_problem(resp, 400, "name", "name: 1 to 63 letters, digits, '_' or '-'");
        goto cleanup;
    }
    /* quota_devices absent = no cap (stored as 0); 0 itself is refused:
     * it read as "nothing" but meant "unlimited". */
    tenant_limits_t lim = {0, 1, TENANT_MAX_QUEUED_DEFAULT, TENANT_MAX_PRIORITY_DEFAULT};
    int64_t id = 0;
    if (int_field(body, "quota_devices", 1, TENANT_QUOTA_MAX, &lim.quota, resp) != 0 ||
        int_field(body, "share", 1, TENANT_SHARE_MAX, &lim.share, resp) != 0 ||
        int_field(body, "max_queued", 1, TENANT_MAX_QUEUED_MAX, &lim.max_queued, resp) != 0 ||
        int_field(body, "max_priority", -JOB_PRIORITY_LIMIT, JOB_PRIORITY_LIMIT,
                  &lim.max_priority, resp) != 0)
        goto cleanup;
    char token[64], hash[AUTH_HASH_HEX_LEN];
    if (auth_new_token(token) != 0) {
        http_problem(resp, 503, NULL, "no randomness available for a token");
        goto cleanup;
    }
    auth_hash_token(token, hash);
    int rc = store_tenant_create(st, name, hash, &lim, &id);
    if (rc == STORE_CONFLICT)
        http_problem(resp, 409, "name", "tenant '%s' exists", name);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "tenant could not be stored");
    else
        /* The token is shown once, so only once it is on disk; only its
         * hash is kept. */
        answer_durable_json(req, resp, 201,
                            json_pack("{s:I, s:s, s:s, s:o, s:I, s:I, s:I}", "id",
                                      (json_int_t)id, "name", name, "token", token,
                                      "quota_devices", lim.quota ? json_integer(lim.quota)
                                                                 : json_null(),
                                      "share", (json_int_t)lim.share, "max_queued",
                                      (json_int_t)lim.max_queued, "max_priority",
                                      (json_int_t)lim.max_priority),
                            "tenant stored but the disk refused to sync it");
cleanup:
    json_decref(body);
}

void api_tenants_list(http_req_t *req, http_resp_t *resp)
{
    (void)req;
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *v = store_tenants_json(st);
    if (v)
        http_json(resp, 200, v);
    else
        http_problem(resp, 500, NULL, "could not list tenants");
}

void api_tenants_revoke(http_req_t *req, http_resp_t *resp)
{
    store_t *st = api_store(resp);
    if (!st)
        return;
    int rc = store_tenant_revoke(st, req->params[0]);
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 404, "name", "no active tenant '%.64s'", req->params[0]);
    else if (rc != STORE_OK)
        http_problem(resp, 503, NULL, "could not revoke");
    else
        answer_durable_json(req, resp, 200,
                            json_pack("{s:s, s:b}", "name", req->params[0], "revoked", 1),
                            "revoked but the disk refused to sync it");
}

/* GET /v1/stats/tenants?seconds=N (DESIGN Part D): device time by tenant
 * over the last N seconds. A tenant's token sees its own row only. */
void api_stats_tenants(http_req_t *req, http_resp_t *resp)
{
    const char *sec_s = http_query(req, "seconds");
    int64_t seconds = sec_s ? api_parse_id(sec_s) : 60;
    if (seconds < 1 || seconds > 3600) {
        http_problem(resp, 400, "seconds", "seconds must be an integer from 1 to 3600");
        return;
    }
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *v = store_tenant_stats(st, seconds, req->tenant);
    if (v)
        http_json(resp, 200, v);
    else
        http_problem(resp, 500, NULL, "could not read device time");
}
