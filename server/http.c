/* http.c - libmicrohttpd glue: body accumulation with a cap, parking of
 * long polls (suspend/resume), response building, and the defences against
 * hostile connections (see http.h): a connection cap from RLIMIT_NOFILE, an
 * idle timeout, and a header deadline enforced by a sweeper.
 *
 * Threads and ownership: MHD's pool threads run the callbacks; a request's
 * conn_ctx_t belongs to the thread running its connection (made at the
 * request line, freed in on_done), so its body needs no lock and never
 * grows past the cap (too_large is set instead). Two lists are shared:
 * parked connections (park_mu: added by a handler that parks, emptied by
 * http_wake from any thread and by the ticker every HTTP_PARK_TICK_MS) and
 * tracked connections for the header sweeper (track_mu: an entry lives
 * from MHD's STARTED to its CLOSED notification, and the sweeper shuts a
 * socket down only under track_mu, so it is always that connection's).
 * The counters are atomics. Once http_stop began, nothing parks. */
#include "http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "jtext.h"
#include "util.h"

/* Per-request state (MHD's con_cls): made by on_uri() when the request
 * line arrives (or by on_request() if that failed), freed in on_done(). */
typedef struct conn_ctx {
    char *body;
    size_t len, cap;
    int too_large;
    int headers_seen;               /* on_request() ran once: the header block is complete */
    char *raw_target;               /* the request target as received; owned */
    http_req_t req;
} conn_ctx_t;

/* One open connection, for the header-deadline sweeper (MHD's
 * socket_context): made on MHD_CONNECTION_NOTIFY_STARTED, unlinked and
 * freed on MHD_CONNECTION_NOTIFY_CLOSED, which MHD calls before it closes
 * the socket; the sweeper holds track_mu while it calls shutdown(), so the
 * fd it shuts down is always still this connection's. */
typedef struct conn_track {
    struct conn_track *prev, *next;
    int fd;
    _Atomic int64_t deadline_us;    /* headers complete by then (monotonic); 0 = none */
} conn_track_t;

static pthread_mutex_t track_mu = PTHREAD_MUTEX_INITIALIZER;
static conn_track_t *track_head;    /* guarded by track_mu */
static _Atomic uint64_t http_cut_count;
static unsigned http_conn_cap;

static struct MHD_Daemon *http_daemon;
static http_config_t http_cfg;
static _Atomic uint64_t http_status_counts[6];            /* by class: [2] = 2xx */
static _Atomic uint64_t http_code_counts[HTTP_CODE_MAX];   /* by exact status */

/* A parked connection and what wakes it (http_resp_t's park_* fields). */
typedef struct parked_conn {
    struct MHD_Connection *conn;
    uint64_t (*gen)(int64_t arg);
    int64_t arg;
    uint64_t seen;
    int64_t until_us;                   /* 0: none */
} parked_conn_t;

/* Parked connections; guarded by park_mu. */
static pthread_mutex_t park_mu = PTHREAD_MUTEX_INITIALIZER;
static parked_conn_t *parked;
static size_t nparked, parked_cap;
static _Atomic uint64_t park_resumes;
static pthread_t ticker;
static _Atomic int ticker_run;
static _Atomic int http_stopping;   /* set by http_stop: parking is refused */

static const char *status_title(int status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return status >= 500 ? "Internal Server Error" : "Error";
    }
}

int http_stream(http_resp_t *resp, const char *type, size_t block,
                ssize_t (*reader)(void *cls, uint64_t pos, char *buf, size_t max), void *cls,
                void (*free_fn)(void *cls))
{
    struct MHD_Response *r = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, block, reader, cls, free_fn);
    if (!r) {
        free_fn(cls);
        http_problem(resp, 503, NULL, "out of memory");
        return -1;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    resp->stream = r;
    resp->status = 200;
    return 0;
}

