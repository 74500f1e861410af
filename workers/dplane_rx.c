/* dplane_rx.c - the data plane's receive path (dplane_int.h): frames from
 * peers into the mailbox. Everything here runs under dp->prog_mu: in the
 * progress thread, or in a taker that progresses while it waits.
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
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dplane_int.h"
#include "util.h"

typedef struct dp_rx {             /* a rendezvous fetch or a pool read in flight */
    dplane_t *dp;
    dplane_hdr_t h;
    int origin;
    mbox_admit_t admit;
    tensor_t *t;                   /* owned until handed to the mailbox */
    ucp_ep_h ack_ep;               /* a pool read: whom to answer, with cookie */
    uint64_t cookie;
} dp_rx_t;

/* Answers a pool send (DPLANE_AM_ACK_ID on its reply endpoint). The
 * header must outlive the send: it is freed on completion. */
static void ack_sent(void *req, ucs_status_t status, void *user)
{
    (void)status;
    free(user);
    ucp_request_free(req);
}

static void ack_send(ucp_ep_h ep, uint64_t cookie, uint32_t status)
{
    uint8_t *hdr = malloc(DPLANE_ACK_SIZE);
    if (!hdr)
        return;                    /* the sender times out and fails the attempt */
    dp_put_u32(hdr, (uint32_t)(cookie >> 32));
    dp_put_u32(hdr + 4, (uint32_t)cookie);
    dp_put_u32(hdr + 8, status);
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = ack_sent, .user_data = hdr};
    void *r = ucp_am_send_nbx(ep, DPLANE_AM_ACK_ID, hdr, DPLANE_ACK_SIZE, NULL, 0, &p);
    if (!UCS_PTR_IS_PTR(r))
        free(hdr);                 /* done at once, or failed: no callback */
}

/* The origin (slot + 1) of the sender whose reply endpoint is ep: its
 * slot, the next unused one, or, once all DPLANE_MAX_CONNS are in use, the
 * least recently used one recycled (progress thread only, the one writer
 * of origins). Slots are taken in order and never emptied, only recycled,
 * so the used ones are origins[0..norigins): a lookup scans those alone
 * (a message's receive scanned all 512 slots, 12 % of a relay root's
 * instructions a computation on a 4-process chain). */
static int origin_of(dplane_t *dp, ucp_ep_h ep)
{
    int64_t now = util_mono_us();
    int lru = 0, slot;
    pthread_mutex_lock(&dp->mu);
    for (int i = 0; i < dp->norigins; i++) {
        if (dp->origins[i].ep == ep) {
            dp->origins[i].used_us = now;
            pthread_mutex_unlock(&dp->mu);
            return i + 1;
        }
        if (dp->origins[i].used_us < dp->origins[lru].used_us)
            lru = i;
    }
    int recycled = dp->norigins == DPLANE_MAX_CONNS;
    slot = recycled ? lru : dp->norigins++;
    dp->origins[slot] = (dp_origin_t){.ep = ep, .used_us = now};
    pthread_mutex_unlock(&dp->mu);
    if (recycled) {
        atomic_fetch_add(&dp->refused, 1);
        mbox_drop_origin(dp->mb, slot + 1);
        dp_rkeys_drop(dp, slot + 1);
    }
    return slot + 1;
}

static void rx_done(void *req, ucs_status_t status, size_t length, void *user)
{
    dp_rx_t *rx = user;
    int ok = status == UCS_OK && length == rx->h.nbytes;
    if (ok) {
        mbox_put_from(rx->dp->mb, &rx->h.tag, &rx->h.key, rx->t, rx->origin, rx->admit);
    } else {
        if (rx->admit == MBOX_ADMIT_UNCLAIMED)
            mbox_unreserve(rx->dp->mb, rx->origin, (int64_t)rx->h.nbytes);
        tensor_free(rx->t);
    }
    if (rx->ack_ep)
        ack_send(rx->ack_ep, rx->cookie, ok ? DPLANE_ACK_OK : DPLANE_ACK_FAILED);
    atomic_fetch_sub(&rx->dp->inflight, 1);
    free(rx);
    if (req)
        ucp_request_free(req);
}

/* ---- the receiver's cache of senders' block keys (under prog_mu) ---- */

void dp_rkeys_drop(dplane_t *dp, int origin)
{
    for (int i = 0; i < DPLANE_RKEY_CACHE; i++) {
        dp_rkey_t *k = &dp->rkeys[i];
        if (k->origin && (origin == 0 || k->origin == origin)) {
            ucp_rkey_destroy(k->rkey);
            k->origin = 0;
        }
    }
}

/* The mapping of this process that holds p, as [*lo, *hi): its line of
 * /proc/self/maps, one VMA (a block is one file mapping, which the kernel
 * never merges with its neighbours). 0, or -1 when none holds p. */
static int mapping_of(const void *p, const char **lo, const char **hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    uintptr_t a = (uintptr_t)p, s, e;
    char line[512];
    int rc = -1;
    while (f && rc != 0 && fgets(line, sizeof line, f)) {
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR, &s, &e) == 2 && s <= a && a < e) {
            *lo = (const char *)s;
            *hi = (const char *)e;
            rc = 0;
        }
        /* A line longer than the buffer: skip its rest. */
        while (f && !strchr(line, '\n') && fgets(line, sizeof line, f))
            ;
    }
    if (f)
        fclose(f);
    return rc;
}

