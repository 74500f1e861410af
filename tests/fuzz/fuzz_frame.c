/* fuzz_frame.c - libFuzzer target for the worker's data-plane receive
 * path: what one peer endpoint delivers as UCX active messages, decoded
 * and gated exactly as dplane_rx.c's dp_am_recv()/rx_offer() do, without UCX.
 *
 * Input: one flags byte (bits 0-1: the endpoint's mailbox origin 1..4),
 * then messages: one selector byte (bit 0: the AM header is 8 bytes too
 * long, which dp_am_recv counts as a bad frame; bit 1: the frame may wait for
 * room, as a rendezvous one can; bit 2: a pool send's header, see
 * frames()), a 100-byte header (dplane_hdr_decode,
 * the attempt key in its last 16 bytes) and its payload. As in dp_am_recv():
 * a bad header or a payload length other than its claim is dropped and the
 * endpoint goes on; mbox_admit() decides before anything is allocated; an
 * admitted frame's payload is copied and handed to mbox_put_from(); WAIT
 * is asked again with the deadline passed (a parked frame's last retry).
 *
 * The mailbox has the gate's cases declared: two tasks of job 7 attempt 1
 * (shards 0 and 1 of 4) under key K1, job 9 attempt 0 cancelled, job 7
 * attempt 0 shard 0 ended; after the frames a late task (job 8 attempt 0
 * comp 1 shard 0 of 2) is declared under key K2, which claims the early
 * frames addressed to it with K2 and drops the others (bad key).
 *
 * Invariants (a violation aborts, which libFuzzer reports):
 *  - an accepted header encodes back to the same 100 bytes, has a valid
 *    shape and nbytes == numel * 4;
 *  - the gate's answer is the model's: TASK exactly for a declared task's
 *    tag with key K1 and a source inside its slice; DROP for the cancelled,
 *    ended or out-of-slice ones, and for a declared task's tag with another
 *    key, counted bad_key; UNCLAIMED, WAIT or (counted over_cap) DROP
 *    otherwise;
 *  - a TASK frame can be taken at once, with its shape and the payload's
 *    bytes; unclaimed bytes never exceed the caps;
 *  - the late task claims exactly the kept early frames addressed to it
 *    under K2; when everything ended, the mailbox is empty and every byte
 *    given back (LeakSanitizer checks the rest). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dplane.h"
#include "mbox.h"
#include "util.h"

typedef struct fz {
    mbox_t *mb;
    int origin;
    const uint8_t *p;           /* unread input */
    size_t left;
    int late_kept;              /* unclaimed frames kept for the late task */
} fz_t;

static const mbox_key_t K1 = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}};
static const mbox_key_t K2 = {{0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa,
                               0xab, 0xac, 0xad, 0xae, 0xaf}};

static int tag_is(const mbox_tag_t *t, int64_t job, int32_t attempt, int32_t comp, int32_t dst)
{
    return t->job == job && t->attempt == attempt && t->comp == comp && t->dst == dst;
}

/* The gate's expected answer; -1 when it may be UNCLAIMED or over-cap DROP,
 * -2 when only "not TASK" is certain (an attempt below the cancelled one:
 * cancelled with it or not, depending on how exact cancels are). */
static int model(const mbox_tag_t *t, const mbox_key_t *key, int *bad_key)
{
    *bad_key = 0;
    if (t->job == 9 && t->attempt == 0)
        return MBOX_ADMIT_DROP;                     /* cancelled */
    if (t->job == 9 && t->attempt < 0)
        return -2;
    if (tag_is(t, 7, 0, 0, 0))
        return MBOX_ADMIT_DROP;                     /* ended */
    if (tag_is(t, 7, 1, 0, 0) || tag_is(t, 7, 1, 0, 1)) {
        *bad_key = memcmp(key, &K1, sizeof K1) != 0;     /* the key first */
        return !*bad_key && t->src >= 0 && t->src < 4 ? MBOX_ADMIT_TASK : MBOX_ADMIT_DROP;
    }
    return -1;
}

static void setup(fz_t *f)
{
    if (!(f->mb = mbox_new()))
        abort();
    if (mbox_expect(f->mb, 7, 1, 0, 0, 4, &K1) || mbox_expect(f->mb, 7, 1, 0, 1, 4, &K1) ||
        mbox_expect(f->mb, 7, 0, 0, 0, 4, &K1))
        abort();
    mbox_task_done(f->mb, 7, 0, 0, 0);
    mbox_cancel_job(f->mb, 9, 0);
}

static void check_header(const uint8_t *buf, const dplane_hdr_t *h)
{
    uint8_t again[DPLANE_HDR_SIZE];
    dplane_hdr_encode(h, again);
    if (memcmp(buf, again, sizeof again) != 0 || !shape_valid(&h->shape) ||
        h->nbytes != (uint64_t)shape_numel(&h->shape) * sizeof(float))
        abort();
}

static void check_caps(fz_t *f)
{
    mbox_guard_stats_t g;
    mbox_guard_stats(f->mb, &g);
    if (g.unclaimed_bytes < 0 || g.unclaimed_bytes > MBOX_UNCLAIMED_TOTAL_BYTES)
        abort();
}

/* A TASK frame was put: it must be there now, whole. */
static void check_take(fz_t *f, const dplane_hdr_t *h, const uint8_t *payload)
{
    tensor_t *t = NULL;
    if (mbox_take(f->mb, &h->tag, 0, &t) != MBOX_OK || !shape_equal(&t->shape, &h->shape) ||
        memcmp(t->data, payload, (size_t)h->nbytes) != 0)
        abort();
    tensor_free(t);
}

