/* wclient.c - see wclient.h.
 *
 * Connections: one curl easy handle per calling thread, kept in
 * WCLIENT_HANDLES slots (a thread beyond them gets a fresh handle per
 * call), so each thread reuses its own kept-alive connection and no handle
 * is ever used by two threads at once. A handle whose transfer failed is
 * dropped: a broken connection is never reused.
 *
 * Invariants: an answer is read into memory only up to WCLIENT_MAX_BODY
 * (a larger one fails the call) before it is parsed; the worker's
 * credential goes only with calls for the registration it was issued to.
 * Locks: `mu` guards what registration sets (id, lease_ms, max_body,
 * secret) and is held only to copy it; `reg_mu` lets one thread register
 * again at a time (the others find the new id) and is the only lock held
 * across HTTP calls; `h_mu` guards the handle slots.
 *
 * Ownership: the client owns its copies of the URL, the registration
 * request, the auth header and CA path, the credential (wiped when freed)
 * and the kept handles; a call's parsed answer is the caller's. */
#include "wclient.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "f32b64.h"
#include "jscan.h"
#include "jtext.h"
#include "util.h"

/* Largest controller answer we accept: a poll may carry many tasks, each
 * with its computation, but never this much. */
#define WCLIENT_MAX_BODY (64u << 20)
/* The header carrying the worker's own credential (docs/worker-protocol.md). */
#define WCLIENT_SECRET_HEADER "X-Atoll-Worker-Secret"
#define WCLIENT_SECRET_MAX 200
/* Kept-alive connections: one curl handle per calling thread (main poll
 * loop, heartbeat, reporter, ...), so each thread's calls reuse its open
 * connection. A connection atolld already accepted keeps working when its
 * listener is full of other clients' connections: a flood cannot cut the
 * workers' heartbeats off (docs/operations.md). More threads than this get
 * a fresh handle per call. */
#define WCLIENT_HANDLES 8

typedef struct wclient_handle {
    pthread_t owner;
    CURL *curl;                 /* owned; NULL = slot free */
} wclient_handle_t;

struct wclient {
    char *base;                 /* owned, no trailing '/' */
    char *island;               /* owned copies of the registration request */
    char *backend;
    char *data_addr;
    char *ucx_address;          /* NULL: registered without one */
    int devices;
    pthread_mutex_t mu;         /* guards id, lease_ms, max_body, secret */
    int64_t id;
    int lease_ms;
    size_t max_body;            /* the controller's request body cap */
    char secret[WCLIENT_SECRET_MAX + 1];   /* id's credential from the registration answer */
    pthread_mutex_t reg_mu;     /* one (re-)registration at a time */
    char *auth_header;          /* "Authorization: Bearer ..." or NULL; owned */
    char *ca_file;              /* owned or NULL */
    pthread_mutex_t h_mu;       /* guards handles */
    wclient_handle_t handles[WCLIENT_HANDLES];
};

/* curl's write callback: the answer grows in a jtext writer (its buffer
 * doubles), at most WCLIENT_MAX_BODY bytes. */
static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    jtext_w_t *w = userdata;
    size_t n = size * nmemb;
    if (w->len + n > WCLIENT_MAX_BODY)
        return 0;                       /* makes curl fail the transfer */
    jtext_raw(w, ptr, n);
    return w->failed ? 0 : n;           /* out of memory fails it too */
}

/* Aborts a call (a parked long poll) when *abort_flag is set, but only
 * while no byte of the answer has arrived: an answer on its way may carry
 * tasks the controller has already leased to us (the job is running), and
 * dropping it would leave them to be requeued when we leave. */
static int on_progress(void *clientp, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)ut, (void)un;
    const atomic_int *abort_flag = clientp;
    return abort_flag && atomic_load(abort_flag) && dn == 0 ? 1 : 0;
}

wclient_t *wclient_new(const char *base_url, const wclient_reg_req_t *req)
{
    wclient_t *wc = calloc(1, sizeof *wc);
    if (!wc)
        return NULL;
    wc->base = strdup(base_url);
    wc->island = strdup(req->island);
    wc->backend = strdup(req->backend);
    wc->data_addr = strdup(req->data_addr);
    wc->ucx_address = req->ucx_address ? strdup(req->ucx_address) : NULL;
    if (!wc->base || !wc->island || !wc->backend || !wc->data_addr ||
        (req->ucx_address && !wc->ucx_address)) {
        wclient_free(wc);
        return NULL;
    }
    size_t n = strlen(wc->base);
    while (n > 0 && wc->base[n - 1] == '/')
        wc->base[--n] = '\0';
    wc->devices = req->devices;
    wc->id = -1;
    wc->lease_ms = 5000;
    wc->max_body = WCLIENT_MAX_BODY_DEFAULT;
    pthread_mutex_init(&wc->mu, NULL);
    pthread_mutex_init(&wc->reg_mu, NULL);
    pthread_mutex_init(&wc->h_mu, NULL);
    return wc;
}

