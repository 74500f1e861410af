/* runlog.c - see runlog.h.
 *
 * Locking: `mu` guards the buffer list, the event array and `inflight`.
 * The thread takes a batch under the lock (events and up to
 * RUNLOG_POST_BYTES of each buffer), sends it unlocked, then clears
 * `inflight` and wakes runlog_flush() callers. A buffer is freed by the
 * thread once it is empty and closed (its computation ended here). */
#include "runlog.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define RUNLOG_TICK_MS 20

/* One process's unsent output: segments [stream:1][length:4, LE][bytes]
 * in the order they were read, so stdout and stderr keep their
 * interleaving (docs/worker-protocol.md, logs). */
typedef struct rbuf {
    runlog_key_t k;
    char *data;
    size_t head, len, cap;     /* unsent segments are data[head, len) */
    int64_t dropped;           /* bytes dropped since the last marker */
    int closed;
    struct rbuf *next;
} rbuf_t;

#define SEG_HDR 5

struct runlog {
    wclient_t *wc;
    pthread_mutex_t mu;
    pthread_cond_t cv;         /* work for the thread */
    pthread_cond_t done_cv;    /* a batch was sent */
    rbuf_t *bufs;
    json_t *events;            /* array of event objects not yet sent */
    int inflight;
    int stopping;
    pthread_t th;
};

typedef struct chunk {
    runlog_key_t k;
    char *data;
    size_t len;
} chunk_t;

static int key_eq(const runlog_key_t *a, const runlog_key_t *b)
{
    return a->job == b->job && a->attempt == b->attempt && a->comp == b->comp &&
           a->process == b->process;
}

static rbuf_t *buf_find(runlog_t *rl, const runlog_key_t *k)
{
    for (rbuf_t *b = rl->bufs; b; b = b->next)
        if (!b->closed && key_eq(&b->k, k))
            return b;
    rbuf_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->k = *k;
    b->next = rl->bufs;
    rl->bufs = b;
    return b;
}

static size_t seg_len(const char *p)
{
    return (size_t)(unsigned char)p[1] | (size_t)(unsigned char)p[2] << 8 |
           (size_t)(unsigned char)p[3] << 16 | (size_t)(unsigned char)p[4] << 24;
}

/* Appends one segment; 0 or -1 (out of memory). Caller holds mu. */
static int seg_append(rbuf_t *b, int stream, const char *data, size_t len)
{
    if (b->head > 0 && b->len + SEG_HDR + len > b->cap) {     /* compact first */
        memmove(b->data, b->data + b->head, b->len - b->head);
        b->len -= b->head;
        b->head = 0;
    }
    if (b->len + SEG_HDR + len > b->cap) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap < b->len + SEG_HDR + len)
            cap *= 2;
        char *nd = realloc(b->data, cap);
        if (!nd)
            return -1;
        b->data = nd;
        b->cap = cap;
    }
    char *p = b->data + b->len;
    p[0] = (char)stream;
    for (int i = 0; i < 4; i++)
        p[1 + i] = (char)((len >> (8 * i)) & 0xff);
    memcpy(p + SEG_HDR, data, len);
    b->len += SEG_HDR + len;
    return 0;
}

void runlog_output(runlog_t *rl, const runlog_key_t *k, int stream, const char *data, size_t len)
{
    if (!rl || len == 0 || len > RUNLOG_POST_BYTES - SEG_HDR)
        return;
    pthread_mutex_lock(&rl->mu);
    rbuf_t *b = buf_find(rl, k);
    if (b && seg_append(b, stream, data, len) != 0)
        b->dropped += (int64_t)len;
    /* The controller is behind: drop the oldest whole segments down to
     * half the cap, and say so in the output. */
    if (b && b->len - b->head > RUNLOG_MAX_PENDING) {
        while (b->len - b->head > RUNLOG_MAX_PENDING / 2) {
            size_t n = seg_len(b->data + b->head);
            b->dropped += (int64_t)n;
            b->head += SEG_HDR + n;
        }
        char note[96];
        int n = snprintf(note, sizeof note, "\n[atoll: %lld bytes of output dropped: the "
                         "controller fell behind]\n", (long long)b->dropped);
        if (seg_append(b, 2, note, (size_t)n) == 0)
            b->dropped = 0;
    }
    pthread_cond_signal(&rl->cv);
    pthread_mutex_unlock(&rl->mu);
}

