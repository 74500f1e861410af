/* dplane_rx.c - the data plane's receive path (dplane_int.h): frames from
 * peers into the mailbox. Everything here runs on the progress thread.
 *
 * Origins: a message's sender is known by its reply endpoint (UCX's
 * endpoint to that peer, made by wire-up). Each distinct one gets a slot
 * (mailbox origin = slot + 1) on first use; when all DPLANE_MAX_CONNS are
 * taken, the least recently used is recycled (its unclaimed frames go).
 *
 * Receiving (dp_am_recv): header checked, then the gate. An admitted
 * frame is copied out (eager data) or fetched into a fresh tensor
 * (rendezvous); an unclaimed frame without room is parked (UCX keeps its
 * data, a rendezvous sender keeps waiting: back-pressure, as a blocked
 * socket gave before) and asked about again on every pass until the
 * unclaimed TTL, then dropped.
 *
 * Ownership: a frame's payload is UCX's until it is taken: an eager copy
 * or a fetched tensor goes to the mailbox (mbox_put_from takes it); a
 * tensor being fetched is its dp_rx_t's until then; a parked frame's data
 * is held (UCS_INPROGRESS) until dp_parked_retry() takes or releases it,
 * or dplane_stop() releases it. Nothing here waits: it takes dp->mu and
 * the mailbox's lock only briefly, and never for a taker or the network. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dplane_int.h"
#include "util.h"

typedef struct dp_rx {             /* a rendezvous fetch in flight */
    dplane_t *dp;
    dplane_hdr_t h;
    int origin;
    mbox_admit_t admit;
    tensor_t *t;                   /* owned until handed to the mailbox */
} dp_rx_t;

/* The origin (slot + 1) of the sender whose reply endpoint is ep: its
 * slot, a free one, or the least recently used one recycled (progress
 * thread only, the one writer of origins). */
static int origin_of(dplane_t *dp, ucp_ep_h ep)
{
    int64_t now = util_mono_us();
    int lru = 0;
    pthread_mutex_lock(&dp->mu);
    for (int i = 0; i < DPLANE_MAX_CONNS; i++) {
        if (dp->origins[i].ep == ep) {
            dp->origins[i].used_us = now;
            pthread_mutex_unlock(&dp->mu);
            return i + 1;
        }
        if (!dp->origins[i].ep || (dp->origins[lru].ep &&
                                   dp->origins[i].used_us < dp->origins[lru].used_us))
            lru = i;
    }
    int recycled = dp->origins[lru].ep != NULL;
    if (!recycled)
        dp->norigins++;
    dp->origins[lru] = (dp_origin_t){.ep = ep, .used_us = now};
    pthread_mutex_unlock(&dp->mu);
    if (recycled) {
        atomic_fetch_add(&dp->refused, 1);
        mbox_drop_origin(dp->mb, lru + 1);
    }
    return lru + 1;
}

static void rx_done(void *req, ucs_status_t status, size_t length, void *user)
{
    dp_rx_t *rx = user;
    if (status == UCS_OK && length == rx->h.nbytes) {
        mbox_put_from(rx->dp->mb, &rx->h.tag, &rx->h.key, rx->t, rx->origin, rx->admit);
    } else {
        if (rx->admit == MBOX_ADMIT_UNCLAIMED)
            mbox_unreserve(rx->dp->mb, rx->origin, (int64_t)rx->h.nbytes);
        tensor_free(rx->t);
    }
    atomic_fetch_sub(&rx->dp->inflight, 1);
    free(rx);
    if (req)
        ucp_request_free(req);
}

typedef enum rx_fate {
    RX_WAIT,                       /* no room yet: data untouched, ask again */
    RX_TAKEN,                      /* eager bytes copied, or a fetch started */
    RX_DROPPED,                    /* refused or no memory: data unused */
} rx_fate_t;

/* Takes an admitted frame's payload into a new tensor for the mailbox:
 * copied from eager data, or fetched by rendezvous (completed in rx_done).
 * The reservation of an UNCLAIMED admit is consumed or given back. */
