/* api_durable.c - answers that wait for group commit (store_sync.c).
 *
 * A handler that acknowledges a write (a job's 201, a cancel's 200, a
 * tenant's token) builds its answer, then hands it here: the request asks
 * for a sync round and parks, holding no HTTP thread, until the round is
 * decided; the request's next run (api_durable_rerun, which the router
 * calls before routing) sends the held answer, or a 503 naming the
 * refusal when the disk refused the sync. The write itself is never done
 * twice, nor its access decided again (a token revoked during the round
 * does not take back the answer): a run again finds the answer held in
 * req->user_ptr.
 *
 * Ownership: the held answer (its text included) belongs to the request
 * (user_ptr, freed by the front door with it).
 *
 * atoll_http_durable_wait_seconds (/metrics) counts each decided wait,
 * from the request for a round to the answer's run: its round's fdatasync
 * (atoll_store_sync_seconds), the wait for a round already running, and
 * the wake of the parked request. A round is asked for by one request at
 * least, which waits from before it began to after it ended, so the waits'
 * sum is never under the rounds' sum (test_durable). */
#include "api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

typedef struct held {
    uint64_t ticket;
    int64_t asked_us;           /* util_mono_us before the round was asked for */
    int status;
    char *text;                 /* owned until answered */
    size_t len;
    char location[sizeof ((http_resp_t *)0)->location];
    char fail[256];             /* the 503's detail when the sync is refused */
} held_t;

/* The rounds' buckets: a wait holds its round, so the two read together. */
static util_hist_t durable_hist = {.bounds_us = store_sync_bounds_us,
                                  .nbounds = STORE_SYNC_NBOUNDS};

const util_hist_t *api_durable_histogram(void) { return &durable_hist; }

static void held_free(void *ptr)
{
    held_t *h = ptr;
    if (h)
        free(h->text);
    free(h);
}

/* Sends h, or parks the request again while its round is pending. */
static void held_answer(http_resp_t *resp, held_t *h)
{
    int v = store_sync_check(h->ticket);
    if (v == 0 && http_stopping_now())
        v = store_sync_wait(h->ticket) == 0 ? 1 : -1;   /* shutdown: no parking */
    if (v == 0) {
        http_park_until(resp, store_sync_gen, (int64_t)h->ticket, 0, 0);
        return;
    }
    if (h->ticket)      /* 0: no round in this mode, nothing waited */
        util_hist_add(&durable_hist, util_mono_us() - h->asked_us);
    if (v < 0) {
        resp->location[0] = '\0';
        http_problem(resp, 503, NULL, "%s", h->fail);
        return;
    }
    memcpy(resp->location, h->location, sizeof resp->location);
    http_json_text(resp, h->status, h->text, h->len);
    h->text = NULL;             /* the response's now */
}

int api_durable_rerun(http_req_t *req, http_resp_t *resp)
{
    if (req->runs == 0 || req->user_free != held_free || !req->user_ptr)
        return 0;
    held_t *h = req->user_ptr;
    if (h->status == 0)
        return 0;       /* a round asked for, no answer held: not parked by us */
    held_answer(resp, h);
    return 1;
}

/* The request's held answer, made (and its round asked for) on the first
 * call; NULL when out of memory. */
static held_t *held_of(http_req_t *req)
{
    if (req->user_free == held_free && req->user_ptr)
        return req->user_ptr;
    held_t *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->asked_us = util_mono_us();
    h->ticket = store_sync_request();
    req->user_ptr = h;
    req->user_free = held_free;
    return h;
}

void api_durable_request(http_req_t *req)
{
    /* Out of memory: api_answer_durable tries again (its round then asked
     * for later), and answers 503 if that fails too. */
    (void)held_of(req);
}

void api_answer_durable(http_req_t *req, http_resp_t *resp, int status, char *text, size_t len,
                        const char *fail_fmt, ...)
{
    held_t *h = held_of(req);
    if (!h) {
        free(text);
        http_problem(resp, 503, NULL, "out of memory; retry");
        return;
    }
    h->status = status;
    h->text = text;
    h->len = len;
    memcpy(h->location, resp->location, sizeof h->location);
    va_list ap;
    va_start(ap, fail_fmt);
    vsnprintf(h->fail, sizeof h->fail, fail_fmt, ap);
    va_end(ap);
    held_answer(resp, h);
}