int http_file(http_resp_t *resp, int fd, uint64_t size, const char *type, const char *filename)
{
    struct MHD_Response *r = MHD_create_response_from_fd64(size, fd);
    if (!r) {
        close(fd);
        http_problem(resp, 503, NULL, "out of memory");
        return -1;
    }
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    char disp[160];
    snprintf(disp, sizeof disp, "attachment; filename=\"%s\"", filename);
    MHD_add_response_header(r, "Content-Disposition", disp);
    resp->stream = r;
    resp->status = 200;
    return 0;
}

void http_text(http_resp_t *resp, int status, const char *type, const char *text, size_t len)
{
    free(resp->body);
    resp->body = malloc(len + 1);
    resp->status = resp->body ? status : 500;
    resp->len = resp->body ? len : 0;
    resp->content_type = type;
    if (resp->body) {
        memcpy(resp->body, text, len);
        resp->body[len] = '\0';
    }
}

void http_json(http_resp_t *resp, int status, json_t *body)
{
    char *text = body ? jtext_dump(body, NULL) : NULL;
    json_decref(body);
    if (!text) {
        http_problem(resp, 500, NULL, "out of memory building the response");
        return;
    }
    http_json_text(resp, status, text, strlen(text));
}

void http_json_text(http_resp_t *resp, int status, char *text, size_t len)
{
    free(resp->body);
    resp->body = text;
    resp->len = len;
    resp->status = status;
    resp->content_type = "application/json";
}

/* Length of the valid UTF-8 sequence at s (strict, as Jansson checks it:
 * no overlongs, no surrogates, nothing above U+10FFFF), or 0. */
static size_t utf8_seq_len(const unsigned char *s)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF)
            return 0;
    return n;
}

/* Replaces every byte that does not start a valid UTF-8 sequence with '?'.
 * Problem texts quote client input (a URL-decoded path, a query value, a
 * name cut at a buffer's end mid-character); Jansson refuses invalid UTF-8,
 * and without this the problem body could not be built at all (a 500). */
static void utf8_scrub(char *text)
{
    unsigned char *s = (unsigned char *)text;
    while (*s) {
        size_t n = utf8_seq_len(s);
        if (n == 0) {
            *s++ = '?';
            continue;
        }
        s += n;     /* NUL is never a continuation byte, so n never overruns */
    }
}

/* A problem+json object (RFC 9457) with the field at fault, if any. New
 * reference, NULL on OOM. */
static json_t *problem_new(int status, const char *field, const char *detail)
{
    char text[512], fieldbuf[256];
    snprintf(text, sizeof text, "%s", detail);
    utf8_scrub(text);
    json_t *p = json_pack("{s:s, s:s, s:i, s:s}", "type", "about:blank", "title",
                          status_title(status), "status", status, "detail", text);
    if (p && field && *field) {
        snprintf(fieldbuf, sizeof fieldbuf, "%s", field);
        utf8_scrub(fieldbuf);
        json_object_set_new(p, "field", json_string(fieldbuf));
    }
    return p;
}

/* Makes p (consumed) the response body. */
static void problem_send(http_resp_t *resp, int status, json_t *p)
{
    char *text = p ? jtext_dump(p, NULL) : NULL;
    json_decref(p);
    free(resp->body);
    resp->body = text;
    resp->len = text ? strlen(text) : 0;
    resp->status = status;
    resp->content_type = "application/problem+json";
}

void http_problem(http_resp_t *resp, int status, const char *field, const char *fmt, ...)
{
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    problem_send(resp, status, problem_new(status, field, detail));
}

/* 413 names the cap as an extension member, "max_body", so a client can
 * resize what it sends (a worker re-batches its reports under it: an
 * atolld restarted with a smaller --max-body is learned at once). */
static void problem_too_large(http_resp_t *resp)
{
    char detail[128];
    snprintf(detail, sizeof detail, "request body larger than %zu bytes", http_cfg.max_body);
    json_t *p = problem_new(413, "body", detail);
    if (p)
        json_object_set_new(p, "max_body", json_integer((json_int_t)http_cfg.max_body));
    problem_send(resp, 413, p);
}

