/* test_tenant_limits.c - tenants' limits and Idempotency-Key reuse against
 * a real atolld, auth on (DESIGN.md Part E):
 *   - POST /v1/tenants takes max_queued (default 1000) and max_priority
 *     (default 0), shown by GET /v1/tenants; quota_devices 0 is 400, an
 *     absent quota is no cap (shown as null, and a job of the whole island
 *     runs); every other bound of the body (the name's length and
 *     characters, unknown fields, quota, share and max_queued ranges) is
 *     400 naming its field, and the bounds themselves are taken;
 *   - past max_queued a submission is 429 with Retry-After; a slot opens
 *     when a queued job leaves; a replay of an accepted submission still
 *     answers its job; admin submissions are not capped;
 *   - a priority above max_priority is 403 (field "priority"); the admin
 *     may use any;
 *   - an Idempotency-Key reused with another document is 422 (field
 *     "Idempotency-Key"); with the same document (keys in another order,
 *     other spacing) it answers the first job.
 * Jobs on island cold (no worker) stay queued.
 * Fail on the old code: all but test_absent_quota_unlimited (max_queued and
 * max_priority were unknown fields, quota_devices 0 was accepted, a
 * reused key with another document answered 200). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "test_tenant_common.h"

static hx_client_t lim_cl, plain_cl;
static char lim_tok[128], plain_tok[128];

static int group_setup(void **state)
{
    (void)state;
    if (tenant_cluster_start() != 0)
        return -1;
    if (hx_client_init(&lim_cl, itest_cluster.url) != 0 ||
        hx_client_init(&plain_cl, itest_cluster.url) != 0) {
        tenant_cluster_stop();
        return -1;
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    hx_client_cleanup(&lim_cl);
    hx_client_cleanup(&plain_cl);
    return tenant_cluster_stop();
}

static json_int_t int_of(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? json_integer_value(v) : -999999;
}

static void test_tenant_fields(void **state)
{
    (void)state;
    check_field(&itest_client, call_q(&itest_client, "POST", "/v1/tenants",
                                      "{'name':'zero','quota_devices':0}", NULL, 400),
                "quota_devices");
    check_field(&itest_client, call_q(&itest_client, "POST", "/v1/tenants",
                                      "{'name':'mq','max_queued':0}", NULL, 400),
                "max_queued");
    check_field(&itest_client, call_q(&itest_client, "POST", "/v1/tenants",
                                      "{'name':'mp','max_priority':1001}", NULL, 400),
                "max_priority");
    check_field(&itest_client, call_q(&itest_client, "POST", "/v1/tenants",
                                      "{'name':'mp','max_priority':'high'}", NULL, 400),
                "max_priority");
    /* Every other bound of the body, each at its first value past it: a
     * tenant named by more than 63 characters, or by one outside
     * [A-Za-z0-9_-], a field the controller does not know, a quota, share
     * or queue cap past its range, a share of 0 (weights are positive). */
    static const char *const bad[][2] = {
        {"{'name':'n123456789012345678901234567890123456789012345678901234567890123'}", "name"},
        {"{'name':'a b'}", "name"},
        {"{'name':'a.b'}", "name"},
        {"{'name':'col','colour':'red'}", "colour"},
        {"{'name':'q','quota_devices':1000001}", "quota_devices"},
        {"{'name':'s0','share':0}", "share"},
        {"{'name':'s1','share':1001}", "share"},
        {"{'name':'mq1','max_queued':100001}", "max_queued"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        check_field(&itest_client, call_q(&itest_client, "POST", "/v1/tenants", bad[i][0], NULL,
                                          400),
                    bad[i][1]);
    /* The bounds themselves are allowed: a 63-character name, the largest
     * quota, share and queue cap. */
    json_t *edge = call_q(&itest_client, "POST", "/v1/tenants",
                          "{'name':'e1234567890123456789012345678901234567890123456789"
                          "0123456789012','quota_devices':1000000,'share':1000,"
                          "'max_queued':100000}", NULL, 201);
    json_decref(edge);
    json_t *t = tenant_new("{'name':'lim','max_queued':5,'max_priority':3}", &lim_cl, lim_tok,
                           sizeof lim_tok);
    int ok = int_of(t, "max_queued") == 5 && int_of(t, "max_priority") == 3 &&
             json_is_null(json_object_get(t, "quota_devices"));
    json_decref(t);
    T_CHECK(ok, "201 of lim: expected max_queued 5, max_priority 3, quota_devices null");
    json_decref(tenant_new("{'name':'plain'}", &plain_cl, plain_tok, sizeof plain_tok));
    json_t *list = call_q(&itest_client, "GET", "/v1/tenants", NULL, NULL, 200);
    json_t *ts = json_object_get(list, "tenants");
    int seen = 0;
    for (size_t i = 0; i < json_array_size(ts); i++) {
        json_t *e = json_array_get(ts, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && strcmp(name, "lim") == 0)
            seen += int_of(e, "max_queued") == 5 && int_of(e, "max_priority") == 3;
        if (name && strcmp(name, "plain") == 0)
            seen += int_of(e, "max_queued") == 1000 && int_of(e, "max_priority") == 0 &&
                    json_is_null(json_object_get(e, "quota_devices"));
    }
    json_decref(list);
    T_CHECK(seen == 2, "GET /v1/tenants does not show lim's and plain's limits and defaults");
}

/* POST /v1/jobs as lim on a raw connection: the status, and Retry-After. */
static int raw_submit(const char *doc_q, char *retry, size_t cap)
{
    char *doc = hx_text_q(doc_q), auth[200];
    T_CHECK(doc != NULL, "out of memory");
    snprintf(auth, sizeof auth, "Bearer %s", lim_tok);
    raw_resp_t *r = malloc(sizeof *r);
    T_CHECK(r != NULL, "out of memory");
    int st = raw_request(raw_port(itest_cluster.url), "POST", "/v1/jobs", auth, doc, r);
    raw_header(r, "Retry-After", retry, cap);
    free(doc);
    free(r);
    return st;
}

static void test_max_queued(void **state)
{
    (void)state;
    int64_t ids[5];
    for (int i = 0; i < 5; i++)
        ids[i] = submit_q(&lim_cl, "held", "[2,2]", "cold", 1000, 0, 201);
    char *doc = job_doc_q("one-too-many", "[2,2]", "cold", 1000, 0), retry[32];
    int st = raw_submit(doc, retry, sizeof retry);
    free(doc);
    T_CHECK(st == 429, "the 6th queued job of a tenant with max_queued 5: %d, expected 429", st);
    T_CHECK(atoi(retry) > 0, "429 without a Retry-After in seconds ('%s')", retry);
    /* Not capped: the admin, and another tenant. */
    int64_t admin_job = submit_q(&itest_client, "admin", "[2,2]", "cold", 1000, 0, 201);
    int64_t plain_job = submit_q(&plain_cl, "plain", "[2,2]", "cold", 1000, 0, 201);
    /* A slot opens when one of lim's queued jobs leaves the queue. */
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, ids[0]);
    json_decref(call_q(&lim_cl, "DELETE", path, NULL, NULL, 200));
    ids[0] = submit_q(&lim_cl, "refill", "[2,2]", "cold", 1000, 0, 201);
    submit_q(&lim_cl, "full-again", "[2,2]", "cold", 1000, 0, 429);
    (void)admin_job;
    (void)plain_job;
}

