/* api_stream.c - the dashboard's live feed and utilization series.
 *
 * GET /v1/events/stream: Server-Sent Events. A stream holds no thread while
 * it waits: its content reader, finding nothing new, suspends the
 * connection and returns 0 bytes; api_stream_changed()/_sampled() (called by
 * the sampler thread, sampler.h) bump a counter and resume every suspended
 * stream, whose reader then writes the event. Events:
 *   event: change  data: {"seq": N}          something the dashboard shows moved
 *   event: sample  data: {"seq": N, "at_us": T}   a utilization sample was written
 *   ": hb" comment lines every API_STREAM_HEARTBEAT_S so proxies keep it open.
 * The browser re-fetches the JSON it shows on `change`.
 *
 * GET /v1/stats/utilization?minutes=15[&since_us=T]: the samples (sampler.h).
 *
 * Invariant: a stream is in `susp` exactly while its connection is
 * suspended; both the check-then-suspend in the reader and the
 * bump-then-resume in the notifiers happen under stream_mu, so no
 * notification falls between a reader's check and its suspension. */
#include "api.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"
#include "store.h"
#include "util.h"

#define API_STREAM_HEARTBEAT_S 15
#define API_STREAM_MAX 256           /* concurrent streams; more get 503 */

typedef struct stream {
    struct MHD_Connection *conn;
    uint64_t sent_change, sent_sample;   /* counters already told */
    int64_t last_write_us;               /* monotonic */
    int hello_sent;
} stream_t;

static pthread_mutex_t stream_mu = PTHREAD_MUTEX_INITIALIZER;
static stream_t *susp[API_STREAM_MAX];   /* suspended streams; guarded */
static int nsusp;
static int nstreams;                     /* open streams; guarded */
static int stopping;                     /* guarded */
static uint64_t change_seq, sample_seq;  /* guarded */
static int64_t sample_at_us;             /* guarded */

/* Resumes every suspended stream; caller holds stream_mu. */
static void resume_all_locked(void)
{
    for (int i = 0; i < nsusp; i++)
        MHD_resume_connection(susp[i]->conn);
    nsusp = 0;
}

void api_stream_changed(void)
{
    pthread_mutex_lock(&stream_mu);
    change_seq++;
    resume_all_locked();
    pthread_mutex_unlock(&stream_mu);
}

void api_stream_sampled(void)
{
    pthread_mutex_lock(&stream_mu);
    sample_seq++;
    sample_at_us = util_wall_us();
    /* Also the heartbeat's clock: every stream gets to check its age once
     * a second. */
    resume_all_locked();
    pthread_mutex_unlock(&stream_mu);
    api_runs_notify();      /* log follows check whether their process ended */
}

void api_stream_stop(void)
{
    pthread_mutex_lock(&stream_mu);
    stopping = 1;
    resume_all_locked();
    pthread_mutex_unlock(&stream_mu);
}

/* Formats what the stream has not been told yet into buf (at most max
 * bytes); 0 when there is nothing. Caller holds stream_mu. */
