/* dplane_frame.c - the frame codec of dplane_frame.h, and the big-endian
 * helpers the address port (dplane.c) shares with it.
 *
 * Pure: no UCX call, no I/O, no allocation, no shared state, so any thread
 * may call it and the fuzzer runs it without a data plane (fuzz_frame).
 * Invariant: a header that dplane_hdr_decode() accepts has a rank of at
 * most TENSOR_MAX_RANK, positive dims within it and zeros past it, at
 * most TENSOR_MAX_ELEMS elements, and a payload size of exactly numel * 4
 * bytes; the receive path relies on it before it allocates anything. */
#include "dplane_frame.h"

#include <string.h>

#include "dplane_int.h"

void dp_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

uint32_t dp_get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)dp_get_u32(p) << 32 | dp_get_u32(p + 4);
}

void dplane_hdr_encode(const dplane_hdr_t *h, uint8_t buf[DPLANE_HDR_SIZE])
{
    dp_put_u32(buf + 0, DPLANE_MAGIC);
    dp_put_u32(buf + 4, (uint32_t)h->shape.rank);
    put_u64(buf + 8, (uint64_t)h->tag.job);
    dp_put_u32(buf + 16, (uint32_t)h->tag.attempt);
    dp_put_u32(buf + 20, (uint32_t)h->tag.comp);
    dp_put_u32(buf + 24, (uint32_t)h->tag.op);
    dp_put_u32(buf + 28, (uint32_t)h->tag.src);
    dp_put_u32(buf + 32, (uint32_t)h->tag.dst);
    for (int i = 0; i < TENSOR_MAX_RANK; i++)
        put_u64(buf + 36 + 8 * i, (uint64_t)h->shape.dim[i]);
    put_u64(buf + 68, h->nbytes);
    put_u64(buf + 76, (uint64_t)h->ready_unix_us);
    memcpy(buf + 84, h->key.b, MBOX_KEY_SIZE);
}

int dplane_hdr_decode(const uint8_t buf[DPLANE_HDR_SIZE], dplane_hdr_t *h)
{
    memset(h, 0, sizeof *h);
    if (dp_get_u32(buf) != DPLANE_MAGIC)
        return -1;
    uint32_t rank = dp_get_u32(buf + 4);
    if (rank > TENSOR_MAX_RANK)
        return -1;
    h->shape.rank = (int)rank;
    h->tag.job = (int64_t)get_u64(buf + 8);
    h->tag.attempt = (int32_t)dp_get_u32(buf + 16);
    h->tag.comp = (int32_t)dp_get_u32(buf + 20);
    h->tag.op = (int32_t)dp_get_u32(buf + 24);
    h->tag.src = (int32_t)dp_get_u32(buf + 28);
    h->tag.dst = (int32_t)dp_get_u32(buf + 32);
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
    h->ready_unix_us = (int64_t)get_u64(buf + 76);
    if (h->ready_unix_us < 0 || h->ready_unix_us > DPLANE_READY_MAX)
        return -1;
    memcpy(h->key.b, buf + 84, MBOX_KEY_SIZE);
    return 0;
}

size_t dplane_rma_encode(const dplane_hdr_t *h, const dplane_rma_ref_t *r, uint8_t *buf,
                         size_t cap)
{
    size_t len = DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + (size_t)r->rkey_len;
    if (r->rkey_len < 1 || r->rkey_len > DPLANE_RKEY_MAX || cap < len)
        return 0;
    dplane_hdr_encode(h, buf);
    uint8_t *p = buf + DPLANE_HDR_SIZE;
    put_u64(p, r->cookie);
    put_u64(p + 8, r->raddr);
    put_u64(p + 16, r->block);
    put_u64(p + 24, r->host);
    dp_put_u32(p + 32, r->rkey_len);
    memcpy(p + DPLANE_RMA_FIXED, r->rkey, r->rkey_len);
    return len;
}

int dplane_rma_decode(const uint8_t *buf, size_t len, dplane_hdr_t *h, dplane_rma_ref_t *r)
{
    if (len < DPLANE_HDR_SIZE + DPLANE_RMA_FIXED || dplane_hdr_decode(buf, h) != 0)
        return -1;
    const uint8_t *p = buf + DPLANE_HDR_SIZE;
    r->cookie = get_u64(p);
    r->raddr = get_u64(p + 8);
    r->block = get_u64(p + 16);
    r->host = get_u64(p + 24);
    r->rkey_len = dp_get_u32(p + 32);
    if (r->rkey_len < 1 || r->rkey_len > DPLANE_RKEY_MAX ||
        len != DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + (size_t)r->rkey_len)
        return -1;
    memcpy(r->rkey, p + DPLANE_RMA_FIXED, r->rkey_len);
    return 0;
}