static void test_full_queue_replay(void **state)
{
    (void)state;
    /* lim's queue is full (test_max_queued); a replay of an accepted
     * submission still answers its job. Needs a fresh slot first. */
    json_t *list = call_q(&lim_cl, "GET", "/v1/jobs?state=queued&limit=1", NULL, NULL, 200);
    int64_t victim = int_of(json_array_get(json_object_get(list, "jobs"), 0), "id");
    json_decref(list);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, victim);
    json_decref(call_q(&lim_cl, "DELETE", path, NULL, NULL, 200));
    static const char *const key[] = {"Idempotency-Key: replay-when-full", NULL};
    char *doc = job_doc_q("replayed", "[2,2]", "cold", 1000, 0);
    json_t *a = call_q(&lim_cl, "POST", "/v1/jobs", doc, key, 201);
    json_t *b = call_q(&lim_cl, "POST", "/v1/jobs", doc, key, 200);
    free(doc);
    int same = int_of(a, "id") == int_of(b, "id");
    json_decref(a);
    json_decref(b);
    T_CHECK(same, "a replay with a full queue did not answer the first job");
}

static void test_max_priority(void **state)
{
    (void)state;
    /* lim's queue is full: the priority is checked first (403, not 429). */
    check_field(&lim_cl, call_q(&lim_cl, "POST", "/v1/jobs",
                                "{'name':'p','priority':4,'slices':{'s':{'shape':[1,1]}},"
                                "'computations':[{'name':'c','slice':'s','ops':[{'op':"
                                "'shard_index','out':'i'}],'outputs':['i']}]}", NULL, 403),
                "priority");
    submit_q(&plain_cl, "p1", "[1,1]", "west", 1000, 1, 403);
    int64_t ok_id = submit_q(&plain_cl, "p0", "[1,1]", "west", 1000, 0, 201);
    int64_t neg_id = submit_q(&plain_cl, "pneg", "[1,1]", "west", 1000, -5, 201);
    int64_t admin_id = submit_q(&itest_client, "p1000", "[1,1]", "west", 1000, 1000, 201);
    wait_ok(&plain_cl, ok_id, ITEST_JOB_TIMEOUT_MS);
    wait_ok(&plain_cl, neg_id, ITEST_JOB_TIMEOUT_MS);
    wait_ok(&itest_client, admin_id, ITEST_JOB_TIMEOUT_MS);
}

