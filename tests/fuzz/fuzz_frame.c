/* fuzz_frame.c - libFuzzer target for the worker's data-plane receive
 * path: what one accepted connection sends, decoded and gated exactly as
 * dplane.c's reader thread does, without sockets or threads.
 *
 * Input: one flags byte (bit 0: a same-host connection, which starts with
 * the 16-byte hello; bits 1-2: the connection's mailbox origin 1..4), then
 * frames: a 76-byte header (dplane_hdr_decode) and its payload. As in
 * reader_frame(): mbox_admit() decides before anything is allocated; an
 * admitted frame's payload is read (the input ending early is the
 * connection closing: an unclaimed reservation is given back), swapped and
 * handed to mbox_put_from(); a refused one is skipped. A bad header or
 * hello ends the connection (mbox_drop_origin), as on a socket.
 *
 * The mailbox has the gate's cases declared: two tasks of job 7 attempt 1
 * (shards 0 and 1 of 4), job 9 attempt 0 cancelled, job 7 attempt 0 shard
 * 0 ended; after the frames a late task (job 8 attempt 0 comp 1 shard 0 of
 * 2) is declared, which claims early frames.
 *
 * Invariants (a violation aborts, which libFuzzer reports):
 *  - a hello is accepted iff its magic is "ATDR" and its ring fits
 *    SHMRING_MAX_BYTES, with that size;
 *  - an accepted header encodes back to the same 76 bytes, has a valid
 *    shape and nbytes == numel * 4;
 *  - the gate's answer is the model's: TASK exactly for a declared task's
 *    tag with a source inside its slice, DROP for the cancelled, ended or
 *    out-of-slice ones, UNCLAIMED (or DROP counted over_cap) otherwise;
 *  - a TASK frame can be taken at once, with its shape and the payload's
 *    bytes; unclaimed bytes never exceed the caps;
 *  - the late task claims exactly the kept early frames addressed to it;
 *    when everything ended, the mailbox is empty and every byte given back
 *    (LeakSanitizer checks the rest). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dplane.h"
#include "mbox.h"
#include "shmring.h"
#include "util.h"

typedef struct fz {
    mbox_t *mb;
    int origin;
    const uint8_t *p;           /* unread input */
    size_t left;
    int late_kept;              /* unclaimed frames kept for the late task */
} fz_t;

static int tag_is(const mbox_tag_t *t, int64_t job, int32_t attempt, int32_t comp, int32_t dst)
{
    return t->job == job && t->attempt == attempt && t->comp == comp && t->dst == dst;
}

/* The gate's expected answer; -1 when it may be UNCLAIMED or over-cap DROP,
 * -2 when only "not TASK" is certain (an attempt below the cancelled one:
 * cancelled with it or not, depending on how exact cancels are). */
static int model(const mbox_tag_t *t)
{
    if (t->job == 9 && t->attempt == 0)
        return MBOX_ADMIT_DROP;                     /* cancelled */
    if (t->job == 9 && t->attempt < 0)
        return -2;
    if (tag_is(t, 7, 0, 0, 0))
        return MBOX_ADMIT_DROP;                     /* ended */
    if (tag_is(t, 7, 1, 0, 0) || tag_is(t, 7, 1, 0, 1))
        return t->src >= 0 && t->src < 4 ? MBOX_ADMIT_TASK : MBOX_ADMIT_DROP;
    return -1;
}

static void setup(fz_t *f)
{
    if (!(f->mb = mbox_new()))
        abort();
    if (mbox_expect(f->mb, 7, 1, 0, 0, 4) || mbox_expect(f->mb, 7, 1, 0, 1, 4) ||
        mbox_expect(f->mb, 7, 0, 0, 0, 4))
        abort();
    mbox_task_done(f->mb, 7, 0, 0, 0);
    mbox_cancel_job(f->mb, 9, 0);
}

static int hello(fz_t *f)
{
    if (f->left < DPLANE_HELLO_SIZE)
        return -1;
    uint64_t ring = 1;
    int rc = dplane_hello_decode(f->p, &ring);
    uint64_t claimed = 0;
    for (int i = 8; i < 16; i++)
        claimed = claimed << 8 | f->p[i];
    int want = f->p[0] == 'A' && f->p[1] == 'T' && f->p[2] == 'D' && f->p[3] == 'R' &&
               claimed <= SHMRING_MAX_BYTES;
    if ((rc == 0) != want || ring != (rc == 0 ? claimed : 0))
        abort();
    f->p += DPLANE_HELLO_SIZE;
    f->left -= DPLANE_HELLO_SIZE;
    return rc;
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

/* One frame after its header. Returns 0, or -1 when the connection ends. */
static int frame(fz_t *f, const dplane_hdr_t *h)
{
    int64_t over_before;
    mbox_guard_stats_t g;
    mbox_guard_stats(f->mb, &g);
    over_before = g.over_cap;
    /* Deadline now: an unclaimed frame that does not fit is dropped at once. */
    mbox_admit_t a = mbox_admit(f->mb, &h->tag, f->origin, (int64_t)h->nbytes, util_mono_us());
    int want = model(&h->tag);
    mbox_guard_stats(f->mb, &g);
    if (want >= 0 ? (int)a != want
                  : a == MBOX_ADMIT_TASK ||
                    (want == -1 && a == MBOX_ADMIT_DROP && g.over_cap != over_before + 1))
        abort();
    check_caps(f);
    int whole = h->nbytes <= f->left;
    if (a == MBOX_ADMIT_DROP || !whole) {
        if (a == MBOX_ADMIT_UNCLAIMED)
            mbox_unreserve(f->mb, f->origin, (int64_t)h->nbytes);
        if (!whole)
            return -1;
    } else {
        tensor_t *t = tensor_new(&h->shape);
        if (!t)
            abort();
        memcpy(t->data, f->p, (size_t)h->nbytes);
        dplane_payload_swap(t->data, shape_numel(&t->shape));
        int kept = mbox_put_from(f->mb, &h->tag, t, f->origin, a) == 0;
        if (a == MBOX_ADMIT_TASK && !kept)
            abort();
        if (a == MBOX_ADMIT_TASK)
            check_take(f, h, f->p);
        else if (kept && tag_is(&h->tag, 8, 0, 1, 0) && h->tag.src >= 0 && h->tag.src < 2)
            f->late_kept++;
    }
    f->p += h->nbytes;
    f->left -= h->nbytes;
    return 0;
}

static void frames(fz_t *f)
{
    while (f->left >= DPLANE_HDR_SIZE) {
        dplane_hdr_t h;
        if (dplane_hdr_decode(f->p, &h) != 0)
            return;             /* bad header: the connection closes */
        check_header(f->p, &h);
        f->p += DPLANE_HDR_SIZE;
        f->left -= DPLANE_HDR_SIZE;
        if (frame(f, &h) != 0)
            return;
    }
}

static void teardown(fz_t *f)
{
    int before = mbox_count(f->mb);
    if (mbox_expect(f->mb, 8, 0, 1, 0, 2) != 0)
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
    fz_t f = {.origin = 1 + ((data[0] >> 1) & 3), .p = data + 1, .left = size - 1};
    setup(&f);
    if (!(data[0] & 1) || hello(&f) == 0)
        frames(&f);
    teardown(&f);
    return 0;
}
