/* dplane_int.h - the data plane's shared state, internal to workers/dplane*.c
 * (everyone else uses dplane.h).
 *
 * The files, each above the ones it calls:
 *   dplane_progress.c  the UCX context and worker, the progress thread and
 *                      its wake-ups, start, stop, guard figures;
 *   dplane_rx.c        the receive path: origins, the mailbox's gate,
 *                      parked frames, rendezvous fetches;
 *   dplane.c           addresses and the address port, endpoints to peers,
 *                      sends, diagnostics;
 *   dplane_frame.c     the frame codec (dplane_frame.h) and the big-endian
 *                      helpers: pure.
 *
 * UCX objects: one context and one worker (UCS_THREAD_MODE_MULTI: senders
 * post from their own threads while the progress thread progresses) and
 * one endpoint per peer address (dp->peers), made from the peer's UCX
 * worker address.
 *
 * Threads: the UCX worker is progressed by the progress thread and by
 * takers waiting in the mailbox (mbox_set_poller), one at a time: whoever
 * holds prog_mu (until dplane_stop() has joined the progress thread), so
 * every UCX callback (the active-message handler, receive and send
 * completions, endpoint errors) runs under prog_mu, and only its holder
 * writes origins, parked, nparked and rkeys. Runner threads call
 * dplane_send() and block in it. The owner's thread starts and stops.
 *
 * Locks: dp->mu guards peers, origins and norigins, closing and nclosing,
 * and abandoned; it is never held across a UCX call that can run handlers
 * (progress). Lock order: a peer's mu, then dp->mu; a send's mu, then
 * dp->mu.
 *
 * Ownership: the dplane owns its UCX context, worker and address, the
 * listening socket and the epoll fd, every peer entry (until
 * dplane_stop()), the parked frames (and their UCX data until released or
 * fetched), the endpoints queued for closing, and the sends given up on
 * (freed after ucp_worker_destroy()); mb is borrowed. */
#ifndef ATOLL_DPLANE_INT_H
#define ATOLL_DPLANE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "cpupsi.h"
#include "dplane.h"
#include "shmpool.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#error "the data plane's payloads are little-endian floats, sent as they lie in memory"
#endif

#define DPLANE_AM_ID 17u
/* Sends from the pool (dplane.c): the sender's "read it here" (no data;
 * its header: dplane_rma_encode), and the receiver's answer once it has
 * read (u32 cookie high | u32 cookie low | u32 status). */
#define DPLANE_AM_RMA_ID 18u
#define DPLANE_AM_ACK_ID 19u
#define DPLANE_ACK_SIZE 12
enum { DPLANE_ACK_OK = 0, DPLANE_ACK_NO_RMA = 1, DPLANE_ACK_FAILED = 2 };
/* Unpacked remote keys kept by the receiver, by (origin, block id). */
#define DPLANE_RKEY_CACHE 256
#define DPLANE_MAX_CLOSING 4096
/* The progress thread's longest sleep while sends are in flight and
 * nothing happens (dplane_progress.c). */
#define DPLANE_INFLIGHT_TICK_MAX_MS 200
/* How long the progress thread progresses on while UCX refuses to arm
 * with nothing to do, before it naps (dplane_progress.c). */
#define DPLANE_BUSY_SPIN_US 2000
/* A peer whose port did not answer a check is asked again after this
 * (dplane.c, peer_served): its address was not confirmed. */
#define DPLANE_PROBE_RETRY_US 1000000

/* A progress thread that never sleeps (events keep coming) still answers
 * the address port this often: a peer's recheck waits for the answer
 * DPLANE_PROBE_TIMEOUT_MS at most (dplane.h) and takes silence for a
 * live, busy process, so a busy worker should not keep its peers waiting
 * that long for nothing. */
#define DPLANE_PORT_ANSWER_US 100000
_Static_assert(DPLANE_PORT_ANSWER_US < DPLANE_PROBE_TIMEOUT_MS * 1000,
               "a busy peer answers its port within a probe's wait");
/* Connections answered per progress pass (a flood cannot starve UCX). */
#define DPLANE_ACCEPTS_PER_PASS 64