const char *http_query(const http_req_t *req, const char *key)
{
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *http_header(const http_req_t *req, const char *key)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, key);
}

void http_code_counts_get(uint64_t out[HTTP_CODE_MAX])
{
    for (int i = 0; i < HTTP_CODE_MAX; i++)
        out[i] = atomic_load(&http_code_counts[i]);
}

/* Counts one response by class and by exact code. */
static void count_status(int status)
{
    int cls = status / 100;
    if (cls >= 1 && cls <= 5)
        atomic_fetch_add(&http_status_counts[cls], 1);
    if (status >= 0 && status < HTTP_CODE_MAX)
        atomic_fetch_add(&http_code_counts[status], 1);
}

size_t http_max_body(void)
{
    return http_cfg.max_body;
}

void http_counts(uint64_t out[6])
{
    for (int i = 0; i < 6; i++)
        out[i] = atomic_load(&http_status_counts[i]);
}

/* Appends an upload chunk; past the cap the rest is read and dropped so the
 * client still gets its 413 instead of a reset connection. */
static void body_append(conn_ctx_t *c, const char *data, size_t n)
{
    if (c->too_large)
        return;
    if (c->len + n > http_cfg.max_body) {
        c->too_large = 1;
        return;
    }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 1024;
        while (cap < c->len + n + 1)
            cap *= 2;
        char *p = realloc(c->body, cap);
        if (!p) {
            c->too_large = 1;   /* answered 413 as well: we cannot hold it */
            return;
        }
        c->body = p;
        c->cap = cap;
    }
    memcpy(c->body + c->len, data, n);
    c->len += n;
    c->body[c->len] = '\0';
}

