/* dplane.c - see dplane.h.
 *
 * Threads: one accept thread, one reader thread per accepted connection.
 * Incoming connections sit on a list so dplane_stop() can shut their
 * sockets down (which wakes their blocking reads) and join them; finished
 * readers are reaped at each accept so the list stays short.
 * Outgoing connections: one per peer address, created on first use and
 * kept; the per-peer mutex serialises whole frames. */
#include "dplane.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

typedef struct dp_conn {           /* an accepted connection */
    int fd;
    pthread_t thread;
    atomic_int done;               /* set by the reader as it exits */
    struct dp_conn *next;
    struct dplane *dp;
} dp_conn_t;

typedef struct dp_peer {           /* an outgoing connection */
    char addr[DPLANE_ADDR_MAX];
    pthread_mutex_t mu;            /* serialises frames; guards fd */
    int fd;                        /* -1 when not connected */
    struct dp_peer *next;
} dp_peer_t;

struct dplane {
    mbox_t *mb;                    /* borrowed */
    int listen_fd;
    char addr[DPLANE_ADDR_MAX];
    pthread_t accept_thread;
    atomic_int stopping;
    pthread_mutex_t conns_mu;      /* guards conns */
    dp_conn_t *conns;
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
static void *reader_main(void *arg)
{
    dp_conn_t *c = arg;
    uint8_t buf[DPLANE_HDR_SIZE];
    for (;;) {
        if (read_full(c->fd, buf, sizeof buf) != 0)
            break;
        dplane_hdr_t h;
        if (dplane_hdr_decode(buf, &h) != 0) {
            log_warn("dplane: bad frame header, closing connection");
            break;
        }
        tensor_t *t = tensor_new(&h.shape);
        if (!t) {
            log_error("dplane: out of memory for a %llu-byte frame", (unsigned long long)h.nbytes);
            break;
        }
        if (read_full(c->fd, t->data, (size_t)h.nbytes) != 0) {
            tensor_free(t);
            break;
        }
        dplane_payload_swap(t->data, shape_numel(&t->shape));
        mbox_put(c->dp->mb, &h.tag, t);   /* takes t */
    }
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
            free(c);
        } else {
            p = &c->next;
        }
    }
}

static void *accept_main(void *arg)
{
    dplane_t *dp = arg;
    while (!atomic_load(&dp->stopping)) {
        int fd = accept4(dp->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (!atomic_load(&dp->stopping))
                log_error("dplane: accept: %s", strerror(errno));
            break;
        }
        dp_conn_t *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->dp = dp;
        pthread_mutex_lock(&dp->conns_mu);
        reap_locked(dp);
        if (pthread_create(&c->thread, NULL, reader_main, c) != 0) {
            pthread_mutex_unlock(&dp->conns_mu);
            log_error("dplane: cannot start a reader thread");
            close(fd);
            free(c);
            continue;
        }
        c->next = dp->conns;
        dp->conns = c;
        pthread_mutex_unlock(&dp->conns_mu);
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

dplane_t *dplane_start(const char *listen_addr, const char *advertise_host, mbox_t *mb)
{
    dplane_t *dp = calloc(1, sizeof *dp);
    if (!dp)
        return NULL;
    dp->mb = mb;
    dp->listen_fd = -1;
    pthread_mutex_init(&dp->conns_mu, NULL);
    pthread_mutex_init(&dp->peers_mu, NULL);
    if (listen_on(dp, listen_addr, advertise_host) != 0)
        goto fail;
    if (pthread_create(&dp->accept_thread, NULL, accept_main, dp) != 0) {
        log_error("dplane: cannot start the accept thread");
        goto fail;
    }
    return dp;
fail:
    if (dp->listen_fd >= 0)
        close(dp->listen_fd);
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
    /* On Linux shutdown() of a listening socket wakes a blocked accept(). */
    shutdown(dp->listen_fd, SHUT_RDWR);
    pthread_join(dp->accept_thread, NULL);
    close(dp->listen_fd);
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

/* Writes one frame. Caller holds the peer's mutex. */
static int write_frame(int fd, const mbox_tag_t *tag, const tensor_t *t)
{
    int64_t n = shape_numel(&t->shape);
    dplane_hdr_t h = {.tag = *tag, .shape = t->shape, .nbytes = (uint64_t)n * sizeof(float)};
    uint8_t buf[DPLANE_HDR_SIZE];
    dplane_hdr_encode(&h, buf);
    if (write_full(fd, buf, sizeof buf) != 0)
        return -1;
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
        if (p->fd < 0 && (p->fd = connect_retry(addr)) < 0)
            break;
        rc = write_frame(p->fd, tag, t);
        if (rc != 0) {
            close(p->fd);
            p->fd = -1;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}
