/* dplane.c - see dplane.h.
 *
 * UCX objects: one context and one worker (UCS_THREAD_MODE_MULTI: senders
 * post from their own threads while the progress thread progresses) and
 * one endpoint per peer address (dp->peers), made from the peer's UCX
 * worker address. The worker address comes from the peer's data_addr: a
 * plain TCP listener that answers every connection with u32 "ATDA" | u32
 * length | the address, then closes. It never reads a byte from its
 * clients, so nothing sent to data_addr is parsed at all. (UCX 1.13's own
 * client-server listener aborts the process on junk at its port: tested,
 * so it is not used.)
 *
 * Origins: a message's sender is known by its reply endpoint (UCX's
 * endpoint to that peer, made by wire-up). Each distinct one gets a slot
 * (mailbox origin = slot + 1) on first use; when all DPLANE_MAX_CONNS are
 * taken, the least recently used is recycled (its unclaimed frames go).
 *
 * Receiving (progress thread, am_recv): header checked, then the gate. An
 * admitted frame is copied out (eager data) or fetched into a fresh tensor
 * (rendezvous); an unclaimed frame without room is parked (UCX keeps its
 * data, a rendezvous sender keeps waiting: back-pressure, as a blocked
 * socket gave before) and asked about again on every pass until the
 * unclaimed TTL, then dropped.
 *
 * Endpoints that fail (peer gone, connection reset) are closed by the
 * progress thread (dp->closing); a sender whose endpoint failed makes a new
 * one once. Locks: dp->mu guards peers, conns, parked and closing; it is
 * never held across a UCX call that can run handlers (progress). */
#include "dplane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include "util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "the data plane's payloads are little-endian floats, sent as they lie in memory"
#endif

#define DPLANE_AM_ID 17u
/* A send still incomplete after this long closes its endpoint (which
 * completes it with an error). */
#define DPLANE_SEND_TIMEOUT_US ((int64_t)60 * 1000000)
#define DPLANE_MAX_CLOSING 4096
/* Address answers: magic "ATDA", and at most this many address bytes. */
#define DPLANE_ADDR_MAGIC 0x41544441u
#define DPLANE_UCX_ADDR_MAX 8192
/* Connections answered per progress pass (a flood cannot starve UCX). */
#define DPLANE_ACCEPTS_PER_PASS 64
/* Fetching a peer's worker address: connect and read within this. A live
 * peer's progress thread answers in microseconds; one that does not within
 * a second is treated as gone (a send fails, and exec_run_send() retries it
 * with backoff up to --peer-timeout-ms), so a frozen peer costs a runner
 * about this long, not more. */
#define DPLANE_FETCH_TIMEOUT_MS 1000

typedef struct dp_peer {           /* the endpoint to one peer address */
    char addr[DPLANE_ADDR_MAX];
    pthread_mutex_t mu;            /* held while the endpoint is made */
    ucp_ep_h ep;                   /* NULL once failed (a new one is made on use) */
    struct dp_peer *next;
} dp_peer_t;

typedef struct dp_origin {         /* a sender, by its reply endpoint */
    ucp_ep_h ep;                   /* NULL: free slot */
    int64_t used_us;
} dp_origin_t;

typedef struct dp_park {           /* a frame waiting for unclaimed room */
    dplane_hdr_t h;
    int origin;
    void *data;                    /* UCX's: eager bytes or a rendezvous descriptor */
    int rndv;
    int64_t deadline_us;
    struct dp_park *next;
} dp_park_t;

typedef struct dp_rx {             /* a rendezvous fetch in flight */
    dplane_t *dp;
    dplane_hdr_t h;
    int origin;
    mbox_admit_t admit;
    tensor_t *t;                   /* owned until handed to the mailbox */
} dp_rx_t;

typedef struct send_wait send_wait_t;
static void send_waits_free_abandoned(dplane_t *dp);