static enum MHD_Result send_resp(struct MHD_Connection *conn, http_resp_t *resp)
{
    if (resp->stream) {   /* a streaming response the handler built (api_stream.c) */
        free(resp->body);
        count_status(resp->status);
        MHD_add_response_header(resp->stream, "X-Content-Type-Options", "nosniff");
        enum MHD_Result sret = MHD_queue_response(conn, (unsigned)resp->status, resp->stream);
        MHD_destroy_response(resp->stream);
        return sret;
    }
    if (!resp->body)
        http_problem(resp, 500, NULL, "the handler produced no response");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(resp->len, resp->body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(resp->body);
        return MHD_NO;
    }
    resp->body = NULL;   /* owned by MHD now */
    MHD_add_response_header(r, "Content-Type", resp->content_type ? resp->content_type
                                                                 : "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (resp->csp)
        MHD_add_response_header(r, "Content-Security-Policy", resp->csp);
    if (resp->location[0])
        MHD_add_response_header(r, "Location", resp->location);
    if (resp->retry_after[0])
        MHD_add_response_header(r, "Retry-After", resp->retry_after);
    if (resp->allow[0])
        MHD_add_response_header(r, "Allow", resp->allow);
    /* MHD closes the connection after an answer that says so. */
    if (resp->close)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    count_status(resp->status);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)resp->status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Whether parked connection c should run again: its generation moved, or
 * its time is up (now_us; 0: not a tick, deadlines are not looked at).
 * park_mu held. */
static int park_ready(const parked_conn_t *c, int64_t now_us)
{
    return c->gen(c->arg) != c->seen || (now_us && c->until_us && now_us >= c->until_us);
}

/* Suspends the request's connection until it is ready to run again
 * (park_ready) at a wake or tick. A generation that moved since the
 * handler read it resumes it at once: a commit moves its generation before
 * its wake, so one that moves after this check finds the connection
 * listed, and no change falls between a handler's look and its park. */
static void park(struct MHD_Connection *conn, const http_resp_t *resp)
{
    parked_conn_t c = {conn, resp->park_gen, resp->park_arg, resp->park_seen,
                       resp->park_until_us};
    pthread_mutex_lock(&park_mu);
    if (c.gen(c.arg) != c.seen) {
        MHD_suspend_connection(conn);
        MHD_resume_connection(conn);
        pthread_mutex_unlock(&park_mu);
        return;
    }
    if (nparked == parked_cap) {
        size_t cap = parked_cap ? parked_cap * 2 : 64;
        parked_conn_t *p = realloc(parked, sizeof *p * cap);
        if (!p) {
            pthread_mutex_unlock(&park_mu);
            return;   /* stays unparked: the handler answers on the next run */
        }
        parked = p;
        parked_cap = cap;
    }
    MHD_suspend_connection(conn);
    parked[nparked++] = c;
    pthread_mutex_unlock(&park_mu);
}

/* Resumes the parked connections that are ready (all with `all`). */
static void resume_ready(int64_t now_us, int all)
{
    pthread_mutex_lock(&park_mu);
    size_t keep = 0;
    for (size_t i = 0; i < nparked; i++) {
        if (all || park_ready(&parked[i], now_us))
            MHD_resume_connection(parked[i].conn);
        else
            parked[keep++] = parked[i];
    }
    atomic_fetch_add(&park_resumes, nparked - keep);
    nparked = keep;
    pthread_mutex_unlock(&park_mu);
}

void http_wake(void) { resume_ready(0, 0); }

/* Sets the header deadline of conn's tracked connection (0: none). */
static void track_deadline(struct MHD_Connection *conn, int64_t deadline_us)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_track_t *t = info ? info->socket_context : NULL;
    if (t)
        atomic_store(&t->deadline_us, deadline_us);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    (void)cls;
    conn_track_t *t = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!info || !(t = calloc(1, sizeof *t)))
            return;     /* untracked: only the idle timeout applies to it */
        t->fd = info->connect_fd;
        atomic_store(&t->deadline_us,
                     util_mono_us() + (int64_t)http_cfg.header_timeout_ms * 1000);
        pthread_mutex_lock(&track_mu);
        t->next = track_head;
        if (track_head)
            track_head->prev = t;
        track_head = t;
        pthread_mutex_unlock(&track_mu);
        *socket_context = t;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && t) {
        pthread_mutex_lock(&track_mu);
        if (t->prev)
            t->prev->next = t->next;
        else
            track_head = t->next;
        if (t->next)
            t->next->prev = t->prev;
        pthread_mutex_unlock(&track_mu);
        free(t);
        *socket_context = NULL;
    }
}

/* Shuts down every connection past its header deadline: MHD then sees the
 * end of the stream and closes it (the fd stays open until then, see
 * conn_track_t). A slowloris client that sends a header line every few
 * seconds resets MHD's idle timer forever; this deadline does not move. */
static void sweep(void)
{
    int64_t now = util_mono_us();
    pthread_mutex_lock(&track_mu);
    for (conn_track_t *t = track_head; t; t = t->next) {
        int64_t d = atomic_load(&t->deadline_us);
        if (d && now > d) {
            shutdown(t->fd, SHUT_RDWR);
            atomic_store(&t->deadline_us, 0);
            atomic_fetch_add(&http_cut_count, 1);
        }
    }
    pthread_mutex_unlock(&track_mu);
}

uint64_t http_header_timeouts(void) { return atomic_load(&http_cut_count); }

void http_park_counts(uint64_t *parked_now, uint64_t *resumes)
{
    pthread_mutex_lock(&park_mu);
    *parked_now = nparked;
    pthread_mutex_unlock(&park_mu);
    *resumes = atomic_load(&park_resumes);
}
unsigned http_max_conns(void) { return http_conn_cap; }

static void *ticker_main(void *arg)
{
    (void)arg;
    while (atomic_load(&ticker_run)) {
        usleep(HTTP_PARK_TICK_MS * 1000);
        resume_ready(util_mono_us(), 0);
        if (http_cfg.tick)
            http_cfg.tick();
        sweep();
    }
    return NULL;
}

