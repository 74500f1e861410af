/* dplane.c - see dplane.h.
 *
 * Two transports share one frame format. TCP (other hosts, or
 * --data-transport tcp): header and payload on the socket. Shared memory
 * (same-host peers): the sender dials the peer's abstract Unix socket
 * "@atoll-dp:<data_addr>", creates a shmring and passes its memfd in a
 * 16-byte hello (u32 "ATDR", u32 0, u64 ring bytes) with SCM_RIGHTS; after
 * that every frame's header goes over the Unix socket and its payload
 * through the ring (same order on both, one writer per connection), so
 * payload bytes never pass through a socket. A peer whose Unix socket cannot
 * be reached gets TCP.
 *
 * Threads: one accept thread (polls both listeners and a wake eventfd),
 * one reader thread per accepted connection.
 * Incoming connections sit on a list so dplane_stop() can shut their
 * sockets down (which wakes their blocking reads) and join them; finished
 * readers are reaped at each accept so the list stays short.
 * Outgoing connections: one per peer address, created on first use and
 * kept; the per-peer mutex serialises whole frames. */
#include "dplane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "shmring.h"
#include "util.h"

/* A ring wait that sees no progress for this long gives the connection up. */
#define DPLANE_SHM_TIMEOUT_MS 30000

typedef struct dp_conn {           /* an accepted connection */
    int fd;
    int origin;                    /* its slot: 1..DPLANE_MAX_CONNS (mbox origin) */
    pthread_t thread;
    atomic_int done;               /* set by the reader as it exits */
    int is_unix;                   /* same-host: payloads come through ring */
    shmring_t *ring;               /* owned by the reader thread */
    struct dp_conn *next;
    struct dplane *dp;
} dp_conn_t;

typedef struct dp_peer {           /* an outgoing connection */
    char addr[DPLANE_ADDR_MAX];
    pthread_mutex_t mu;            /* serialises frames; guards fd */
    int fd;                        /* -1 when not connected */
    shmring_t *ring;               /* set when fd is a same-host Unix socket */
    struct dp_peer *next;
} dp_peer_t;

struct dplane {
    mbox_t *mb;                    /* borrowed */
    int listen_fd;
    int unix_fd;                   /* -1 when the shm transport is unavailable */
    int wake_fd;                   /* eventfd: wakes the accept thread at stop */
    atomic_int shm_on;             /* senders may use shared memory */
    atomic_llong sent_shm, sent_tcp;
    char addr[DPLANE_ADDR_MAX];
    pthread_t accept_thread;
    atomic_int stopping;
    pthread_mutex_t conns_mu;      /* guards conns, nconns, slot_used */
    dp_conn_t *conns;
    int nconns;
    unsigned char slot_used[DPLANE_MAX_CONNS + 1];
    atomic_llong refused, bad_frames, accept_errors;
    dplane_guard_stats_t logged;   /* accept thread only: last figures logged */
    int64_t logged_us;
    pthread_mutex_t peers_mu;      /* guards the peers list (not the peers) */
    dp_peer_t *peers;
};

/* ---- frame codec ---- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)(v & 0xff);
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)(v & 0xff);
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
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
    return 0;
}

int dplane_hello_decode(const uint8_t buf[DPLANE_HELLO_SIZE], uint64_t *ring_bytes)
{
    *ring_bytes = 0;
    if (get_u32(buf) != DPLANE_HELLO_MAGIC)
        return -1;
    uint64_t claimed = get_u64(buf + 8);
    if (claimed > SHMRING_MAX_BYTES)
        return -1;
    *ring_bytes = claimed;
    return 0;
}

void dplane_payload_swap(float *data, int64_t n)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (int64_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, &data[i], 4);
        v = __builtin_bswap32(v);
        memcpy(&data[i], &v, 4);
    }
#else
    (void)data;
    (void)n;
#endif
}

/* ---- socket helpers ---- */

