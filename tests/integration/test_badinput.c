/* test_badinput.c - bad input never breaks atolld.
 *
 * Against a real atolld (islands west=2x2 with one real worker, and fake=2
 * whose "worker" is this test speaking the worker protocol by hand), every
 * endpoint gets malformed input: wrong types, missing/unknown fields,
 * out-of-range numbers, oversized bodies and tensors, NaN, deep nesting,
 * invalid UTF-8, cycles, shape errors, unknown islands, bad ids. Each must
 * answer a 4xx application/problem+json whose `field` names the fault, and
 * afterwards atolld still answers /healthz, no job was created (no
 * half-written job), and /metrics has counted no 5xx response at all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <strings.h>

#include "itest.h"

/* ---- helpers ---- */

/* Number of jobs atolld holds (all states; the test creates few). */
static int job_count(void)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/v1/jobs?limit=500", NULL, 0, &r) == 0,
            "GET /v1/jobs failed at transport level");
    long status = r.status;
    int n = (int)json_array_size(json_object_get(r.json, "jobs"));
    hx_resp_clear(&r);
    T_CHECK(status == 200, "GET /v1/jobs answered %ld", status);
    return n;
}

static void expect_healthy(void)
{
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/healthz", NULL, 0, &r) == 0,
            "atolld stopped answering /healthz");
    long status = r.status;
    hx_resp_clear(&r);
    T_CHECK(status == 200, "/healthz answered %ld", status);
}

/* Sends one request and checks: status `want`, problem+json with title,
 * detail and the same status, and (when `field` is not NULL) a `field`
 * member containing `field` (case-insensitive). Then /healthz still answers. */
/* The credential of the worker test_worker_protocol plays ("X-Atoll-Worker-
 * Secret: ..." once it registered), sent with every request below. */
static char worker_secret_hdr[300];
static const char *const worker_hdrs[] = {worker_secret_hdr, NULL};

static void expect_fault(const char *method, const char *path, const char *body, size_t len,
                         int want, const char *field)
{
    hx_resp_t r;
    T_CHECK(hx_request_h(&itest_client, method, path, body, len,
                         worker_secret_hdr[0] ? worker_hdrs : NULL, &r) == 0,
            "%s %s failed at transport level (want %d)", method, path, want);
    long status = r.status;
    int ctype_ok = strncmp(r.ctype, "application/problem+json", 24) == 0;
    const json_t *p = r.json;
    int shape_ok = json_is_string(json_object_get(p, "title")) &&
                   json_is_string(json_object_get(p, "detail")) &&
                   json_integer_value(json_object_get(p, "status")) == want;
    const char *f = json_string_value(json_object_get(p, "field"));
    char got[200];
    snprintf(got, sizeof got, "%s", f ? f : "(none)");
    int named = !field || (f && strcasestr(f, field));
    hx_resp_clear(&r);
    T_CHECK(status == want, "%s %s: status %ld, want %d", method, path, status, want);
    T_CHECK(ctype_ok, "%s %s: Content-Type is not application/problem+json", method, path);
    T_CHECK(shape_ok, "%s %s: problem body lacks title/detail/status=%d", method, path, want);
    T_CHECK(named, "%s %s: field is '%s', want one naming '%s'", method, path, got, field);
    expect_healthy();
}

/* expect_fault with a NUL-terminated body. */
static void fault_s(const char *method, const char *path, const char *body, int want,
                    const char *field)
{
    expect_fault(method, path, body, strlen(body), want, field);
}

/* POST /v1/jobs of a single-quoted document. */
static void job_fault_q(const char *doc_q, int want, const char *field)
{
    char *doc = hx_text_q(doc_q);
    T_CHECK(doc != NULL, "out of memory");
    expect_fault("POST", "/v1/jobs", doc, strlen(doc), want, field);
    free(doc);
}

static void job_fault_raw(const char *body, int want, const char *field)
{
    expect_fault("POST", "/v1/jobs", body, strlen(body), want, field);
}

/* `n` copies of `unit` between prefix and suffix; caller frees. */
static char *repeat(const char *prefix, const char *unit, size_t n, const char *mid,
                    const char *unit2, size_t n2, const char *suffix)
{
    size_t lp = strlen(prefix), lu = strlen(unit), lm = strlen(mid), lu2 = strlen(unit2);
    size_t total = lp + lu * n + lm + lu2 * n2 + strlen(suffix) + 1;
    char *s = malloc(total), *w = s;
    T_CHECK(s != NULL, "out of memory");
    memcpy(w, prefix, lp);
    w += lp;
    for (size_t i = 0; i < n; i++, w += lu)
        memcpy(w, unit, lu);
    memcpy(w, mid, lm);
    w += lm;
    for (size_t i = 0; i < n2; i++, w += lu2)
        memcpy(w, unit2, lu2);
    strcpy(w, suffix);
    return s;
}

/* A valid document around one computation's ops on slice [2]. */
#define ONE_COMP(OPS) \
    "{'name':'bad','slices':{'s':{'shape':[2]}},'computations':[{'name':'c','slice':'s'," \
    "'ops':[" OPS "],'outputs':['x']}]}"

/* ---- POST /v1/jobs: the body ---- */

static void test_job_body_syntax(void **state)
{
    (void)state;
    int before = job_count();
    job_fault_raw("", 400, "body");
    job_fault_raw("[1,2,3]", 400, "body");
    job_fault_raw("\"a string\"", 400, "body");
    job_fault_raw("42", 400, "body");
    job_fault_raw("null", 400, "body");
    job_fault_raw("{\"name\": ", 400, "body");
    job_fault_raw("{\"name\":\"a\",\"name\":\"b\"}", 400, "body");       /* duplicate keys */
    job_fault_raw("{\"priority\": NaN}", 400, "body");
    job_fault_raw("{\"priority\": Infinity}", 400, "body");
    job_fault_raw("{\"priority\": 1e400}", 400, "body");
    job_fault_raw("{\"priority\": 123456789012345678901234567890}", 400, "body");
    job_fault_raw("{\"name\": \"a\\u0000b\"}", 400, "body");             /* NUL in a string */
    /* Invalid UTF-8: a lone continuation byte, an overlong '/', a surrogate. */
    job_fault_raw("{\"name\": \"\x80\"}", 400, "body");
    job_fault_raw("{\"name\": \"\xc0\xaf\"}", 400, "body");
    job_fault_raw("{\"name\": \"\xed\xa0\x80\"}", 400, "body");
    job_fault_raw("{\"\xff\": 1}", 400, "body");
    /* 100k-deep nesting, arrays and objects. */
    char *deep = repeat("", "[", 100000, "", "]", 100000, "");
    job_fault_raw(deep, 400, "body");
    free(deep);
    deep = repeat("", "{\"a\":", 100000, "1", "}", 100000, "");
    job_fault_raw(deep, 400, "body");
    free(deep);
    T_CHECK(job_count() == before, "a rejected body created a job");
}