void runlog_event(runlog_t *rl, const runlog_key_t *k, const char *state, int pid,
                  int exit_code, int signal, const char *host)
{
    if (!rl)
        return;
    json_t *ev = json_pack("{s:I, s:i, s:i, s:i, s:s, s:i, s:s}", "job", (json_int_t)k->job,
                           "attempt", k->attempt, "comp", k->comp, "process", k->process,
                           "state", state, "pid", pid, "host", host ? host : "");
    if (ev && strcmp(state, "exited") == 0)
        json_object_set_new(ev, "exit_code", json_integer(exit_code));
    if (ev && strcmp(state, "killed") == 0)
        json_object_set_new(ev, "signal", json_integer(signal));
    pthread_mutex_lock(&rl->mu);
    if (ev)
        json_array_append_new(rl->events, ev);
    pthread_cond_signal(&rl->cv);
    pthread_mutex_unlock(&rl->mu);
}

/* Takes the next batch (caller holds mu). *nch chunks into ch (cap n). */
static json_t *take_batch(runlog_t *rl, chunk_t *ch, int n, int *nch)
{
    json_t *ev = NULL;
    if (json_array_size(rl->events) > 0) {
        ev = rl->events;
        rl->events = json_array();
    }
    *nch = 0;
    for (rbuf_t **pp = &rl->bufs; *pp;) {
        rbuf_t *b = *pp;
        size_t have = b->len - b->head;
        if (have == 0 && b->closed) {
            *pp = b->next;
            free(b->data);
            free(b);
            continue;
        }
        if (have > 0 && *nch < n) {
            size_t take = 0;           /* whole segments, at most RUNLOG_POST_BYTES */
            while (take < have) {
                size_t seg = SEG_HDR + seg_len(b->data + b->head + take);
                if (take > 0 && take + seg > RUNLOG_POST_BYTES)
                    break;
                take += seg;
            }
            chunk_t *c = &ch[*nch];
            if ((c->data = malloc(take))) {
                memcpy(c->data, b->data + b->head, take);
                c->len = take;
                c->k = b->k;
                (*nch)++;
            }
            b->head += take;
            if (b->head == b->len)
                b->head = b->len = 0;
        }
        pp = &b->next;
    }
    return ev;
}

/* Output first, then states: a process's output is queued before its end
 * (gang.c reads its pipes before announcing it), and a follower of its
 * logs stops at the end, so the end must not overtake the output. */
static void send_batch(runlog_t *rl, json_t *events, chunk_t *ch, int nch)
{
    for (int i = 0; i < nch; i++) {
        char fmt[256];
        snprintf(fmt, sizeof fmt, "/v1/workers/%%lld/logs?job=%" PRId64 "&attempt=%d&comp=%d"
                 "&process=%d", ch[i].k.job, (int)ch[i].k.attempt, (int)ch[i].k.comp,
                 (int)ch[i].k.process);
        int st = wclient_worker_post(rl->wc, fmt, NULL, ch[i].data, ch[i].len, 10000, NULL);
        if (st != 200)
            log_debug("runlog: %zu bytes of job %" PRId64 " not taken (HTTP %d)", ch[i].len,
                      ch[i].k.job, st);
        free(ch[i].data);
    }
    if (events) {
        json_t *body = json_pack("{s:o}", "events", events);
        int st = body ? wclient_worker_post(rl->wc, "/v1/workers/%lld/procs", body, NULL, 0,
                                            10000, NULL) : -1;
        if (st != 200)
            log_warn("runlog: process states not taken (HTTP %d)", st);
        json_decref(body);
    }
}