static int write_full(int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Returns 0, or -1 on error or EOF before n bytes. */
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

static int connect_once(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    /* Small frames (scalars, collective pieces) must not wait for Nagle. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Connects, retrying for about a second (a peer that just restarted). */
static int connect_retry(const char *addr)
{
    struct sockaddr_in sa;
    if (resolve(addr, 0, &sa) != 0) {
        log_warn("dplane: cannot resolve peer %s", addr);
        return -1;
    }
    static const long backoff_ms[] = {0, 100, 300, 600};
    for (size_t i = 0; i < sizeof backoff_ms / sizeof backoff_ms[0]; i++) {
        if (backoff_ms[i]) {
            struct timespec ts = {0, backoff_ms[i] * 1000000L};
            nanosleep(&ts, NULL);
        }
        int fd = connect_once(&sa);
        if (fd >= 0)
            return fd;
    }
    log_warn("dplane: cannot connect to peer %s: %s", addr, strerror(errno));
    return -1;
}

/* ---- receiving ---- */

/* Reads frames until EOF or error; every good frame goes to the mailbox.
 * A malformed frame closes the connection: the stream cannot be resynced. */
/* Same-host connections start with the hello carrying the ring's memfd.
 * Returns 0 with c->ring set, or -1. */
static int reader_hello(dp_conn_t *c)
{
    uint8_t hello[DPLANE_HELLO_SIZE];
    char cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof cbuf};
    ssize_t got;
    do
        got = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    while (got < 0 && errno == EINTR);
    int fd = -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(cm), sizeof fd);
    uint64_t claimed = 0;
    int ok = got == (ssize_t)sizeof hello && fd >= 0 && dplane_hello_decode(hello, &claimed) == 0;
    /* The memfd must be sealed and exactly as large as the hello says
     * before it is mapped (shmring_attach checks both). */
    if (ok && !(c->ring = shmring_attach(fd, (size_t)claimed)))
        ok = 0;
    if (fd >= 0)
        close(fd);                 /* the mapping keeps the memory */
    if (!ok)
        log_warn("dplane: bad shared-memory hello, closing connection");
    return ok ? 0 : -1;
}

/* Reads n payload bytes into buf (ring or socket). Returns 0 or -1. */
static int read_payload(dp_conn_t *c, void *buf, size_t n)
{
    if (c->ring)
        return shmring_read(c->ring, buf, n, &c->dp->stopping, c->fd, DPLANE_SHM_TIMEOUT_MS);
    return read_full(c->fd, buf, n);
}

/* Reads and throws away the payload of a refused frame (nothing is
 * allocated for it), so the frames behind it on the connection still
 * arrive. Returns 0 or -1. */
static int skip_payload(dp_conn_t *c, uint64_t n)
{
    uint8_t sink[16384];
    while (n > 0) {
        size_t k = n < sizeof sink ? (size_t)n : sizeof sink;
        if (read_payload(c, sink, k) != 0)
            return -1;
        n -= k;
    }
    return 0;
}

/* One frame whose header is h: admitted (mbox_admit decides before a byte
 * is allocated), read and handed to the mailbox, or skipped. Returns 0, or
 * -1 when the connection must close. */
static int reader_frame(dp_conn_t *c, const dplane_hdr_t *h)
{
    mbox_t *mb = c->dp->mb;
    int64_t deadline = util_mono_us() + (int64_t)MBOX_UNCLAIMED_TTL_MS * 1000;
    mbox_admit_t a = mbox_admit(mb, &h->tag, c->origin, (int64_t)h->nbytes, deadline);
    if (a == MBOX_ADMIT_DROP)
        return skip_payload(c, h->nbytes);
    tensor_t *t = tensor_new(&h->shape);
    if (!t || read_payload(c, t->data, (size_t)h->nbytes) != 0) {
        if (!t)
            log_error("dplane: out of memory for a %llu-byte frame",
                      (unsigned long long)h->nbytes);
        if (a == MBOX_ADMIT_UNCLAIMED)
            mbox_unreserve(mb, c->origin, (int64_t)h->nbytes);
        tensor_free(t);
        return -1;
    }
    if (!c->ring)                  /* same host, same byte order: no swap */
        dplane_payload_swap(t->data, shape_numel(&t->shape));
    mbox_put_from(mb, &h->tag, t, c->origin, a);   /* takes t */
    return 0;
}

