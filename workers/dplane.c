/* dplane.c - the data plane's addresses, endpoints to peers, and sends
 * (dplane.h; what the dplane files share: dplane_int.h).
 *
 * Addresses: a peer's UCX worker address comes from the owner's resolver
 * (atoll-worker: the controller's directory) or, without one, from the
 * peer's data_addr: a plain TCP listener that answers every connection
 * with u32 "ATDA" | u32 length | the address, then closes. It never reads
 * a byte from its clients, so nothing sent to data_addr is parsed at all.
 * (UCX 1.13's own client-server listener aborts the process on junk at its
 * port: tested, so it is not used.) The progress thread answers
 * (dp_addr_answer); a sender resolves a peer's address once, outside every
 * lock, and makes its endpoint (peer_ep), asking the port again later to
 * find a peer that restarted (below, "Peers that restart"). Why a
 * directory: the 511 peers of a 512-process collective's root all asked
 * the root's port at once while its progress thread was busy wiring them
 * up (2 cores), and every fetch timed out (bench_scale 512).
 *
 * Endpoints that fail (peer gone, connection reset, a port that serves
 * another process's address) are closed by the progress thread
 * (dp->closing); a sender whose endpoint failed makes a new one once.
 * Peer entries live until dplane_stop(); an endpoint is made or checked by
 * one sender at a time (the peer's mu).
 *
 * Sends (runner threads): dplane_send() blocks until UCX no longer needs
 * the payload, asking a silent peer's data_addr every second; a send to a
 * dead or restarted peer, or one past DPLANE_SEND_TIMEOUT_US, closes its
 * endpoint and is given up on (its send_wait then belongs to the
 * completion callback or to dplane_free(); see struct send_wait). */
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

#include "dplane_int.h"
#include "util.h"

/* dplane_send(): a send still incomplete after this long closes its
 * endpoint (which completes it with an error). */
#define DPLANE_SEND_TIMEOUT_US ((int64_t)60 * 1000000)
/* Address answers: magic "ATDA" (then the length, at most
 * DPLANE_UCX_ADDR_MAX). */
#define DPLANE_ADDR_MAGIC 0x41544441u
/* Fetching a peer's worker address from its port (no resolver): connect
 * and read within this. A live peer's progress thread answers in
 * microseconds; one that does not within a second is treated as gone (a
 * send fails, and exec_io_send() retries it with backoff up to
 * --peer-timeout-ms). Also the liveness probe's connect timeout. */
#define DPLANE_FETCH_TIMEOUT_MS 1000

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

/* ---- the address port ---- */

/* Binds data_addr, the plain TCP socket that hands out our worker address;
 * it joins both of the progress thread's epoll sets. */
int dp_listen_on(dplane_t *dp, const char *listen_addr, const char *advertise_host)
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
    if (epoll_ctl(dp->epfd, EPOLL_CTL_ADD, dp->listen_fd, &ev) != 0 ||
        epoll_ctl(dp->epfd_unarmed, EPOLL_CTL_ADD, dp->listen_fd, &ev) != 0)
        return -1;
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
    snprintf(dp->addr, sizeof dp->addr, "%s:%u",
             advertise_host && *advertise_host ? advertise_host : host,
             (unsigned)ntohs(sa.sin_port));
    return 0;
}

/* Answers waiting connections on data_addr with our worker address, then
 * closes them (progress thread). Returns how many were answered. */