int wclient_set_auth(wclient_t *wc, const char *token, const char *ca_file)
{
    if (token) {
        size_t n = strlen(token) + 32;
        if (!(wc->auth_header = malloc(n)))
            return -1;
        snprintf(wc->auth_header, n, "Authorization: Bearer %s", token);
    }
    if (ca_file && !(wc->ca_file = strdup(ca_file)))
        return -1;
    return 0;
}

void wclient_free(wclient_t *wc)
{
    if (!wc)
        return;
    if (wc->base && wc->island && wc->backend && wc->data_addr) {
        pthread_mutex_destroy(&wc->mu);
        pthread_mutex_destroy(&wc->reg_mu);
        pthread_mutex_destroy(&wc->h_mu);
        for (int i = 0; i < WCLIENT_HANDLES; i++)
            if (wc->handles[i].curl)
                curl_easy_cleanup(wc->handles[i].curl);
    }
    free(wc->base);
    free(wc->island);
    free(wc->backend);
    free(wc->data_addr);
    free(wc->ucx_address);
    free(wc->auth_header);
    free(wc->ca_file);
    memset(wc->secret, 0, sizeof wc->secret);
    free(wc);
}

/* Sets up one easy handle. Returns 0 or -1. */
static int setup(CURL *c, const char *url, const char *method, const char *payload,
                 size_t payload_len, struct curl_slist *hdrs, long timeout_ms, const atomic_int *abort_flag,
                 jtext_w_t *b, const char *ca_file)
{
    int bad = 0;
    if (ca_file)
        bad |= curl_easy_setopt(c, CURLOPT_CAINFO, ca_file) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_URL, url) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 3000L) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_WRITEDATA, b) != CURLE_OK;
    if (payload) {
        bad |= curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)payload_len) !=
               CURLE_OK;
        bad |= curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload) != CURLE_OK;
    }
    if (abort_flag) {
        bad |= curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress) != CURLE_OK;
        bad |= curl_easy_setopt(c, CURLOPT_XFERINFODATA, (void *)abort_flag) != CURLE_OK;
        bad |= curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L) != CURLE_OK;
    }
    return bad ? -1 : 0;
}

/* The calling thread's kept handle, reset for a new transfer (its open
 * connection stays); a new handle of the caller's own (*own = 1: the
 * caller cleans it up) when every slot is taken; NULL on OOM. */
static CURL *handle_get(wclient_t *wc, int *own)
{
    pthread_t self = pthread_self();
    CURL *c = NULL;
    *own = 0;
    pthread_mutex_lock(&wc->h_mu);
    int free_slot = -1;
    for (int i = 0; i < WCLIENT_HANDLES && !c; i++) {
        if (wc->handles[i].curl && pthread_equal(wc->handles[i].owner, self))
            c = wc->handles[i].curl;
        else if (!wc->handles[i].curl && free_slot < 0)
            free_slot = i;
    }
    if (!c && free_slot >= 0 && (c = curl_easy_init()))
        wc->handles[free_slot] = (wclient_handle_t){self, c};
    pthread_mutex_unlock(&wc->h_mu);
    if (c) {
        curl_easy_reset(c);
        return c;
    }
    *own = 1;
    return curl_easy_init();
}

/* A handle whose transfer failed may hold a broken connection: the next
 * call of its thread starts clean. */
static void handle_drop(wclient_t *wc, CURL *c)
{
    pthread_mutex_lock(&wc->h_mu);
    for (int i = 0; i < WCLIENT_HANDLES; i++)
        if (wc->handles[i].curl == c)
            wc->handles[i].curl = NULL;
    pthread_mutex_unlock(&wc->h_mu);
    curl_easy_cleanup(c);
}

/* Raw request bodies (application/octet-stream), for call_with(). */
typedef struct raw_body {
    const void *data;
    size_t len;
    int json;                   /* already JSON text: sent as application/json */
    jtext_w_t *answer;          /* set: the answer's bytes are handed over here
                                 * (the caller's to drop), not parsed */
} raw_body_t;

