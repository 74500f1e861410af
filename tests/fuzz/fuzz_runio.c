/* fuzz_runio.c - libFuzzer target for the two decoders of users' programs'
 * untrusted bytes (DESIGN Part F): the first input byte picks one.
 *   even: common/npy.c npy_decode() of an output file a program wrote;
 *   odd:  store/report_decode.c report_log_segments() of a worker's logs
 *         body (POST /v1/workers/{id}/logs).
 *
 * Invariants (a violation aborts, which libFuzzer reports):
 *  - npy: a refusal has a reason; an accepted tensor has rank <= 4, every
 *    dim >= 1 (or rank 0 and one element), numel = the product of its dims
 *    <= TENSOR_MAX_ELEMS, and the file holds at least numel elements of 4
 *    or 8 bytes after a header of at most NPY_MAX_HEADER bytes; re-encoding
 *    it and decoding again gives the same shape and the same bits;
 *  - segments: accepted iff an independent walk accepts; the accepted
 *    segments lie inside the body, in order, back to back, cover it
 *    exactly, each of stream 1 or 2 with the header's length, at most max
 *    of them. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "npy.h"
#include "report_decode.h"
#include "tensor.h"

#define SEGS_MAX 64     /* small, so the "too many" refusal is reached */

static void check_npy(const uint8_t *data, size_t size)
{
    tensor_t *t = NULL, *again = NULL;
    char err[256] = "";
    if (npy_decode(data, size, &t, err, sizeof err) != 0) {
        if (t || !err[0] || !memchr(err, '\0', sizeof err))
            abort();
        return;
    }
    if (!t || t->shape.rank > NPY_MAX_RANK)
        abort();
    int64_t n = 1;
    for (int i = 0; i < t->shape.rank; i++) {
        if (t->shape.dim[i] < 1)
            abort();
        n *= t->shape.dim[i];
    }
    if (n != shape_numel(&t->shape) || n > TENSOR_MAX_ELEMS || (size_t)n * 4 > size)
        abort();
    void *buf = NULL;
    size_t len = 0;
    if (npy_encode(t, &buf, &len) == 0) {
        if (npy_decode(buf, len, &again, err, sizeof err) != 0 ||
            !shape_equal(&again->shape, &t->shape) ||
            memcmp(again->data, t->data, sizeof(float) * (size_t)n) != 0)
            abort();
    }
    free(buf);
    tensor_free(again);
    tensor_free(t);
}

/* The model: 1 when body splits into at most SEGS_MAX well-formed segments. */
static int segs_model(const uint8_t *b, size_t len)
{
    size_t pos = 0;
    int n = 0;
    while (pos != len) {
        if (pos + 5 > len || (b[pos] != 1 && b[pos] != 2))
            return 0;
        uint64_t sl = (uint64_t)b[pos + 1] | (uint64_t)b[pos + 2] << 8 |
                      (uint64_t)b[pos + 3] << 16 | (uint64_t)b[pos + 4] << 24;
        if (pos + 5 + sl > len || ++n > SEGS_MAX)
            return 0;
        pos += 5 + (size_t)sl;
    }
    return 1;
}

static void check_segments(const uint8_t *data, size_t size)
{
    report_log_seg_t segs[SEGS_MAX];
    int n = report_log_segments(data, size, segs, SEGS_MAX);
    if ((n >= 0) != segs_model(data, size) || n > SEGS_MAX)
        abort();
    const uint8_t *at = data;
    for (int i = 0; i < n; i++) {
        const uint8_t *h = at;
        size_t sl = (size_t)h[1] | (size_t)h[2] << 8 | (size_t)h[3] << 16 | (size_t)h[4] << 24;
        if (segs[i].stream != h[0] || (segs[i].stream != 1 && segs[i].stream != 2) ||
            segs[i].data != h + 5 || segs[i].len != sl)
            abort();
        at = h + 5 + sl;
    }
    if (n >= 0 && at != data + size)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        check_segments(data + 1, size - 1);
    else
        check_npy(data + 1, size - 1);
    return 0;
}
