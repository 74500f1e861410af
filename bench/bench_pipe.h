/* bench_pipe.h - one HTTP/1.1 connection that pipelines: requests are
 * written without waiting for the answers before them, and the answers,
 * which arrive back to back in request order, are read off one buffer.
 * Static functions: one copy per bench program. Nothing here asserts. */
#ifndef ATOLL_BENCH_PIPE_H
#define ATOLL_BENCH_PIPE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "../tests/security/test_front_raw.h"

/* Answers read back to back from one connection: buf holds what arrived
 * and was not consumed yet. */
typedef struct pipe_rd {
    int fd;
    char buf[1 << 16];
    size_t len;
} pipe_rd_t;

/* A POST of body (JSON) to target as one request's bytes in out (size
 * cap); its length, or -1 when it does not fit. */
static inline int pipe_post(char *out, size_t cap, const char *target, const char *body)
{
    int n = snprintf(out, cap, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     target, strlen(body), body);
    return n < 0 || (size_t)n >= cap ? -1 : n;
}

/* The status of the next whole answer on p (raw_split_answer), or -1 on a
 * closed connection, a missing or bad Content-Length, or an answer larger
 * than the buffer. The answer is consumed; with body, its first
 * bodycap - 1 bytes are copied there, NUL-terminated. */
static inline int pipe_next(pipe_rd_t *p, char *body, size_t bodycap)
{
    for (;;) {
        int status = 0;
        const char *b = NULL;
        size_t blen = 0;
        long n = raw_split_answer(p->buf, p->len, &status, &b, &blen);
        if (n < 0)
            return -1;
        if (n > 0) {
            if (body && bodycap > 0)
                snprintf(body, bodycap, "%.*s", (int)blen, b);   /* cut at bodycap */
            p->len -= (size_t)n;
            memmove(p->buf, p->buf + n, p->len);
            return status;
        }
        if (p->len == sizeof p->buf)
            return -1;
        ssize_t got = recv(p->fd, p->buf + p->len, sizeof p->buf - p->len, 0);
        if (got <= 0)
            return -1;
        p->len += (size_t)got;
    }
}

/* Keeps `depth` copies of req (len bytes) in flight on p until max were
 * sent or deadline_ms (monotonic ms, raw_now_ms) passed, and reads every
 * answer to what was sent, handing each to answer(status, body, ctx)
 * (status -1: the connection failed; body: the first bodycap - 1 bytes,
 * or "" with body NULL). Stops at the first answer for which answer
 * returns non-zero. Returns how many answers were read. */
static inline long pipe_window(pipe_rd_t *p, const char *req, int len, int depth, long max,
                               int64_t deadline_ms, char *body, size_t bodycap,
                               int (*answer)(int status, const char *body, void *ctx),
                               void *ctx)
{
    long sent = 0, answered = 0;
    for (;;) {
        while (sent - answered < depth && sent < max && raw_now_ms() < deadline_ms &&
               raw_send_all(p->fd, req, (size_t)len) == 0)
            sent++;
        if (answered == sent)
            return answered;
        int status = pipe_next(p, body, bodycap);
        answered++;
        if (answer(status, body ? body : "", ctx) != 0 || status < 0)
            return answered;
    }
}

#endif