static void test_job_body_oversized_413(void **state)
{
    (void)state;
    int before = job_count();
    /* 2 MiB: a valid-looking JSON object padded with spaces. */
    size_t n = 2u << 20;
    char *big = malloc(n + 1);
    T_CHECK(big != NULL, "out of memory");
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    big[n] = '\0';
    expect_fault("POST", "/v1/jobs", big, n, 413, "body");
    /* Also over the cap on the worker protocol. */
    expect_fault("POST", "/v1/workers", big, n, 413, "body");
    free(big);
    T_CHECK(job_count() == before, "an oversized body created a job");
}

static void test_job_document_faults(void **state)
{
    (void)state;
    int before = job_count();
    /* Wrong types and missing / unknown fields. */
    job_fault_q("{'slices':{'s':{'shape':[2]}}}", 400, "computations");
    job_fault_q("{'computations':[]}", 400, "slices");
    job_fault_q("{'nmae':'typo','slices':{},'computations':[]}", 400, "nmae");
    job_fault_q("{'name':7,'slices':{'s':{'shape':[2]}},'computations':[]}", 400, "name");
    job_fault_q("{'priority':'high','slices':{'s':{'shape':[2]}},'computations':[]}", 400,
                "priority");
    job_fault_q("{'priority':1.5,'slices':{'s':{'shape':[2]}},'computations':[]}", 400,
                "priority");
    job_fault_q("{'priority':1000000,'slices':{'s':{'shape':[2]}},'computations':[]}", 400,
                "priority");
    job_fault_q("{'max_retries':-1,'slices':{'s':{'shape':[2]}},'computations':[]}", 400,
                "max_retries");
    job_fault_q("{'slices':[2],'computations':[]}", 400, "slices");
    job_fault_q("{'slices':{'s':{'shape':[2]}},'computations':{}}", 400, "computations");
    job_fault_q(ONE_COMP("{'op':'fill','out':'x','shape':[2],'value':'one'}"), 400,
                "ops[0].value");
    job_fault_q(ONE_COMP("{'op':'fill','out':'x','shape':[2]}"), 400, "ops[0].value");
    job_fault_q(ONE_COMP("{'op':'fill','out':'x','shape':[2],'value':1,'colour':'red'}"), 400,
                "ops[0].colour");
    job_fault_q(ONE_COMP("{'op':'conv2d','out':'x'}"), 400, "ops[0].op");
    job_fault_q(ONE_COMP("{'op':'fill','out':'x','shape':[2],'value':1e39}"), 400,
                "ops[0].value");   /* finite as f64, infinite as f32 */
    job_fault_q(ONE_COMP("{'op':'shard_index','out':'i'},"
                         "{'op':'ppermute','out':'x','args':['i'],'shift':1.5}"), 400,
                "ops[1].shift");
    job_fault_q(ONE_COMP("{'op':'iota','out':'x','shape':[4]},"
                         "{'op':'all_gather','out':'y','args':['x'],'axis':1}"), 400,
                "ops[1].axis");
    job_fault_q(ONE_COMP("{'op':'compute','out':'x','us':-5}"), 400, "ops[0].us");
    /* Shapes: negative and zero dims, a tensor over the element cap, rank 5. */
    job_fault_q(ONE_COMP("{'op':'iota','out':'x','shape':[-4]}"), 400, "ops[0].shape");
    job_fault_q(ONE_COMP("{'op':'iota','out':'x','shape':[0]}"), 400, "ops[0].shape");
    job_fault_q(ONE_COMP("{'op':'fill','out':'x','shape':[4096,4096,2],'value':1}"), 400,
                "ops[0].shape");
    job_fault_q(ONE_COMP("{'op':'iota','out':'x','shape':[1,1,1,1,1]}"), 400, "ops[0].shape");
    job_fault_q(ONE_COMP("{'op':'iota','out':'a','shape':[4096,1]},"
                         "{'op':'iota','out':'b','shape':[1,8192]},"
                         "{'op':'matmul','out':'x','args':['a','b']}"), 400, "ops[2]");
    job_fault_q(ONE_COMP("{'op':'iota','out':'a','shape':[3,2]},"
                         "{'op':'matmul','out':'x','args':['a','a']}"), 400, "ops[1].args");
    job_fault_q("{'slices':{'s':{'shape':[0,2]}},'computations':[{'name':'c','slice':'s',"
                "'ops':[{'op':'shard_index','out':'x'}]}]}", 400, "slices.s.shape");
    job_fault_q("{'slices':{'s':{'shape':[-2]}},'computations':[{'name':'c','slice':'s',"
                "'ops':[{'op':'shard_index','out':'x'}]}]}", 400, "slices.s.shape");
    /* A cycle, a mismatched shard count, an unknown island, never fits. */
    job_fault_q("{'slices':{'s':{'shape':[2]}},'computations':["
                "{'name':'p','slice':'s','ops':[{'op':'input','out':'x','from':'q.y'}],"
                "'outputs':['x']},"
                "{'name':'q','slice':'s','ops':[{'op':'input','out':'y','from':'p.x'}],"
                "'outputs':['y']}]}", 400, "from");
    job_fault_q("{'slices':{'a':{'shape':[2,2]},'b':{'shape':[2]}},'computations':["
                "{'name':'p','slice':'a','ops':[{'op':'shard_index','out':'i'}],'outputs':['i']},"
                "{'name':'q','slice':'b','ops':[{'op':'input','out':'y','from':'p.i'}]}]}",
                400, "computations[1].ops[0].from");
    job_fault_q("{'slices':{'s':{'shape':[2],'island':'atlantis'}},'computations':["
                "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'x'}]}]}", 400,
                "slices.s.island");
    job_fault_q("{'slices':{'s':{'shape':[8,8]}},'computations':["
                "{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'x'}]}]}", 422,
                "slices.s.shape");
    /* Very long strings in names. */
    char *doc = repeat("{\"name\":\"", "n", 100000, "\",\"slices\":{\"s\":{\"shape\":[2]}},"
                       "\"computations\":[]}", "", 0, "");
    job_fault_raw(doc, 400, "name");
    free(doc);
    doc = repeat("{\"slices\":{\"s\":{\"shape\":[2]}},\"computations\":[{\"name\":\"", "c", 5000,
                 "\",\"slice\":\"s\",\"ops\":[{\"op\":\"shard_index\",\"out\":\"x\"}]}]}", "",
                 0, "");
    job_fault_raw(doc, 400, "computations[0].name");
    free(doc);
    doc = repeat("{\"slices\":{\"", "s", 5000, "\":{\"shape\":[2]}},\"computations\":[]}", "", 0,
                 "");
    job_fault_raw(doc, 400, "slices.");
    free(doc);
    /* Multi-byte characters cut at a buffer's end must still make a valid answer. */
    doc = repeat("{\"", "\xc3\xa9", 3000, "x\":1}", "", 0, "");
    job_fault_raw(doc, 400, NULL);
    free(doc);
    doc = repeat("{\"", "\xe2\x82\xac", 3000, "\":1}", "", 0, "");
    job_fault_raw(doc, 400, NULL);
    free(doc);
    /* Nesting inside a field the compiler reads (under the parser's limit). */
    doc = repeat("{\"slices\":{\"s\":{\"shape\":", "[", 1000, "2", "]", 1000,
                 "}},\"computations\":[]}");
    job_fault_raw(doc, 400, "slices.s.shape");
    free(doc);
    T_CHECK(job_count() == before, "a rejected document created a job");
}

