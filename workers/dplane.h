/* dplane.h - the data plane: tagged tensors between workers, over shared
 * memory to peers on this host and TCP to the others (see dplane.c).
 *
 * Each worker listens on one TCP address (its data_addr). A thread per
 * accepted connection reads frames and puts their tensors into the
 * worker's mailbox. Senders keep one outgoing connection per peer address,
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
#define DPLANE_ADDR_MAX 64

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
/* Frames sent so far through shared memory and over TCP (not counting
 * same-process deliveries). */
void dplane_counts(dplane_t *dp, int64_t *shm_frames, int64_t *tcp_frames);
/* Non-zero when two data addresses are on one host: the same host part, or
 * both loopback. */
int dplane_same_host(const char *a, const char *b);

/* Splits "host:port" (IPv4 dotted or "localhost"). Returns 0 or -1. */
int dplane_parse_addr(const char *addr, char *host, size_t hostlen, int *port);

#endif