struct dplane {
    mbox_t *mb;                    /* borrowed */
    ucp_context_h ctx;
    ucp_worker_h worker;
    int listen_fd;                 /* data_addr: answers with our worker address */
    ucp_address_t *ucx_addr;       /* ours, ucx_addr_len bytes (UCX's) */
    size_t ucx_addr_len;
    int epfd;
    char addr[DPLANE_ADDR_MAX];
    pthread_t progress_thread;
    atomic_int stopping;
    atomic_int inflight;           /* sends and fetches not complete yet */
    int64_t spin_us;               /* polling after the last event (see dplane.h) */
    pthread_mutex_t mu;
    dp_peer_t *peers;
    dp_origin_t origins[DPLANE_MAX_CONNS];
    int norigins;
    dp_park_t *parked;
    int nparked;
    ucp_ep_h closing[DPLANE_MAX_CLOSING];
    int nclosing;
    send_wait_t *abandoned;        /* sends given up on; see send_abandon() */
    atomic_llong refused, bad_frames, accept_errors;
};

/* ---- frame codec ---- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

void dplane_hdr_encode(const dplane_hdr_t *h, uint8_t buf[DPLANE_HDR_SIZE])
{
    put_u32(buf + 0, DPLANE_MAGIC);
    put_u32(buf + 4, (uint32_t)h->shape.rank);
    put_u64(buf + 8, (uint64_t)h->tag.job);
    put_u32(buf + 16, (uint32_t)h->tag.attempt);
    put_u32(buf + 20, (uint32_t)h->tag.comp);
    put_u32(buf + 24, (uint32_t)h->tag.op);
    put_u32(buf + 28, (uint32_t)h->tag.src);
    put_u32(buf + 32, (uint32_t)h->tag.dst);
    for (int i = 0; i < TENSOR_MAX_RANK; i++)
        put_u64(buf + 36 + 8 * i, (uint64_t)h->shape.dim[i]);
    put_u64(buf + 68, h->nbytes);
    memcpy(buf + 76, h->key.b, MBOX_KEY_SIZE);
}

int dplane_hdr_decode(const uint8_t buf[DPLANE_HDR_SIZE], dplane_hdr_t *h)
{
    memset(h, 0, sizeof *h);
    if (get_u32(buf) != DPLANE_MAGIC)
        return -1;
    uint32_t rank = get_u32(buf + 4);
    if (rank > TENSOR_MAX_RANK)
        return -1;
    h->shape.rank = (int)rank;
    h->tag.job = (int64_t)get_u64(buf + 8);
    h->tag.attempt = (int32_t)get_u32(buf + 16);
    h->tag.comp = (int32_t)get_u32(buf + 20);
    h->tag.op = (int32_t)get_u32(buf + 24);
    h->tag.src = (int32_t)get_u32(buf + 28);
    h->tag.dst = (int32_t)get_u32(buf + 32);
    int64_t numel = 1;
    for (int i = 0; i < TENSOR_MAX_RANK; i++) {
        int64_t d = (int64_t)get_u64(buf + 36 + 8 * i);
        /* Dims beyond rank must be 0, dims within it positive; the running
         * product is checked at each step so it cannot overflow. */
        if ((i < (int)rank && (d < 1 || d > TENSOR_MAX_ELEMS)) || (i >= (int)rank && d != 0))
            return -1;
        h->shape.dim[i] = d;
        if (i < (int)rank) {
            numel *= d;
            if (numel > TENSOR_MAX_ELEMS)
                return -1;
        }
    }
    h->nbytes = get_u64(buf + 68);
    if (h->nbytes != (uint64_t)numel * sizeof(float))
        return -1;
    memcpy(h->key.b, buf + 76, MBOX_KEY_SIZE);
    return 0;
}

/* ---- addresses ---- */

int dplane_parse_addr(const char *addr, char *host, size_t hostlen, int *port)
{
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    if (!colon || colon == addr || (size_t)(colon - addr) >= hostlen)
        return -1;
    char *end = NULL;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end != '\0' || p < 0 || p > 65535)
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    *port = (int)p;
    return 0;
}

