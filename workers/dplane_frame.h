/* dplane_frame.h - the data plane's frame header: its layout and codec.
 *
 * A data-plane message is one UCX active message: this frame header as the
 * AM header, the payload (numel f32 values, little-endian) as its data.
 * The codec is pure (no UCX, no I/O, no allocation, no locks: any thread),
 * unit-tested and fuzzed on its own (tests/fuzz/fuzz_frame.c). The
 * receive path (dplane_rx.c) decodes and checks every header here before
 * it asks the mailbox's gate or allocates anything; dplane_send() encodes.
 * dplane.h includes this header: its users see these names as before.
 *
 * Frame header (all integers big-endian):
 *   u32 magic "ATDP" | u32 rank | i64 job | i32 attempt | i32 comp | i32 op
 *   | i32 src | i32 dst | 4 x i64 dims | u64 payload bytes | i64 ready
 *   | 16 key bytes
 * ready: when the value exists on the sender's devices (a `sim` worker's
 * modelled device time, tensor_t.ready_us), as unix microseconds, 0..2^52;
 * 0: it exists now. */
#ifndef ATOLL_DPLANE_FRAME_H
#define ATOLL_DPLANE_FRAME_H

#include <stdint.h>

#include "mbox.h"
#include "tensor.h"

#define DPLANE_MAGIC 0x41544450u   /* "ATDP" */
#define DPLANE_HDR_SIZE 100
#define DPLANE_READY_MAX ((int64_t)1 << 52)
/* The furthest ahead a received value's ready time may be (dplane_rx.c). */
#define DPLANE_READY_AHEAD_US 1000000

typedef struct dplane_hdr {
    mbox_tag_t tag;
    shape_t shape;
    uint64_t nbytes;            /* payload bytes = numel * 4 */
    int64_t ready_unix_us;      /* 0..DPLANE_READY_MAX (see above) */
    mbox_key_t key;
} dplane_hdr_t;

/* A pool send's "read it here" (DPLANE_AM_RMA_ID; dplane.c, "Sends from
 * the pool"): the frame header, then (big-endian) u64 cookie | u64
 * address | u64 block id | u64 host id | u32 key length, then the packed
 * remote key. */
#define DPLANE_RMA_FIXED 36
#define DPLANE_RKEY_MAX 1024
typedef struct dplane_rma_ref {
    uint64_t cookie, raddr, block;
    uint64_t host;              /* the sender's view of shared memory (dp_host_id) */
    uint32_t rkey_len;          /* 1..DPLANE_RKEY_MAX */
    uint8_t rkey[DPLANE_RKEY_MAX];
} dplane_rma_ref_t;

/* Frame codec: pure functions, unit-tested and fuzzed on their own. */
void dplane_hdr_encode(const dplane_hdr_t *h, uint8_t buf[DPLANE_HDR_SIZE]);
/* Returns 0, or -1 when the bytes are not a valid header (bad magic, rank,
 * negative dim, too many elements, payload size not matching the shape,
 * ready out of range). */
int dplane_hdr_decode(const uint8_t buf[DPLANE_HDR_SIZE], dplane_hdr_t *h);
/* A pool send's header: DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + r->rkey_len
 * bytes into buf (cap bytes); returns that length, or 0 when it does not
 * fit or the key length is out of range. */
size_t dplane_rma_encode(const dplane_hdr_t *h, const dplane_rma_ref_t *r, uint8_t *buf,
                         size_t cap);
/* Decodes len bytes as a pool send's header: 0, or -1 when the frame
 * header is bad, the key length is 0 or over DPLANE_RKEY_MAX, or len is
 * not exactly the header's length. */
int dplane_rma_decode(const uint8_t *buf, size_t len, dplane_hdr_t *h, dplane_rma_ref_t *r);

#endif
