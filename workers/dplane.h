/* dplane.h - the data plane: tagged tensors between workers, over UCX.
 *
 * Each worker runs one UCX worker (ucp). Peers are named by data_addr
 * ("host:port", what the controller hands peers; DESIGN Part E): a plain
 * TCP port of ours that answers every connection with "ATDA" | u32 length
 * | the UCX worker address, and closes without reading a byte (UCX 1.13's
 * own sockaddr listener aborts the process on junk, so it is not exposed).
 * A sender learns a peer's UCX address once, from the owner's resolver
 * (atoll-worker: the controller's directory, where every worker registers
 * its address) or, with none set, from the peer's port, and makes one UCX
 * endpoint to it. The port also tells a dead peer (it refuses) from a
 * restarted one (it serves another address: a new endpoint is made from
 * that) and from a live one (the same address, or no answer in time: the
 * kernel accepts for a live process even while it is too busy to answer);
 * see dplane_set_recheck for when it is asked. UCX picks the transports
 * per peer at run time: shared memory (posix, CMA single-copy for large
 * messages) to same-host peers, TCP to others, RDMA (verbs) when the
 * machine has it and UCX_TLS allows it. No Atoll code is per transport
 * (docs/operations.md, "Data plane").
 *
 * A message is one UCX active message: the frame header (dplane_frame.h)
 * as the AM header, the payload (numel f32 values, little-endian) as its
 * data. The receiver decodes and checks the header, then asks the
 * mailbox's gate (mbox_admit: the task, its attempt's key, the unclaimed
 * caps) before it allocates anything; large payloads come by rendezvous
 * only after that, so a length claim costs nothing. Frames for tasks this
 * worker does not run are dropped or kept, bounded, as unclaimed (see
 * mbox.h).
 *
 * Threads: a runner waiting in the mailbox for a message progresses the
 * UCX worker itself for a while (DPLANE_POLL_US, mbox_set_poller), so
 * the message is received by the thread that wants it, with no wake-up on
 * the way. Otherwise one progress thread drives the worker: it progresses
 * while there is work (and, with enough cores, for DPLANE_SPIN_US after),
 * then arms the worker and sleeps in epoll (unarmed while takers poll), so
 * an idle worker costs ~0 CPU. Handlers run in whichever thread
 * progresses, one at a time. Senders call dplane_send() from any thread and
 * block in it until their payload is no longer needed; the owner (main.c)
 * starts and stops the dplane.
 *
 * The frame header's layout and codec: dplane_frame.h (included here). The
 * implementation's files and what they share: dplane_int.h. */
#ifndef ATOLL_DPLANE_H
#define ATOLL_DPLANE_H

#include <stddef.h>
#include <stdint.h>

#include "dplane_frame.h"
#include "mbox.h"
#include "tensor.h"

#define DPLANE_ADDR_MAX 64
/* A UCX worker address's bytes at most (~215 seen: shared memory, TCP). */
#define DPLANE_UCX_ADDR_MAX 8192
/* Peers connected to one worker at a time (each peer keeps one endpoint
 * per worker, so a few hundred leaves room for large clusters); more are
 * rejected. Must stay below MBOX_MAX_ORIGINS (a connection's slot is its
 * mailbox origin). */
#define DPLANE_MAX_CONNS 512
/* Frames waiting for unclaimed room (their payloads stay with the sender
 * or UCX meanwhile); more are dropped at once. */
#define DPLANE_MAX_PARKED 1024
/* The progress thread polls this long after the last event before it
 * sleeps, on hosts with at least DPLANE_SPIN_MIN_CPUS online CPUs; on
 * smaller ones it never spins (measured on 2 cores: a spinning progress
 * thread takes the core a runner or a peer needs, and chained
 * computations got slower by a fifth). */