/* After all that, a valid job is still accepted and runs (one job more). */
static void test_valid_job_still_runs(void **state)
{
    (void)state;
    int before = job_count();
    hx_resp_t r;
    char *doc = hx_text_q(ONE_COMP("{'op':'shard_index','out':'x'}"));
    T_CHECK(doc != NULL, "out of memory");
    int64_t id = 0;
    int st = hx_job_submit(&itest_client, doc, &id, &r);
    hx_resp_clear(&r);
    free(doc);
    T_CHECK(st == 201, "a valid job was refused with %d", st);
    json_decref(itest_wait_state(id, "succeeded"));
    T_CHECK(job_count() == before + 1, "a valid submission did not create exactly one job");
    /* The summary view: the job's row as listed, without its parts. */
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "?view=summary", id);
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0, "GET %s failed", path);
    int summary_ok = r.status == 200 && strcmp(hx_job_state(r.json), "succeeded") == 0 &&
                     json_integer_value(json_object_get(r.json, "computations_done")) == 1 &&
                     !json_object_get(r.json, "computations") &&
                     !json_object_get(r.json, "document");
    hx_resp_clear(&r);
    T_CHECK(summary_ok, "GET %s is not the job's summary", path);
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "?view=bogus", id);
    expect_fault("GET", path, NULL, 0, 400, "view");
}

/* The job object's "document" is the accepted body byte for byte (its
 * spacing and key order included) in the 201 and in GET: the stored text
 * goes out as it came in, neither parsed nor printed again. */
static void test_document_as_sent(void **state)
{
    (void)state;
    static const char doc[] =
        "{ \"slices\" : {\"s\": {\"shape\": [2]}},\n  \"name\": \"spaced\",\n"
        "  \"computations\": [ {\"outputs\": [\"x\"], \"name\": \"c\", \"slice\": \"s\",\n"
        "    \"ops\": [{\"out\": \"x\", \"op\": \"shard_index\"}] } ]\n}";
    hx_resp_t r;
    int64_t id = 0;
    int st = hx_job_submit(&itest_client, doc, &id, &r);
    int in_201 = st == 201 && strstr(r.body, doc) != NULL &&
                 json_is_object(json_object_get(r.json, "document"));
    hx_resp_clear(&r);
    T_CHECK(in_201, "the 201 (status %d) does not carry the document as sent", st);
    char path[64];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, id);
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0, "GET %s failed", path);
    int in_get = r.status == 200 && strstr(r.body, doc) != NULL &&
                 json_is_array(json_object_get(r.json, "computations")) &&
                 strcmp(json_string_value(json_object_get(
                            json_object_get(r.json, "document"), "name")), "spaced") == 0;
    hx_resp_clear(&r);
    T_CHECK(in_get, "GET %s does not carry the document as sent", path);
}

/* POST /v1/jobs?view=summary answers the job as listed (its id, state and
 * counts, none of its parts), a replay with the same Idempotency-Key too;
 * view=full (the default) the whole object; another view is 400 at
 * "view" and stores nothing. */
static void test_submit_summary_view(void **state)
{
    (void)state;
    char *doc = hx_text_q(ONE_COMP("{'op':'shard_index','out':'x'}"));
    T_CHECK(doc != NULL, "out of memory");
    int before = job_count();
    expect_fault("POST", "/v1/jobs?view=bogus", doc, strlen(doc), 400, "view");
    T_CHECK(job_count() == before, "a submission refused for its view created a job");
    static const char key[] = "Idempotency-Key: summary-view-1";
    const char *const hdrs[] = {key, NULL};
    long status[2] = {0, 0};
    int64_t id[2] = {0, 0};
    int parts = 0, counted = 1;
    char location[256] = "";
    for (int i = 0; i < 2; i++) {
        hx_resp_t r;
        if (hx_request_h(&itest_client, "POST", "/v1/jobs?view=summary", doc, strlen(doc), hdrs,
                         &r) != 0)
            break;
        status[i] = r.status;
        id[i] = json_integer_value(json_object_get(r.json, "id"));
        parts += json_object_get(r.json, "computations") != NULL ||
                 json_object_get(r.json, "slices") != NULL ||
                 json_object_get(r.json, "document") != NULL;
        counted &= json_integer_value(json_object_get(r.json, "computations_total")) == 1 &&
                   json_is_string(json_object_get(r.json, "state"));
        if (i == 0)
            snprintf(location, sizeof location, "%s", r.location);
        hx_resp_clear(&r);
    }
    T_CHECK(status[0] == 201 && status[1] == 200 && id[0] > 0 && id[1] == id[0],
            "summary submissions answered %ld (job %lld) then %ld (job %lld), want 201 then 200"
            " for one job", status[0], (long long)id[0], status[1], (long long)id[1]);
    char want[64];
    snprintf(want, sizeof want, "/v1/jobs/%lld", (long long)id[0]);
    T_CHECK(strcmp(location, want) == 0, "Location %s, want %s", location, want);
    T_CHECK(parts == 0 && counted, "a summary answer carried the job's parts or lacked its counts");
    T_CHECK(job_count() == before + 1, "two summary submissions with one key did not make one job");
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "POST", "/v1/jobs?view=full", doc, strlen(doc), &r) == 0,
            "POST ?view=full failed at transport level");
    int full = r.status == 201 && json_is_array(json_object_get(r.json, "computations")) &&
               json_is_object(json_object_get(r.json, "document"));
    hx_resp_clear(&r);
    free(doc);
    T_CHECK(full, "POST ?view=full did not answer the whole job");
    json_decref(itest_wait_state(id[0], "succeeded"));
}

