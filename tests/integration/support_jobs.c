/* support_jobs.c - job-level helpers on top of the HTTP client: submit,
 * poll to a terminal state, fetch results, read timestamps. */
#include "support_harness.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void hx_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int64_t hx_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int hx_cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

char *hx_text_q(const char *text)
{
    char *s = strdup(text);
    if (!s)
        return NULL;
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    return s;
}

json_t *hx_json_q(const char *text)
{
    char *s = hx_text_q(text);
    if (!s)
        return NULL;
    json_error_t err;
    json_t *j = json_loads(s, 0, &err);
    if (!j)
        fprintf(stderr, "harness: bad test JSON at %d:%d: %s\n  %s\n", err.line, err.column,
                err.text, s);
    free(s);
    return j;
}

/* Job ids are integers in this server; a string id holding digits is
 * accepted too so the harness does not fail on a harmless representation
 * change. Returns 0 or -1. */
static int jobs_id_of(const json_t *obj, int64_t *id)
{
    json_t *v = json_object_get(obj, "id");
    if (json_is_integer(v)) {
        *id = json_integer_value(v);
        return 0;
    }
    if (json_is_string(v)) {
        char *end = NULL;
        long long x = strtoll(json_string_value(v), &end, 10);
        if (end && *end == '\0' && end != json_string_value(v)) {
            *id = x;
            return 0;
        }
    }
    return -1;
}

int hx_job_submit(hx_client_t *cl, const char *doc, int64_t *id, hx_resp_t *out)
{
    hx_resp_t r;
    /* A caller that keeps no answer reads only the id: the summary serves
     * (a large program's full object is tens of KB to build and parse). */
    if (hx_request(cl, "POST", out ? "/v1/jobs" : "/v1/jobs?view=summary", doc, strlen(doc),
                   &r) != 0)
        return -1;
    int status = (int)r.status;
    if (status == 201 && jobs_id_of(r.json, id) != 0) {
        fprintf(stderr, "harness: 201 without a job id: %s\n", r.body);
        status = -1;
    }
    if (out)
        *out = r;               /* caller now owns the response */
    else
        hx_resp_clear(&r);
    return status;
}

/* GET /v1/jobs/{id}, with `?view=summary` when summary is set, and
 * `wait_ms` (the server answers when the job is final or after that long)
 * when wait_ms > 0. */
static json_t *job_get_view(hx_client_t *cl, int64_t id, int summary, int wait_ms)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "?view=%s&wait_ms=%d", id,
             summary ? "summary" : "full", wait_ms > 0 ? wait_ms : 0);
    hx_resp_t r;
    if (hx_request(cl, "GET", path, NULL, 0, &r) != 0)
        return NULL;
    json_t *job = NULL;
    if (r.status == 200 && json_is_object(r.json)) {
        job = r.json;
        r.json = NULL;          /* keep the reference, clear drops the rest */
    }
    hx_resp_clear(&r);
    return job;
}

json_t *hx_job_get(hx_client_t *cl, int64_t id)
{
    return job_get_view(cl, id, 0, 0);
}

const char *hx_job_state(const json_t *job)
{
    const char *s = json_string_value(json_object_get(job, "state"));
    return s ? s : "";
}

int hx_state_terminal(const char *s)
{
    return strcmp(s, "succeeded") == 0 || strcmp(s, "failed") == 0 ||
           strcmp(s, "cancelled") == 0;
}

/* Longest server-side wait of one request of hx_job_wait: well inside the
 * client's HTTP timeout. */
#define JOBS_WAIT_CHUNK_MS 2000

/* Polls the job's summary (one row: cheap for the controller however long
 * the job) until done(state, arg) or timeout; *out then gets the whole job
 * as it is after that. Shared by both wait helpers. With lp set, each
 * request parks on the server until the job is final (wait_ms), and an
 * answer that came back early, not final, is followed by a pause of
 * poll_ms. */
static int jobs_poll(hx_client_t *cl, int64_t id, int timeout_ms, int poll_ms, json_t **out,
                     int (*done)(const char *state, const char *arg), const char *arg, int lp)
{
    int64_t deadline = hx_now_ms() + timeout_ms;
    int rc = -1;
    for (;;) {
        int64_t left = deadline - hx_now_ms(), t0 = hx_now_ms();
        int wait_ms = !lp ? 0 : left > JOBS_WAIT_CHUNK_MS ? JOBS_WAIT_CHUNK_MS
                                : left > 1 ? (int)left : 1;
        json_t *job = job_get_view(cl, id, 1, wait_ms);
        if (!job)
            break;
        int ended = done(hx_job_state(job), arg);
        json_decref(job);
        if (ended) {
            rc = 0;
            break;
        }
        if (hx_now_ms() >= deadline)
            break;
        if (hx_now_ms() - t0 < wait_ms / 2 + 1)   /* polling, or a server without wait_ms */
            hx_sleep_ms(poll_ms);
    }
    if (out)
        *out = hx_job_get(cl, id);
    return rc;
}