/* MHD_OPTION_UNESCAPE_CALLBACK, for the path and each query key and value:
 * decodes %XX as MHD's own unescaper does, except %00, kept as sent. MHD
 * hands these out as C strings, so a decoded NUL silently cut the value
 * (?view=summary%00junk was read as "summary", ?limit=1%00abc as 1); kept,
 * the value fails its parameter's own check, and the router refuses a path
 * holding it (route_core.h). Decodes in place; returns the new length. */
static size_t http_unescape(void *cls, struct MHD_Connection *conn, char *text)
{
    (void)cls;
    (void)conn;
    char *w = text;
    for (const char *r = text; *r;) {
        int hi = r[0] == '%' ? util_hex_digit(r[1]) : -1;
        int lo = hi < 0 ? -1 : util_hex_digit(r[2]);    /* r[2] is read only when r[1] was a digit */
        if (lo >= 0 && (hi | lo) != 0) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return (size_t)(w - text);
}

/* The body framing a request's header block declares (RFC 9112 §6),
 * counted over every field line: MHD's lookups, and MHD itself when it
 * reads the body, see only the first line of a name. */
typedef struct framing {
    int clen;                       /* Content-Length lines (a list counts as two) */
    int te;                         /* Transfer-Encoding lines */
    const char *te_last;            /* the last one's value */
} framing_t;

static enum MHD_Result framing_count(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    framing_t *f = cls;
    /* MHD 0.9.75 refuses a list ("2, 2") with its own 400 before this
     * runs; counted anyway, should a later MHD let one through. */
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        f->clen += value && strchr(value, ',') ? 2 : 1;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        f->te++;
        f->te_last = value ? value : "";
    }
    return MHD_YES;
}

/* Whether the last transfer coding of list is "chunked". */
static int te_chunked_last(const char *list)
{
    const char *comma = strrchr(list, ',');
    const char *p = comma ? comma + 1 : list;
    p += strspn(p, " \t");
    size_t n = strcspn(p, " \t");
    return n == 7 && strncasecmp(p, "chunked", 7) == 0 && p[n + strspn(p + n, " \t")] == '\0';
}

/* Fills resp (and returns 1) when the request's body length is ambiguous,
 * which RFC 9112 §6.3 says to refuse and close: a proxy in front of atolld
 * may frame it otherwise than MHD, which goes by the first Content-Length
 * (or by Transfer-Encoding over it), and the rest of the bytes would run as
 * a second request on the connection (request smuggling). Answered before
 * any body is read; MHD then reads nothing more from the connection. */
static int framing_refused(struct MHD_Connection *conn, const char *version, http_resp_t *resp)
{
    framing_t f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, framing_count, &f);
    if (f.clen > 1)
        http_problem(resp, 400, "Content-Length", "more than one Content-Length");
    else if (f.te && f.clen)
        http_problem(resp, 400, "Transfer-Encoding",
                     "both Transfer-Encoding and Content-Length");
    else if (f.te && strcmp(version, MHD_HTTP_VERSION_1_0) == 0)
        http_problem(resp, 400, "Transfer-Encoding", "Transfer-Encoding in an HTTP/1.0 request");
    else if (f.te && !te_chunked_last(f.te_last))
        http_problem(resp, 400, "Transfer-Encoding", "chunked must be the last transfer coding");
    else if (f.te > 1 || (f.te && strcasecmp(f.te_last, "chunked") != 0))
        http_problem(resp, 501, "Transfer-Encoding", "only the chunked transfer coding is "
                     "implemented");
    else
        return 0;
    resp->close = 1;
    return 1;
}

/* MHD_OPTION_URI_LOG_CALLBACK: the request line has arrived; its target is
 * still as sent (MHD decodes the path later, with http_unescape), so a
 * copy is kept for the router, which looks for encoded control characters
 * in it. The result becomes the request's con_cls. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    (void)conn;
    conn_ctx_t *c = calloc(1, sizeof *c);
    if (c && uri)
        c->raw_target = strdup(uri);    /* NULL on OOM: the router then sees only the path */
    return c;
}