int dp_addr_answer(dplane_t *dp)
{
    uint8_t hdr[8];
    dp_put_u32(hdr, DPLANE_ADDR_MAGIC);
    dp_put_u32(hdr + 4, (uint32_t)dp->ucx_addr_len);
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

/* ---- endpoints ---- */

/* Queues ep for closing by the progress thread. Holds mu. */
static void close_later_locked(dplane_t *dp, ucp_ep_h ep)
{
    /* Once: a sender that found its peer restarted (peer_served) and UCX
     * failing the same endpoint (ep_failed) both queue it, and closing it
     * twice would touch a freed endpoint. */
    for (int i = 0; i < dp->nclosing; i++)
        if (dp->closing[i] == ep)
            return;
    if (dp->nclosing < DPLANE_MAX_CLOSING)
        dp->closing[dp->nclosing++] = ep;
    /* else: leaked until ucp_worker_destroy, which frees every endpoint */
}

/* UCX error handler (under prog_mu): the endpoint is dead. A server
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

/* ---- sending ---- */

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

/* Asks the port at addr for the UCX worker address it serves (malloc'd,
 * *len bytes; caller frees), within timeout_ms for the connect and as much
 * again for the answer. NULL when there is none: then *gone says whether
 * nobody listens there (refused, unreachable: a dead peer) rather than
 * that the answer did not come in time or was not one (magic, size checked
 * before anything is allocated). */
static void *port_fetch(const char *addr, int timeout_ms, size_t *len, int *gone)
{
    struct sockaddr_in sa;
    *gone = 0;
    if (resolve(addr, 0, &sa) != 0)
        return NULL;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;               /* our own trouble says nothing of the peer */
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);   /* bounds connect() */
    uint8_t hdr[8], *buf = NULL;
    uint32_t n = 0;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        *gone = errno == ECONNREFUSED || errno == EHOSTUNREACH || errno == ENETUNREACH;
        close(fd);
        return NULL;
    }
    if (read_full(fd, hdr, 8) != 0 || dp_get_u32(hdr) != DPLANE_ADDR_MAGIC ||
        (n = dp_get_u32(hdr + 4)) == 0 || n > DPLANE_UCX_ADDR_MAX || !(buf = malloc(n)) ||
        read_full(fd, buf, n) != 0) {
        free(buf);
        close(fd);
        return NULL;
    }
    close(fd);
    *len = n;
    return buf;
}

/* The resolver when the owner set none: the peer's own port. */
static void *fetch_peer_address(const char *addr, size_t *len)
{
    int gone;
    return port_fetch(addr, DPLANE_FETCH_TIMEOUT_MS, len, &gone);
}

/* ---- peers that restart ----
 *
 * A worker restarted on the same data_addr (compose.yaml's fixed
 * ATOLL_DATA_LISTEN with restart) is a new process with a new UCX address.
 * An endpoint made from the old one reaches nobody, and not always
 * visibly: over shared memory an eager send into the dead process's FIFO
 * completes, and the message is lost. So each peer entry remembers the
 * address its endpoint was made from and when that was last known to be
 * the one at the peer's port (checked_us). A send after dp->recheck_us
 * more asks the port first (peer_ep), and so does a send the peer has not
 * taken for a second (send_wait): a different address drops the endpoint
 * and the next one is made from what the port served (the directory may
 * still name the old process until its lease runs out); a refused
 * connection drops it too (the peer is dead); no answer in time keeps it
 * (a live but busy process: a restarted one is idle and answers at
 * once). Why a recheck_us below the time a peer takes to be replaced is
 * enough: an address confirmed at time c was the live process's at c, so
 * it died after c, and its successor gets tasks only once its lease ran
 * out. */

/* What a peer's port said of an endpoint to it: the same process (or no
 * answer in time: a busy one), another process's address, nobody there;
 * or the endpoint was dropped meanwhile (failed, or another sender found
 * the peer changed): it is not the peer's endpoint any more either way. */
enum { PEER_SAME, PEER_CHANGED, PEER_GONE, PEER_DROPPED };

/* Records what the port of the peer entry at addr answered about ep (the
 * endpoint the caller used): served (owned, taken; NULL when no answer) or
 * gone. A changed address or a dead peer drops ep (closed by the progress
 * thread); otherwise ep counts as confirmed now. */