/* One exchange; extra (may be NULL) is one more header line; the body is
 * JSON (body) or, when raw is not NULL, those bytes as they are. */
static int call_with(wclient_t *wc, const char *extra, const char *method, const char *path,
                     const json_t *body, const raw_body_t *raw, long timeout_ms,
                     const atomic_int *abort_flag, json_t **resp)
{
    int status = -1;
    char url[1024];
    char *payload = NULL;
    jtext_w_t b = {0};
    struct curl_slist *hdrs = NULL, *h2 = NULL;
    CURL *c = NULL;
    int own = 1, failed = 1;
    if (resp)
        *resp = NULL;
    snprintf(url, sizeof url, "%s%s", wc->base, path);
    if (body && !(payload = jtext_dump(body, NULL)))
        goto cleanup;
    if (!(hdrs = curl_slist_append(NULL, "Accept: application/json")))
        goto cleanup;
    if (!(h2 = curl_slist_append(hdrs, raw && !raw->json
                                           ? "Content-Type: application/octet-stream"
                                           : "Content-Type: application/json")))
        goto cleanup;
    hdrs = h2;
    if (wc->auth_header) {
        if (!(h2 = curl_slist_append(hdrs, wc->auth_header)))
            goto cleanup;
        hdrs = h2;
    }
    if (extra) {
        if (!(h2 = curl_slist_append(hdrs, extra)))
            goto cleanup;
        hdrs = h2;
    }
    if (!(c = handle_get(wc, &own)) ||
        setup(c, url, method, raw ? (const char *)raw->data : payload ? payload
                                                              : (body ? "" : NULL),
              raw ? raw->len : payload ? strlen(payload) : 0, hdrs, timeout_ms, abort_flag, &b,
              wc->ca_file) != 0)
        goto cleanup;
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK) {
        if (!(abort_flag && atomic_load(abort_flag)))
            log_debug("%s %s: %s", method, url, curl_easy_strerror(rc));
        goto cleanup;
    }
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    status = (int)code;
    failed = 0;
    if (raw && raw->answer && !b.failed) {
        *raw->answer = b;
        b = (jtext_w_t){0};
    } else if (resp && !b.failed && b.len > 0) {
        *resp = jscan_load(b.p, b.len, 0, NULL);
    }
cleanup:
    if (c && own)
        curl_easy_cleanup(c);
    else if (c && failed)
        handle_drop(wc, c);
    curl_slist_free_all(hdrs);
    free(payload);
    jtext_drop(&b);
    return status;
}

int wclient_call(wclient_t *wc, const char *method, const char *path, const json_t *body,
                 long timeout_ms, const atomic_int *abort_flag, json_t **resp)
{
    return call_with(wc, NULL, method, path, body, NULL, timeout_ms, abort_flag, resp);
}

/* A call about worker `id`, with its credential when id is the current
 * registration (a call for an id replaced meanwhile goes without and is
 * refused; the caller then uses the new id). */
static int call_as_raw(wclient_t *wc, int64_t id, const char *method, const char *path,
                       const json_t *body, const raw_body_t *raw, long timeout_ms,
                       const atomic_int *abort_flag, json_t **resp)
{
    char hdr[sizeof WCLIENT_SECRET_HEADER + WCLIENT_SECRET_MAX + 4] = "";
    pthread_mutex_lock(&wc->mu);
    if (id == wc->id && wc->secret[0])
        snprintf(hdr, sizeof hdr, WCLIENT_SECRET_HEADER ": %s", wc->secret);
    pthread_mutex_unlock(&wc->mu);
    int st = call_with(wc, hdr[0] ? hdr : NULL, method, path, body, raw, timeout_ms,
                       abort_flag, resp);
    memset(hdr, 0, sizeof hdr);
    return st;
}

static int call_as(wclient_t *wc, int64_t id, const char *method, const char *path,
                   const json_t *body, long timeout_ms, const atomic_int *abort_flag,
                   json_t **resp)
{
    return call_as_raw(wc, id, method, path, body, NULL, timeout_ms, abort_flag, resp);
}