/* An Idempotency-Key is 1 to 128 characters: an empty one ("Name;" makes
 * curl send the header without a value) or one of 129 is 400 naming it,
 * no job created; one of 128 is taken. */
static void test_idempotency_key_bounds(void **state)
{
    (void)state;
    int before = job_count();
    char *doc = hx_text_q(ONE_COMP("{'op':'shard_index','out':'x'}"));
    T_CHECK(doc != NULL, "out of memory");
    char long_key[200];
    snprintf(long_key, sizeof long_key, "Idempotency-Key: %0129d", 7);
    static const char empty_key[] = "Idempotency-Key;";
    const char *const keys[] = {empty_key, long_key};
    for (int i = 0; i < 2; i++) {
        const char *const hdrs[] = {keys[i], NULL};
        hx_resp_t r;
        int sent = hx_request_h(&itest_client, "POST", "/v1/jobs", doc, strlen(doc), hdrs,
                                &r) == 0;
        long status = sent ? r.status : 0;
        const char *f = sent ? json_string_value(json_object_get(r.json, "field")) : NULL;
        int named = f && strcmp(f, "Idempotency-Key") == 0;
        if (sent)
            hx_resp_clear(&r);
        if (status != 400 || !named)
            free(doc);
        T_CHECK(status == 400 && named, "%s answered %ld, want 400 at Idempotency-Key",
                i ? "a key of 129 characters" : "an empty key", status);
    }
    T_CHECK(job_count() == before, "a refused key created a job");
    char key[200];
    snprintf(key, sizeof key, "Idempotency-Key: %0128d", 8);
    const char *const hdrs[] = {key, NULL};
    hx_resp_t r;
    int sent = hx_request_h(&itest_client, "POST", "/v1/jobs", doc, strlen(doc), hdrs, &r) == 0;
    long status = sent ? r.status : 0;
    int64_t id = sent ? json_integer_value(json_object_get(r.json, "id")) : 0;
    if (sent)
        hx_resp_clear(&r);
    free(doc);
    T_CHECK(status == 201, "a key of 128 characters answered %ld, want 201", status);
    json_decref(itest_wait_state(id, "succeeded"));
}

/* ---- GET /v1/jobs, /v1/jobs/{id}, DELETE, /result ---- */

static void test_job_queries(void **state)
{
    (void)state;
    int before = job_count();
    static const struct {
        const char *path;
        const char *field;
    } list[] = {
        {"/v1/jobs?state=bogus", "state"},
        {"/v1/jobs?state=", "state"},
        {"/v1/jobs?state=%ff", "state"},
        {"/v1/jobs?limit=0", "limit"},
        {"/v1/jobs?limit=-3", "limit"},
        {"/v1/jobs?limit=abc", "limit"},
        {"/v1/jobs?limit=501", "limit"},
        {"/v1/jobs?limit=1e3", "limit"},
        {"/v1/jobs?limit=99999999999999999999999999", "limit"},
        {"/v1/jobs?before=-1", "before"},
        {"/v1/jobs?before=x", "before"},
        {"/v1/jobs?before=0", "before"},
        {"/v1/jobs?before=9223372036854775808", "before"},   /* INT64_MAX + 1 */
    };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++)
        expect_fault("GET", list[i].path, NULL, 0, 400, list[i].field);
    /* Every positive int64 is a bound: 10^18 and INT64_MAX list the jobs. */
    static const char *const big[] = {"/v1/jobs?before=1000000000000000000",
                                      "/v1/jobs?before=9223372036854775807"};
    for (int i = 0; i < 2; i++) {
        hx_resp_t r;
        int ok = hx_request(&itest_client, "GET", big[i], NULL, 0, &r) == 0 && r.status == 200;
        hx_resp_clear(&r);
        T_CHECK(ok, "GET %s should list the jobs (200)", big[i]);
    }
    static const char *const bad_ids[] = {"abc", "0", "-1", "1.5", "1e3", "%ff",
                                          "99999999999999999999999", "999999"};
    static const char *const methods[] = {"GET", "DELETE", "GET"};
    static const char *const suffixes[] = {"", "", "/result"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof bad_ids[0]; i++) {
        for (int m = 0; m < 3; m++) {
            char path[128];
            snprintf(path, sizeof path, "/v1/jobs/%s%s", bad_ids[i], suffixes[m]);
            expect_fault(methods[m], path, NULL, 0, 404, "id");
        }
    }
    expect_fault("PUT", "/v1/jobs", "{}", 2, 405, "method");
    expect_fault("GET", "/v1/nothing/%ff", NULL, 0, 404, "path");
    T_CHECK(job_count() == before, "a query created a job");
}

/* ---- /v1/islands/{name} ---- */

/* A waiter parked on GET /v1/jobs/{id}?wait_ms=30000 (own connection). */
typedef struct job_waiter {
    int64_t id;
    int status;
    char state[16];
    int64_t ms;                 /* how long its answer took */
    int whole;                  /* the answer was the whole job (computations, document) */
} job_waiter_t;

static void *job_wait_main(void *arg)
{
    job_waiter_t *w = arg;
    hx_client_t cl;
    if (hx_client_init(&cl, itest_cluster.url) != 0)
        return NULL;
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "?wait_ms=30000", w->id);
    hx_resp_t r;
    int64_t t0 = hx_now_ms();
    if (hx_request(&cl, "GET", path, NULL, 0, &r) == 0) {
        w->status = r.status;
        snprintf(w->state, sizeof w->state, "%s", hx_job_state(r.json));
        w->whole = json_is_array(json_object_get(r.json, "computations")) &&
                   json_is_object(json_object_get(r.json, "document"));
        hx_resp_clear(&r);
    }
    w->ms = hx_now_ms() - t0;
    hx_client_cleanup(&cl);
    return NULL;
}

