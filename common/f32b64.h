/* f32b64.h - tensor values as text for the worker's reports: the f32
 * elements as little-endian bytes, base64 (RFC 4648, padded; the codec is
 * f32b64.c's own, checked against nettle's in test_tensor). A report's
 * values travel as one such string ("values_f32"), not a JSON array of
 * numbers: a quarter of the bytes, and no number printing or parsing
 * (16,384 values took ~25 ms of JSON work each way on a 2-core machine).
 * Non-finite values pass through unchanged. */
#ifndef ATOLL_F32B64_H
#define ATOLL_F32B64_H

#include <stddef.h>
#include <stdint.h>

/* n values as a NUL-terminated base64 string (caller frees), NULL on OOM. */
char *f32b64_encode(const float *v, int64_t n);
/* Decodes text (len bytes) into exactly n values. 0, or -1 when it is not
 * valid base64 of exactly 4n bytes. */
int f32b64_decode(const char *text, size_t len, float *out, int64_t n);

/* The same encoding for raw bytes (a worker's UCX address in its
 * registration and in the controller's peer directory). encode: n bytes
 * as a NUL-terminated string (caller frees), NULL on OOM. decode: text
 * (len bytes) into a malloc'd buffer of *n bytes (caller frees); NULL when
 * it is not valid base64 of 1..max bytes (the length is checked before
 * anything is allocated) or on OOM. */
char *f32b64_bytes_encode(const void *p, size_t n);
void *f32b64_bytes_decode(const char *text, size_t len, size_t max, size_t *n);

#endif
