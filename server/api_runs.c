/* api_runs.c - users' programs (DESIGN.md Part F): what workers send about
 * their processes, and what users read.
 *
 *   POST /v1/workers/{id}/logs?job&attempt&comp&process
 *        one process's output as segments [stream: 1 byte, 1 stdout or 2
 *        stderr][length: 4 bytes, little-endian][bytes] (worker credential;
 *        the worker must hold a host task of that computation attempt)
 *   POST /v1/workers/{id}/procs   {"events": [...]}: process states
 *   GET  /v1/jobs/{id}/logs?computation=NAME&process=K[&attempt=A][&follow=1]
 *        text/plain, stdout and stderr as received; follow streams until
 *        the process (or its job attempt) ended
 *   GET  /v1/jobs/{id}/processes  every process of every run computation
 *
 * Follow streams park like the event stream (api_stream.c): a reader that
 * finds nothing new suspends its connection; every chunk or state stored,
 * and the sampler's tick once a second, resume them all. */
#include "api.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "util.h"

#define RUNS_FOLLOW_MAX 256
#define RUNS_READ_MAX ((size_t)(2 * STORE_RUN_LOG_KEEP + (1 << 20)))

typedef struct follow {
    struct MHD_Connection *conn;
    store_run_key_t k;
    int64_t last_id;
    char *buf;                 /* read but not yet handed to MHD */
    size_t len, pos;
    int done;
} follow_t;

static pthread_mutex_t runs_mu = PTHREAD_MUTEX_INITIALIZER;
static follow_t *parked[RUNS_FOLLOW_MAX];   /* guarded */
static int nparked, nfollow, runs_stopping; /* guarded */

void api_runs_notify(void)
{
    pthread_mutex_lock(&runs_mu);
    for (int i = 0; i < nparked; i++)
        MHD_resume_connection(parked[i]->conn);
    nparked = 0;
    pthread_mutex_unlock(&runs_mu);
}

void api_runs_stop(void)
{
    pthread_mutex_lock(&runs_mu);
    runs_stopping = 1;
    pthread_mutex_unlock(&runs_mu);
    api_runs_notify();
}

/* A non-negative integer query parameter (absent: dflt). -1 when bad. */
static int64_t query_int(const http_req_t *req, const char *key, int64_t dflt, int64_t max)
{
    const char *v = http_query(req, key);
    if (!v)
        return dflt;
    if (strcmp(v, "0") == 0)
        return 0;
    int64_t n = api_parse_id(v);
    return n >= 1 && n <= max ? n : -1;
}

/* ---------------------------------------------------------------- */
/* From workers. */

void api_worker_logs(http_req_t *req, http_resp_t *resp)
{
    store_t *st;
    int64_t worker = api_worker_caller(req, resp, &st);
    if (worker < 1)
        return;
    int64_t job = query_int(req, "job", -1, INT64_MAX / 2), att = query_int(req, "attempt", -1, 1000);
    int64_t comp = query_int(req, "comp", -1, JOB_MAX_COMPS - 1);
    int64_t proc = query_int(req, "process", -1, 1 << 20);
    const char *bad = job < 1 ? "job" : att < 0 ? "attempt" : comp < 0 ? "comp"
                    : proc < 0 ? "process" : NULL;
    if (bad) {
        http_problem(resp, 400, bad, "logs need job, attempt, comp and process (non-negative "
                     "integers)");
        return;
    }
    if (req->body_len > REPORT_LOG_BODY_MAX) {
        http_problem(resp, 413, "body", "at most %zu bytes of output a request",
                     REPORT_LOG_BODY_MAX);
        return;
    }
    store_run_seg_t *segs = malloc(sizeof *segs * REPORT_LOG_SEGS_MAX);
    int nseg = segs ? report_log_segments(req->body, req->body_len, segs, REPORT_LOG_SEGS_MAX)
                    : -1;
    if (nseg < 0) {
        free(segs);
        http_problem(resp, 400, "body", "the body must be segments [stream 1|2][length u32 "
                     "LE][bytes], at most %d", REPORT_LOG_SEGS_MAX);
        return;
    }
    store_run_key_t k = {job, (int)att, (int)comp, (int)proc};
    int rc = store_run_owned(st, worker, job, (int)att, (int)comp, (int)proc);
    if (rc == STORE_NOTFOUND)
        http_problem(resp, 409, "job", "worker %lld holds no task of job %lld attempt %lld "
                     "computation %lld, a run computation with a process %lld",
                     (long long)worker, (long long)job, (long long)att, (long long)comp,
                     (long long)proc);
    else if (rc != STORE_OK || store_run_log_put(st, &k, segs, nseg) != STORE_OK)
        http_problem(resp, 503, NULL, "the output could not be stored; retry");
    else
        http_json(resp, 200, json_pack("{s:I}", "stored", (json_int_t)req->body_len));
    free(segs);
    if (rc == STORE_OK)
        api_runs_notify();
}