static size_t stream_pending_locked(stream_t *s, char *buf, size_t max)
{
    char ev[512];
    size_t n = 0;
    int64_t now = util_mono_us();
    if (!s->hello_sent) {
        n = (size_t)snprintf(ev, sizeof ev,
                             "retry: 2000\nevent: hello\ndata: {\"change\":%llu,\"sample\":%llu}\n\n",
                             (unsigned long long)change_seq, (unsigned long long)sample_seq);
        s->hello_sent = 1;
        s->sent_change = change_seq;
        s->sent_sample = sample_seq;
    } else if (s->sent_change != change_seq) {
        n = (size_t)snprintf(ev, sizeof ev, "event: change\ndata: {\"seq\":%llu}\n\n",
                             (unsigned long long)change_seq);
        s->sent_change = change_seq;
    } else if (s->sent_sample != sample_seq) {
        n = (size_t)snprintf(ev, sizeof ev, "event: sample\ndata: {\"seq\":%llu,\"at_us\":%lld}\n\n",
                             (unsigned long long)sample_seq, (long long)sample_at_us);
        s->sent_sample = sample_seq;
    } else if (now - s->last_write_us >= (int64_t)API_STREAM_HEARTBEAT_S * 1000000) {
        n = (size_t)snprintf(ev, sizeof ev, ": hb\n\n");
    }
    if (n == 0 || n >= sizeof ev || n > max)
        return 0;   /* (max is MHD's block size, far above one event) */
    memcpy(buf, ev, n);
    s->last_write_us = now;
    return n;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_t *s = cls;
    pthread_mutex_lock(&stream_mu);
    if (stopping) {
        pthread_mutex_unlock(&stream_mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = stream_pending_locked(s, buf, max);
    if (n == 0) {
        /* Nothing new: park until a notifier resumes us. Returning 0
         * without suspending would make MHD spin on this reader. */
        MHD_suspend_connection(s->conn);
        susp[nsusp++] = s;
    }
    pthread_mutex_unlock(&stream_mu);
    return (ssize_t)n;
}

/* MHD frees the response (and so the stream) once the connection closed;
 * a stream is never suspended then (suspended connections do not close). */
static void stream_free(void *cls)
{
    pthread_mutex_lock(&stream_mu);
    nstreams--;
    pthread_mutex_unlock(&stream_mu);
    free(cls);
}

void api_events_stream(http_req_t *req, http_resp_t *resp)
{
    stream_t *s = calloc(1, sizeof *s);
    if (!s) {
        http_problem(resp, 503, NULL, "out of memory");
        return;
    }
    pthread_mutex_lock(&stream_mu);
    int refuse = stopping ? 1 : nstreams >= API_STREAM_MAX ? 2 : 0;
    if (!refuse)
        nstreams++;
    pthread_mutex_unlock(&stream_mu);
    if (refuse) {
        free(s);
        http_problem(resp, 503, NULL, refuse == 1 ? "atolld is shutting down"
                                                  : "too many event streams open");
        return;
    }
    s->conn = req->conn;
    s->last_write_us = util_mono_us();
    http_stream(resp, "text/event-stream", 4096, stream_read, s, stream_free);
}

void api_stats_utilization(http_req_t *req, http_resp_t *resp)
{
    const char *min_s = http_query(req, "minutes"), *since_s = http_query(req, "since_us");
    int64_t minutes = min_s ? api_parse_id(min_s) : 15;
    if (minutes < 1 || minutes > 60) {
        http_problem(resp, 400, "minutes", "minutes must be 1 to 60");
        return;
    }
    int64_t now = util_wall_us(), since = now - minutes * 60 * 1000000;
    if (since_s) {
        int64_t v = strcmp(since_s, "0") == 0 ? 0 : api_parse_id(since_s);
        if (v < 0 || (v == 0 && strcmp(since_s, "0") != 0)) {
            http_problem(resp, 400, "since_us", "since_us must be a Unix time in microseconds");
            return;
        }
        if (v > since)
            since = v;
    }
    store_t *st = api_store(resp);
    if (!st)
        return;
    json_t *samples = sampler_series(st, since), *islands = json_object();
    if (!samples || !islands) {
        json_decref(samples);
        json_decref(islands);
        http_problem(resp, 500, NULL, "could not read the samples");
        return;
    }
    for (int i = 0; i < api_cfg.nislands; i++)
        json_object_set_new(islands, api_cfg.islands[i].name,
                            json_integer(shape_numel(&api_cfg.islands[i].shape)));
    http_json(resp, 200, json_pack("{s:i, s:I, s:I, s:o, s:o}", "interval_ms", 1000,
                                   "from_us", (json_int_t)since, "now_us", (json_int_t)now,
                                   "islands", islands, "samples", samples));
}
