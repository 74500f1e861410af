/* bench_clients.h - client threads for a closed-loop load: each has its
 * own keep-alive connection and calls one step (a request, a whole job)
 * again and again until a deadline, counting the steps that did what they
 * should and the others. Static functions: one copy per bench program.
 * Nothing here asserts. */
#ifndef ATOLL_BENCH_CLIENTS_H
#define ATOLL_BENCH_CLIENTS_H

#include <pthread.h>

#include "support_harness.h"

/* One step on cl with doc: 0 when it did what it should. */
typedef int (*bench_step_fn)(hx_client_t *cl, const char *doc);

typedef struct bench_client {
    pthread_t tid;
    const char *url, *doc;      /* borrowed: live until bench_clients_join */
    bench_step_fn step;
    int64_t deadline_ms;        /* hx_now_ms */
    long done, errors;
} bench_client_t;

static inline void *bench_client_main(void *arg)
{
    bench_client_t *c = arg;
    hx_client_t cl;
    if (hx_client_init(&cl, c->url) != 0) {
        c->errors++;
        return NULL;
    }
    while (hx_now_ms() < c->deadline_ms) {
        if (c->step(&cl, c->doc) == 0)
            c->done++;
        else
            c->errors++;
    }
    hx_client_cleanup(&cl);
    return NULL;
}

/* Starts n clients (c[0..n)) stepping until deadline_ms: how many started
 * (bench_clients_join takes that number). */
static inline int bench_clients_start(bench_client_t *c, int n, const char *url,
                                      const char *doc, bench_step_fn step, int64_t deadline_ms)
{
    int started = 0;
    for (; started < n; started++) {
        c[started] = (bench_client_t){.url = url, .doc = doc, .step = step,
                                      .deadline_ms = deadline_ms};
        if (pthread_create(&c[started].tid, NULL, bench_client_main, &c[started]) != 0)
            break;
    }
    return started;
}

/* Joins the started clients of c[0..n): their steps done into *done, the
 * others, and one for each client that did not start, into *errors. */
static inline void bench_clients_join(bench_client_t *c, int n, int started, long *done,
                                      long *errors)
{
    *done = 0;
    *errors = n - started;
    for (int i = 0; i < started; i++) {
        pthread_join(c[i].tid, NULL);
        *done += c[i].done;
        *errors += c[i].errors;
    }
}

#endif
