/* f32b64.c - see f32b64.h. */
#include "f32b64.h"

#include <nettle/base64.h>
#include <stdlib.h>
#include <string.h>

/* Little-endian bytes of each value, whatever the host's order. */
static void to_le(const float *v, int64_t n, uint8_t *out)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        for (int b = 0; b < 4; b++)
            out[4 * i + b] = (uint8_t)(u >> (8 * b));
    }
}

char *f32b64_encode(const float *v, int64_t n)
{
    if (n < 0 || n > (int64_t)(SIZE_MAX / 8))
        return NULL;
    size_t bytes = (size_t)n * 4;
    uint8_t *raw = malloc(bytes ? bytes : 1);
    if (!raw)
        return NULL;
    to_le(v, n, raw);
    char *text = f32b64_bytes_encode(raw, bytes);
    free(raw);
    return text;
}

int f32b64_decode(const char *text, size_t len, float *out, int64_t n)
{
    /* The exact encoded length first: nothing is allocated for a lie. */
    if (n < 0 || n > (int64_t)(SIZE_MAX / 8) || len != BASE64_ENCODE_RAW_LENGTH((size_t)n * 4))
        return -1;
    if (n == 0)
        return 0;
    size_t got = 0;
    uint8_t *raw = f32b64_bytes_decode(text, len, (size_t)n * 4, &got);
    if (!raw || got != (size_t)n * 4) {
        free(raw);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = 0;
        for (int b = 0; b < 4; b++)
            u |= (uint32_t)raw[4 * i + b] << (8 * b);
        memcpy(&out[i], &u, 4);
    }
    free(raw);
    return 0;
}

char *f32b64_bytes_encode(const void *p, size_t n)
{
    if (n > SIZE_MAX / 2)
        return NULL;
    char *text = malloc(BASE64_ENCODE_RAW_LENGTH(n) + 1);
    if (!text)
        return NULL;
    base64_encode_raw(text, n, p);
    text[BASE64_ENCODE_RAW_LENGTH(n)] = '\0';
    return text;
}

void *f32b64_bytes_decode(const char *text, size_t len, size_t max, size_t *n)
{
    /* Padded base64: a multiple of 4 characters, at most max's encoding. */
    if (len == 0 || len % 4 != 0 || max > SIZE_MAX / 2 || len > BASE64_ENCODE_RAW_LENGTH(max))
        return NULL;
    uint8_t *raw = malloc(BASE64_DECODE_LENGTH(len) + 1);
    struct base64_decode_ctx ctx;
    size_t got = 0;
    if (!raw)
        return NULL;
    base64_decode_init(&ctx);
    if (!base64_decode_update(&ctx, &got, raw, len, text) || !base64_decode_final(&ctx) ||
        got == 0 || got > max) {
        free(raw);
        return NULL;
    }
    *n = got;
    return raw;
}