static int peer_served(dplane_t *dp, const char *addr, ucp_ep_h ep, void *served, size_t len,
                       int gone)
{
    int rc = PEER_SAME;
    pthread_mutex_lock(&dp->mu);
    dp_peer_t *p = dp->peers;
    while (p && strcmp(p->addr, addr) != 0)
        p = p->next;
    if (!p || p->ep != ep) {
        rc = PEER_DROPPED;
    } else if (gone || (served && (len != p->ucx_len || memcmp(served, p->ucx, len) != 0))) {
        p->ep = NULL;
        close_later_locked(dp, ep);
        rc = gone ? PEER_GONE : PEER_CHANGED;
        if (served) {
            free(p->ucx);
            p->ucx = served;
            p->ucx_len = len;
            p->served = 1;
            p->no_rma = 0;             /* a new process: what it reads is learned again */
            served = NULL;
        }
    } else if (served) {
        p->checked_us = util_mono_us();     /* the same process: confirmed now */
    } else {
        /* No answer (a busy process, or ours failed): nothing confirmed.
         * Asked again in DPLANE_PROBE_RETRY_US, not after a whole
         * recheck_us: a port that accepts before its new process answers
         * must not get a stale endpoint trusted for half a lease. */
        p->checked_us = util_mono_us() - atomic_load(&dp->recheck_us) + DPLANE_PROBE_RETRY_US;
    }
    pthread_mutex_unlock(&dp->mu);
    free(served);
    if (rc == PEER_CHANGED || rc == PEER_GONE) {
        dp_wake(dp);                   /* the progress thread closes ep */
        if (rc == PEER_CHANGED)
            log_info("dplane: the peer at %s restarted (its port serves a new UCX address): "
                     "reconnecting", addr);
    }
    return rc;
}

/* Asks the port at addr about ep (peer_served). */
static int peer_probe(dplane_t *dp, const char *addr, ucp_ep_h ep)
{
    size_t len = 0;
    int gone = 0;
    void *served = port_fetch(addr, DPLANE_PROBE_TIMEOUT_MS, &len, &gone);
    return peer_served(dp, addr, ep, served, len, gone);
}

void dplane_set_recheck(dplane_t *dp, int64_t us)
{
    atomic_store(&dp->recheck_us, us > 0 ? us : 1);
}

/* The UCX address to make p's next endpoint from (malloc'd, *len bytes,
 * the caller owns it), p->mu held, outside dp->mu: what p's port served in
 * place of its last endpoint's, else the resolver's answer (the
 * directory), else the port's. A resolver that answers the very address
 * whose endpoint was dropped may be naming a process that died (its lease
 * not yet run out): the port is asked then too, and what it serves wins
 * (a refusal: none). NULL when none. */
static void *peer_address(dplane_t *dp, dp_peer_t *p, size_t *len)
{
    void *remote = NULL, *old = NULL;
    size_t old_len = 0;
    pthread_mutex_lock(&dp->mu);
    if (p->served) {
        remote = p->ucx;
        *len = p->ucx_len;
        p->ucx = NULL;
        p->served = 0;
    } else if (p->ucx && (old = malloc(p->ucx_len)) != NULL) {
        memcpy(old, p->ucx, p->ucx_len);
        old_len = p->ucx_len;
    }
    pthread_mutex_unlock(&dp->mu);
    if (remote)
        return remote;
    remote = dp->resolve ? dp->resolve(dp->resolve_ctx, p->addr, len)
                         : fetch_peer_address(p->addr, len);
    if (remote && dp->resolve && old && *len == old_len && memcmp(remote, old, old_len) == 0) {
        size_t n = 0;
        int gone = 0;
        void *served = port_fetch(p->addr, DPLANE_PROBE_TIMEOUT_MS, &n, &gone);
        if (served || gone) {          /* gone: nobody is there, whatever the directory says */
            free(remote);
            remote = served;
            *len = n;
        }
    }
    free(old);
    return remote;
}

/* The endpoint to addr: made when missing (address from peer_address,
 * outside dp->mu), and checked with the peer's port first when its
 * address was last confirmed more than dp->recheck_us ago ("Peers that
 * restart"). NULL when addr cannot be reached (its port refuses, or no
 * address) or UCX refuses. Entries live until dplane_stop(). */