static void *reader_main(void *arg)
{
    dp_conn_t *c = arg;
    uint8_t buf[DPLANE_HDR_SIZE];
    if (c->is_unix && reader_hello(c) != 0) {
        atomic_fetch_add(&c->dp->bad_frames, 1);
        goto out;
    }
    for (;;) {
        if (read_full(c->fd, buf, sizeof buf) != 0)
            break;
        dplane_hdr_t h;
        if (dplane_hdr_decode(buf, &h) != 0) {
            /* Bad magic, rank, dims or length claim: the stream cannot be
             * resynced, and a junk sender gets no second try. */
            atomic_fetch_add(&c->dp->bad_frames, 1);
            log_debug("dplane: bad frame header, closing connection");
            break;
        }
        if (reader_frame(c, &h) != 0)
            break;
    }
out:
    mbox_drop_origin(c->dp->mb, c->origin);
    shmring_close(c->ring);
    c->ring = NULL;
    /* Tell the sender at once (it reconnects on its next frame); the fd
     * itself is closed by whoever joins this thread, so it cannot be reused
     * while dplane_stop() might still shut it down. */
    shutdown(c->fd, SHUT_RDWR);
    atomic_store(&c->done, 1);
    return NULL;
}

/* Joins and frees finished readers. Caller holds conns_mu. */
static void reap_locked(dplane_t *dp)
{
    dp_conn_t **p = &dp->conns;
    while (*p) {
        dp_conn_t *c = *p;
        if (atomic_load(&c->done)) {
            *p = c->next;
            pthread_join(c->thread, NULL);
            close(c->fd);
            dp->slot_used[c->origin] = 0;
            dp->nconns--;
            free(c);
        } else {
            p = &c->next;
        }
    }
}

/* Non-zero for accept() errors that leave the listener usable: out of
 * descriptors or memory (back off, then keep accepting) and a connection
 * that died in the backlog. */
static int accept_error_transient(int e)
{
    return e == EINTR || e == EAGAIN || e == ECONNABORTED || e == EPROTO || e == EMFILE ||
           e == ENFILE || e == ENOBUFS || e == ENOMEM || e == EPERM;
}

/* Same-host connections come from our own user only (SO_PEERCRED): the
 * abstract socket is reachable by every process in the network namespace. */
static int unix_peer_ok(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 && cr.uid == geteuid();
}

/* Logs the guard's figures when they changed, at most every 10 s. */
static void log_guard(dplane_t *dp)
{
    int64_t now = util_mono_us();
    if (now - dp->logged_us < 10 * 1000000)
        return;
    dplane_guard_stats_t g;
    dplane_guard_stats(dp, &g);
    if (memcmp(&g.refused, &dp->logged.refused, 3 * sizeof g.refused) != 0 ||
        g.mb.dropped != dp->logged.mb.dropped || g.mb.over_cap != dp->logged.mb.over_cap ||
        g.mb.expired != dp->logged.mb.expired)
        log_info("dplane: refused %lld connection(s), %lld bad frame(s), %lld accept "
                 "error(s); frames dropped %lld, over cap %lld, expired %lld (%lld bytes); "
                 "unclaimed now %lld (%lld bytes)", (long long)g.refused,
                 (long long)g.bad_frames, (long long)g.accept_errors, (long long)g.mb.dropped,
                 (long long)g.mb.over_cap, (long long)g.mb.expired,
                 (long long)g.mb.dropped_bytes, (long long)g.mb.unclaimed,
                 (long long)g.mb.unclaimed_bytes);
    dp->logged = g;
    dp->logged_us = now;
}

