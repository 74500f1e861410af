/* http.h - atolld's front door on libmicrohttpd.
 *
 * A thread pool serves connections; request bodies are accumulated per
 * connection and capped (413 beyond the cap, the rest of the body is read
 * and dropped). Each complete request is passed to one handler (the
 * router); the handler fills an http_resp_t. A handler may instead park
 * the request (long poll, http_park_until): the connection is suspended
 * and the handler runs again once the generation it waits on moved (seen
 * at an http_wake() or a tick every HTTP_PARK_TICK_MS) or its time is up,
 * until it answers.
 *
 * Hostile clients (docs/operations.md, "Connections and hostile clients"):
 * epoll, RLIMIT_NOFILE raised to its hard limit and a connection cap
 * derived from it; a connection idle HTTP_IDLE_TIMEOUT_S is closed; a
 * request's header block must be complete within header_timeout_ms of the
 * accept (of the previous response on a kept-alive connection:
 * HTTP_IDLE_TIMEOUT_S), else a sweeper shuts the socket down (slowloris).
 * Every response carries X-Content-Type-Options: nosniff.
 *
 * Framing (RFC 9112 §6): a request whose body length is ambiguous (more
 * than one Content-Length, Transfer-Encoding with Content-Length, a
 * Transfer-Encoding other than "chunked", or one in HTTP/1.0) is refused
 * before any of its body is read, and its connection is closed after the
 * answer: a proxy in front may have framed it differently, and the rest of
 * the bytes would otherwise run as a second request (smuggling).
 *
 * Decoding: the path and the query's keys and values are URL-decoded,
 * except %00, which stays as the three characters sent: MHD hands them out
 * as C strings, and a decoded NUL silently cut the value there
 * (?view=summary%00junk read as "summary"). Kept, it fails the
 * parameter's own check, and the router refuses it in the path.
 *
 * HEAD: the handler runs as for the GET and MHD sends the answer's status
 * and headers without its body. A HEAD never parks: its wait is over
 * before it begins (first_us). */
#ifndef ATOLL_HTTP_H
#define ATOLL_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HTTP_MAX_PARAMS 4
/* Longest Allow header value ("GET, HEAD, POST, DELETE" and room). */
#define HTTP_ALLOW_MAX 64
#define HTTP_PARK_TICK_MS 100
/* Longer than the longest long poll (api_worker.c, 30 s) with margin. */
#define HTTP_IDLE_TIMEOUT_S 60
#define HTTP_HEADER_TIMEOUT_MS_DEFAULT 10000
/* File descriptors kept out of the connection cap (database, logs, the
 * store's threads, the listener). */
#define HTTP_FD_RESERVE 256

typedef struct http_req {
    const char *method;
    const char *path;               /* URL-decoded, but a %00 stays as sent */
    const char *raw_target;         /* path?query as received, or NULL */
    const char *body;               /* NUL-terminated; "" when none */
    size_t body_len;
    void *conn;                     /* struct MHD_Connection * */
    const char *params[HTTP_MAX_PARAMS];  /* ":name" path segments, set by the router */
    int64_t first_us;               /* monotonic time the request was first handled; a
                                       wait (long poll) counts from it. A HEAD's is
                                       INT64_MIN / 2: its wait is already over, so the
                                       handler answers at once instead of parking */
    int runs;                       /* how many times the handler ran (parking) */
    uint64_t user_gen;              /* the handler's own, kept across runs (0 at first) */
    void *user_ptr;                 /* the handler's own, kept across runs (NULL at first);
                                       user_free(user_ptr) runs when the request is done */
    void (*user_free)(void *ptr);
    int64_t tenant;                 /* set by the router: the caller's tenant id,
                                       0 = may see every tenant's jobs */
} http_req_t;

typedef struct http_resp {
    int status;
    char *body;                     /* owned (malloc); freed by the front door */
    size_t len;
    const char *content_type;       /* static string */
    char location[128];             /* Location header when non-empty */
    char retry_after[16];           /* Retry-After header (seconds) when non-empty */
    char allow[HTTP_ALLOW_MAX];     /* Allow header (a 405's methods) when non-empty */
    int close;                      /* Connection: close: nothing after this answer is
                                       read from the connection */
    /* Set by http_park_until() only: "run me again when park_gen(park_arg)
     * differs from park_seen (the generation the handler read before
     * looking) or park_until_us (monotonic; 0: none) has passed".
     * park_gen must be cheap and callable from any thread. */
    int park;
    uint64_t (*park_gen)(int64_t arg);
    int64_t park_arg;
    uint64_t park_seen;
    int64_t park_until_us;
    void *stream;                   /* handler: a struct MHD_Response * to queue as is
                                       (streaming body, e.g. SSE); owned, body unused */
    const char *csp;                /* Content-Security-Policy when set (static string) */
} http_resp_t;