/* Whether the gate (http_config_t) refused, on its headers alone, a
 * request that waits for leave to send its body (Expect: 100-continue);
 * the refusal, to send with Connection: close, into *resp. Only those:
 * the final answer in place of "100 Continue" is what the client asked
 * for, and nothing of the body is on the wire yet. A request that sends
 * its body unasked is answered after it: closing a connection with
 * unread data in it resets it, and the client could lose the answer. */
static int gate_refused(conn_ctx_t *c, struct MHD_Connection *conn, const char *method,
                        const char *url, http_resp_t *resp)
{
    const char *expect = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Expect");
    if (!http_cfg.gate || !expect || strcasecmp(expect, "100-continue") != 0)
        return 0;
    http_req_t req = {.method = method, .path = url, .raw_target = c->raw_target, .body = "",
                      .conn = conn, .first_us = util_mono_us()};
    http_cfg.gate(&req, resp);
    if (!resp->status)
        return 0;
    resp->close = 1;
    return 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)cls;
    conn_ctx_t *c = *con_cls;
    if (!c && !(c = *con_cls = calloc(1, sizeof *c)))
        return MHD_NO;
    if (!c->headers_seen) {
        /* First call: the header block is complete, no deadline until the
         * response is done. */
        c->headers_seen = 1;
        track_deadline(conn, 0);
        http_resp_t refusal = {0};
        if (framing_refused(conn, version, &refusal))
            return send_resp(conn, &refusal);
        if (gate_refused(c, conn, method, url, &refusal))
            return send_resp(conn, &refusal);
        const char *clen = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (clen && strtoull(clen, NULL, 10) > http_cfg.max_body)
            c->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        body_append(c, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    int head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    http_resp_t resp = {0};
    if (c->too_large) {
        problem_too_large(&resp);
        return send_resp(conn, &resp);
    }
    if (c->req.runs == 0) {
        c->req.method = method;
        c->req.path = url;
        c->req.raw_target = c->raw_target;
        c->req.body = c->body ? c->body : "";
        c->req.body_len = c->len;
        c->req.conn = conn;
        /* A HEAD answers what the GET would answer now: the wait that a
         * parking handler counts from first_us is over before it began. */
        c->req.first_us = head ? INT64_MIN / 2 : util_mono_us();
    }
    http_cfg.handler(&c->req, &resp);
    c->req.runs++;
    if (resp.park && atomic_load(&http_stopping))
        http_problem(&resp, 503, NULL, "atolld is shutting down");
    else if (resp.park && head)     /* a handler whose wait ignores first_us: never park a HEAD */
        http_problem(&resp, 400, "method", "a HEAD of %s cannot wait; send a GET", url);
    else if (resp.park) {
        free(resp.body);
        park(conn, &resp);
        return MHD_YES;
    }
    return send_resp(conn, &resp);
}

static void on_done(void *cls, struct MHD_Connection *conn, void **con_cls,
                    enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)toe;
    /* The next request on a kept-alive connection gets as long for its
     * headers as an idle connection may live. */
    track_deadline(conn, util_mono_us() + (int64_t)HTTP_IDLE_TIMEOUT_S * 1000000);
    conn_ctx_t *c = *con_cls;
    if (c) {
        if (c->req.user_free)
            c->req.user_free(c->req.user_ptr);
        free(c->body);
        free(c->raw_target);
        free(c);
        *con_cls = NULL;
    }
}

/* PEM text of the TLS certificate and key: MHD reads them for as long as
 * the daemon runs, so they live until http_stop(). */
static char *tls_cert_pem, *tls_key_pem;

/* Reads a whole PEM file into a new NUL-terminated buffer; NULL (logged)
 * when it cannot. */