/* GET /v1/jobs/{id}?wait_ms=N: a job that cannot end (island fake has no
 * worker yet) is answered after the wait, not at once, in the view asked
 * for; a waiter parked for 30 s (whole view: it parks on the summary) is
 * answered with the whole job as soon as the job is cancelled; bad values
 * are 400 naming wait_ms. */
static void test_job_wait(void **state)
{
    (void)state;
    char *doc = hx_text_q("{'name':'w','slices':{'s':{'shape':[2],'island':'fake'}},"
                          "'computations':[{'name':'c','slice':'s',"
                          "'ops':[{'op':'shard_index','out':'x'}],'outputs':['x']}]}");
    T_CHECK(doc != NULL, "out of memory");
    hx_resp_t r;
    int64_t id = 0;
    int st = hx_job_submit(&itest_client, doc, &id, &r);
    hx_resp_clear(&r);
    free(doc);
    T_CHECK(st == 201, "the job for island fake was refused with %d", st);
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "?view=summary&wait_ms=300", id);
    int64_t t0 = hx_now_ms();
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0 && r.status == 200,
            "GET %s failed", path);
    int64_t took = hx_now_ms() - t0;
    int final = hx_state_terminal(hx_job_state(r.json));
    int summary = json_object_get(r.json, "computations") == NULL;
    hx_resp_clear(&r);
    T_CHECK(!final && took >= 300, "GET %s answered after %" PRId64 " ms (%s): the wait was"
            " not kept", path, took, final ? "final" : "not final");
    T_CHECK(summary, "GET %s answered more than the summary", path);
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "?wait_ms=100", id);
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0 && r.status == 200 &&
                json_is_array(json_object_get(r.json, "computations")),
            "GET %s (the wait over) did not answer the whole job", path);
    hx_resp_clear(&r);

    job_waiter_t w = {id, 0, "", 0, 0};
    pthread_t th;
    T_CHECK(pthread_create(&th, NULL, job_wait_main, &w) == 0, "no thread");
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64, id);
    int cancelled = hx_request(&itest_client, "DELETE", path, NULL, 0, &r) == 0 &&
                    r.status < 300;
    hx_resp_clear(&r);
    pthread_join(th, NULL);
    T_CHECK(cancelled, "DELETE %s failed", path);
    T_CHECK(w.status == 200 && strcmp(w.state, "cancelled") == 0 && w.ms < 20000,
            "the parked waiter got %d '%s' after %" PRId64 " ms, not the cancellation",
            w.status, w.state, w.ms);
    T_CHECK(w.whole, "the parked waiter got the summary, not the whole job it asked for");

    static const char *const bad[] = {"-1", "abc", "30001", "1e3", "", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "?wait_ms=%s", id, bad[i]);
        expect_fault("GET", path, NULL, 0, 400, "wait_ms");
    }
}

static void test_islands(void **state)
{
    (void)state;
    expect_fault("GET", "/v1/islands/atlantis", NULL, 0, 404, "name");
    expect_fault("GET", "/v1/islands/%ff%fe", NULL, 0, 404, NULL);
    expect_fault("GET", "/v1/islands/a%20b", NULL, 0, 404, "name");
    char path[400];
    memset(path, 0, sizeof path);
    strcpy(path, "/v1/islands/");
    memset(path + strlen(path), 'x', 300);
    expect_fault("GET", path, NULL, 0, 404, NULL);
}

/* ---- worker protocol ---- */

/* The data-plane directory, asked by worker wid (registered at
 * 127.0.0.1:9 with the address "ABC", base64 QUJD): its own entry comes
 * back as registered; a bad or unknown addr, or a caller without its
 * credential, gets a problem naming the field. */
static void check_directory(int64_t wid)
{
    char path[160];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/peers?addr=127.0.0.1:9", wid);
    T_CHECK(hx_request_h(&itest_client, "GET", path, NULL, 0, worker_hdrs, &r) == 0 &&
                r.status == 200, "the directory did not answer for 127.0.0.1:9 (%ld)", r.status);
    const char *ucx = json_string_value(json_object_get(r.json, "ucx_address"));
    int64_t who = json_integer_value(json_object_get(r.json, "worker"));
    int ok = ucx && strcmp(ucx, "QUJD") == 0 && who == wid;
    hx_resp_clear(&r);
    T_CHECK(ok, "the directory answered another address or worker for 127.0.0.1:9");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/peers?addr=127.0.0.1:8", wid);
    expect_fault("GET", path, NULL, 0, 404, "addr");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/peers", wid);
    expect_fault("GET", path, NULL, 0, 400, "addr");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/peers?addr=a%%20b:1", wid);
    expect_fault("GET", path, NULL, 0, 400, "addr");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/peers?addr=:9", wid);
    expect_fault("GET", path, NULL, 0, 400, "addr");
    /* 64 characters: one past a data_addr's 63, well formed otherwise. */
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/peers?addr=%s:9", wid,
             "h1234567890123456789012345678901234567890123456789012345678901");
    expect_fault("GET", path, NULL, 0, 400, "addr");
    /* A caller that is not a live worker: 409, as for its logs and procs. */
    expect_fault("GET", "/v1/workers/999999/peers?addr=127.0.0.1:9", NULL, 0, 409, "id");
    /* Without the worker's own credential: refused before any lookup. */
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/peers?addr=127.0.0.1:9", wid);
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0, "transport failure");
    long st = r.status;
    hx_resp_clear(&r);
    T_CHECK(st == 401 || st == 403, "the directory answered %ld without a credential", st);
}