int wclient_worker_post(wclient_t *wc, const char *path_fmt_id, const json_t *body,
                        const void *raw, size_t rawlen, long timeout_ms, json_t **resp)
{
    char path[512];
    int64_t id = wclient_id(wc);
    if (id < 1)
        return -1;
    int n = snprintf(path, sizeof path, path_fmt_id, (long long)id);
    if (n < 0 || (size_t)n >= sizeof path)
        return -1;
    raw_body_t rb = {raw, rawlen, 0, NULL};
    return call_as_raw(wc, id, "POST", path, body, raw ? &rb : NULL, timeout_ms, NULL, resp);
}

void *wclient_peer_address(wclient_t *wc, const char *addr, size_t max, size_t *len)
{
    char path[256];
    int64_t id = wclient_id(wc);
    /* addr is host:port of [A-Za-z0-9.:_[]-] (atolld checked it at the
     * peer's registration); anything else is refused here rather than
     * escaped, as atolld would refuse it. */
    if (id < 1 || strlen(addr) > 63 || strspn(addr, "abcdefghijklmnopqrstuvwxyz"
                                                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.:_-")
                                             != strlen(addr))
        return NULL;
    snprintf(path, sizeof path, "/v1/workers/%lld/peers?addr=%s", (long long)id, addr);
    json_t *ans = NULL;
    void *out = NULL;
    if (call_as(wc, id, "GET", path, NULL, 5000, NULL, &ans) == 200) {
        const json_t *u = json_object_get(ans, "ucx_address");
        if (json_is_string(u))
            out = f32b64_bytes_decode(json_string_value(u), json_string_length(u), max, len);
    }
    json_decref(ans);
    return out;
}

const char *wclient_problem_detail(const json_t *resp)
{
    const char *d = json_string_value(json_object_get(resp, "detail"));
    if (!d)
        d = json_string_value(json_object_get(resp, "title"));
    return d ? d : "";
}

/* Takes the controller's body cap from an answer's "max_body" (caller
 * holds mu). Bounded both ways: a forged tiny cap would make every report
 * lose its values, a huge one is no promise we need. */
/* Takes the controller's lease (wc->mu held) when it is one: 30 ms to a
 * day. Anything else keeps the one known: an int cast of a larger number
 * would wrap, and the heartbeat's sleep and the data plane's recheck are
 * derived from it. */
static void lease_learn(wclient_t *wc, const json_t *lease)
{
    if (json_is_integer(lease) && json_integer_value(lease) >= 30 &&
        json_integer_value(lease) <= 24 * 3600 * 1000)
        wc->lease_ms = (int)json_integer_value(lease);
}

static void max_body_learn(wclient_t *wc, const json_t *cap)
{
    if (json_is_integer(cap) && json_integer_value(cap) >= 16384 &&
        json_integer_value(cap) <= (1 << 30))
        wc->max_body = (size_t)json_integer_value(cap);
}

int wclient_register(wclient_t *wc, json_t **resp)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    json_t *body = json_pack("{s:s, s:i, s:s, s:s, s:s, s:I}", "island", wc->island,
                             "devices", wc->devices, "backend", wc->backend,
                             "data_addr", wc->data_addr, "host", host,
                             "pid", (json_int_t)getpid());
    if (body && wc->ucx_address &&
        json_object_set_new(body, "ucx_address", json_string(wc->ucx_address)) != 0) {
        json_decref(body);
        body = NULL;
    }
    if (!body)
        return -1;
    json_t *ans = NULL;
    int status = wclient_call(wc, "POST", "/v1/workers", body, 10000, NULL, &ans);
    json_decref(body);
    if (status == 201) {
        const json_t *id = json_object_get(ans, "id");
        const json_t *lease = json_object_get(ans, "lease_ms");
        const json_t *cap = json_object_get(ans, "max_body");
        const char *secret = json_string_value(json_object_get(ans, "secret"));
        if (!json_is_integer(id) || (secret && strlen(secret) > WCLIENT_SECRET_MAX)) {
            log_error("register: answer without an integer id or with a bad secret");
            status = -1;
        } else {
            /* A controller without credentials answers none: send none. */
            pthread_mutex_lock(&wc->mu);
            snprintf(wc->secret, sizeof wc->secret, "%s", secret ? secret : "");
            wc->id = json_integer_value(id);
            lease_learn(wc, lease);
            max_body_learn(wc, cap);
            pthread_mutex_unlock(&wc->mu);
        }
    }
    if (resp)
        *resp = ans;
    else
        json_decref(ans);
    return status;
}

