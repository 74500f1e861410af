/* test_front_raw.h - a raw-socket HTTP/1.1 client for the front-door
 * security tests (test_tokens.c, test_front_*.c): sends exactly the bytes
 * asked for (junk header values, undecoded paths, half requests), which
 * libcurl would refuse or rewrite, and reads only the status line and the
 * header block, so a streaming response (SSE) does not hang the test.
 * Static functions: one copy per test program. Nothing here asserts. */
#ifndef ATOLL_TEST_FRONT_RAW_H
#define ATOLL_TEST_FRONT_RAW_H

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define RAW_HEAD_MAX 8192

/* How long raw_request() waits for an answer's head. */
static int raw_timeout_ms = 15000;

typedef struct raw_resp {
    int status;                 /* 0: no status line (connection closed, timeout) */
    char head[RAW_HEAD_MAX];    /* the status line and header block, NUL-terminated */
    char body[512];             /* the start of the body, NUL-terminated */
} raw_resp_t;

static inline int64_t raw_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Port of an "http://127.0.0.1:PORT" URL. */
static inline int raw_port(const char *url)
{
    const char *colon = strrchr(url, ':');
    return colon ? atoi(colon + 1) : 0;
}

/* A blocking TCP connection to 127.0.0.1:port, or -1. */
static inline int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline int raw_send_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads until the end of the header block (plus what came with it) or
 * timeout_ms; fills r. 0 when a status line was read, else -1. */
static inline int raw_read_head(int fd, raw_resp_t *r, int timeout_ms)
{
    char buf[RAW_HEAD_MAX + sizeof r->body];
    size_t len = 0;
    int64_t deadline = raw_now_ms() + timeout_ms;
    char *end = NULL;
    memset(r, 0, sizeof *r);
    while (len < sizeof buf - 1) {
        int64_t left = deadline - raw_now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            break;
        ssize_t n = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        if ((end = strstr(buf, "\r\n\r\n")) != NULL)
            break;
    }
    buf[len] = '\0';
    size_t hl = end ? (size_t)(end - buf) + 2 : len;
    if (hl >= sizeof r->head)
        hl = sizeof r->head - 1;
    memcpy(r->head, buf, hl);
    r->head[hl] = '\0';
    if (end)
        snprintf(r->body, sizeof r->body, "%s", end + 4);
    if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1)
        r->status = 0;
    return r->status ? 0 : -1;
}

/* One request on a new connection ("Connection: close"): method, target
 * sent as is, an optional Authorization value (any bytes but CR/LF; NULL:
 * no header), an optional body. Fills r; returns r->status (0 on failure). */
static inline int raw_request(int port, const char *method, const char *target,
                              const char *auth, const char *body, raw_resp_t *r)
{
    memset(r, 0, sizeof *r);
    int fd = raw_connect(port);
    if (fd < 0)
        return 0;
    size_t blen = body ? strlen(body) : 0;
    size_t cap = strlen(method) + strlen(target) + (auth ? strlen(auth) : 0) + blen + 256;
    char *req = malloc(cap);
    if (!req) {
        close(fd);
        return 0;
    }
    int n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
                     method, target);
    if (auth)
        n += snprintf(req + n, cap - (size_t)n, "Authorization: %s\r\n", auth);
    if (body)
        n += snprintf(req + n, cap - (size_t)n,
                      "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
    n += snprintf(req + n, cap - (size_t)n, "\r\n%s", body ? body : "");
    if (raw_send_all(fd, req, (size_t)n) == 0)
        raw_read_head(fd, r, raw_timeout_ms);
    free(req);
    close(fd);
    return r->status;
}

/* The value of header `name` (case-insensitive) in r->head copied into
 * out, or "" when absent. Returns out. */
static inline const char *raw_header(const raw_resp_t *r, const char *name, char *out,
                                     size_t cap)
{
    size_t nl = strlen(name);
    out[0] = '\0';
    for (const char *line = strstr(r->head, "\r\n"); line && line[2]; line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (strncasecmp(h, name, nl) == 0 && h[nl] == ':') {
            const char *v = h + nl + 1;
            while (*v == ' ')
                v++;
            size_t vl = strcspn(v, "\r\n");
            snprintf(out, cap, "%.*s", (int)(vl < cap ? vl : cap - 1), v);
            break;
        }
    }
    return out;
}

/* The first whole answer in buf (len bytes of answers back to back, as a
 * connection that pipelines receives them): its status in *status and its
 * body, blen bytes not NUL-terminated, at *body. Returns the answer's
 * length, 0 when it has not all arrived, or -1 when its head has no status
 * line or no valid Content-Length, or is over RAW_HEAD_MAX bytes. */
static inline long raw_split_answer(const char *buf, size_t len, int *status,
                                    const char **body, size_t *blen)
{
    const char *end = memmem(buf, len, "\r\n\r\n", 4);
    if (!end)
        return len >= RAW_HEAD_MAX ? -1 : 0;
    size_t hl = (size_t)(end - buf) + 4;
    if (hl > RAW_HEAD_MAX)
        return -1;
    char head[RAW_HEAD_MAX + 1];
    memcpy(head, buf, hl);
    head[hl] = '\0';
    const char *cl = strcasestr(head, "\r\nContent-Length:");
    long n = cl ? strtol(cl + 17, NULL, 10) : -1;
    if (n < 0 || n == LONG_MAX || sscanf(head, "HTTP/1.%*d %d", status) != 1)
        return -1;
    if (len - hl < (size_t)n)
        return 0;
    *body = buf + hl;
    *blen = (size_t)n;
    return (long)(hl + (size_t)n);
}

/* Raises this process's soft RLIMIT_NOFILE to the hard limit (the flood
 * tests open thousands of sockets). Returns the limit in force. */
static inline long raw_raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return -1;
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
    return (long)rl.rlim_cur;
}

#endif