/* The endpoint to one peer address. Its process may change under the
 * address (a worker restarted on a fixed --data-listen), so ep is known to
 * reach whoever the address's port names only as of checked_us: a send
 * after recheck_us more asks the port again (dplane.c, "Peers that
 * restart"). Fields after mu are guarded by dp->mu. Invariant: served
 * implies ep == NULL and ucx != NULL. */
typedef struct dp_peer {
    char addr[DPLANE_ADDR_MAX];
    pthread_mutex_t mu;            /* held while the endpoint is made or checked */
    ucp_ep_h ep;                   /* NULL once failed (a new one is made on use) */
    void *ucx;                     /* owned: the UCX address ep was made from (or, when
                                      served, the one to make the next ep from); NULL
                                      before the first; ucx_len bytes */
    size_t ucx_len;
    int served;                    /* ucx came from the port in place of ep's (the peer
                                      restarted): the next ep is made from it, not from
                                      the resolver's answer */
    int64_t checked_us;            /* monotonic: ep made, or its address confirmed */
    int no_rma;                    /* it cannot read our pool: plain sends only */
    struct dp_peer *next;
} dp_peer_t;

typedef struct dp_origin {         /* a sender, by its reply endpoint */
    ucp_ep_h ep;                   /* NULL: free slot */
    int64_t used_us;
} dp_origin_t;

typedef struct dp_rma {            /* where a pool send's payload lies at its sender */
    dplane_rma_ref_t ref;
    ucp_ep_h ep;                   /* the sender's reply endpoint */
} dp_rma_t;

typedef struct dp_rkey {           /* an unpacked key of a sender's pool block */
    int origin;                    /* 0: free entry */
    uint64_t block;
    ucp_rkey_h rkey;
    const char *lo, *hi;           /* the block's mapping here: every read stays inside */
} dp_rkey_t;

typedef struct dp_park {           /* a frame waiting for unclaimed room */
    dplane_hdr_t h;
    int origin;
    void *data;                    /* UCX's: eager bytes or a rendezvous descriptor */
    int rndv;
    dp_rma_t *rma;                 /* owned: a pool send (data NULL), else NULL */
    int64_t deadline_us;
    struct dp_park *next;
} dp_park_t;

typedef struct send_wait send_wait_t;

struct dplane {
    mbox_t *mb;                    /* borrowed */
    shmpool_t *pool;               /* borrowed, NULL: no pool sends; owns ctx when set */
    ucp_context_h ctx;             /* owned only when pool is NULL */
    ucp_worker_h worker;
    int listen_fd;                 /* data_addr: answers with our worker address */
    dplane_resolve_fn resolve;     /* peers' worker addresses (NULL: their data_addr) */
    void *resolve_ctx;
    atomic_llong recheck_us;       /* a peer's port is asked again after this (dp_peer_t) */
    ucp_address_t *ucx_addr;       /* ours, ucx_addr_len bytes (UCX's) */
    size_t ucx_addr_len;
    int epfd;
    char addr[DPLANE_ADDR_MAX];
    pthread_t progress_thread;
    atomic_int stopping;
    atomic_int inflight;           /* sends and fetches not complete yet */
    int64_t spin_us;               /* polling after the last event (see dplane.h) */
    /* Takers that progress (dplane_progress.c): prog_mu is held by whoever
     * progresses the worker or touches the receive path's state; pollers:
     * takers polling now; unarmed: the progress thread sleeps unarmed;
     * yield_polls: pollers yield the core between polls from the start
     * (small hosts), else once they polled DPLANE_POLL_US; poll_max_us:
     * how long a waiter polls (dplane_set_poll_us; the mailbox's spin_us);
     * contended: the host's CPUs are (dp_pressure_check), so a waiter
     * polls no longer than DPLANE_POLL_US (dp_poll_budget); psi: the
     * progress thread's sampler of that, under prog_mu. */
    pthread_mutex_t prog_mu;
    atomic_int pollers, unarmed;
    int yield_polls;
    atomic_llong poll_max_us;
    atomic_int contended;
    cpupsi_t psi;
    int wake_fd;                   /* eventfd: dp_wake() */
    int epfd_unarmed;              /* the unarmed sleep's: wake_fd, listen_fd */
    pthread_mutex_t mu;
    dp_peer_t *peers;
    dp_origin_t origins[DPLANE_MAX_CONNS];
    int norigins;                  /* origins[0..norigins) are in use */
    dp_park_t *parked;
    int nparked;
    ucp_ep_h closing[DPLANE_MAX_CLOSING];
    int nclosing;
    send_wait_t *abandoned;        /* sends given up on; see send_abandon() */
    send_wait_t *rma_waits;        /* pool sends waiting for their ACK, by cookie */
    uint64_t rma_cookie;           /* next cookie (random start), under mu */
    dp_rkey_t rkeys[DPLANE_RKEY_CACHE];   /* under prog_mu */
    int rkey_next;                 /* round-robin victim */
    atomic_llong refused, bad_frames, accept_errors;
    atomic_llong pool_reads;       /* payloads read from a sender's pool block */
    uint64_t host_id;              /* our view of shared memory (dp_host_id) */
};