/* Registers and starts a reader for fd, or closes fd (over the cap, OOM).
 * Returns 0 when a reader owns fd now. */
static int conn_start(dplane_t *dp, int fd, int is_unix)
{
    dp_conn_t *c = calloc(1, sizeof *c);
    pthread_attr_t attr;
    int attr_ok = pthread_attr_init(&attr) == 0;
    if (attr_ok)
        pthread_attr_setstacksize(&attr, DPLANE_READER_STACK);
    pthread_mutex_lock(&dp->conns_mu);
    reap_locked(dp);
    int slot = 0;
    for (int k = 1; c && dp->nconns < DPLANE_MAX_CONNS && k <= DPLANE_MAX_CONNS && !slot; k++)
        if (!dp->slot_used[k])
            slot = k;
    if (!slot) {                   /* over the cap: closed at once */
        pthread_mutex_unlock(&dp->conns_mu);
        atomic_fetch_add(&dp->refused, 1);
        goto fail;
    }
    c->fd = fd;
    c->origin = slot;
    c->is_unix = is_unix;
    c->dp = dp;
    if (pthread_create(&c->thread, attr_ok ? &attr : NULL, reader_main, c) != 0) {
        pthread_mutex_unlock(&dp->conns_mu);
        log_error("dplane: cannot start a reader thread");
        goto fail;
    }
    dp->slot_used[slot] = 1;
    dp->nconns++;
    c->next = dp->conns;
    dp->conns = c;
    pthread_mutex_unlock(&dp->conns_mu);
    if (attr_ok)
        pthread_attr_destroy(&attr);
    return 0;
fail:
    if (attr_ok)
        pthread_attr_destroy(&attr);
    close(fd);
    free(c);
    return -1;
}

