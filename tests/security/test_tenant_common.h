/* test_tenant_common.h - shared by the tenant security tests
 * (test_tenant_*.c): a real atolld with auth on (admin, worker and read
 * tokens) on west=2x2 (one worker of 4 devices) and cold=2x2 (no worker: a
 * job there stays queued), clients per identity, and checked calls.
 * Static functions: one copy per test program. Include after <cmocka.h>. */
#ifndef ATOLL_TEST_TENANT_COMMON_H
#define ATOLL_TEST_TENANT_COMMON_H

#include "itest.h"
#include "test_front_raw.h"

#define ADMIN_TOKEN "admin-token-0123456789abcdef"
#define WORKER_TOKEN "worker-token-0123456789abcdef"
#define READ_TOKEN "read-token-0123456789abcdef"

/* itest_client is the admin (the shared leftover-cancelling teardown then
 * sees every job). */
static hx_client_t read_cl;

/* Fails the test, reporting `cl`'s last exchange and the logs. */
#define C_CHECK(cl, cond, ...)                                                          \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            hx_report_failure(&itest_cluster, (cl), __FILE__, __LINE__, __VA_ARGS__);  \
            fail_msg("%s", #cond);                                                      \
        }                                                                               \
    } while (0)

/* One request with a JSON text body written with single quotes (NULL:
 * none); fails unless the status is `want`. Returns the parsed body (new
 * reference, may be NULL). */
static inline json_t *call_q(hx_client_t *cl, const char *method, const char *path,
                             const char *body_q, const char *const *hdrs, long want)
{
    char *body = body_q ? hx_text_q(body_q) : NULL;
    C_CHECK(cl, !body_q || body, "out of memory");
    hx_resp_t r;
    int rc = hx_request_h(cl, method, path, body, body ? strlen(body) : 0, hdrs, &r);
    free(body);
    long got = rc == 0 ? r.status : 0;
    json_t *j = NULL;
    if (rc == 0 && got == want) {
        j = r.json;     /* ownership moves to the caller */
        r.json = NULL;
    }
    hx_resp_clear(&r);  /* before a failing check: it longjmps */
    C_CHECK(cl, got == want, "%s %s: status %ld, expected %ld", method, path, got, want);
    return j;
}

/* The problem's `field` equals `want`; consumes p. */
static inline void check_field(hx_client_t *cl, json_t *p, const char *want)
{
    const char *f = json_string_value(json_object_get(p, "field"));
    int ok = f && strcmp(f, want) == 0;
    json_decref(p);
    C_CHECK(cl, ok, "problem field is not '%s'", want);
}

/* Creates a tenant as the admin (body with single quotes); copies its token
 * into out and sets it on cl. Returns the 201 body (caller decrefs). */
static inline json_t *tenant_new(const char *body_q, hx_client_t *cl, char *out,
                                  size_t cap)
{
    json_t *t = call_q(&itest_client, "POST", "/v1/tenants", body_q, NULL, 201);
    const char *tok = json_string_value(json_object_get(t, "token"));
    int ok = tok && strlen(tok) >= 16 && strlen(tok) < cap;
    if (ok)
        snprintf(out, cap, "%s", tok);
    else
        json_decref(t);
    T_CHECK(ok, "POST /v1/tenants %s: no token", body_q);
    T_CHECK(hx_client_set_auth(cl, out, NULL) == 0, "token too long");
    return t;
}

/* A job document (single quotes) with one slice `shape` on `island`, busy
 * `us` µs per shard, priority `prio`: malloc'd, caller frees. */
static inline char *job_doc_q(const char *name, const char *shape, const char *island,
                              int64_t us, int prio)
{
    char *buf = malloc(1024);
    T_CHECK(buf != NULL, "out of memory");
    if (buf)    /* (T_CHECK longjmps; the compiler does not know) */
        snprintf(buf, 1024,
                 "{'name':'%s','priority':%d,'slices':{'s':{'shape':%s,'island':'%s'}},"
                 "'computations':[{'name':'c','slice':'s','ops':[{'op':'compute','out':'b',"
                 "'us':%" PRId64 "},{'op':'shard_index','out':'i'}],'outputs':['i']}]}",
                 name, prio, shape, island, us);
    return buf;
}

/* Submits as cl; fails unless the status is `want`. Returns the job id
 * when the answer carries one, else 0. */
static inline int64_t submit_q(hx_client_t *cl, const char *name, const char *shape,
                               const char *island, int64_t us, int prio, long want)
{
    char *doc = job_doc_q(name, shape, island, us, prio);
    json_t *j = call_q(cl, "POST", "/v1/jobs", doc, NULL, want);
    free(doc);
    int64_t id = json_integer_value(json_object_get(j, "id"));
    json_decref(j);
    return id;
}

/* Waits for `id` to succeed (polling as cl, `timeout_ms`). */
static inline void wait_ok(hx_client_t *cl, int64_t id, int timeout_ms)
{
    json_t *job = NULL;
    int rc = hx_job_wait(cl, id, timeout_ms, ITEST_POLL_MS, &job);
    int ok = rc == 0 && job && strcmp(hx_job_state(job), "succeeded") == 0;
    json_decref(job);
    C_CHECK(cl, ok, "job %" PRId64 " did not succeed within %d ms", id, timeout_ms);
}

/* Group setup: the cluster above. */
static inline int tenant_cluster_start(void)
{
    static const char *const islands[] = {"west=2x2", "cold=2x2"};
    static const char *const extra[] = {"--admin-token", ADMIN_TOKEN, "--worker-token",
                                        WORKER_TOKEN, "--read-token", READ_TOKEN, NULL};
    static const char *const wextra[] = {"--token", WORKER_TOKEN, NULL};
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 2, extra) != 0)
        return -1;
    if (hx_worker_start_args(&itest_cluster, "west", 4, wextra, 15000, 0) != 0 ||
        hx_client_init(&itest_client, itest_cluster.url) != 0 ||
        hx_client_init(&read_cl, itest_cluster.url) != 0 ||
        hx_client_set_auth(&itest_client, ADMIN_TOKEN, NULL) != 0 ||
        hx_client_set_auth(&read_cl, READ_TOKEN, NULL) != 0) {
        hx_cluster_stop(&itest_cluster);
        return -1;
    }
    return 0;
}

static inline int tenant_cluster_stop(void)
{
    hx_client_cleanup(&read_cl);
    return itest_stop();
}

#endif