/* Resolves host:port to an IPv4 socket address. Returns 0 or -1. */
static int resolve(const char *addr, int passive, struct sockaddr_in *sa)
{
    char host[DPLANE_ADDR_MAX];
    int port;
    if (dplane_parse_addr(addr, host, sizeof host, &port) != 0)
        return -1;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res)
        return -1;
    memcpy(sa, res->ai_addr, sizeof *sa);
    sa->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

/* ---- endpoints ---- */

/* Queues ep for closing by the progress thread. Holds mu. */
static void close_later_locked(dplane_t *dp, ucp_ep_h ep)
{
    if (dp->nclosing < DPLANE_MAX_CLOSING)
        dp->closing[dp->nclosing++] = ep;
    /* else: leaked until ucp_worker_destroy, which frees every endpoint */
}

/* UCX error handler (progress thread): the endpoint is dead. A server
 * endpoint frees its slot and its unclaimed frames; a client endpoint is
 * forgotten, so the next send makes a new one. */
static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    dplane_t *dp = arg;
    pthread_mutex_lock(&dp->mu);
    for (dp_peer_t *p = dp->peers; p; p = p->next)
        if (p->ep == ep)
            p->ep = NULL;
    close_later_locked(dp, ep);
    pthread_mutex_unlock(&dp->mu);
    log_debug("dplane: endpoint closed (%s)", ucs_status_string(status));
}

/* Error mode NONE: UCX 1.13 leaves shared memory out of endpoints that ask
 * for peer-failure handling (seen: TCP only). A dead peer is found by
 * send_wait() instead (its data_addr refuses connections); the handler
 * still catches what UCX reports. */
static ucs_status_t ep_new(dplane_t *dp, ucp_ep_params_t *p, ucp_ep_h *ep)
{
    p->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p->err_handler.cb = ep_failed;
    p->err_handler.arg = dp;
    return ucp_ep_create(dp->worker, p, ep);
}

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

/* Answers waiting connections on data_addr with our worker address, then
 * closes them (progress thread). Returns how many were answered. */
static int addr_answer(dplane_t *dp)
{
    uint8_t hdr[8];
    put_u32(hdr, DPLANE_ADDR_MAGIC);
    put_u32(hdr + 4, (uint32_t)dp->ucx_addr_len);
    int n = 0;
    for (; n < DPLANE_ACCEPTS_PER_PASS; n++) {
        int fd = accept4(dp->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                atomic_fetch_add(&dp->accept_errors, 1);
            break;
        }
        /* A few hundred bytes into a fresh socket's send buffer: one
         * non-blocking write each, never a wait on the client. */
        struct iovec iov[2] = {{hdr, sizeof hdr}, {dp->ucx_addr, dp->ucx_addr_len}};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
        (void)!sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        close(fd);
    }
    return n;
}

/* ---- receiving ---- */

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
    tensor_t *t = tensor_new(&h->shape);
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
static ucs_status_t am_recv(void *arg, const void *header, size_t header_length, void *data,
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
static int parked_retry(dplane_t *dp)
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

/* ---- the progress thread ---- */

/* Closes the endpoints queued for closing (progress thread). */
static void close_pending(dplane_t *dp)
{
    ucp_ep_h eps[64];
    int n = 0;
    pthread_mutex_lock(&dp->mu);
    while (n < 64 && dp->nclosing > 0)
        eps[n++] = dp->closing[--dp->nclosing];
    pthread_mutex_unlock(&dp->mu);
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    for (int i = 0; i < n; i++) {
        void *r = ucp_ep_close_nbx(eps[i], &p);
        if (UCS_PTR_IS_PTR(r)) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS)
                ucp_worker_progress(dp->worker);
            ucp_request_free(r);
        }
    }
}