/* Checks one process-state event; NULL when good, else the bad member. */
static const char *event_bad(const json_t *ev)
{
    static const char *const ints[] = {"job", "attempt", "comp", "process", "pid"};
    if (!json_is_object(ev))
        return "events";
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        const json_t *v = json_object_get(ev, ints[i]);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > INT32_MAX)
            return ints[i];
    }
    const char *state = json_string_value(json_object_get(ev, "state"));
    const char *host = json_string_value(json_object_get(ev, "host"));
    if (!state || (strcmp(state, "running") && strcmp(state, "exited") && strcmp(state, "killed")))
        return "state";
    if (!host || strlen(host) > 255)
        return "host";
    const json_t *code = json_object_get(ev, "exit_code"), *sig = json_object_get(ev, "signal");
    if (code && !json_is_integer(code))
        return "exit_code";
    /* Its own name: a bad signal was answered as a bad exit_code. */
    if (sig && !json_is_integer(sig))
        return "signal";
    return NULL;
}

void api_worker_procs(http_req_t *req, http_resp_t *resp)
{
    store_t *st;
    int64_t worker = api_worker_caller(req, resp, &st);
    if (worker < 1)
        return;
    json_t *body = api_body_json(req, resp);
    if (!body)
        return;
    json_t *evs = json_object_get(body, "events");
    if (!json_is_array(evs) || json_array_size(evs) > 4096) {
        http_problem(resp, 400, "events", "events must be an array of at most 4096 states");
        goto cleanup;
    }
    for (size_t i = 0; i < json_array_size(evs); i++) {
        const json_t *ev = json_array_get(evs, i);
        const char *bad = event_bad(ev);
        char field[64];
        snprintf(field, sizeof field, "events[%zu].%s", i, bad ? bad : "job");
        if (bad) {
            http_problem(resp, 400, field, "a state is {job, attempt, comp, process, pid, "
                         "state: running|exited|killed, host, exit_code?, signal?}");
            goto cleanup;
        }
        if (store_run_owned(st, worker, json_integer_value(json_object_get(ev, "job")),
                            (int)json_integer_value(json_object_get(ev, "attempt")),
                            (int)json_integer_value(json_object_get(ev, "comp")),
                            (int)json_integer_value(json_object_get(ev, "process"))) != STORE_OK) {
            http_problem(resp, 409, field, "worker %lld holds no task of that computation,"
                         " or it is not a run computation with that process", (long long)worker);
            goto cleanup;
        }
    }
    if (store_run_procs_put(st, worker, evs) != STORE_OK) {
        http_problem(resp, 503, NULL, "the states could not be stored; retry");
        goto cleanup;
    }
    api_runs_notify();
    http_json(resp, 200, json_pack("{s:i}", "stored", (int)json_array_size(evs)));
cleanup:
    json_decref(body);
}

/* ---------------------------------------------------------------- */
/* For users. */

/* The run computation named by ?computation= (default: the job's only
 * one). Its index, or -1 when answered. */
static int logs_comp(http_req_t *req, http_resp_t *resp, store_t *st, int64_t id)
{
    json_t *doc = store_sched_job_doc(st, id);
    const json_t *comps = json_object_get(doc, "computations");
    const char *want = http_query(req, "computation");
    int found = -1, nrun = 0;
    for (size_t i = 0; i < json_array_size(comps); i++) {
        const json_t *c = json_array_get(comps, i);
        const char *name = json_string_value(json_object_get(c, "name"));
        int run = json_object_get(c, "run") != NULL;
        nrun += run;
        if (want ? name && strcmp(name, want) == 0 && run : run && found < 0)
            found = (int)i;
    }
    json_decref(doc);
    if (!doc)
        http_problem(resp, 500, NULL, "job %lld's document could not be read", (long long)id);
    else if (want && found < 0)
        http_problem(resp, 404, "computation", "job %lld has no run computation named '%.64s'",
                     (long long)id, want);
    else if (!want && nrun != 1)
        http_problem(resp, 400, "computation", "job %lld has %d run computations: name one",
                     (long long)id, nrun);
    return doc && found >= 0 && (want || nrun == 1) ? found : -1;
}