int wclient_register_backoff(int status, const json_t *resp, int *delay)
{
    const char *field = json_string_value(json_object_get(resp, "field"));
    int held = status == 409 && field && strcmp(field, "data_addr") == 0;
    if (held && *delay > WCLIENT_ADDR_HELD_RETRY_MS)
        *delay = WCLIENT_ADDR_HELD_RETRY_MS;
    return held;
}

int wclient_reregister(wclient_t *wc, int64_t stale_id, const atomic_int *stop)
{
    int rc = 0, delay = 100;
    pthread_mutex_lock(&wc->reg_mu);
    if (wclient_id(wc) != stale_id)
        goto done;                      /* another thread already did it */
    log_warn("controller no longer knows worker %lld: registering again", (long long)stale_id);
    for (;;) {
        json_t *ans = NULL;
        int st = wclient_register(wc, &ans);
        if (st == 201) {
            log_info("registered again as worker %lld", (long long)wclient_id(wc));
            json_decref(ans);
            break;
        }
        if (st > 0)
            log_warn("register: HTTP %d %s", st, wclient_problem_detail(ans));
        wclient_register_backoff(st, ans, &delay);
        json_decref(ans);
        if (wclient_sleep_backoff(&delay, stop)) {
            rc = -1;
            break;
        }
    }
done:
    pthread_mutex_unlock(&wc->reg_mu);
    return rc;
}

int64_t wclient_id(wclient_t *wc)
{
    pthread_mutex_lock(&wc->mu);
    int64_t id = wc->id;
    pthread_mutex_unlock(&wc->mu);
    return id;
}

size_t wclient_max_body(wclient_t *wc)
{
    pthread_mutex_lock(&wc->mu);
    size_t cap = wc->max_body;
    pthread_mutex_unlock(&wc->mu);
    return cap;
}

int wclient_lease_ms(wclient_t *wc)
{
    pthread_mutex_lock(&wc->mu);
    int ms = wc->lease_ms;
    pthread_mutex_unlock(&wc->mu);
    return ms;
}

int wclient_heartbeat(wclient_t *wc, int64_t id, const json_t *body)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/workers/%lld/heartbeat", (long long)id);
    json_t *empty = body ? NULL : json_object(), *ans = NULL;
    if (!body && !empty)
        return -1;
    int st = call_as(wc, id, "POST", path, body ? body : empty, 5000, NULL, &ans);
    json_decref(empty);
    const json_t *lease = json_object_get(ans, "lease_ms");
    if (st == 200) {
        pthread_mutex_lock(&wc->mu);
        lease_learn(wc, lease);
        pthread_mutex_unlock(&wc->mu);
    }
    json_decref(ans);
    return st;
}

int wclient_poll(wclient_t *wc, int64_t id, int wait_ms, int64_t ack,
                 const atomic_int *abort_flag, jtext_w_t *answer)
{
    char path[160];
    snprintf(path, sizeof path, "/v1/workers/%lld/tasks?wait_ms=%d&ack=%lld", (long long)id,
             wait_ms, (long long)ack);
    raw_body_t rb = {NULL, 0, 1, answer};
    *answer = (jtext_w_t){0};
    return call_as_raw(wc, id, "GET", path, NULL, &rb, (long)wait_ms + 10000, abort_flag, NULL);
}

/* Appends {"item", "task", "status", "detail"} to *refused (created on
 * first use); item: the result's position, which is its report's in the
 * batch (the results come in the reports' order; a task id alone does not
 * tell which, since a run's computations share their task's id). */
static void note_refused(json_t **refused, size_t item, const json_t *r, json_int_t code)
{
    if (!*refused && !(*refused = json_array()))
        return;
    const char *detail = json_string_value(json_object_get(r, "detail"));
    json_array_append_new(*refused, json_pack("{s:I, s:O?, s:I, s:s}", "item", (json_int_t)item,
                                              "task", json_object_get(r, "task"), "status", code,
                                              "detail", detail ? detail : ""));
}

/* One result item of a batch's answer that is not 200: logged, and noted
 * in *refused when it refuses the report itself (not 404/409: no longer
 * ours). r: the item (borrowed), i its position. */
static void item_refused(const json_t *r, size_t i, json_t **refused)
{
    json_int_t code = json_integer_value(json_object_get(r, "status"));
    log_warn("report of task %lld: %lld %s",
             (long long)json_integer_value(json_object_get(r, "task")), (long long)code,
             json_string_value(json_object_get(r, "detail"))
                 ? json_string_value(json_object_get(r, "detail")) : "");
    if (code != 404 && code != 409)
        note_refused(refused, i, r, code);
}