static char *read_pem(const char *path)
{
    char *buf = NULL;
    FILE *f = fopen(path, "rb");
    long size = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (!f || size <= 0 || size > (1 << 20) || fseek(f, 0, SEEK_SET) != 0 ||
        !(buf = malloc((size_t)size + 1)) || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        log_error("cannot read TLS file %s", path);
        free(buf);
        buf = NULL;
    } else {
        buf[size] = '\0';
    }
    if (f)
        fclose(f);
    return buf;
}

/* Raises the soft RLIMIT_NOFILE to the hard limit (each connection is one
 * fd) and derives the connection cap from what is left after the reserve.
 * The limit is the hard one: an operator lowers it with ulimit/systemd's
 * LimitNOFILE, or sets --max-connections. */
static unsigned fd_budget(unsigned asked)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return asked ? asked : 1000;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max == RLIM_INFINITY ? 1048576 : rl.rlim_max;
        struct rlimit up = {want, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &up) == 0)
            rl.rlim_cur = want;
    }
    rlim_t room = rl.rlim_cur > 2 * HTTP_FD_RESERVE ? rl.rlim_cur - HTTP_FD_RESERVE
                                                    : rl.rlim_cur / 2;
    if (room > 1000000)
        room = 1000000;
    if (asked && asked < room)
        return asked;
    if (asked)
        log_warn("--max-connections %u is more than the %lu file descriptors allowed; using %lu",
                 asked, (unsigned long)room, (unsigned long)room);
    return (unsigned)room;
}

int http_start(const http_config_t *cfg, int *bound_port)
{
    http_cfg = *cfg;
    if (http_cfg.header_timeout_ms <= 0)
        http_cfg.header_timeout_ms = HTTP_HEADER_TIMEOUT_MS_DEFAULT;
    http_conn_cap = fd_budget(cfg->max_conns);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)cfg->port);
    if (inet_pton(AF_INET, cfg->host, &addr.sin_addr) != 1) {
        log_error("--listen: '%s' is not an IPv4 address", cfg->host);
        return -1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    /* Options as an array so that the TLS ones are added only when asked.
     * MHD_USE_AUTO picks epoll here: no FD_SETSIZE ceiling, and the cost of
     * a wake-up does not grow with the number of idle connections. */
    struct MHD_OptionItem opts[16];
    int n = 0;
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &addr};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, cfg->threads, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_TIMEOUT, HTTP_IDLE_TIMEOUT_S, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_CONNECTION_LIMIT, (intptr_t)http_conn_cap, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_done, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection,
                                        NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_uri, NULL};
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)http_unescape,
                                        NULL};
    if (cfg->tls_cert) {
        if (!(tls_cert_pem = read_pem(cfg->tls_cert)) || !(tls_key_pem = read_pem(cfg->tls_key)))
            return -1;
        flags |= MHD_USE_TLS;
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, tls_cert_pem};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, tls_key_pem};
    }
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    http_daemon = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, NULL,
                                   MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (!http_daemon) {
        free(tls_cert_pem);
        free(tls_key_pem);
        tls_cert_pem = tls_key_pem = NULL;
        log_error("cannot listen on %s:%d", cfg->host, cfg->port);
        return -1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(http_daemon, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : cfg->port;
    atomic_store(&ticker_run, 1);
    if (pthread_create(&ticker, NULL, ticker_main, NULL) != 0) {
        MHD_stop_daemon(http_daemon);
        http_daemon = NULL;
        return -1;
    }
    return 0;
}

void http_stop(void)
{
    if (!http_daemon)
        return;
    atomic_store(&http_stopping, 1);
    atomic_store(&ticker_run, 0);
    pthread_join(ticker, NULL);
    /* MHD requires suspended connections to be resumed before stopping. */
    resume_ready(0, 1);
    MHD_stop_daemon(http_daemon);
    http_daemon = NULL;
    free(tls_cert_pem);
    free(tls_key_pem);
    tls_cert_pem = tls_key_pem = NULL;
    free(parked);
    parked = NULL;
    nparked = parked_cap = 0;
}

int http_stopping_now(void) { return atomic_load(&http_stopping); }