/* The gate's answer for h, as rx_offer() asks it: with a deadline ahead
 * when the frame may wait (then once more with it passed, the last retry
 * of a parked frame), else with it passed at once. */
static mbox_admit_t admit(fz_t *f, const dplane_hdr_t *h, int may_wait)
{
    int64_t now = util_mono_us();
    mbox_admit_t a = mbox_admit(f->mb, &h->tag, &h->key, f->origin, (int64_t)h->nbytes,
                                may_wait ? now + 60 * 1000000LL : now);
    if (a == MBOX_ADMIT_WAIT) {
        if (!may_wait)
            abort();
        a = mbox_admit(f->mb, &h->tag, &h->key, f->origin, (int64_t)h->nbytes, 0);
        if (a != MBOX_ADMIT_DROP)
            abort();        /* nothing made room between the two */
    }
    return a;
}

/* One frame whose header and payload arrived whole. */
static void frame(fz_t *f, const dplane_hdr_t *h, const uint8_t *payload, int may_wait)
{
    mbox_guard_stats_t g0, g;
    mbox_guard_stats(f->mb, &g0);
    mbox_admit_t a = admit(f, h, may_wait);
    int bad_key;
    int want = model(&h->tag, &h->key, &bad_key);
    mbox_guard_stats(f->mb, &g);
    if (want >= 0 ? (int)a != want
                  : a == MBOX_ADMIT_TASK ||
                    (want == -1 && a == MBOX_ADMIT_DROP && g.over_cap != g0.over_cap + 1))
        abort();
    if (want == MBOX_ADMIT_DROP && g.bad_key != g0.bad_key + bad_key)
        abort();
    check_caps(f);
    if (a == MBOX_ADMIT_DROP)
        return;
    tensor_t *t = tensor_new(&h->shape);
    if (!t)
        abort();
    memcpy(t->data, payload, (size_t)h->nbytes);
    int kept = mbox_put_from(f->mb, &h->tag, &h->key, t, f->origin, a) == 0;
    if (a == MBOX_ADMIT_TASK && !kept)
        abort();
    if (a == MBOX_ADMIT_TASK)
        check_take(f, h, payload);
    else if (kept && tag_is(&h->tag, 8, 0, 1, 0) && h->tag.src >= 0 && h->tag.src < 2 &&
             memcmp(&h->key, &K2, sizeof K2) == 0)
        f->late_kept++;
}

/* A pool send's header (dp_am_rma): len bytes, whatever they are. One
 * that decodes has a key length in range, is exactly as long as it says,
 * and encodes back to the same bytes. */
static void rma_message(const uint8_t *p, size_t len)
{
    dplane_hdr_t h;
    static dplane_rma_ref_t r;
    static uint8_t back[DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + DPLANE_RKEY_MAX];
    if (dplane_rma_decode(p, len, &h, &r) != 0)
        return;
    if (r.rkey_len < 1 || r.rkey_len > DPLANE_RKEY_MAX ||
        len != DPLANE_HDR_SIZE + DPLANE_RMA_FIXED + (size_t)r.rkey_len ||
        dplane_rma_encode(&h, &r, back, sizeof back) != len || memcmp(back, p, len) != 0)
        abort();
}

/* Messages until the input ends. A message whose header does not decode
 * or whose payload is not its claimed size is dropped (dp_am_recv counts it);
 * the endpoint goes on. Selector bit 2: a pool send's header instead, of
 * the length in the next two bytes (dp_am_rma: decoded, then gated like
 * any frame, which the frames here cover). */
static void frames(fz_t *f)
{
    while (f->left >= 1 + DPLANE_HDR_SIZE) {
        int sel = f->p[0];
        f->p++;
        f->left--;
        if (sel & 4) {
            size_t len = (size_t)f->p[0] << 8 | f->p[1];
            if (len > f->left - 2)
                len = f->left - 2;
            rma_message(f->p + 2, len);
            f->p += 2 + len;
            f->left -= 2 + len;
            continue;
        }
        dplane_hdr_t h;
        int ok = !(sel & 1) && dplane_hdr_decode(f->p, &h) == 0;
        if (ok)
            check_header(f->p, &h);
        size_t hdr = DPLANE_HDR_SIZE + ((sel & 1) ? 8 : 0);
        if (f->left < hdr)
            return;
        f->p += hdr;
        f->left -= hdr;
        /* The payload: what the header claims, or the rest when it lies. */
        size_t len = ok && h.nbytes <= f->left ? (size_t)h.nbytes : f->left;
        if (ok && len == h.nbytes)
            frame(f, &h, f->p, (sel & 2) != 0);
        f->p += len;
        f->left -= len;
    }
}

static void teardown(fz_t *f)
{
    int before = mbox_count(f->mb);
    if (mbox_expect(f->mb, 8, 0, 1, 0, 2, &K2) != 0)
        abort();
    mbox_drop_origin(f->mb, f->origin);
    if (mbox_count(f->mb) != f->late_kept || before < f->late_kept)
        abort();
    mbox_task_done(f->mb, 8, 0, 1, 0);
    mbox_task_done(f->mb, 7, 1, 0, 0);
    mbox_task_done(f->mb, 7, 1, 0, 1);
    mbox_guard_stats_t g;
    mbox_guard_stats(f->mb, &g);
    if (mbox_count(f->mb) != 0 || g.unclaimed_bytes != 0)
        abort();
    mbox_free(f->mb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    fz_t f = {.origin = 1 + (data[0] & 3), .p = data + 1, .left = size - 1};
    setup(&f);
    frames(&f);
    teardown(&f);
    return 0;
}