static void *progress_main(void *arg)
{
    dplane_t *dp = arg;
    int64_t last_event = util_mono_us(), last_expire = last_event, last_accept = last_event;
    while (!atomic_load(&dp->stopping)) {
        unsigned n = ucp_worker_progress(dp->worker);
        int64_t now = util_mono_us();      /* one clock read per pass */
        if (now - last_accept > 1000) {    /* also after every wake-up */
            addr_answer(dp);
            last_accept = now;
        }
        if (dp->nparked)
            n += (unsigned)parked_retry(dp);
        if (dp->nclosing) {        /* racy read; close_pending locks */
            close_pending(dp);
            n++;
        }
        if (now - last_expire > 1000000) {
            mbox_expire(dp->mb);
            last_expire = now;
        }
        /* Spin only right after events, never for operations in flight: on
         * a host with fewer cores than busy threads a spinning progress
         * thread takes the core the peer (or our own runner) needs to
         * answer; UCX wakes us when their replies come. */
        if (n) {
            last_event = now;
            continue;
        }
        if (now - last_event < dp->spin_us)
            continue;
        ucs_status_t st = ucp_worker_arm(dp->worker);
        if (st == UCS_ERR_BUSY)
            continue;
        struct epoll_event ev;
        /* Parked frames are retried every few ms; operations in flight
         * get a 10 ms safety tick (their completions wake us anyway); else
         * a 1 s tick for expiring unclaimed frames. */
        int timeout_ms = dp->nparked ? 2 : atomic_load(&dp->inflight) > 0 ? 10 : 1000;
        if (st == UCS_OK)
            epoll_wait(dp->epfd, &ev, 1, timeout_ms);
        last_event = util_mono_us();
        last_accept = 0;
    }
    return NULL;
}

/* ---- start and stop ---- */

static int ucx_init(dplane_t *dp, dplane_transport_t tr)
{
    ucp_config_t *cfg = NULL;
    if (ucp_config_read(NULL, NULL, &cfg) != UCS_OK)
        return -1;
    /* tcp: UCX's TCP transport for data ("self" only ever serves sends to
     * ourselves, which never reach UCX). */
    /* A mutex, not a spinlock, guards the UCX worker between the progress
     * thread and senders: with more busy threads than cores a spinning
     * sender burns the slice the lock holder needs. */
    if (ucp_config_modify(cfg, "USE_MT_MUTEX", "y") != UCS_OK ||
        (tr == DPLANE_TCP && ucp_config_modify(cfg, "TLS", "tcp") != UCS_OK)) {
        ucp_config_release(cfg);
        return -1;
    }
    ucp_params_t pp = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME |
                                     UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                       .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
                       .name = "atoll-dplane", .mt_workers_shared = 0};
    ucs_status_t st = ucp_init(&pp, cfg, &dp->ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) {
        log_error("dplane: ucp_init: %s", ucs_status_string(st));
        return -1;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_MULTI};
    if ((st = ucp_worker_create(dp->ctx, &wp, &dp->worker)) != UCS_OK) {
        log_error("dplane: ucp_worker_create: %s", ucs_status_string(st));
        return -1;
    }
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                 .id = DPLANE_AM_ID, .cb = am_recv, .arg = dp};
    int efd = -1;
    if (ucp_worker_set_am_recv_handler(dp->worker, &hp) != UCS_OK ||
        ucp_worker_get_efd(dp->worker, &efd) != UCS_OK)
        return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
    if ((dp->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        epoll_ctl(dp->epfd, EPOLL_CTL_ADD, efd, &ev) != 0)
        return -1;
    if ((st = ucp_worker_get_address(dp->worker, &dp->ucx_addr, &dp->ucx_addr_len)) != UCS_OK) {
        log_error("dplane: ucp_worker_get_address: %s", ucs_status_string(st));
        return -1;
    }
    if (dp->ucx_addr_len > DPLANE_UCX_ADDR_MAX) {
        log_error("dplane: UCX worker address of %zu bytes (limit %d)", dp->ucx_addr_len,
                  DPLANE_UCX_ADDR_MAX);
        return -1;
    }
    return 0;
}

/* Binds data_addr, the plain TCP socket that hands out our worker address;
 * it joins the progress thread's epoll set. */
