/* test_front_flood.h - a hostile client holding many connections to
 * atolld, for test_front_flood.c and bench/bench_connflood.c: `nidle`
 * connections that never send a byte, and `nslow` slowloris connections
 * that send a request line and then one header line every slow_period_ms,
 * never finishing. Like a real attacker, a connection the server closes is
 * opened again at once (counted in `reopened`). One thread, poll(). Static
 * functions: one copy per program. Needs test_front_raw.h. */
#ifndef ATOLL_TEST_FRONT_FLOOD_H
#define ATOLL_TEST_FRONT_FLOOD_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/time.h>

#include "test_front_raw.h"

typedef struct flood {
    int port, nidle, nslow, slow_period_ms;
    int n;                          /* nidle + nslow */
    int *fds;                       /* [n]: -1 while not connected */
    int64_t *next_line_ms;          /* [n]: slowloris: when the next header line goes */
    int64_t *line_no;
    pthread_t thread;
    atomic_int stop;
    atomic_int opened;              /* connections opened in the first round */
    atomic_long reopened;           /* closed by the server and opened again */
    atomic_long connect_failed;
} flood_t;

/* Opens connection i (and, for a slowloris one, sends its request line). */
static inline void flood_open(flood_t *f, int i)
{
    int fd = raw_connect(f->port);
    if (fd < 0) {
        atomic_fetch_add(&f->connect_failed, 1);
        f->fds[i] = -1;
        return;
    }
    struct timeval tv = {1, 0};     /* never stall the flood thread on one socket */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    f->fds[i] = fd;
    if (i >= f->nidle) {
        static const char line[] = "GET /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n";
        raw_send_all(fd, line, sizeof line - 1);
        f->next_line_ms[i] = raw_now_ms() + f->slow_period_ms;
    }
}

static inline void *flood_main(void *arg)
{
    flood_t *f = arg;
    struct pollfd *p = calloc((size_t)f->n, sizeof *p);
    if (!p)
        return NULL;
    for (int i = 0; i < f->n && !atomic_load(&f->stop); i++) {
        flood_open(f, i);
        atomic_fetch_add(&f->opened, 1);
    }
    char buf[4096];
    while (!atomic_load(&f->stop)) {
        for (int i = 0; i < f->n; i++) {
            p[i].fd = f->fds[i];
            p[i].events = POLLIN;
            p[i].revents = 0;
        }
        poll(p, (nfds_t)f->n, 100);
        int64_t now = raw_now_ms();
        for (int i = 0; i < f->n; i++) {
            int closed = f->fds[i] < 0;
            if (!closed && (p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t r = recv(f->fds[i], buf, sizeof buf, MSG_DONTWAIT);
                closed = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
            }
            if (!closed && i >= f->nidle && now >= f->next_line_ms[i]) {
                char line[64];
                int len = snprintf(line, sizeof line, "X-Slow-%lld: still coming\r\n",
                                   (long long)f->line_no[i]++);
                closed = raw_send_all(f->fds[i], line, (size_t)len) != 0;
                f->next_line_ms[i] = now + f->slow_period_ms;
            }
            if (closed) {
                if (f->fds[i] >= 0)
                    close(f->fds[i]);
                flood_open(f, i);
                atomic_fetch_add(&f->reopened, 1);
            }
        }
    }
    for (int i = 0; i < f->n; i++)
        if (f->fds[i] >= 0)
            close(f->fds[i]);
    free(p);
    return NULL;
}

/* Starts the flood thread and waits (up to 60 s) until every connection
 * was opened once. 0 or -1. */
static inline int flood_start(flood_t *f, int port, int nidle, int nslow, int slow_period_ms)
{
    memset(f, 0, sizeof *f);
    f->port = port;
    f->nidle = nidle;
    f->nslow = nslow;
    f->n = nidle + nslow;
    f->slow_period_ms = slow_period_ms;
    f->fds = calloc((size_t)f->n, sizeof *f->fds);
    f->next_line_ms = calloc((size_t)f->n, sizeof *f->next_line_ms);
    f->line_no = calloc((size_t)f->n, sizeof *f->line_no);
    if (!f->fds || !f->next_line_ms || !f->line_no ||
        pthread_create(&f->thread, NULL, flood_main, f) != 0) {
        free(f->fds);
        free(f->next_line_ms);
        free(f->line_no);
        return -1;
    }
    int64_t deadline = raw_now_ms() + 60000;
    while (atomic_load(&f->opened) < f->n && raw_now_ms() < deadline)
        usleep(20 * 1000);
    return atomic_load(&f->opened) == f->n ? 0 : -1;
}

static inline void flood_stop(flood_t *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->thread, NULL);
    free(f->fds);
    free(f->next_line_ms);
    free(f->line_no);
    f->fds = NULL;
}

/* GET /healthz on a new connection; returns the status (0: none) and the
 * time it took in *ms. */
static inline int flood_probe(int port, int64_t *ms)
{
    raw_resp_t r;
    int64_t t0 = raw_now_ms();
    int st = raw_request(port, "GET", "/healthz", NULL, NULL, &r);
    *ms = raw_now_ms() - t0;
    return st;
}

#endif