static const char *const bad_registrations[][2] = {
    {"", "body"},
    {"[]", "body"},
    {"{'devices':2,'data_addr':'127.0.0.1:1'}", "island"},
    {"{'island':'fake','data_addr':'127.0.0.1:1'}", "devices"},
    {"{'island':'fake','devices':0,'data_addr':'127.0.0.1:1'}", "devices"},
    {"{'island':'fake','devices':-2,'data_addr':'127.0.0.1:1'}", "devices"},
    {"{'island':'fake','devices':'2','data_addr':'127.0.0.1:1'}", "devices"},
    {"{'island':'fake','devices':2.0,'data_addr':'127.0.0.1:1'}", "devices"},
    {"{'island':'fake','devices':99999999,'data_addr':'127.0.0.1:1'}", "devices"},
    {"{'island':'fake','devices':2}", "data_addr"},
    {"{'island':'fake','devices':2,'data_addr':'no-port'}", "data_addr"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:99999'}", "data_addr"},
    {"{'island':'fake','devices':2,'data_addr':'a b:1'}", "data_addr"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','backend':'tpu'}", "backend"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','pid':'1'}", "pid"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','colour':1}", "colour"},
    {"{'island':7,'devices':2,'data_addr':'127.0.0.1:1'}", "island"},
    /* Empty strings: an island (not looked up: 400, not 404), a backend
     * (not taken for the default), a host; an address without a host. */
    {"{'island':'','devices':2,'data_addr':'127.0.0.1:1'}", "island"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','backend':''}", "backend"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','host':''}", "host"},
    {"{'island':'fake','devices':2,'data_addr':':1'}", "data_addr"},
    /* The UCX address peers are handed: base64 (padded) of 1..8192 bytes. */
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','ucx_address':7}", "ucx_address"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','ucx_address':''}", "ucx_address"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','ucx_address':'QUJ'}", "ucx_address"},
    {"{'island':'fake','devices':2,'data_addr':'127.0.0.1:1','ucx_address':'QU*D'}", "ucx_address"},
};

static void test_worker_register(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad_registrations / sizeof bad_registrations[0]; i++) {
        char *doc = hx_text_q(bad_registrations[i][0]);
        T_CHECK(doc != NULL, "out of memory");
        expect_fault("POST", "/v1/workers", doc, strlen(doc), 400, bad_registrations[i][1]);
        free(doc);
    }
    char *doc = hx_text_q("{'island':'atlantis','devices':2,'data_addr':'127.0.0.1:1'}");
    T_CHECK(doc != NULL, "out of memory");
    expect_fault("POST", "/v1/workers", doc, strlen(doc), 404, "island");
    free(doc);
    doc = hx_text_q("{'island':'fake','devices':3,'data_addr':'127.0.0.1:1'}");
    T_CHECK(doc != NULL, "out of memory");
    expect_fault("POST", "/v1/workers", doc, strlen(doc), 409, "devices");
    free(doc);
    char *name = repeat("{\"island\":\"", "i", 3000, "\",\"devices\":1,\"data_addr\":\"h:1\"}",
                        "", 0, "");
    expect_fault("POST", "/v1/workers", name, strlen(name), 400, "island");
    free(name);
    /* 8,193 bytes of address (10,924 base64 characters): one past the cap. */
    char *ucx = repeat("{\"island\":\"fake\",\"devices\":2,\"data_addr\":\"h:1\",\"ucx_address\":\"",
                       "QUJD", 2731, "\"}", "", 0, "");
    expect_fault("POST", "/v1/workers", ucx, strlen(ucx), 400, "ucx_address");
    free(ucx);
    /* Nothing above registered a worker on fake: its devices are still down. */
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/v1/islands/fake", NULL, 0, &r) == 0 &&
                r.status == 200, "GET /v1/islands/fake failed");
    json_t *devs = json_object_get(r.json, "devices");
    int down = 0;
    for (size_t i = 0; i < json_array_size(devs); i++) {
        const char *ds = json_string_value(json_object_get(json_array_get(devs, i), "state"));
        down += ds && strcmp(ds, "down") == 0;
    }
    hx_resp_clear(&r);
    T_CHECK(down == 2, "a refused registration took devices of fake (%d of 2 down)", down);
}

/* POSTs a single-quoted report for task `task` as worker `wid`. */
static void report_fault(int64_t wid, int64_t task, const char *body_q, int want,
                         const char *field)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks/%" PRId64, wid, task);
    char *body = hx_text_q(body_q);
    T_CHECK(body != NULL, "out of memory");
    expect_fault("POST", path, body, strlen(body), want, field);
    free(body);
}

static int report_ok(int64_t wid, int64_t task, const char *body_q)
{
    char path[128];
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks/%" PRId64, wid, task);
    char *body = hx_text_q(body_q);
    T_CHECK(body != NULL, "out of memory");
    hx_resp_t r;
    int rc = hx_request_h(&itest_client, "POST", path, body, strlen(body), worker_hdrs, &r);
    long status = rc == 0 ? r.status : 0;
    if (rc == 0)
        hx_resp_clear(&r);
    free(body);
    return (int)status;
}

/* A valid scalar tensor, for report bodies. */
#define T0 "{'shape':[],'sum':0}"

/* The poll's group for the fake job: {job, attempt 0, placement, tasks}
 * with one host task of both shards, and the placement of this worker
 * (127.0.0.1:9, devices 0..1 of fake) and slice s (the whole island), an
 * exclusive job under parallel dispatch: its reports may be held. */
static void check_host_group(const json_t *g, int64_t job)
{
    json_t *tasks = json_object_get(g, "tasks"), *t = json_array_get(tasks, 0);
    json_t *pl = json_object_get(g, "placement");
    json_t *want_pl = json_pack("{s:[{s:s, s:s, s:i, s:i}], s:{s:{s:s, s:[i], s:[i], s:[i]}},"
                                " s:b}",
                                "procs", "addr", "127.0.0.1:9", "island", "fake", "first", 0,
                                "count", 2, "slices", "s", "island", "fake", "mesh", 2,
                                "origin", 0, "box", 2, "hold_reports", 1);
    int pl_ok = json_equal(pl, want_pl);
    json_decref(want_pl);
    T_CHECK(json_integer_value(json_object_get(g, "job")) == job &&
                json_integer_value(json_object_get(g, "attempt")) == 0,
            "the group is not job %" PRId64 " attempt 0", job);
    T_CHECK(pl_ok, "the group's placement is not this worker and slice s");
    json_t *want_sh = json_pack("[i, i]", 0, 1);
    int sh_ok = json_array_size(tasks) == 1 && json_equal(json_object_get(t, "shards"), want_sh) &&
                json_equal(json_object_get(t, "devices"), want_sh) &&
                json_integer_value(json_object_get(t, "task")) > 0 &&
                json_is_string(json_object_get(t, "slice")) &&
                !strcmp(json_string_value(json_object_get(t, "slice")), "s") &&
                !json_object_get(t, "peers") && !json_object_get(t, "shard");
    json_decref(want_sh);
    T_CHECK(sh_ok, "expected one host task of shards [0,1] on devices [0,1] of slice s");
}

/* POSTs batch `fmt_q` (single-quoted, %PRId64 for the task) as worker wid:
 * 200 with the one item's status `want`. */