static int listen_on(dplane_t *dp, const char *listen_addr, const char *advertise_host)
{
    struct sockaddr_in sa;
    if (resolve(listen_addr, 1, &sa) != 0) {
        log_error("dplane: bad listen address %s", listen_addr);
        return -1;
    }
    int one = 1;
    dp->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof sa;
    if (dp->listen_fd < 0 ||
        setsockopt(dp->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(dp->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(dp->listen_fd, 512) != 0 ||
        getsockname(dp->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
        log_error("dplane: cannot listen on %s: %s", listen_addr, strerror(errno));
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = dp->listen_fd};
    if (epoll_ctl(dp->epfd, EPOLL_CTL_ADD, dp->listen_fd, &ev) != 0)
        return -1;
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
    snprintf(dp->addr, sizeof dp->addr, "%s:%u",
             advertise_host && *advertise_host ? advertise_host : host,
             (unsigned)ntohs(sa.sin_port));
    return 0;
}

static void dplane_free(dplane_t *dp)
{
    if (dp->listen_fd >= 0)
        close(dp->listen_fd);
    if (dp->ucx_addr)
        ucp_worker_release_address(dp->worker, dp->ucx_addr);
    if (dp->worker)
        ucp_worker_destroy(dp->worker);
    send_waits_free_abandoned(dp);
    if (dp->ctx)
        ucp_cleanup(dp->ctx);
    if (dp->epfd >= 0)
        close(dp->epfd);
    pthread_mutex_destroy(&dp->mu);
    free(dp);
}

dplane_t *dplane_start(const char *listen_addr, const char *advertise_host, mbox_t *mb,
                       dplane_transport_t tr)
{
    dplane_t *dp = calloc(1, sizeof *dp);
    if (!dp)
        return NULL;
    dp->mb = mb;
    dp->epfd = -1;
    dp->listen_fd = -1;
    dp->spin_us = sysconf(_SC_NPROCESSORS_ONLN) >= DPLANE_SPIN_MIN_CPUS ? DPLANE_SPIN_US : 0;
    pthread_mutex_init(&dp->mu, NULL);
    if (ucx_init(dp, tr) != 0 || listen_on(dp, listen_addr, advertise_host) != 0)
        goto fail;
    if (pthread_create(&dp->progress_thread, NULL, progress_main, dp) != 0) {
        log_error("dplane: cannot start the progress thread");
        goto fail;
    }
    return dp;
fail:
    dplane_free(dp);
    return NULL;
}

/* Closes ep and progresses until it is gone (stop only). */
static void close_now(dplane_t *dp, ucp_ep_h ep)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS)
            ucp_worker_progress(dp->worker);
        ucp_request_free(r);
    }
}

void dplane_stop(dplane_t *dp)
{
    if (!dp)
        return;
    /* The owner stops the mailbox too, but may do so only after this. */
    mbox_shutdown(dp->mb);
    atomic_store(&dp->stopping, 1);
    ucp_worker_signal(dp->worker);
    pthread_join(dp->progress_thread, NULL);
    /* From here this thread is the only one in UCX. */
    while (dp->parked) {
        dp_park_t *pk = dp->parked;
        dp->parked = pk->next;
        ucp_am_data_release(dp->worker, pk->data);
        free(pk);
    }
    close_pending(dp);
    while (dp->peers) {
        dp_peer_t *p = dp->peers;
        dp->peers = p->next;
        if (p->ep)
            close_now(dp, p->ep);
        pthread_mutex_destroy(&p->mu);
        free(p);
    }
    close_pending(dp);             /* endpoints that failed while closing others */
    while (atomic_load(&dp->inflight) > 0)
        ucp_worker_progress(dp->worker);
    dplane_free(dp);
}

const char *dplane_addr(const dplane_t *dp)
{
    return dp->addr;
}