#define DPLANE_SPIN_US 50
#define DPLANE_SPIN_MIN_CPUS 8
/* A runner waiting for a message (mbox_set_poller) or for its send to
 * complete progresses the UCX worker itself before it sleeps: the handler
 * then runs in the thread that waits. Below DPLANE_SPIN_MIN_CPUS it
 * polls DPLANE_POLL_US and yields the core between polls. (Measured on 2
 * cores: 50 us ended most waits of a ping-pong before the answer came;
 * a budget that halved after each such wait and doubled after each
 * answered one kept chained computations as they were but lost most of
 * the collectives' gain.) On larger hosts it polls DPLANE_POLL_LARGE_US,
 * spinning for the first DPLANE_POLL_US and yielding between polls after
 * (so that many worker processes on one host still hand the core to the
 * peer they wait for). A waiter that sleeps is woken through the progress
 * thread, two wake-ups that cost 0.1-0.5 ms on a VM whose idle vCPUs
 * halt: measured on a 16-CPU one, `sim` chains of 0.5 and 1 ms
 * computations kept their devices under 95 % busy in 12 of 26 runs
 * (30-80 %) with a 200 us budget, in 1 of 14 with 2 ms
 * (docs/performance.md, "Stop 71").
 * While the host's CPUs are contended (cpupsi.h: many worker processes
 * on one host), a longer budget falls back to DPLANE_POLL_US.
 * dplane_set_poll_us() replaces the budget (the worker's --spin-us). */
#define DPLANE_POLL_US 200
#define DPLANE_POLL_LARGE_US 2000
_Static_assert(DPLANE_POLL_LARGE_US > DPLANE_POLL_US, "large hosts poll longer");
/* While runners poll, the progress thread sleeps unarmed and looks again
 * this often (dplane_progress.c, "waiters that progress"). */
#define DPLANE_UNARMED_MS 1
_Static_assert(DPLANE_MAX_CONNS < MBOX_MAX_ORIGINS, "connection slots are mailbox origins");

/* What the data plane refused (worker-local; heartbeat figures). */
typedef struct dplane_guard_stats {
    int64_t refused;            /* connection requests rejected: over the cap */
    int64_t bad_frames;         /* messages dropped for a bad header */
    int64_t conns;              /* peers connected now */
    mbox_guard_stats_t mb;      /* frames dropped (bad key among them), expired, unclaimed */
} dplane_guard_stats_t;

typedef enum dplane_transport {
    DPLANE_AUTO = 0,            /* UCX chooses (UCX_TLS, when set, limits it) */
    DPLANE_TCP,                 /* UCX's TCP transport only (--data-transport tcp) */
} dplane_transport_t;

typedef struct dplane dplane_t;
typedef struct shmpool shmpool_t;

/* A shared-memory pool (shmpool.h) over a UCX context with the data
 * plane's settings for tr, for dplane_start(); keep_bytes: free blocks
 * kept for reuse. NULL with a logged reason on failure. */
shmpool_t *dplane_pool_new(dplane_transport_t tr, size_t keep_bytes);

/* Listens on listen_addr ("127.0.0.1:0" picks a free port) and starts the
 * progress thread. Frames go into mb (borrowed; must outlive the dplane),
 * whose takers then progress the dplane while they wait (mb's poller is
 * set here and cleared by dplane_stop; no take may be in progress).
 * advertise_host, when not NULL/"", replaces the bound host in the
 * reported address (for wildcard binds). pool (borrowed, may be NULL;
 * made by dplane_pool_new with the same tr, must outlive the dplane):
 * the UCX worker lives in its context, and tensors whose data lies in it
 * are read by same-host peers in one copy (dplane.c, "Sends from the
 * pool"). Returns NULL with a logged reason on failure. */
dplane_t *dplane_start(const char *listen_addr, const char *advertise_host, mbox_t *mb,
                       dplane_transport_t tr, shmpool_t *pool);
/* The polling budget of this host's waiters (DPLANE_POLL_US): what a
 * dplane starts with on a host of ncpu online CPUs. */
int64_t dplane_poll_budget_us(long ncpu);
/* Replaces dp's polling budget: us (0: waiters sleep at once, never
 * poll); for takes from its mailbox (mbox_set_poller's spin_us) and for
 * its sends. While no take or send is in progress (before the first
 * task). */