static void batch_item_fault(int64_t wid, int64_t task, const char *fmt_q, int want)
{
    char path[96], text[512];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/reports", wid);
    snprintf(text, sizeof text, fmt_q, task);
    char *body = hx_text_q(text);
    T_CHECK(body != NULL, "out of memory");
    int rc = hx_request_h(&itest_client, "POST", path, body, strlen(body), worker_hdrs, &r);
    free(body);
    T_CHECK(rc == 0, "POST %s failed at transport level", path);
    long status = r.status;
    json_t *item = json_array_get(json_object_get(r.json, "results"), 0);
    json_int_t got = json_integer_value(json_object_get(item, "status"));
    hx_resp_clear(&r);
    T_CHECK(status == 200 && got == want, "batch item answered %ld/%lld, want 200/%d", status,
            (long long)got, want);
}

/* The fake job's result: shard k is k, both from the one host task. */
static void check_fake_result(int64_t job)
{
    char path[64];
    hx_resp_t r;
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "/result", job);
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0 && r.status == 200,
            "GET %s failed", path);
    json_t *arr = json_object_get(json_object_get(r.json, "outputs"), "c.i");
    int ok = json_array_size(arr) == 2;
    for (size_t k = 0; ok && k < 2; k++) {
        json_t *e = json_array_get(arr, k);
        ok = json_integer_value(json_object_get(e, "shard")) == (json_int_t)k &&
             json_number_value(json_array_get(json_object_get(e, "values"), 0)) == (double)k;
    }
    hx_resp_clear(&r);
    T_CHECK(ok, "the result of job %" PRId64 " is not shard k = k for k = 0, 1", job);
}

/* The test plays a worker on island fake: registers, heartbeats, polls a
 * real job's host task (one, for both shards, with the placement), sends
 * malformed reports (each 400, the task stays leased and the job
 * unchanged), then a valid one (the job succeeds), then a repeat (409). */