/* Reads the result item next in s (an object) past it, its "status" into
 * *status (0 when it has no integer one). 0, or -1 on a syntax error. */
static int item_status(jscan_t *s, int64_t *status)
{
    jscan_str_t key;
    jscan_num_t num;
    int n = 0, more;
    *status = 0;
    if (jscan_object(s) != 0)
        return -1;
    while ((more = jscan_member(s, &n, &key)) == 1) {
        if (jscan_str_eq(&key, "status") && jscan_peek(s) == JSCAN_NUMBER) {
            if (jscan_number(s, &num) != 0)
                return -1;
            *status = num.is_int ? num.i : 0;
        } else if (jscan_skip(s) != 0) {
            return -1;
        }
    }
    return more == 0 ? 0 : -1;
}

/* The results of a batch's 200 answer, {"results": [{"task", "status",
 * "detail"?}, ...]}, read with the pull reader: an item of status 200,
 * nearly every one, builds nothing (a tree of the whole answer cost the
 * reporting thread ~6K instructions a computation of a chain); another is
 * loaded alone and handled by item_refused. 0, or -1 when the text is
 * not JSON (the items read before it count). */
static int results_scan(const char *text, size_t len, json_t **refused)
{
    jscan_t s;
    jscan_str_t key;
    int n = 0, more;
    jscan_init(&s, text, len);
    if (jscan_object(&s) != 0)
        return -1;
    while ((more = jscan_member(&s, &n, &key)) == 1) {
        if (!jscan_str_eq(&key, "results") || jscan_peek(&s) != JSCAN_ARRAY) {
            if (jscan_skip(&s) != 0)
                return -1;
            continue;
        }
        int k = 0, el;
        if (jscan_array(&s) != 0)
            return -1;
        while ((el = jscan_element(&s, &k)) == 1) {
            if (jscan_peek(&s) != JSCAN_OBJECT) {
                if (jscan_skip(&s) != 0)
                    return -1;
                continue;
            }
            const char *start = (const char *)s.p;
            int64_t status;
            if (item_status(&s, &status) != 0)
                return -1;
            if (status != 200) {
                json_t *r = jscan_load(start, (size_t)((const char *)s.p - start), 0, NULL);
                if (r)
                    item_refused(r, (size_t)(k - 1), refused);
                json_decref(r);
            }
        }
        if (el < 0)
            return -1;
    }
    return more == 0 && jscan_finish(&s) == 0 ? 0 : -1;
}

int wclient_report_batch(wclient_t *wc, int64_t id, const char *body, size_t len,
                         size_t count, json_t **refused)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/workers/%lld/reports", (long long)id);
    jtext_w_t text = {0};
    raw_body_t rb = {body, len, 1, &text};
    *refused = NULL;
    int st = call_as_raw(wc, id, "POST", path, NULL, &rb, 15000, NULL, NULL);
    if (st == 200) {
        if (results_scan(text.p, text.len, refused) != 0)
            log_warn("batch of %zu reports: its answer is not JSON", count);
        jtext_drop(&text);
        return st;
    }
    json_t *ans = text.len > 0 ? jscan_load(text.p, text.len, 0, NULL) : NULL;
    jtext_drop(&text);
    if (st == 413) {
        /* Over the cap of this controller (restarted with a smaller
         * --max-body since we registered): its answer names the cap. */
        pthread_mutex_lock(&wc->mu);
        max_body_learn(wc, json_object_get(ans, "max_body"));
        pthread_mutex_unlock(&wc->mu);
    }
    if (st >= 400)
        log_warn("batch of %zu reports: HTTP %d %s", count, st, wclient_problem_detail(ans));
    json_decref(ans);
    return st;
}

int wclient_leave(wclient_t *wc, int64_t id)
{
    char path[96];
    snprintf(path, sizeof path, "/v1/workers/%lld", (long long)id);
    return call_as(wc, id, "DELETE", path, NULL, 5000, NULL, NULL);
}

int wclient_sleep_backoff(int *delay_ms, const atomic_int *stop)
{
    for (int slept = 0; slept < *delay_ms; slept += 50) {
        if (stop && atomic_load(stop))
            return 1;
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
    }
    *delay_ms = *delay_ms * 2 > 5000 ? 5000 : *delay_ms * 2;
    return stop && atomic_load(stop) ? 1 : 0;
}