void dplane_set_poll_us(dplane_t *dp, int64_t us);
/* The polling budget set (dplane_set_poll_us, or the host's). */
int64_t dplane_poll_us(dplane_t *dp);
/* How long a waiter polls now: the budget set, or DPLANE_POLL_US while
 * this host's CPUs are contended (cpupsi.h; sampled about once a second
 * by the progress thread, only when the budget set is longer). */
int64_t dplane_poll_now_us(dplane_t *dp);
/* Reads the host's CPU pressure from path (borrowed; cpupsi.h's format)
 * instead of /proc/pressure/cpu, from the next sample on (tests). */
void dplane_set_pressure_file(dplane_t *dp, const char *path);
/* Closes every endpoint and the listener, joins the progress thread,
 * frees. No thread may be inside dplane_send() or taking from mb. */
void dplane_stop(dplane_t *dp);
/* "127.0.0.1:40123": the address peers use to reach this worker. */
const char *dplane_addr(const dplane_t *dp);
/* Our UCX worker address: *len bytes, borrowed until dplane_stop(). */
const void *dplane_ucx_address(const dplane_t *dp, size_t *len);

/* Where peers' UCX worker addresses come from: fn answers the address of
 * the peer at data_addr `addr` (malloc'd, 1..DPLANE_UCX_ADDR_MAX bytes in
 * *len; the dplane frees it), or NULL when it does not know a live one
 * (the send then fails like one to a dead peer). Called from sending
 * threads, outside the dplane's locks, once per peer endpoint made. */
typedef void *(*dplane_resolve_fn)(void *ctx, const char *addr, size_t *len);
/* Sets the resolver; before the first send (senders read it unlocked).
 * Without one, the peer's own port is asked (one TCP exchange, given up
 * after a second: fine for a few peers, not for hundreds asking one busy
 * peer at once). */
void dplane_set_resolver(dplane_t *dp, dplane_resolve_fn fn, void *ctx);

/* A peer restarted on the same data_addr has a new UCX address, and an
 * endpoint made from the old one may even "complete" sends (into the dead
 * process's shared memory). So a send on an endpoint whose address was last
 * resolved or confirmed more than us ago first asks the peer's port what
 * it serves (one TCP exchange, at most DPLANE_PROBE_TIMEOUT_MS; no answer
 * in time keeps the endpoint), and a new address makes a new endpoint.
 * Safe when us is below the time a peer takes to be replaced: atoll-worker
 * sets half its lease (a successor registers only once its predecessor's
 * lease, renewed every third of it, ran out). Default DPLANE_RECHECK_US;
 * any thread. */
#define DPLANE_RECHECK_US 1000000
#define DPLANE_PROBE_TIMEOUT_MS 250
void dplane_set_recheck(dplane_t *dp, int64_t us);

/* Sends a copy of t (borrowed) tagged tag, with key (its attempt's), to
 * the worker at addr. Blocks until t's memory is no longer needed (the
 * payload was copied out or fetched by the peer). A send to this worker's
 * own address goes straight to the mailbox. Returns 0, or -1 when the peer
 * cannot be reached (one fresh endpoint is tried after a failed one, or
 * after one to a process the peer's port no longer names). */
int dplane_send(dplane_t *dp, const char *addr, const mbox_tag_t *tag, const mbox_key_t *key,
                const tensor_t *t);
/* The same, giving up on a send still incomplete at deadline_mono_us
 * (util_mono_us() clock) instead of after a minute: a runner bounds a
 * send to a live but stopped peer by its peer timeout, as it does its
 * receives. */
int dplane_send_until(dplane_t *dp, const char *addr, const mbox_tag_t *tag,
                      const mbox_key_t *key, const tensor_t *t, int64_t deadline_mono_us);

void dplane_guard_stats(dplane_t *dp, dplane_guard_stats_t *out);

/* The UCX transports of this worker's endpoint to addr, comma-separated
 * ("sysv,cma", "tcp"), written to out; 0, or -1 when there is no
 * endpoint to addr (no send yet). For tests, benchmarks and logs. */
int dplane_transports(dplane_t *dp, const char *addr, char *out, size_t outlen);

/* Splits "host:port" (IPv4 dotted or "localhost"). Returns 0 or -1. */
int dplane_parse_addr(const char *addr, char *host, size_t hostlen, int *port);

#endif