void dplane_guard_stats(dplane_t *dp, dplane_guard_stats_t *out)
{
    out->refused = atomic_load(&dp->refused);
    out->bad_frames = atomic_load(&dp->bad_frames);
    pthread_mutex_lock(&dp->mu);
    out->conns = dp->norigins;
    pthread_mutex_unlock(&dp->mu);
    mbox_guard_stats(dp->mb, &out->mb);
}

/* ---- sending ---- */

static void *fetch_peer_address(const char *addr, size_t *len);

/* Reads exactly n bytes from a socket with a receive timeout. 0 or -1. */
static int read_full(int fd, void *buf, size_t n)
{
    uint8_t *p = buf;
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Asks the peer at addr for its UCX worker address (malloc'd, *len
 * bytes; caller frees). NULL when it cannot be reached or its answer is
 * not one (magic, size checked before anything is allocated). */
static void *fetch_peer_address(const char *addr, size_t *len)
{
    struct sockaddr_in sa;
    if (resolve(addr, 0, &sa) != 0)
        return NULL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct timeval tv = {DPLANE_FETCH_TIMEOUT_MS / 1000, (DPLANE_FETCH_TIMEOUT_MS % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    uint8_t hdr[8], *buf = NULL;
    uint32_t n = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || read_full(fd, hdr, 8) != 0 ||
        get_u32(hdr) != DPLANE_ADDR_MAGIC || (n = get_u32(hdr + 4)) == 0 ||
        n > DPLANE_UCX_ADDR_MAX || !(buf = malloc(n)) || read_full(fd, buf, n) != 0) {
        free(buf);
        close(fd);
        return NULL;
    }
    close(fd);
    *len = n;
    return buf;
}

/* The endpoint to addr, made when missing (worker address fetched from
 * addr, outside dp->mu); NULL when addr cannot be reached or UCX refuses.
 * Entries live until dplane_stop(). */
static ucp_ep_h peer_ep(dplane_t *dp, const char *addr)
{
    if (strlen(addr) >= DPLANE_ADDR_MAX)
        return NULL;
    pthread_mutex_lock(&dp->mu);
    dp_peer_t *p = dp->peers;
    while (p && strcmp(p->addr, addr) != 0)
        p = p->next;
    if (!p && (p = calloc(1, sizeof *p)) != NULL) {
        snprintf(p->addr, sizeof p->addr, "%s", addr);
        pthread_mutex_init(&p->mu, NULL);
        p->next = dp->peers;
        dp->peers = p;
    }
    ucp_ep_h ep = p ? p->ep : NULL;
    pthread_mutex_unlock(&dp->mu);
    if (ep || !p)
        return ep;
    pthread_mutex_lock(&p->mu);            /* one maker per peer */
    pthread_mutex_lock(&dp->mu);
    ep = p->ep;
    pthread_mutex_unlock(&dp->mu);
    size_t len = 0;
    void *remote = ep ? NULL : fetch_peer_address(addr, &len);
    if (remote) {
        ucp_ep_params_t prm = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                               .address = remote};
        ucs_status_t st = ep_new(dp, &prm, &ep);
        if (st != UCS_OK) {
            log_warn("dplane: cannot connect to %s: %s", addr, ucs_status_string(st));
            ep = NULL;
        }
        free(remote);
        pthread_mutex_lock(&dp->mu);
        p->ep = ep;
        pthread_mutex_unlock(&dp->mu);
    } else if (!ep) {
        log_warn("dplane: no UCX address from %s", addr);
    }
    pthread_mutex_unlock(&p->mu);
    return ep;
}

/* Forgets a client endpoint that failed a send (closed by the progress
 * thread; the error handler may have done both already). */
static void peer_drop(dplane_t *dp, const char *addr, ucp_ep_h ep)
{
    pthread_mutex_lock(&dp->mu);
    for (dp_peer_t *p = dp->peers; p; p = p->next) {
        if (strcmp(p->addr, addr) == 0 && p->ep == ep) {
            p->ep = NULL;
            close_later_locked(dp, ep);
        }
    }
    pthread_mutex_unlock(&dp->mu);
    ucp_worker_signal(dp->worker);
}

/* One posted send. Owned by the sending thread until it gives up on the
 * send (abandoned): then by the completion callback, or, if UCX never
 * completes it (a rendezvous to a peer that died stays pending in error
 * mode NONE), by dplane_free(), which frees what is left on dp->abandoned
 * after ucp_worker_destroy. Lock order: w->mu, then dp->mu. */
struct send_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done, abandoned;
    ucs_status_t status;
    dplane_t *dp;
    struct send_wait *next;        /* on dp->abandoned */
};