static void *accept_main(void *arg)
{
    dplane_t *dp = arg;
    while (!atomic_load(&dp->stopping)) {
        struct pollfd pf[3] = {{.fd = dp->listen_fd, .events = POLLIN},
                               {.fd = dp->wake_fd, .events = POLLIN},
                               {.fd = dp->unix_fd, .events = POLLIN}};
        int np = dp->unix_fd >= 0 ? 3 : 2;
        /* Wakes at least every second to expire unclaimed frames. */
        int pr = poll(pf, (nfds_t)np, 1000);
        if (pr < 0 && errno != EINTR) {
            log_error("dplane: poll: %s", strerror(errno));
            break;
        }
        mbox_expire(dp->mb);
        log_guard(dp);
        if (pr <= 0)
            continue;
        if (atomic_load(&dp->stopping) || pf[1].revents)
            break;
        int is_unix = np == 3 && (pf[2].revents & POLLIN) && !(pf[0].revents & POLLIN);
        int fd = accept4(is_unix ? dp->unix_fd : dp->listen_fd, NULL, NULL,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            int e = errno;
            if (atomic_load(&dp->stopping))
                break;
            if (!accept_error_transient(e)) {
                log_error("dplane: accept: %s", strerror(e));
                break;
            }
            if (e == EINTR || e == EAGAIN || e == ECONNABORTED || e == EPROTO)
                continue;
            /* Out of descriptors or memory: the connection stays in the
             * backlog, so back off instead of spinning, and keep going. */
            if (atomic_fetch_add(&dp->accept_errors, 1) % 100 == 0)
                log_warn("dplane: accept: %s (backing off)", strerror(e));
            struct timespec ts = {0, DPLANE_ACCEPT_BACKOFF_MS * 1000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        /* Listeners are polled, accepted sockets are read blocking. */
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 ||
            (is_unix && !unix_peer_ok(fd))) {
            if (fl >= 0)
                atomic_fetch_add(&dp->refused, 1);
            close(fd);
            continue;
        }
        conn_start(dp, fd, is_unix);
    }
    return NULL;
}

/* Binds and listens; fills dp->listen_fd and dp->addr. Returns 0 or -1. */
static int listen_on(dplane_t *dp, const char *listen_addr, const char *advertise_host)
{
    struct sockaddr_in sa;
    if (resolve(listen_addr, 1, &sa) != 0) {
        log_error("dplane: bad listen address '%s' (want HOST:PORT)", listen_addr);
        return -1;
    }
    dp->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (dp->listen_fd < 0)
        return -1;
    int one = 1;
    setsockopt(dp->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    socklen_t len = sizeof sa;
    if (bind(dp->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        listen(dp->listen_fd, 128) != 0 ||
        getsockname(dp->listen_fd, (struct sockaddr *)&sa, &len) != 0) {
        log_error("dplane: cannot listen on %s: %s", listen_addr, strerror(errno));
        return -1;
    }
    char ip[INET_ADDRSTRLEN] = "127.0.0.1";
    if (advertise_host && *advertise_host)
        snprintf(ip, sizeof ip, "%s", advertise_host);
    else if (sa.sin_addr.s_addr != htonl(INADDR_ANY))
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
    else
        log_warn("dplane: wildcard bind without an advertised host; peers will use 127.0.0.1");
    snprintf(dp->addr, sizeof dp->addr, "%s:%d", ip, (int)ntohs(sa.sin_port));
    return 0;
}

/* The abstract Unix socket name of the worker whose data address is addr. */
static socklen_t unix_name(const char *addr, struct sockaddr_un *su)
{
    memset(su, 0, sizeof *su);
    su->sun_family = AF_UNIX;
    /* sun_path[0] = 0: abstract namespace, no file to clean up. */
    int n = snprintf(su->sun_path + 1, sizeof su->sun_path - 1, "atoll-dp:%s", addr);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Same-host listener; failure only disables the shm transport. */
static void listen_unix(dplane_t *dp)
{
    struct sockaddr_un su;
    socklen_t len = unix_name(dp->addr, &su);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&su, len) != 0 || listen(fd, 128) != 0) {
        log_warn("dplane: no same-host listener (%s): peers on this host will use TCP",
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    dp->unix_fd = fd;
}

dplane_t *dplane_start(const char *listen_addr, const char *advertise_host, mbox_t *mb)
{
    dplane_t *dp = calloc(1, sizeof *dp);
    if (!dp)
        return NULL;
    dp->mb = mb;
    dp->listen_fd = -1;
    dp->unix_fd = -1;
    atomic_store(&dp->shm_on, 1);
    pthread_mutex_init(&dp->conns_mu, NULL);
    pthread_mutex_init(&dp->peers_mu, NULL);
    if ((dp->wake_fd = eventfd(0, EFD_CLOEXEC)) < 0)
        goto fail;
    if (listen_on(dp, listen_addr, advertise_host) != 0)
        goto fail;
    listen_unix(dp);
    if (pthread_create(&dp->accept_thread, NULL, accept_main, dp) != 0) {
        log_error("dplane: cannot start the accept thread");
        goto fail;
    }
    return dp;
fail:
    if (dp->listen_fd >= 0)
        close(dp->listen_fd);
    if (dp->unix_fd >= 0)
        close(dp->unix_fd);
    if (dp->wake_fd >= 0)
        close(dp->wake_fd);
    pthread_mutex_destroy(&dp->conns_mu);
    pthread_mutex_destroy(&dp->peers_mu);
    free(dp);
    return NULL;
}

void dplane_stop(dplane_t *dp)
{
    if (!dp)
        return;
    atomic_store(&dp->stopping, 1);
    uint64_t one = 1;
    if (write(dp->wake_fd, &one, sizeof one) != (ssize_t)sizeof one)
        shutdown(dp->listen_fd, SHUT_RDWR);    /* fallback wake */
    pthread_join(dp->accept_thread, NULL);
    close(dp->listen_fd);
    close(dp->wake_fd);
    if (dp->unix_fd >= 0)
        close(dp->unix_fd);
    /* Wakes readers waiting in mbox_admit (the owner stops the mailbox
     * too, but may do so only after this returns). */
    mbox_shutdown(dp->mb);
    pthread_mutex_lock(&dp->conns_mu);
    for (dp_conn_t *c = dp->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);    /* wakes the reader's recv() */
    while (dp->conns) {
        dp_conn_t *c = dp->conns;
        dp->conns = c->next;
        pthread_join(c->thread, NULL);
        close(c->fd);
        free(c);
    }
    pthread_mutex_unlock(&dp->conns_mu);
    while (dp->peers) {
        dp_peer_t *p = dp->peers;
        dp->peers = p->next;
        if (p->fd >= 0)
            close(p->fd);
        shmring_close(p->ring);
        pthread_mutex_destroy(&p->mu);
        free(p);
    }
    pthread_mutex_destroy(&dp->conns_mu);
    pthread_mutex_destroy(&dp->peers_mu);
    free(dp);
}

const char *dplane_addr(const dplane_t *dp)
{
    return dp->addr;
}

void dplane_set_shm(dplane_t *dp, int on)
{
    atomic_store(&dp->shm_on, on ? 1 : 0);
}

void dplane_guard_stats(dplane_t *dp, dplane_guard_stats_t *out)
{
    out->refused = atomic_load(&dp->refused);
    out->bad_frames = atomic_load(&dp->bad_frames);
    out->accept_errors = atomic_load(&dp->accept_errors);
    pthread_mutex_lock(&dp->conns_mu);
    out->conns = dp->nconns;
    pthread_mutex_unlock(&dp->conns_mu);
    mbox_guard_stats(dp->mb, &out->mb);
}

void dplane_counts(dplane_t *dp, int64_t *shm_frames, int64_t *tcp_frames)
{
    *shm_frames = atomic_load(&dp->sent_shm);
    *tcp_frames = atomic_load(&dp->sent_tcp);
}

int dplane_same_host(const char *a, const char *b)
{
    char ha[DPLANE_ADDR_MAX], hb[DPLANE_ADDR_MAX];
    int pa, pb;
    if (dplane_parse_addr(a, ha, sizeof ha, &pa) != 0 ||
        dplane_parse_addr(b, hb, sizeof hb, &pb) != 0)
        return 0;
    int la = strncmp(ha, "127.", 4) == 0 || strcmp(ha, "localhost") == 0;
    int lb = strncmp(hb, "127.", 4) == 0 || strcmp(hb, "localhost") == 0;
    return strcmp(ha, hb) == 0 || (la && lb);
}

/* ---- sending ---- */

/* Finds or creates the peer entry for addr; NULL on OOM or a too-long
 * address. Entries live until dplane_stop(). */
static dp_peer_t *peer_get(dplane_t *dp, const char *addr)
{
    if (strlen(addr) >= DPLANE_ADDR_MAX)
        return NULL;
    pthread_mutex_lock(&dp->peers_mu);
    dp_peer_t *p = dp->peers;
    while (p && strcmp(p->addr, addr) != 0)
        p = p->next;
    if (!p && (p = calloc(1, sizeof *p)) != NULL) {
        snprintf(p->addr, sizeof p->addr, "%s", addr);
        p->fd = -1;
        pthread_mutex_init(&p->mu, NULL);
        p->next = dp->peers;
        dp->peers = p;
    }
    pthread_mutex_unlock(&dp->peers_mu);
    return p;
}

/* Dials a same-host peer's Unix socket and hands it a new ring. Returns 0
 * with p->fd and p->ring set, or -1 (the caller falls back to TCP). */
static int connect_shm(dplane_t *dp, dp_peer_t *p)
{
    struct sockaddr_un su;
    socklen_t len = unix_name(p->addr, &su);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), memfd = -1;
    shmring_t *ring = NULL;
    if (fd < 0 || connect(fd, (struct sockaddr *)&su, len) != 0)
        goto fail;
    if (!(ring = shmring_create(SHMRING_DEFAULT_BYTES, &memfd)))
        goto fail;
    uint8_t hello[DPLANE_HELLO_SIZE] = {0};
    put_u32(hello, DPLANE_HELLO_MAGIC);
    put_u64(hello + 8, SHMRING_DEFAULT_BYTES);
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov = {.iov_base = hello, .iov_len = sizeof hello};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                        .msg_controllen = sizeof cbuf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &memfd, sizeof memfd);
    if (sendmsg(fd, &mh, MSG_NOSIGNAL) != (ssize_t)sizeof hello)
        goto fail;
    close(memfd);                  /* the receiver has its own copy now */
    p->fd = fd;
    p->ring = ring;
    log_debug("dplane: shared memory to %s", p->addr);
    (void)dp;
    return 0;
fail:
    shmring_close(ring);
    if (memfd >= 0)
        close(memfd);
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Connects p (shared memory when allowed and the peer is on this host,
 * else TCP). Caller holds p->mu. Returns 0 or -1. */
static int peer_connect(dplane_t *dp, dp_peer_t *p)
{
    if (atomic_load(&dp->shm_on) && dplane_same_host(dp->addr, p->addr) &&
        connect_shm(dp, p) == 0)
        return 0;
    return (p->fd = connect_retry(p->addr)) >= 0 ? 0 : -1;
}

/* Drops p's connection (and ring). Caller holds p->mu. */
static void peer_disconnect(dp_peer_t *p)
{
    close(p->fd);
    p->fd = -1;
    shmring_close(p->ring);
    p->ring = NULL;
}

/* Has the peer closed this connection (it stopped or restarted)? A write
 * could still succeed into socket buffers or a ring with room, and the
 * frame would be lost without an error: ask the kernel first (one poll,
 * no wait). */
static int peer_closed(int fd)
{
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Writes one frame. Caller holds the peer's mutex. */
static int write_frame(dplane_t *dp, dp_peer_t *p, const mbox_tag_t *tag, const tensor_t *t)
{
    int fd = p->fd;
    if (peer_closed(fd))
        return -1;
    int64_t n = shape_numel(&t->shape);
    dplane_hdr_t h = {.tag = *tag, .shape = t->shape, .nbytes = (uint64_t)n * sizeof(float)};
    uint8_t buf[DPLANE_HDR_SIZE];
    dplane_hdr_encode(&h, buf);
    if (write_full(fd, buf, sizeof buf) != 0)
        return -1;
    if (p->ring) {
        atomic_fetch_add(&dp->sent_shm, 1);
        return shmring_write(p->ring, t->data, (size_t)h.nbytes, &dp->stopping, fd,
                             DPLANE_SHM_TIMEOUT_MS);
    }
    atomic_fetch_add(&dp->sent_tcp, 1);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    float *tmp = malloc((size_t)h.nbytes);
    if (!tmp)
        return -1;
    memcpy(tmp, t->data, (size_t)h.nbytes);
    dplane_payload_swap(tmp, n);
    int rc = write_full(fd, tmp, (size_t)h.nbytes);
    free(tmp);
    return rc;
#else
    return write_full(fd, t->data, (size_t)h.nbytes);
#endif
}

int dplane_send(dplane_t *dp, const char *addr, const mbox_tag_t *tag, const tensor_t *t)
{
    if (strcmp(addr, dp->addr) == 0) {
        tensor_t *copy = tensor_clone(t);
        if (!copy)
            return -1;
        mbox_put(dp->mb, tag, copy);       /* takes copy */
        return 0;
    }
    dp_peer_t *p = peer_get(dp, addr);
    if (!p)
        return -1;
    int rc = -1;
    pthread_mutex_lock(&p->mu);
    /* Second round: the kept connection may have died (peer restarted). */
    for (int round = 0; round < 2 && rc != 0; round++) {
        if (p->fd < 0 && peer_connect(dp, p) != 0)
            break;
        rc = write_frame(dp, p, tag, t);
        if (rc != 0)
            peer_disconnect(p);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}