static ssize_t follow_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    follow_t *f = cls;
    if (f->pos == f->len) {
        free(f->buf);
        f->buf = NULL;
        f->len = f->pos = 0;
        store_t *st = store_thread();
        int ended = !st || store_run_proc_ended(st, &f->k);   /* before the read: no loss */
        if (st)
            store_run_log_read(st, &f->k, f->last_id, 1 << 20, &f->buf, &f->len, &f->last_id);
        if (f->len == 0 && ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    if (f->pos < f->len) {
        size_t n = f->len - f->pos < max ? f->len - f->pos : max;
        memcpy(buf, f->buf + f->pos, n);
        f->pos += n;
        return (ssize_t)n;
    }
    pthread_mutex_lock(&runs_mu);
    if (runs_stopping) {
        pthread_mutex_unlock(&runs_mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    MHD_suspend_connection(f->conn);          /* nothing new: park until notified */
    parked[nparked++] = f;
    pthread_mutex_unlock(&runs_mu);
    return 0;
}

static void follow_free(void *cls)
{
    follow_t *f = cls;
    pthread_mutex_lock(&runs_mu);
    nfollow--;
    pthread_mutex_unlock(&runs_mu);
    free(f->buf);
    free(f);
}

static void logs_follow(http_req_t *req, http_resp_t *resp, const store_run_key_t *k)
{
    follow_t *f = calloc(1, sizeof *f);
    pthread_mutex_lock(&runs_mu);
    int refuse = !f || runs_stopping || nfollow >= RUNS_FOLLOW_MAX;
    if (!refuse)
        nfollow++;
    pthread_mutex_unlock(&runs_mu);
    if (refuse) {
        free(f);
        http_problem(resp, 503, NULL, "too many log streams open");
        return;
    }
    f->conn = req->conn;
    f->k = *k;
    http_stream(resp, "text/plain; charset=utf-8", 65536, follow_read, f, follow_free);
}

void api_jobs_logs(http_req_t *req, http_resp_t *resp)
{
    store_t *st = NULL;
    int64_t id = api_visible_job(req, resp, &st);
    if (id < 1)
        return;
    int64_t proc = query_int(req, "process", 0, 1 << 20);
    int64_t att = query_int(req, "attempt", -2, 1000);
    const char *fw = http_query(req, "follow");
    if (proc < 0 || att == -1 || (fw && strcmp(fw, "0") && strcmp(fw, "1"))) {
        http_problem(resp, 400, proc < 0 ? "process" : att == -1 ? "attempt" : "follow",
                     "process and attempt are non-negative integers, follow 0 or 1");
        return;
    }
    int comp = logs_comp(req, resp, st, id);
    if (comp < 0)
        return;
    if (att == -2)                 /* the newest attempt that wrote or started */
        att = store_run_latest_attempt(st, id, comp, (int)proc);
    store_run_key_t k = {id, (int)(att < 0 ? 0 : att), comp, (int)proc};
    if (fw && strcmp(fw, "1") == 0) {
        logs_follow(req, resp, &k);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    int64_t last;
    if (store_run_log_read(st, &k, 0, RUNS_READ_MAX, &buf, &len, &last) != STORE_OK) {
        free(buf);
        http_problem(resp, 503, NULL, "the output could not be read; retry");
        return;
    }
    http_text(resp, 200, "text/plain; charset=utf-8", buf ? buf : "", len);
    free(buf);
}

/* Adds each process's computation name (the document's, by index) beside
 * its index, so readers need not fetch the document. */
static void name_processes(json_t *procs, const json_t *comps)
{
    size_t i;
    json_t *p;
    json_array_foreach(procs, i, p) {
        const json_t *c = json_array_get(comps, (size_t)json_integer_value(
                                                       json_object_get(p, "comp")));
        const char *name = json_string_value(json_object_get(c, "name"));
        if (name)
            json_object_set_new(p, "computation", json_string(name));
    }
}

void api_jobs_processes(http_req_t *req, http_resp_t *resp)
{
    store_t *st = NULL;
    int64_t id = api_visible_job(req, resp, &st);
    if (id < 1)
        return;
    json_t *procs = store_run_processes(st, id);
    json_t *doc = procs ? store_sched_job_doc(st, id) : NULL;
    name_processes(procs, json_object_get(doc, "computations"));
    json_decref(doc);
    if (!procs) {
        http_problem(resp, 503, NULL, "the processes could not be read; retry");
        return;
    }
    http_json(resp, 200, json_pack("{s:I, s:o}", "id", (json_int_t)id, "processes", procs));
}