/* The unpacked key of rma's block: cached per (origin, block), since a
 * key unpacked afresh maps the block afresh and its first read pays every
 * page fault again. Its mapping here is noted once, so that a read a
 * sender claims past its block (a lie about the address or the size) is
 * refused rather than faulting. NULL when it cannot be used here. */
static const dp_rkey_t *rkey_of(dplane_t *dp, int origin, const dp_rma_t *rma)
{
    for (int i = 0; i < DPLANE_RKEY_CACHE; i++)
        if (dp->rkeys[i].origin == origin && dp->rkeys[i].block == rma->ref.block)
            return &dp->rkeys[i];
    ucp_rkey_h rk;
    void *p = NULL;
    const char *lo, *hi;
    if (ucp_ep_rkey_unpack(rma->ep, rma->ref.rkey, &rk) != UCS_OK)
        return NULL;
    if (ucp_rkey_ptr(rk, rma->ref.raddr, &p) != UCS_OK || !p || mapping_of(p, &lo, &hi) != 0) {
        ucp_rkey_destroy(rk);
        return NULL;
    }
    dp_rkey_t *k = &dp->rkeys[dp->rkey_next];
    dp->rkey_next = (dp->rkey_next + 1) % DPLANE_RKEY_CACHE;
    if (k->origin)
        ucp_rkey_destroy(k->rkey);
    *k = (dp_rkey_t){.origin = origin, .block = rma->ref.block, .rkey = rk, .lo = lo, .hi = hi};
    return k;
}

/* Reads an admitted pool send into t and answers the sender. Only a block
 * this process can map (a sender that sees the same shared memory and
 * processes: same host id, and ucp_rkey_ptr gives an address) is read,
 * with one memcpy, and only inside its mapping; otherwise the sender is
 * told to send plainly. (UCX's RMA get on a reply endpoint still wiring
 * up over TCP trips an assertion in UCX 1.13, so it is never used.) The
 * endpoint must still be the origin's. */
static void rma_read(dplane_t *dp, dp_rx_t *rx, const dp_rma_t *rma)
{
    const dp_rkey_t *k = NULL;
    void *src = NULL;
    size_t n = (size_t)rx->h.nbytes;
    pthread_mutex_lock(&dp->mu);
    int same = dp->origins[rx->origin - 1].ep == rma->ep;
    pthread_mutex_unlock(&dp->mu);
    if (!same || rma->ref.host != dp->host_id || !(k = rkey_of(dp, rx->origin, rma)) ||
        ucp_rkey_ptr(k->rkey, rma->ref.raddr, &src) != UCS_OK || (const char *)src < k->lo ||
        (const char *)src > k->hi || n > (size_t)(k->hi - (const char *)src)) {
        if (rx->admit == MBOX_ADMIT_UNCLAIMED)
            mbox_unreserve(dp->mb, rx->origin, (int64_t)rx->h.nbytes);
        tensor_free(rx->t);
        if (same)                  /* else nobody is there to hear it */
            ack_send(rma->ep, rma->ref.cookie, DPLANE_ACK_NO_RMA);
        free(rx);
        return;
    }
    memcpy(rx->t->data, src, n);
    atomic_fetch_add(&dp->pool_reads, 1);
    atomic_fetch_add(&dp->inflight, 1);    /* rx_done counts it off */
    rx_done(NULL, UCS_OK, n, rx);
}

typedef enum rx_fate {
    RX_WAIT,                       /* no room yet: data untouched, ask again */
    RX_TAKEN,                      /* eager bytes copied, or a fetch started */
    RX_DROPPED,                    /* refused or no memory: data unused */
} rx_fate_t;

/* A frame's ready time (unix us, 0: now) on this host's monotonic clock,
 * at most DPLANE_READY_AHEAD_US from now: a value a peer says exists only
 * later (its device time runs at most its sim_ahead_us ahead; clocks of
 * two hosts differ a little) delays its consumer, never past that bound. */
static int64_t rx_ready_mono(int64_t ready_unix_us)
{
    if (ready_unix_us <= 0)
        return 0;
    int64_t now = util_mono_us(), at = util_wall_to_mono_us(ready_unix_us);
    return at > now + DPLANE_READY_AHEAD_US ? now + DPLANE_READY_AHEAD_US : at;
}

/* Takes an admitted frame's payload into a new tensor for the mailbox:
 * copied from eager data, fetched by rendezvous (completed in rx_done),
 * or read from the sender's pool block (rma_read, at once).
 * The reservation of an UNCLAIMED admit is consumed or given back. */