static void test_worker_protocol(void **state)
{
    (void)state;
    hx_resp_t r;
    char *doc = hx_text_q("{'island':'fake','devices':2,'data_addr':'127.0.0.1:9','host':'t',"
                          "'ucx_address':'QUJD'}");
    T_CHECK(doc != NULL, "out of memory");
    T_CHECK(hx_request(&itest_client, "POST", "/v1/workers", doc, strlen(doc), &r) == 0,
            "register failed at transport level");
    free(doc);
    long status = r.status;
    int64_t wid = json_integer_value(json_object_get(r.json, "id"));
    const char *secret = json_string_value(json_object_get(r.json, "secret"));
    snprintf(worker_secret_hdr, sizeof worker_secret_hdr, "X-Atoll-Worker-Secret: %s",
             secret ? secret : "");
    hx_resp_clear(&r);
    T_CHECK(status == 201 && wid > 0 && secret, "registration on fake answered %ld", status);
    char path[128];

    /* Heartbeat faults. */
    expect_fault("POST", "/v1/workers/abc/heartbeat", "{}", 2, 404, "id");
    expect_fault("POST", "/v1/workers/999999/heartbeat", "{}", 2, 404, "id");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/heartbeat", wid);
    fault_s("POST", path, "[]", 400, "body");
    fault_s("POST", path, "{\"beat\":1}", 400, "beat");
    fault_s("POST", path, "{\"store\":[]}", 400, "store");
    fault_s("POST", path, "{\"store\":{\"objects\":-1}}", 400, "store.objects");
    fault_s("POST", path, "{\"store\":{\"bytes\":\"x\"}}", 400, "store.bytes");
    fault_s("POST", path, "{\"store\":{\"bytes\":1e400}}", 400, "body");

    /* Poll faults. */
    static const char *const waits[] = {"abc", "-1", "30001", "1e3", "", "99999999999999999999"};
    for (size_t i = 0; i < sizeof waits / sizeof waits[0]; i++) {
        snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=%s", wid, waits[i]);
        expect_fault("GET", path, NULL, 0, 400, "wait_ms");
    }
    expect_fault("GET", "/v1/workers/999999/tasks?wait_ms=0", NULL, 0, 404, "id");
    /* A live worker's poll names what it received: without ack, 400. */
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=0", wid);
    expect_fault("GET", path, NULL, 0, 400, "ack");
    expect_fault("GET", "/v1/workers/x/tasks", NULL, 0, 404, "id");

    check_directory(wid);

    /* A real job on fake: two shards, both on this "worker", so one host
     * task covering shards [0, 1], in a group with the job's placement. */
    int64_t job = itest_submit("{'name':'fake','slices':{'s':{'shape':[2],'island':'fake'}},"
                               "'computations':[{'name':'c','slice':'s','ops':["
                               "{'op':'shard_index','out':'i'}],'outputs':['i']}]}");
    json_t *group = NULL;
    int64_t t0 = hx_now_ms();
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks?wait_ms=500&ack=0", wid);
    while (!group && hx_now_ms() - t0 < 10000) {
        T_CHECK(hx_request_h(&itest_client, "GET", path, NULL, 0, worker_hdrs, &r) == 0 &&
                    r.status == 200, "poll failed");
        T_CHECK(json_is_array(json_object_get(r.json, "jobs")) && !json_object_get(r.json, "tasks"),
                "the poll answer is not {jobs, cancel}");
        group = json_incref(json_array_get(json_object_get(r.json, "jobs"), 0));
        hx_resp_clear(&r);
    }
    T_CHECK(group != NULL, "the fake worker got no host task within 10 s");
    check_host_group(group, job);
    int64_t task = json_integer_value(json_object_get(json_array_get(
        json_object_get(group, "tasks"), 0), "task"));
    json_decref(group);

    /* Malformed reports: 400, nothing recorded. */
    static const char *const bad_reports[][2] = {
        {"{}", "state"},
        {"{'state':'done'}", "state"},
        {"{'state':7}", "state"},
        {"{'state':'failed','error':42}", "error"},
        {"{'state':'succeeded','started_us':'now'}", "started_us"},
        {"{'state':'succeeded','started_us':1.5}", "started_us"},
        /* stamps out of range (the controller sums their differences) */
        {"{'state':'succeeded','started_us':-1}", "started_us"},
        {"{'state':'succeeded','finished_us':9223372036854775807}", "finished_us"},
        {"{'state':'succeeded','colour':'red'}", "colour"},
        /* comp: a computation index, 0..2^31-1 (schema/032's runs) */
        {"{'state':'succeeded','comp':-1}", "comp"},
        {"{'state':'succeeded','comp':2147483648}", "comp"},
        {"{'state':'succeeded','comp':'c0'}", "comp"},
        {"{'state':'succeeded','comp':0.5}", "comp"},
        {"{'state':'succeeded','outputs':[]}", "outputs"},
        /* a tensor per output, not an array of one per shard (before host tasks) */
        {"{'state':'succeeded','outputs':{'i':{'shape':[],'sum':0}}}", "outputs"},
        {"{'state':'succeeded','outputs':{'i':[]}}", "outputs"},
        /* one tensor per shard of the task: it has 2 (fails without the check) */
        {"{'state':'succeeded','outputs':{'i':[" T0 "]}}", "outputs.i"},
        {"{'state':'succeeded','outputs':{'i':[" T0 "," T0 "," T0 "]}}", "outputs.i"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",7]}}", "outputs.i[1]"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[]}]}}", "outputs.i[1]"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[-1],'sum':0}]}}", "outputs.i[1]"},
        {"{'state':'succeeded','outputs':{'i':[{'shape':[4096,4096,4096],'sum':0}," T0 "]}}",
         "outputs.i[0]"},
        /* the element count overflows int64 (wrapped to 0 before the fix) */
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[16777216,1099511627776],'sum':0}]}}",
         "outputs.i[1]"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[1,1,1,1,1],'sum':0}]}}", "outputs"},
        /* values_f32: base64 of exactly the elements' f32 bytes */
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[2],'sum':0,"
         "'values_f32':'AAAAAA=='}]}}", "outputs.i[1]"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[],'sum':0,"
         "'values_f32':'!!!!!!!!'}]}}", "outputs.i[1]"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[],'sum':'x'}]}}", "outputs"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[],'sum':0,'values_f32':5}]}}",
         "outputs"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[],'sum':0,'values':[0]}]}}",
         "outputs.i[1]"},
        {"{'state':'succeeded','outputs':{'i':[" T0 ",{'shape':[],'sum':0,'extra':1}]}}", "outputs"},
        {"{'state':'succeeded','outputs':{'no such name!':[" T0 "," T0 "]}}", "outputs"},
    };
    for (size_t i = 0; i < sizeof bad_reports / sizeof bad_reports[0]; i++)
        report_fault(wid, task, bad_reports[i][0], 400, bad_reports[i][1]);
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks/%" PRId64, wid, task);
    fault_s("POST", path, "", 400, "body");
    fault_s("POST", path, "[1]", 400, "body");
    fault_s("POST", path, "{\"state\":\"succeeded\",\"state\":\"failed\"}", 400, "body");
    /* In a batch, a wrong count of tensors is that item's 400 (nothing applied). */
    batch_item_fault(wid, task, "{'reports':[{'task':%" PRId64 ",'state':'succeeded',"
                     "'outputs':{'i':[" T0 "," T0 "," T0 "]}}]}", 400);
    /* Outputs that are not an object: that item's 400, not the whole
     * batch's (the others of a batch still apply). */
    batch_item_fault(wid, task, "{'reports':[{'task':%" PRId64 ",'state':'succeeded',"
                     "'outputs':[]}]}", 400);
    /* Wrong ids: unknown task 404, another worker's task 409. */
    report_fault(wid, 99999999, "{'state':'succeeded'}", 404, "task");
    report_fault(wid + 1000, task, "{'state':'succeeded'}", 409, "task");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64 "/tasks/abc", wid);
    fault_s("POST", path, "{}", 404, "task");

    /* The job did not move: still running, no computation done. */
    json_t *j = hx_job_get(&itest_client, job);
    char st[32];
    snprintf(st, sizeof st, "%s", j ? hx_job_state(j) : "(none)");
    json_int_t done = json_integer_value(json_object_get(j, "computations_done"));
    json_decref(j);
    T_CHECK(strcmp(st, "running") == 0 && done == 0,
            "malformed reports moved the job (state %s, %lld done)", st, (long long)done);

    /* The valid report now, one tensor per shard in the task's shard
     * order: accepted, the job succeeds with one result row per shard. */
    int s = report_ok(wid, task, "{'state':'succeeded','started_us':1,'inputs_ready_us':2,"
                      "'finished_us':3,'outputs':{'i':[{'shape':[],'sum':0,"
                      "'values_f32':'AAAAAA=='},{'shape':[],'sum':1,'values_f32':'AACAPw=='}]}}");
    T_CHECK(s == 200, "valid report of task %" PRId64 " answered %d", task, s);
    json_decref(itest_wait_state(job, "succeeded"));
    check_fake_result(job);
    /* A second report of a finished task: 409, never counted twice. */
    report_fault(wid, task, "{'state':'succeeded','outputs':{'i':[" T0 "," T0 "]}}", 409, "task");
    snprintf(path, sizeof path, "/v1/workers/%" PRId64, wid);
    T_CHECK(hx_request_h(&itest_client, "DELETE", path, NULL, 0, worker_hdrs, &r) == 0 &&
                r.status == 200, "the fake worker could not leave");
    hx_resp_clear(&r);
    worker_secret_hdr[0] = '\0';
}

/* Last: across everything above, atolld answered no 5xx at all. */
static void test_no_5xx(void **state)
{
    (void)state;
    hx_resp_t r;
    T_CHECK(hx_request(&itest_client, "GET", "/metrics", NULL, 0, &r) == 0 && r.status == 200,
            "GET /metrics failed");
    const char *line = strstr(r.body, "atoll_http_responses{code=\"5xx\"}");
    long n5 = line ? strtol(line + strlen("atoll_http_responses{code=\"5xx\"}"), NULL, 10) : -1;
    hx_resp_clear(&r);
    T_CHECK(n5 == 0, "atolld answered %ld 5xx responses during the bad-input tests", n5);
    expect_healthy();
}

static int group_setup(void **state)
{
    (void)state;
    /* fake has no worker process: the test registers one by hand. */
    static const itest_island_t isl[] = {{"west=2x2", "west", 1, 4, NULL},
                                         {"fake=2", "fake", 0, 0, NULL}};
    return itest_start(isl, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_job_body_syntax, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_job_body_oversized_413, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_job_document_faults, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_valid_job_still_runs, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_document_as_sent, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_submit_summary_view, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_idempotency_key_bounds, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_job_queries, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_job_wait, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_islands, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_worker_register, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_worker_protocol, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_no_5xx, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