typedef void (*http_handler_fn)(http_req_t *req, http_resp_t *resp);

typedef struct http_config {
    const char *host;               /* numeric IPv4 address to bind */
    int port;                       /* 0 = ephemeral */
    size_t max_body;                /* bytes */
    int threads;
    http_handler_fn handler;
    /* NULL, or run once a request that asks leave to send its body
     * (Expect: 100-continue) has its headers: a refusal it answers
     * (status set) is sent at once instead of "100 Continue", and the
     * connection closed, so a caller refused on its headers (no token,
     * another worker's credential) sends no body. The request has no
     * body then (body_len 0). */
    http_handler_fn gate;
    const char *tls_cert;           /* PEM file paths: HTTPS when set (GnuTLS via MHD) */
    const char *tls_key;
    unsigned max_conns;             /* 0: RLIMIT_NOFILE - HTTP_FD_RESERVE */
    int header_timeout_ms;          /* 0: HTTP_HEADER_TIMEOUT_MS_DEFAULT */
    void (*tick)(void);             /* NULL, or run on the ticker thread every
                                       HTTP_PARK_TICK_MS: periodic work that parked
                                       requests, which no longer run per tick, used to do */
} http_config_t;

/* Starts serving (raising RLIMIT_NOFILE first); *bound_port receives the
 * actual port. 0 or -1. */
int http_start(const http_config_t *cfg, int *bound_port);
/* Parks the request (long poll) until gen(arg) moves from seen or the
 * monotonic time until_us (0: none) has passed; see http_resp_t. */
static inline void http_park_until(http_resp_t *resp, uint64_t (*gen)(int64_t arg), int64_t arg,
                                   uint64_t seen, int64_t until_us)
{
    resp->park = 1;
    resp->park_gen = gen;
    resp->park_arg = arg;
    resp->park_seen = seen;
    resp->park_until_us = until_us;
}

/* Resumes every parked request, then stops the daemon. */
void http_stop(void);
/* Whether http_stop() began: a handler run again then answers now (a park
 * would be refused with a 503). */
int http_stopping_now(void);
/* Runs again the parked requests whose generation moved (something they
 * wait for changed); the others stay parked. */
void http_wake(void);

/* Response helpers. http_json steals `body` (json_decref'd here). */
void http_json(http_resp_t *resp, int status, json_t *body);
/* An application/json body already in text: takes `text` (malloc'd, len
 * bytes, NUL-terminated), which the response frees. */
void http_json_text(http_resp_t *resp, int status, char *text, size_t len);
void http_text(http_resp_t *resp, int status, const char *type, const char *text, size_t len);
/* A 200 whose body is the first `size` bytes of file descriptor fd (sent
 * with sendfile where it can be), downloaded as `filename`. Takes fd: it
 * is closed when the response is done, or here on failure (-1, 503
 * answered). */
int http_file(http_resp_t *resp, int fd, uint64_t size, const char *type, const char *filename);
/* A 200 whose body comes from `reader` (MHD's content-reader contract:
 * bytes, 0 after suspending the connection, or END_OF_STREAM) until the
 * stream ends; not cached or buffered by proxies. free_fn(cls) runs when
 * MHD drops the response, and here on failure (-1, 503 answered). */
int http_stream(http_resp_t *resp, const char *type, size_t block,
                ssize_t (*reader)(void *cls, uint64_t pos, char *buf, size_t max), void *cls,
                void (*free_fn)(void *cls));
/* application/problem+json {type,title,status,detail,field?}. */
void http_problem(http_resp_t *resp, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
const char *http_query(const http_req_t *req, const char *key);
const char *http_header(const http_req_t *req, const char *key);

/* Connections shut down for not completing their headers in time. */
uint64_t http_header_timeouts(void);
/* The connection cap in force (after http_start). */
unsigned http_max_conns(void);
/* Requests parked now, and parked requests resumed since start (/metrics):
 * resumes grow with what the parked ones wait for, not with every wake. */
void http_park_counts(uint64_t *parked_now, uint64_t *resumes);
/* The request body cap in force (bytes), told to workers so their report
 * batches fit under it. */
size_t http_max_body(void);
/* Requests served per status class since start (for /metrics). */
void http_counts(uint64_t out[6]);
#define HTTP_CODE_MAX 600
/* Responses served per exact status code since start. */
void http_code_counts_get(uint64_t out[HTTP_CODE_MAX]);

#endif