static rx_fate_t rx_take(dplane_t *dp, const dplane_hdr_t *h, int origin, mbox_admit_t a,
                         void *data, int rndv, const dp_rma_t *rma)
{
    tensor_t *t = tensor_new_uninit(&h->shape);
    if (t)
        t->ready_us = rx_ready_mono(h->ready_unix_us);
    int fetch = rndv || rma;
    dp_rx_t *rx = fetch && t ? malloc(sizeof *rx) : NULL;
    if (!t || (fetch && !rx)) {
        log_error("dplane: out of memory for a %llu-byte frame", (unsigned long long)h->nbytes);
        if (a == MBOX_ADMIT_UNCLAIMED)
            mbox_unreserve(dp->mb, origin, (int64_t)h->nbytes);
        tensor_free(t);
        return RX_DROPPED;
    }
    if (rma) {
        *rx = (dp_rx_t){.dp = dp, .h = *h, .origin = origin, .admit = a, .t = t,
                        .ack_ep = rma->ep, .cookie = rma->ref.cookie};
        rma_read(dp, rx, rma);
        return RX_TAKEN;
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
                          const dp_rma_t *rma, int64_t deadline_us)
{
    mbox_admit_t a = mbox_admit(dp->mb, &h->tag, &h->key, origin, (int64_t)h->nbytes,
                                deadline_us);
    if (a == MBOX_ADMIT_WAIT)
        return RX_WAIT;
    if (a == MBOX_ADMIT_DROP) {
        /* Declined like a rendezvous: the sender completes (a stale frame
         * never fails a peer). */
        if (rma)
            ack_send(rma->ep, rma->ref.cookie, DPLANE_ACK_OK);
        return RX_DROPPED;
    }
    return rx_take(dp, h, origin, a, data, rndv, rma);
}

/* UCX active-message handler (under prog_mu). Returns UCS_INPROGRESS
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
    rx_fate_t f = rx_offer(dp, &h, origin, data, rndv, NULL, can_keep ? deadline : 0);
    if (f == RX_WAIT && dp->nparked >= DPLANE_MAX_PARKED)
        f = rx_offer(dp, &h, origin, data, rndv, NULL, 0);     /* refused now (counted) */
    dp_park_t *pk = f == RX_WAIT ? malloc(sizeof *pk) : NULL;
    if (f == RX_WAIT && !pk)
        f = rx_offer(dp, &h, origin, data, rndv, NULL, 0);
    if (f != RX_WAIT)
        return f == RX_TAKEN && rndv ? UCS_INPROGRESS : UCS_OK;
    *pk = (dp_park_t){.h = h, .origin = origin, .data = data, .rndv = rndv,
                      .deadline_us = deadline, .next = dp->parked};
    dp->parked = pk;               /* under prog_mu: no other lock needed */
    dp->nparked++;
    return UCS_INPROGRESS;
}

ucs_status_t dp_am_rma(void *arg, const void *header, size_t header_length, void *data,
                       size_t length, const ucp_am_recv_param_t *param)
{
    (void)data;
    dplane_t *dp = arg;
    dplane_hdr_t h;
    dp_rma_t rma;
    int has_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0;
    if (!has_ep || length != 0 || dplane_rma_decode(header, header_length, &h, &rma.ref) != 0) {
        atomic_fetch_add(&dp->bad_frames, 1);
        return UCS_OK;
    }
    rma.ep = param->reply_ep;
    int origin = origin_of(dp, rma.ep);
    int64_t deadline = util_mono_us() + (int64_t)MBOX_UNCLAIMED_TTL_MS * 1000;
    rx_fate_t f = rx_offer(dp, &h, origin, NULL, 0, &rma,
                           dp->nparked < DPLANE_MAX_PARKED ? deadline : 0);
    dp_park_t *pk = f == RX_WAIT ? malloc(sizeof *pk) : NULL;
    dp_rma_t *kept = pk ? malloc(sizeof *kept) : NULL;
    if (f == RX_WAIT && (!pk || !kept)) {
        free(pk);
        free(kept);
        rx_offer(dp, &h, origin, NULL, 0, &rma, 0);
        return UCS_OK;
    }
    if (f != RX_WAIT)
        return UCS_OK;
    *kept = rma;
    *pk = (dp_park_t){.h = h, .origin = origin, .rma = kept, .deadline_us = deadline,
                      .next = dp->parked};
    dp->parked = pk;
    dp->nparked++;
    return UCS_OK;                 /* nothing of UCX's is kept: the header was copied */
}

/* Offers every parked frame again (progress thread, under prog_mu). Returns how many
 * left the list. */
int dp_parked_retry(dplane_t *dp)
{
    int n = 0;
    for (dp_park_t **pp = &dp->parked; *pp;) {
        dp_park_t *pk = *pp;
        rx_fate_t f = rx_offer(dp, &pk->h, pk->origin, pk->data, pk->rndv, pk->rma,
                               pk->deadline_us);
        if (f == RX_WAIT) {
            pp = &pk->next;
            continue;
        }
        /* Eager bytes are done with either way; a rendezvous descriptor
         * not fetched is declined (its sender completes). */
        if (!pk->rma && (!pk->rndv || f == RX_DROPPED))
            ucp_am_data_release(dp->worker, pk->data);
        *pp = pk->next;
        free(pk->rma);
        free(pk);
        dp->nparked--;
        n++;
    }
    return n;
}
