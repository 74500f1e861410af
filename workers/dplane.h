/* dplane.h - the data plane: tagged tensors between workers, over shared
 * memory to peers on this host and TCP to the others (see dplane.c).
 *
 * Each worker listens on one TCP address (its data_addr). A thread per
 * accepted connection (at most DPLANE_MAX_CONNS; more are closed at once)
 * reads frames and puts their tensors into the worker's mailbox, through
 * its gate (mbox_admit: frames for tasks this worker does not run are
 * dropped or kept, bounded, as unclaimed; see mbox.h). A bad header (magic,
 * rank, dims, length claim) closes the connection; no length claim is
 * allocated before the gate admitted it. Senders keep one outgoing connection per peer address,
 * each behind its own mutex so that frames never interleave. A send to the
 * worker's own data_addr skips the socket and goes straight to the mailbox.
 *
 * Frame (all integers big-endian):
 *   u32 magic "ATDP" | u32 rank | i64 job | i32 attempt | i32 comp | i32 op
 *   | i32 src | i32 dst | 4 x i64 dims | u64 payload bytes
 * followed by the payload: numel f32 values, IEEE-754 little-endian. */
#ifndef ATOLL_DPLANE_H
#define ATOLL_DPLANE_H

#include <stddef.h>
#include <stdint.h>

#include "mbox.h"
#include "tensor.h"

#define DPLANE_MAGIC 0x41544450u   /* "ATDP" */
#define DPLANE_HDR_SIZE 76
/* Same-host hello: u32 "ATDR" | u32 0 (not checked) | u64 ring bytes. */
#define DPLANE_HELLO_MAGIC 0x41544452u   /* "ATDR" */
#define DPLANE_HELLO_SIZE 16
#define DPLANE_ADDR_MAX 64
/* Accepted data connections per worker (peers keep one each per worker,
 * so a few hundred leaves room for large clusters); must stay below
 * MBOX_MAX_ORIGINS (a connection's slot is its mailbox origin). */
#define DPLANE_MAX_CONNS 512
#define DPLANE_READER_STACK ((size_t)256 << 10)
/* Pause after accept() ran out of descriptors or memory. */
#define DPLANE_ACCEPT_BACKOFF_MS 50
_Static_assert(DPLANE_MAX_CONNS < MBOX_MAX_ORIGINS, "connection slots are mailbox origins");

/* What the data plane refused (worker-local; logged by the accept thread
 * every 10 s when it changed). */
typedef struct dplane_guard_stats {
    int64_t refused;            /* connections closed at once: over the cap, or a
                                   same-host peer of another user */
    int64_t bad_frames;         /* connections closed on a bad header or hello */
    int64_t accept_errors;      /* accept() out of descriptors or memory */
    int64_t conns;              /* accepted connections open now */
    mbox_guard_stats_t mb;      /* frames dropped, expired, unclaimed */
} dplane_guard_stats_t;

typedef struct dplane_hdr {
    mbox_tag_t tag;
    shape_t shape;
    uint64_t nbytes;            /* payload bytes = numel * 4 */
} dplane_hdr_t;

/* Frame codec: pure functions, unit-tested on their own. */
void dplane_hdr_encode(const dplane_hdr_t *h, uint8_t buf[DPLANE_HDR_SIZE]);
/* Returns 0, or -1 when the bytes are not a valid header (bad magic, rank,
 * negative dim, too many elements, payload size not matching the shape). */
int dplane_hdr_decode(const uint8_t buf[DPLANE_HDR_SIZE], dplane_hdr_t *h);
/* Returns 0 with *ring_bytes set (at most SHMRING_MAX_BYTES), or -1 when
 * the bytes are not a same-host hello (bad magic, ring too large). The
 * ring's memfd is checked against *ring_bytes when it is attached. */
int dplane_hello_decode(const uint8_t buf[DPLANE_HELLO_SIZE], uint64_t *ring_bytes);
/* Payload byte order: converts n floats between host order and the wire's
 * little-endian order (a no-op on little-endian hosts). */
void dplane_payload_swap(float *data, int64_t n);

typedef struct dplane dplane_t;

/* Listens on listen_addr ("127.0.0.1:0" picks a free port) and starts the
 * accept thread. Frames go into mb (borrowed; must outlive the dplane).
 * advertise_host, when not NULL/"", replaces the bound host in the
 * reported address (for wildcard binds). Returns NULL with a logged reason
 * on failure. */
dplane_t *dplane_start(const char *listen_addr, const char *advertise_host, mbox_t *mb);
/* Closes the listener and every connection, joins all threads, frees. */
void dplane_stop(dplane_t *dp);
/* "127.0.0.1:40123": the address peers use to reach this worker. */
const char *dplane_addr(const dplane_t *dp);

/* Sends a copy of t (borrowed) tagged tag to the worker at addr. Blocks
 * until the bytes are written to the kernel (or the local put is done).
 * Returns 0, or -1 when the peer cannot be reached (one reconnect is tried
 * after a broken connection; connects are retried for up to about a
 * second). */
int dplane_send(dplane_t *dp, const char *addr, const mbox_tag_t *tag, const tensor_t *t);

/* Shared memory to same-host peers: on by default (--data-transport auto);
 * off = TCP to every peer (--data-transport tcp). Affects new connections. */
void dplane_set_shm(dplane_t *dp, int on);
void dplane_guard_stats(dplane_t *dp, dplane_guard_stats_t *out);

/* Frames sent so far through shared memory and over TCP (not counting
 * same-process deliveries). */
void dplane_counts(dplane_t *dp, int64_t *shm_frames, int64_t *tcp_frames);
/* Non-zero when two data addresses are on one host: the same host part, or
 * both loopback. */
int dplane_same_host(const char *a, const char *b);

/* Splits "host:port" (IPv4 dotted or "localhost"). Returns 0 or -1. */
int dplane_parse_addr(const char *addr, char *host, size_t hostlen, int *port);

#endif