static rx_fate_t rx_take(dplane_t *dp, const dplane_hdr_t *h, int origin, mbox_admit_t a,
                         void *data, int rndv)
{
    tensor_t *t = tensor_new_uninit(&h->shape);
    dp_rx_t *rx = rndv && t ? malloc(sizeof *rx) : NULL;
    if (!t || (rndv && !rx)) {
        log_error("dplane: out of memory for a %llu-byte frame", (unsigned long long)h->nbytes);
        if (a == MBOX_ADMIT_UNCLAIMED)
            mbox_unreserve(dp->mb, origin, (int64_t)h->nbytes);
        tensor_free(t);
        return RX_DROPPED;
    }
    if (!rndv) {
        memcpy(t->data, data, (size_t)h->nbytes);
        mbox_put_from(dp->mb, &h->tag, &h->key, t, origin, a);   /* takes t */
        return RX_TAKEN;
    }
    *rx = (dp_rx_t){.dp = dp, .h = *h, .origin = origin, .admit = a, .t = t};
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.recv_am = rx_done, .user_data = rx};
    atomic_fetch_add(&dp->inflight, 1);
    void *r = ucp_am_recv_data_nbx(dp->worker, data, t->data, (size_t)h->nbytes, &p);
    if (r == NULL)                 /* done at once: no callback comes */
        rx_done(NULL, UCS_OK, (size_t)h->nbytes, rx);
    else if (UCS_PTR_IS_ERR(r))
        rx_done(NULL, UCS_PTR_STATUS(r), 0, rx);
    return RX_TAKEN;
}

/* Asks the gate about a frame and acts on the answer. */
static rx_fate_t rx_offer(dplane_t *dp, const dplane_hdr_t *h, int origin, void *data, int rndv,
                          int64_t deadline_us)
{
    mbox_admit_t a = mbox_admit(dp->mb, &h->tag, &h->key, origin, (int64_t)h->nbytes,
                                deadline_us);
    if (a == MBOX_ADMIT_WAIT)
        return RX_WAIT;
    if (a == MBOX_ADMIT_DROP)
        return RX_DROPPED;
    return rx_take(dp, h, origin, a, data, rndv);
}

/* UCX active-message handler (progress thread). Returns UCS_INPROGRESS
 * when UCX must keep data (a parked frame, or a fetch started), else
 * UCS_OK (data unused after this; a declined rendezvous completes its
 * sender with success, so a stale frame never fails a peer). */
ucs_status_t dp_am_recv(void *arg, const void *header, size_t header_length, void *data,
                        size_t length, const ucp_am_recv_param_t *param)
{
    dplane_t *dp = arg;
    dplane_hdr_t h;
    int rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
    int origin = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
                     ? origin_of(dp, param->reply_ep) : 0;
    if (header_length != DPLANE_HDR_SIZE || dplane_hdr_decode(header, &h) != 0 ||
        length != h.nbytes || origin == 0) {
        atomic_fetch_add(&dp->bad_frames, 1);
        return UCS_OK;
    }
    int64_t deadline = util_mono_us() + (int64_t)MBOX_UNCLAIMED_TTL_MS * 1000;
    /* Only data UCX lets us keep can wait for room. */
    int can_keep = rndv || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA);
    rx_fate_t f = rx_offer(dp, &h, origin, data, rndv, can_keep ? deadline : 0);
    if (f == RX_WAIT && dp->nparked >= DPLANE_MAX_PARKED)
        f = rx_offer(dp, &h, origin, data, rndv, 0);     /* refused now (counted) */
    dp_park_t *pk = f == RX_WAIT ? malloc(sizeof *pk) : NULL;
    if (f == RX_WAIT && !pk)
        f = rx_offer(dp, &h, origin, data, rndv, 0);
    if (f != RX_WAIT)
        return f == RX_TAKEN && rndv ? UCS_INPROGRESS : UCS_OK;
    *pk = (dp_park_t){.h = h, .origin = origin, .data = data, .rndv = rndv,
                      .deadline_us = deadline, .next = dp->parked};
    dp->parked = pk;               /* progress thread only: no lock needed */
    dp->nparked++;
    return UCS_INPROGRESS;
}

/* Offers every parked frame again (progress thread). Returns how many
 * left the list. */
int dp_parked_retry(dplane_t *dp)
{
    int n = 0;
    for (dp_park_t **pp = &dp->parked; *pp;) {
        dp_park_t *pk = *pp;
        rx_fate_t f = rx_offer(dp, &pk->h, pk->origin, pk->data, pk->rndv, pk->deadline_us);
        if (f == RX_WAIT) {
            pp = &pk->next;
            continue;
        }
        /* Eager bytes are done with either way; a rendezvous descriptor
         * not fetched is declined (its sender completes). */
        if (!pk->rndv || f == RX_DROPPED)
            ucp_am_data_release(dp->worker, pk->data);
        *pp = pk->next;
        free(pk);
        dp->nparked--;
        n++;
    }
    return n;
}