static ucp_ep_h peer_ep(dplane_t *dp, const char *addr)
{
    if (strlen(addr) >= DPLANE_ADDR_MAX)
        return NULL;
    int64_t every = atomic_load(&dp->recheck_us);
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
    int due = ep && util_mono_us() - p->checked_us >= every;
    pthread_mutex_unlock(&dp->mu);
    if ((ep && !due) || !p)
        return ep;
    pthread_mutex_lock(&p->mu);            /* one maker (or checker) per peer */
    pthread_mutex_lock(&dp->mu);
    ep = p->ep;
    due = ep && util_mono_us() - p->checked_us >= every;
    pthread_mutex_unlock(&dp->mu);
    if (due && peer_probe(dp, addr, ep) != PEER_SAME) {
        pthread_mutex_lock(&dp->mu);
        ep = p->ep;                        /* NULL: dropped (only makers, under p->mu, set it) */
        int served = p->served;
        pthread_mutex_unlock(&dp->mu);
        if (!served) {                     /* gone or failed: the send fails, and is retried */
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
    }
    if (ep) {
        pthread_mutex_unlock(&p->mu);
        return ep;
    }
    size_t len = 0;
    void *remote = peer_address(dp, p, &len);
    if (remote && (len == 0 || len > DPLANE_UCX_ADDR_MAX)) {
        free(remote);
        remote = NULL;
    }
    if (remote) {
        ucp_ep_params_t prm = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                               .address = remote};
        ucs_status_t st = ep_new(dp, &prm, &ep);
        if (st != UCS_OK) {
            log_warn("dplane: cannot connect to %s: %s", addr, ucs_status_string(st));
            ep = NULL;
        }
        pthread_mutex_lock(&dp->mu);
        p->ep = ep;
        free(p->ucx);
        p->ucx = ep ? remote : NULL;
        p->ucx_len = ep ? len : 0;
        p->checked_us = util_mono_us();
        pthread_mutex_unlock(&dp->mu);
        if (!ep)
            free(remote);
    } else {
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
    dp_wake(dp);
}

/* One posted send. Owned by the sending thread until it gives up on the
 * send (abandoned): then by the completion callback, or, if UCX never
 * completes it (a rendezvous to a peer that died stays pending in error
 * mode NONE), by dplane_free(), which frees what is left on dp->abandoned
 * after ucp_worker_destroy. Lock order: w->mu, then dp->mu. */
struct send_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int done;               /* written under mu; polled without it */
    int abandoned;
    ucs_status_t status;
    uint32_t ack;                  /* a pool send: the receiver's DPLANE_ACK_* */
    dplane_t *dp;
    struct send_wait *next;        /* on dp->abandoned */
    /* A pool send: on dp->rma_waits until its ACK (or the sender gives up)
     * takes it off, under dp->mu; hdr is the RTS header UCX may still
     * read (freed with the wait). */
    uint64_t cookie;
    struct send_wait *rma_next;
    uint8_t *hdr;
    /* A plain send (send_once): the copy of the payload UCX sends from,
     * freed with the wait. UCX may still read a request's payload after
     * the sender gave up on it, even once its endpoint was closed with
     * FORCE or the request cancelled (UCX 1.13: a send queued behind the
     * endpoint's wire-up to a stopped peer is packed when that peer wakes
     * up; seen under ASan as a read of the caller's freed buffer), so the
     * payload must live as long as the request: the caller's own memory
     * is free to go when send_once returns, whatever happened. */
    void *payload;
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
    free(w->hdr);
    free(w->payload);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

/* After ucp_worker_destroy: the sends UCX never completed (their requests
 * went with the worker). */
void dp_send_waits_free_abandoned(dplane_t *dp)
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

/* Completes w (under prog_mu): wakes its sender, or frees it when the
 * sender gave up on it (with req, the UCX request, when there is one). */
static void send_complete(send_wait_t *w, void *req, ucs_status_t status)
{
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
    if (req)
        ucp_request_free(req);
    send_wait_free(w);
}

static void send_done(void *req, ucs_status_t status, void *user)
{
    send_complete(user, req, status);
}

/* Gives up on w after its endpoint was closed: 1 if w is now the
 * callback's (the caller must not touch w or its request again), 0 if it
 * completed meanwhile. UCX may still send or expose what the request
 * holds: a plain send's payload is w's own copy (freed with w), a pool
 * send's is pool memory the peer may still read, towards a peer that is
 * dead (its data_addr refused) or that held the frame past the sender's
 * deadline: a late frame or read lands in an attempt whose sender has
 * failed, so the attempt fails and its values are discarded
 * (attempt-exact results). */
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

/* Progresses the worker while w is not done, for dplane_poll_now_us at most
 * (dp_poll): a send's completion, or a peer's read of our pool, is then
 * handled in this thread. */
static void send_poll(dplane_t *dp, send_wait_t *w)
{
    if (atomic_load(&dp->poll_max_us) <= 0)
        return;
    int64_t start = util_mono_us();
    dp_poll_enter(dp);
    while (!atomic_load(&w->done) && dp_poll(dp, util_mono_us() - start))
        ;
    dp_poll_leave(dp, !atomic_load(&w->done));
}

/* Waits for a posted send, polling first (send_poll). Every second of
 * waiting the peer's data_addr is asked (peer_probe): a dead peer (its
 * port refuses), a port that serves another process's address (the peer
 * restarted: the caller's next try reaches the new one), or the deadline
 * (monotonic us) closes the endpoint and gives up on the send
 * (UCS_ERR_CANCELED, *abandoned = 1). A port that accepts but does not
 * answer in time is a live, busy peer: waited for. Else its status. */
static ucs_status_t send_wait(dplane_t *dp, send_wait_t *w, const char *addr, ucp_ep_h ep,
                              int64_t deadline, int *abandoned)
{
    send_poll(dp, w);
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
        int probe = now > deadline ? PEER_GONE : peer_probe(dp, addr, ep);
        if (probe != PEER_SAME) {
            log_warn("dplane: a send to %s did not complete (%s); closing", addr,
                     now > deadline          ? "timeout"
                     : probe == PEER_GONE    ? "peer gone"
                     : probe == PEER_CHANGED ? "peer restarted"
                                             : "endpoint dropped");
            if (now > deadline)
                peer_drop(dp, addr, ep);   /* else it is dropped already */
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
static int send_once(dplane_t *dp, const char *addr, const uint8_t *hdr, const tensor_t *t,
                     int64_t deadline)
{
    ucp_ep_h ep = peer_ep(dp, addr);
    if (!ep)
        return -1;
    send_wait_t *w = send_wait_new(dp);
    size_t nbytes = (size_t)shape_numel(&t->shape) * sizeof(float);
    if (w && nbytes > 0 && !(w->payload = malloc(nbytes))) {
        send_wait_free(w);
        w = NULL;
    }
    if (!w)
        return -1;
    if (nbytes > 0)
        memcpy(w->payload, t->data, nbytes);
    /* REPLY: the receiver learns which connection (mailbox origin) a frame
     * came through from its reply endpoint. */
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY, .cb.send = send_done,
                             .user_data = w};
    void *r = ucp_am_send_nbx(ep, DPLANE_AM_ID, hdr, DPLANE_HDR_SIZE, w->payload, nbytes, &p);
    ucs_status_t st = UCS_OK;
    int abandoned = 0;
    if (UCS_PTR_IS_ERR(r)) {
        st = UCS_PTR_STATUS(r);
    } else if (r) {
        atomic_fetch_add(&dp->inflight, 1);
        dp_wake(dp);                       /* the progress thread may sleep */
        st = send_wait(dp, w, addr, ep, deadline, &abandoned);
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

/* ---- sends from the pool ----
 *
 * A payload that lies in one of our pool's blocks (shmpool.h) is not sent:
 * the receiver is told where it lies (DPLANE_AM_RMA_ID: the frame header,
 * a cookie, the address, the block's id, our host id and the packed key),
 * gates it like any frame, maps the block and copies it once (dplane_rx.c,
 * rma_read) and answers with an ACK carrying the cookie; the sender waits
 * for that ACK as for any send, so the payload stays put while it is
 * read. A receiver that cannot map it (another host or container: another
 * host id; --data-transport tcp) answers DPLANE_ACK_NO_RMA: from then on
 * that peer gets plain sends. Cookies count up from a random 64-bit
 * start (dplane_start): an ACK with a cookie no send waits for is
 * ignored. */

static void rma_waits_unlink_locked(dplane_t *dp, uint64_t cookie, send_wait_t **out)
{
    *out = NULL;
    for (send_wait_t **pp = &dp->rma_waits; *pp; pp = &(*pp)->rma_next)
        if ((*pp)->cookie == cookie) {
            *out = *pp;
            *pp = (*pp)->rma_next;
            return;
        }
}

ucs_status_t dp_am_ack(void *arg, const void *header, size_t header_length, void *data,
                       size_t length, const ucp_am_recv_param_t *param)
{
    (void)data;
    (void)param;
    dplane_t *dp = arg;
    const uint8_t *h = header;
    if (header_length != DPLANE_ACK_SIZE || length != 0) {
        atomic_fetch_add(&dp->bad_frames, 1);
        return UCS_OK;
    }
    uint64_t cookie = (uint64_t)dp_get_u32(h) << 32 | dp_get_u32(h + 4);
    send_wait_t *w;
    pthread_mutex_lock(&dp->mu);
    rma_waits_unlink_locked(dp, cookie, &w);
    pthread_mutex_unlock(&dp->mu);
    if (!w)
        return UCS_OK;             /* late (given up on) or forged */
    w->ack = dp_get_u32(h + 8);
    send_complete(w, NULL, w->ack == DPLANE_ACK_FAILED ? UCS_ERR_IO_ERROR : UCS_OK);
    return UCS_OK;
}

static void rts_sent(void *req, ucs_status_t status, void *user)
{
    (void)status;
    (void)user;
    ucp_request_free(req);
}

/* Builds w's RTS header (w goes on dp->rma_waits under its cookie). 0, or
 * -1 (OOM, or a key too long). */
static int rma_header(dplane_t *dp, send_wait_t *w, const dplane_hdr_t *h, const tensor_t *t,
                      const shmpool_ref_t *ref, size_t *len)
{
    dplane_rma_ref_t r = {.raddr = (uint64_t)(uintptr_t)t->data, .block = ref->id,
                          .host = dp->host_id, .rkey_len = (uint32_t)ref->rkey_len};
    size_t cap = DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + DPLANE_RKEY_MAX;
    if (ref->rkey_len < 1 || ref->rkey_len > DPLANE_RKEY_MAX || !(w->hdr = malloc(cap)))
        return -1;
    memcpy(r.rkey, ref->rkey, ref->rkey_len);
    pthread_mutex_lock(&dp->mu);
    w->cookie = r.cookie = dp->rma_cookie++;
    w->rma_next = dp->rma_waits;
    dp->rma_waits = w;
    pthread_mutex_unlock(&dp->mu);
    *len = dplane_rma_encode(h, &r, w->hdr, cap);
    return *len ? 0 : -1;
}

/* One pool send on the endpoint to addr: 0 (read by the peer), 1 (the
 * peer cannot read our pool: send plainly), or -1 (the endpoint is
 * dropped). */
static int send_rma_once(dplane_t *dp, const char *addr, const dplane_hdr_t *h,
                         const tensor_t *t, const shmpool_ref_t *ref, int64_t deadline)
{
    ucp_ep_h ep = peer_ep(dp, addr);
    send_wait_t *w = ep ? send_wait_new(dp) : NULL;
    size_t len = 0;
    if (!w || rma_header(dp, w, h, t, ref, &len) != 0) {
        if (w && w->hdr) {         /* on dp->rma_waits iff hdr was allocated */
            pthread_mutex_lock(&dp->mu);
            send_wait_t *x;
            rma_waits_unlink_locked(dp, w->cookie, &x);
            pthread_mutex_unlock(&dp->mu);
        }
        if (w)
            send_wait_free(w);
        return -1;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_REPLY, .cb.send = rts_sent};
    uint64_t cookie = w->cookie;
    atomic_fetch_add(&dp->inflight, 1);
    void *r = ucp_am_send_nbx(ep, DPLANE_AM_RMA_ID, w->hdr, len, NULL, 0, &p);
    int abandoned = 0;
    ucs_status_t st = UCS_PTR_IS_ERR(r) ? UCS_PTR_STATUS(r) : UCS_OK;
    if (st == UCS_OK) {
        if (r)                     /* still to progress: the progress thread may sleep */
            dp_wake(dp);
        st = send_wait(dp, w, addr, ep, deadline, &abandoned);
    }
    atomic_fetch_sub(&dp->inflight, 1);
    if (st != UCS_OK || abandoned) {
        /* No ACK will come for it, or one comes late and must find
         * nothing. An abandoned w may be freed by a late ACK at any
         * moment: only its cookie is used here. */
        send_wait_t *x;
        pthread_mutex_lock(&dp->mu);
        rma_waits_unlink_locked(dp, cookie, &x);
        pthread_mutex_unlock(&dp->mu);
    }
    uint32_t ack = abandoned ? DPLANE_ACK_FAILED : w->ack;
    if (!abandoned)
        send_wait_free(w);         /* an abandoned one: its ACK's or dplane_free()'s */
    if (st == UCS_OK)
        return ack == DPLANE_ACK_NO_RMA ? 1 : 0;
    log_debug("dplane: pool send to %s failed: %s", addr, ucs_status_string(st));
    if (!abandoned)
        peer_drop(dp, addr, ep);
    return -1;
}

/* Whether the peer at addr takes pool sends (not yet known: yes). */
static int peer_rma(dplane_t *dp, const char *addr, int set_no)
{
    int ok = 1;
    pthread_mutex_lock(&dp->mu);
    for (dp_peer_t *p = dp->peers; p; p = p->next)
        if (strcmp(p->addr, addr) == 0) {
            if (set_no)
                p->no_rma = 1;
            ok = !p->no_rma;
        }
    pthread_mutex_unlock(&dp->mu);
    return ok;
}

int dplane_send(dplane_t *dp, const char *addr, const mbox_tag_t *tag, const mbox_key_t *key,
                const tensor_t *t)
{
    return dplane_send_until(dp, addr, tag, key, t, util_mono_us() + DPLANE_SEND_TIMEOUT_US);
}

/* A value's ready time (tensor_t.ready_us, this host's monotonic clock)
 * as the frame carries it: unix microseconds, which another host can read
 * (to its clocks' skew: `sim` device time is a model); 0 stays 0. */
static int64_t dp_ready_to_unix(int64_t ready_mono_us)
{
    if (ready_mono_us <= 0)
        return 0;
    int64_t u = util_mono_to_wall_us(ready_mono_us);
    return u < 0 ? 0 : u > DPLANE_READY_MAX ? DPLANE_READY_MAX : u;
}

int dplane_send_until(dplane_t *dp, const char *addr, const mbox_tag_t *tag,
                      const mbox_key_t *key, const tensor_t *t, int64_t deadline_mono_us)
{
    if (strcmp(addr, dp->addr) == 0) {
        tensor_t *copy = tensor_clone(t);
        if (!copy)
            return -1;
        mbox_put(dp->mb, tag, copy);
        return 0;
    }
    dplane_hdr_t h = {.tag = *tag, .shape = t->shape, .key = *key,
                      .nbytes = (uint64_t)shape_numel(&t->shape) * sizeof(float),
                      .ready_unix_us = dp_ready_to_unix(t->ready_us)};
    uint8_t hdr[DPLANE_HDR_SIZE];
    dplane_hdr_encode(&h, hdr);
    shmpool_ref_t ref;
    int pooled = dp->pool && h.nbytes >= SHMPOOL_MIN_BYTES &&
                 shmpool_find(dp->pool, t->data, (size_t)h.nbytes, &ref) == 0;
    for (int i = 0; i < 2; i++) {
        int rc = pooled && peer_rma(dp, addr, 0)
                     ? send_rma_once(dp, addr, &h, t, &ref, deadline_mono_us)
                     : 1;
        if (rc == 1 && pooled)
            peer_rma(dp, addr, 1);
        if (rc == 1)
            rc = send_once(dp, addr, hdr, t, deadline_mono_us);
        if (rc == 0)
            return 0;
    }
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