static send_wait_t *send_wait_new(dplane_t *dp)
{
    send_wait_t *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->dp = dp;
    return w;
}

static void send_wait_free(send_wait_t *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* After ucp_worker_destroy: the sends UCX never completed (their requests
 * went with the worker). */
static void send_waits_free_abandoned(dplane_t *dp)
{
    while (dp->abandoned) {
        send_wait_t *w = dp->abandoned;
        dp->abandoned = w->next;
        send_wait_free(w);
    }
}

/* Unlinks w from dp->abandoned. Holds dp->mu. */
static void abandoned_unlink_locked(dplane_t *dp, send_wait_t *w)
{
    for (send_wait_t **pp = &dp->abandoned; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            return;
        }
}

static void send_done(void *req, ucs_status_t status, void *user)
{
    send_wait_t *w = user;
    pthread_mutex_lock(&w->mu);
    w->status = status;
    w->done = 1;
    if (!w->abandoned) {
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return;
    }
    pthread_mutex_unlock(&w->mu);
    pthread_mutex_lock(&w->dp->mu);
    abandoned_unlink_locked(w->dp, w);
    pthread_mutex_unlock(&w->dp->mu);
    ucp_request_free(req);
    send_wait_free(w);
}

/* Whether something accepts connections at addr (a live worker's
 * data_addr does, a dead one's refuses at once). */
static int peer_alive(const char *addr)
{
    size_t len;
    void *a = fetch_peer_address(addr, &len);
    free(a);
    return a != NULL;
}

/* Gives up on w after its endpoint was closed: 1 if w is now the
 * callback's (the caller must not touch w or its request again), 0 if it
 * completed meanwhile. The payload may still be referenced by UCX only
 * towards a peer that is dead (its data_addr refused) or that held the
 * frame past DPLANE_SEND_TIMEOUT_US: a late read there lands in an attempt
 * whose sender has failed, so the attempt fails and its values are
 * discarded (attempt-exact results). */
static int send_abandon(dplane_t *dp, send_wait_t *w)
{
    pthread_mutex_lock(&w->mu);
    int done = w->done;
    if (!done) {
        w->abandoned = 1;
        pthread_mutex_lock(&dp->mu);
        w->next = dp->abandoned;
        dp->abandoned = w;
        pthread_mutex_unlock(&dp->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return !done;
}

/* Waits for a posted send. Every second of waiting the peer's data_addr
 * is probed: a dead peer, or the timeout, closes the endpoint and gives up
 * on the send (UCS_ERR_CANCELED, *abandoned = 1). Else its status. */
static ucs_status_t send_wait(dplane_t *dp, send_wait_t *w, const char *addr, ucp_ep_h ep,
                              int *abandoned)
{
    int64_t deadline = util_mono_us() + DPLANE_SEND_TIMEOUT_US;
    int64_t probe_at = util_mono_us() + 1000000;
    pthread_mutex_lock(&w->mu);
    while (!w->done) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        int64_t now = util_mono_us();
        if (w->done || (now <= deadline && now <= probe_at))
            continue;
        pthread_mutex_unlock(&w->mu);
        if (now > deadline || !peer_alive(addr)) {
            log_warn("dplane: a send to %s did not complete (%s); closing", addr,
                     now > deadline ? "timeout" : "peer gone");
            peer_drop(dp, addr, ep);
            if (send_abandon(dp, w)) {
                *abandoned = 1;
                return UCS_ERR_CANCELED;
            }
        }
        probe_at = util_mono_us() + 1000000;
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return w->status;
}

/* One send on the endpoint to addr. 0, or -1 (the endpoint is dropped). */
static int send_once(dplane_t *dp, const char *addr, const uint8_t *hdr, const tensor_t *t)
{
    ucp_ep_h ep = peer_ep(dp, addr);
    if (!ep)
        return -1;
    send_wait_t *w = send_wait_new(dp);
    if (!w)
        return -1;
    /* REPLY: the receiver learns which connection (mailbox origin) a frame
     * came through from its reply endpoint. */
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY, .cb.send = send_done,
                             .user_data = w};
    size_t nbytes = (size_t)shape_numel(&t->shape) * sizeof(float);
    void *r = ucp_am_send_nbx(ep, DPLANE_AM_ID, hdr, DPLANE_HDR_SIZE, t->data, nbytes, &p);
    ucs_status_t st = UCS_OK;
    int abandoned = 0;
    if (UCS_PTR_IS_ERR(r)) {
        st = UCS_PTR_STATUS(r);
    } else if (r) {
        atomic_fetch_add(&dp->inflight, 1);
        ucp_worker_signal(dp->worker);     /* the progress thread may sleep */
        st = send_wait(dp, w, addr, ep, &abandoned);
        atomic_fetch_sub(&dp->inflight, 1);
        if (!abandoned)
            ucp_request_free(r);
    }
    if (!abandoned)
        send_wait_free(w);
    if (st == UCS_OK)
        return 0;
    log_debug("dplane: send to %s failed: %s", addr, ucs_status_string(st));
    if (!abandoned)        /* an abandoned send's endpoint is closed already */
        peer_drop(dp, addr, ep);
    return -1;
}

int dplane_send(dplane_t *dp, const char *addr, const mbox_tag_t *tag, const mbox_key_t *key,
                const tensor_t *t)
{
    if (strcmp(addr, dp->addr) == 0) {
        tensor_t *copy = tensor_clone(t);
        if (!copy)
            return -1;
        mbox_put(dp->mb, tag, copy);
        return 0;
    }
    dplane_hdr_t h = {.tag = *tag, .shape = t->shape, .key = *key,
                      .nbytes = (uint64_t)shape_numel(&t->shape) * sizeof(float)};
    uint8_t hdr[DPLANE_HDR_SIZE];
    dplane_hdr_encode(&h, hdr);
    for (int i = 0; i < 2; i++)
        if (send_once(dp, addr, hdr, t) == 0)
            return 0;
    return -1;
}

/* ---- diagnostics ---- */

/* Appends the transport name of one "lane[i]: N:name/dev ..." line of
 * ucp_ep_print_info to out, once. */
static void lane_transport(const char *line, char *out, size_t outlen)
{
    const char *p = strstr(line, "lane[");
    p = p ? strchr(p, ':') : NULL;
    if (!p || !(p = strchr(p + 1, ':')))
        return;                    /* a cm lane has no "N:" */
    char name[32];
    size_t n = 0;
    for (p++; *p && *p != '/' && *p != ' ' && n + 1 < sizeof name; p++)
        name[n++] = *p;
    name[n] = '\0';
    if (n == 0 || strstr(out, name))
        return;
    size_t len = strlen(out);
    snprintf(out + len, outlen - len, "%s%s", len ? "," : "", name);
}

int dplane_transports(dplane_t *dp, const char *addr, char *out, size_t outlen)
{
    out[0] = '\0';
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return -1;
    int found = 0;
    pthread_mutex_lock(&dp->mu);
    for (dp_peer_t *p = dp->peers; p; p = p->next) {
        if (strcmp(p->addr, addr) == 0 && p->ep) {
            ucp_ep_print_info(p->ep, f);
            found = 1;
        }
    }
    pthread_mutex_unlock(&dp->mu);
    fclose(f);
    for (char *line = buf, *nl; found && line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        lane_transport(line, out, outlen);
    }
    free(buf);
    return found ? 0 : -1;
}