/* Waits on cv for at most RUNLOG_TICK_MS (caller holds mu): a flush's
 * wait, which checks its own deadline. */
static void tick_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += RUNLOG_TICK_MS * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

static void *runlog_main(void *arg)
{
    runlog_t *rl = arg;
    pthread_setname_np(pthread_self(), "atoll-runlog");
    enum { MAXCH = 32 };
    chunk_t ch[MAXCH];
    pthread_mutex_lock(&rl->mu);
    for (;;) {
        int nch;
        json_t *ev = take_batch(rl, ch, MAXCH, &nch);
        if (!ev && nch == 0) {
            if (rl->stopping)
                break;
            /* Every change (output, an event, a flush, the stop) signals
             * cv under mu, and take_batch looked under mu: no timeout
             * needed, so an idle worker's log thread never wakes. */
            pthread_cond_wait(&rl->cv, &rl->mu);
            continue;
        }
        rl->inflight = 1;
        pthread_mutex_unlock(&rl->mu);
        send_batch(rl, ev, ch, nch);
        pthread_mutex_lock(&rl->mu);
        rl->inflight = 0;
        pthread_cond_broadcast(&rl->done_cv);
    }
    pthread_cond_broadcast(&rl->done_cv);
    pthread_mutex_unlock(&rl->mu);
    return NULL;
}

runlog_t *runlog_start(wclient_t *wc)
{
    runlog_t *rl = calloc(1, sizeof *rl);
    if (!rl)
        return NULL;
    rl->wc = wc;
    rl->events = json_array();
    pthread_mutex_init(&rl->mu, NULL);
    pthread_cond_init(&rl->cv, NULL);
    pthread_cond_init(&rl->done_cv, NULL);
    if (!rl->events || pthread_create(&rl->th, NULL, runlog_main, rl) != 0) {
        json_decref(rl->events);
        free(rl);
        return NULL;
    }
    return rl;
}

/* Anything of (job, attempt, comp) unsent? Caller holds mu. */
static int pending_for(runlog_t *rl, int64_t job, int32_t attempt, int32_t comp)
{
    if (rl->inflight || json_array_size(rl->events) > 0)
        return 1;
    for (rbuf_t *b = rl->bufs; b; b = b->next)
        if (b->k.job == job && b->k.attempt == attempt && b->k.comp == comp &&
            b->len > b->head)
            return 1;
    return 0;
}

int runlog_flush(runlog_t *rl, int64_t job, int32_t attempt, int32_t comp, int64_t timeout_ms)
{
    if (!rl)
        return 0;
    int64_t end = util_mono_us() + timeout_ms * 1000;
    pthread_mutex_lock(&rl->mu);
    for (rbuf_t *b = rl->bufs; b; b = b->next)
        if (b->k.job == job && b->k.attempt == attempt && b->k.comp == comp)
            b->closed = 1;
    pthread_cond_signal(&rl->cv);
    int rc = 0;
    while (pending_for(rl, job, attempt, comp) && !rl->stopping) {
        if (util_mono_us() >= end) {
            rc = -1;
            break;
        }
        tick_wait(&rl->done_cv, &rl->mu);
    }
    pthread_mutex_unlock(&rl->mu);
    return rc;
}

void runlog_stop(runlog_t *rl)
{
    if (!rl)
        return;
    pthread_mutex_lock(&rl->mu);
    rl->stopping = 1;
    pthread_cond_signal(&rl->cv);
    pthread_mutex_unlock(&rl->mu);
    pthread_join(rl->th, NULL);
    for (rbuf_t *b = rl->bufs, *n; b; b = n) {
        n = b->next;
        free(b->data);
        free(b);
    }
    json_decref(rl->events);
    pthread_cond_destroy(&rl->cv);
    pthread_cond_destroy(&rl->done_cv);
    pthread_mutex_destroy(&rl->mu);
    free(rl);
}