static void test_absent_quota_unlimited(void **state)
{
    (void)state;
    /* plain has no quota: a job of the whole island (4 devices) runs. */
    int64_t id = submit_q(&plain_cl, "whole", "[2,2]", "west", 1000, 0, 201);
    wait_ok(&plain_cl, id, ITEST_JOB_TIMEOUT_MS);
}

static void test_idempotency_mismatch(void **state)
{
    (void)state;
    static const char *const key[] = {"Idempotency-Key: k-mismatch", NULL};
    json_t *a = call_q(&plain_cl, "POST", "/v1/jobs",
                       "{'name':'idem','slices':{'s':{'shape':[1,1],'island':'west'}},"
                       "'computations':[{'name':'c','slice':'s','ops':[{'op':'shard_index',"
                       "'out':'i'}],'outputs':['i']}]}", key, 201);
    /* The same document, keys in another order and other spacing: 200. */
    json_t *b = call_q(&plain_cl, "POST", "/v1/jobs",
                       "{ 'computations': [{'slice':'s','name':'c','outputs':['i'],"
                       "'ops':[{'out':'i','op':'shard_index'}]}],"
                       "'slices':{'s':{'island':'west','shape':[1, 1]}}, 'name':'idem' }",
                       key, 200);
    int same = int_of(a, "id") == int_of(b, "id") && int_of(a, "id") > 0;
    json_decref(a);
    json_decref(b);
    T_CHECK(same, "the same document under the same key did not answer the first job");
    /* Another document under the same key: 422, nothing created. */
    check_field(&plain_cl, call_q(&plain_cl, "POST", "/v1/jobs",
                                  "{'name':'idem-2','slices':{'s':{'shape':[1,1],"
                                  "'island':'west'}},'computations':[{'name':'c','slice':'s',"
                                  "'ops':[{'op':'shard_index','out':'i'}],'outputs':['i']}]}",
                                  key, 422),
                "Idempotency-Key");
    /* Keys are per tenant: the admin's same key is another key. */
    json_t *l = call_q(&itest_client, "POST", "/v1/jobs",
                       "{'name':'idem-admin','slices':{'s':{'shape':[1,1],'island':'west'}},"
                       "'computations':[{'name':'c','slice':'s','ops':[{'op':'shard_index',"
                       "'out':'i'}],'outputs':['i']}]}", key, 201);
    json_decref(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tenant_fields),
        cmocka_unit_test(test_max_queued),
        cmocka_unit_test(test_full_queue_replay),
        cmocka_unit_test(test_max_priority),
        cmocka_unit_test(test_absent_quota_unlimited),
        cmocka_unit_test_teardown(test_idempotency_mismatch, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