/* dplane_frame.c: big-endian integers at p (p holds 4 bytes). Pure. */
void dp_put_u32(uint8_t *p, uint32_t v);
uint32_t dp_get_u32(const uint8_t *p);

/* dplane_rx.c, under prog_mu. */
/* The UCX active-message handler (registered by dplane_start(), arg: the
 * dplane): decodes, gates, and copies, fetches or parks the frame. */
ucs_status_t dp_am_recv(void *arg, const void *header, size_t header_length, void *data,
                        size_t length, const ucp_am_recv_param_t *param);
/* Offers every parked frame to the gate again; how many left the list. */
int dp_parked_retry(dplane_t *dp);
/* The handler of pool sends (DPLANE_AM_RMA_ID): decodes, gates, reads the
 * payload from the sender's block and answers it (DPLANE_AM_ACK_ID). */
ucs_status_t dp_am_rma(void *arg, const void *header, size_t header_length, void *data,
                       size_t length, const ucp_am_recv_param_t *param);
/* Forgets the unpacked keys of origin (its slot is recycled or stopping). */
void dp_rkeys_drop(dplane_t *dp, int origin);

/* dplane.c, under prog_mu: the handler of ACKs to our pool sends. */
ucs_status_t dp_am_ack(void *arg, const void *header, size_t header_length, void *data,
                       size_t length, const ucp_am_recv_param_t *param);

/* dplane_progress.c: wakes the progress thread (any thread; armed or
 * unarmed sleep alike). */
void dp_wake(dplane_t *dp);
/* dplane_progress.c: a waiting runner's progress (ctx: the dplane), as
 * mb's poller (mbox.h): enter before polling, dp_poll (progress once if
 * nobody else is; never blocks; waited_us: how long this waiter has
 * polled; 0 once that reached dplane_poll_now_us: stop) while it returns
 * 1, leave when done; need: this or another waiter sleeps now. */
void dp_poll_enter(void *ctx);
int dp_poll(void *ctx, int64_t waited_us);
void dp_poll_leave(void *ctx, int need);

/* dplane_progress.c: which shared memory and processes this process
 * sees: a hash of the boot id and of its IPC, PID and mount namespaces.
 * Two processes with the same id open the same /dev/shm segments and
 * /proc/PID links (UCX's POSIX segments are opened through the owner's
 * /proc/PID/fd), so only then may a receiver map a sender's block; in
 * another container the same PID may be another process. */
uint64_t dp_host_id(void);

/* dplane.c */
/* Binds data_addr and sets dp->addr (dplane_start(), before the progress
 * thread runs). 0, or -1 with a logged reason. */
int dp_listen_on(dplane_t *dp, const char *listen_addr, const char *advertise_host);
/* Answers waiting connections on data_addr with our worker address
 * (progress thread; never blocks). How many were answered. */
int dp_addr_answer(dplane_t *dp);
/* Frees the sends UCX never completed (dplane_free(), after
 * ucp_worker_destroy(): their requests went with the worker). */
void dp_send_waits_free_abandoned(dplane_t *dp);

#endif