static int jobs_is_terminal(const char *state, const char *unused)
{
    (void)unused;
    return hx_state_terminal(state);
}

static int jobs_left(const char *state, const char *from)
{
    return strcmp(state, from) != 0;
}

int hx_job_wait(hx_client_t *cl, int64_t id, int timeout_ms, int poll_ms, json_t **job)
{
    return jobs_poll(cl, id, timeout_ms, poll_ms, job, jobs_is_terminal, NULL, 1);
}

int hx_job_run(hx_client_t *cl, const char *doc, int timeout_ms, int poll_ms)
{
    int64_t id;
    json_t *job = NULL;
    if (hx_job_submit(cl, doc, &id, NULL) != 201) {
        hx_client_print_last(cl);
        return -1;
    }
    int rc = hx_job_wait(cl, id, timeout_ms, poll_ms, &job);
    if (rc != 0 || strcmp(hx_job_state(job), "succeeded") != 0) {
        fprintf(stderr, "job %" PRId64 " ended '%s'\n", id, job ? hx_job_state(job) : "?");
        rc = -1;
    }
    json_decref(job);
    return rc;
}

int hx_job_wait_leave(hx_client_t *cl, int64_t id, const char *state, int timeout_ms,
                      int poll_ms, json_t **job)
{
    return jobs_poll(cl, id, timeout_ms, poll_ms, job, jobs_left, state, 0);
}

json_t *hx_job_result(hx_client_t *cl, int64_t id)
{
    return hx_job_part(cl, id, "result");
}

json_t *hx_job_part(hx_client_t *cl, int64_t id, const char *part)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/jobs/%" PRId64 "/%s", id, part);
    hx_resp_t r;
    if (hx_request(cl, "GET", path, NULL, 0, &r) != 0)
        return NULL;
    json_t *res = NULL;
    if (r.status == 200 && json_is_object(r.json)) {
        res = r.json;
        r.json = NULL;
    }
    hx_resp_clear(&r);
    return res;
}

int64_t hx_job_time_us(const json_t *job, const char *name)
{
    json_t *v = json_object_get(json_object_get(job, "times_us"), name);
    if (json_is_integer(v))
        return json_integer_value(v);
    char key[64];
    snprintf(key, sizeof key, "%s_us", name);
    v = json_object_get(job, key);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

int64_t hx_comp_time_us(const json_t *job, int comp, const char *name)
{
    json_t *c = json_array_get(json_object_get(job, "computations"), (size_t)comp);
    json_t *v = json_object_get(json_object_get(c, "times_us"), name);
    return json_is_integer(v) ? json_integer_value(v) : -1;
}

json_t *hx_result_shard(const json_t *result, const char *key, int shard)
{
    json_t *arr = json_object_get(json_object_get(result, "outputs"), key);
    return json_array_get(arr, (size_t)shard);
}

char *hx_compute_chain_doc(const char *name, int n, int64_t us, int shared, const char *island,
                           int d0, int d1)
{
    json_t *comps = json_array();
    for (int i = 0; comps && i < n; i++) {
        char cname[16], prev[24];
        snprintf(cname, sizeof cname, "c%d", i);
        json_t *ops = json_array();
        if (i > 0) {
            snprintf(prev, sizeof prev, "c%d.b", i - 1);
            json_array_append_new(ops, json_pack("{s:s, s:s, s:s}", "op", "input", "out", "p",
                                                 "from", prev));
        }
        json_array_append_new(ops, json_pack("{s:s, s:s, s:I}", "op", "compute", "out", "b",
                                             "us", (json_int_t)us));
        json_array_append_new(comps, json_pack("{s:s, s:s, s:o, s:[s]}", "name", cname, "slice",
                                               "s", "ops", ops, "outputs", "b"));
    }
    json_t *shape = d1 > 0 ? json_pack("[i,i]", d0, d1) : json_pack("[i]", d0);
    json_t *slice = json_pack("{s:o}", "shape", shape);
    if (slice && island)
        json_object_set_new(slice, "island", json_string(island));
    json_t *doc = json_pack("{s:s, s:s, s:{s:o}, s:o}", "name", name, "sharing",
                            shared ? "shared" : "exclusive", "slices", "s", slice,
                            "computations", comps);
    char *text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    return text;
}
