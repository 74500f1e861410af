/* f32b64.c - see f32b64.h.
 *
 * Base64 (RFC 4648, standard alphabet, padded) by hand rather than
 * through nettle: a report's tensors are mostly a few values, and nettle's
 * streaming decoder plus the byte buffer it needs cost ~650 instructions
 * a scalar tensor in atolld's report decoder (16 a computation of a 4x4
 * chain; the decoder's share fell by 6.4K a computation with this one,
 * stop 75). test_tensor compares both codecs on random bytes. Decoding is strict: only the alphabet, '=' only as the
 * last one or two characters of the text, and the length must be exactly
 * that of the bytes expected (the caller's checks). */
#include "f32b64.h"

#include <stdlib.h>
#include <string.h>

static const char b64_chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Characters of the encoding of n bytes. */
static size_t enc_len(size_t n) { return (n + 2) / 3 * 4; }

/* The 6-bit value of c, or -1. */
static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Writes the enc_len(n) characters of bytes p[0..n) to out (no NUL). */
static void encode(const uint8_t *p, size_t n, char *out)
{
    for (size_t i = 0; i < n; i += 3, out += 4) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        out[0] = b64_chars[v >> 18];
        out[1] = b64_chars[v >> 12 & 63];
        out[2] = i + 1 < n ? b64_chars[v >> 6 & 63] : '=';
        out[3] = i + 2 < n ? b64_chars[v & 63] : '=';
    }
}

/* The number of bytes text[0..len) decodes to (len a positive multiple of
 * 4), or -1 when it is not padded base64. */
static long long decoded_len(const char *text, size_t len)
{
    if (len == 0 || len % 4 != 0)
        return -1;
    size_t pad = text[len - 1] == '=' ? (text[len - 2] == '=' ? 2 : 1) : 0;
    return (long long)(len / 4 * 3 - pad);
}

/* Decodes text[0..len) (decoded_len already said n bytes) into out. 0, or
 * -1 on a character outside the alphabet: '=' is one only among the last
 * len / 4 * 3 - n characters, the padding decoded_len counted. */
static int decode(const char *text, size_t len, uint8_t *out, size_t n)
{
    size_t o = 0, pad_from = len - (len / 4 * 3 - n);
    for (size_t i = 0; i < len; i += 4) {
        uint32_t v = 0;
        for (size_t k = i; k < i + 4; k++) {
            int d = b64_value((unsigned char)text[k]);
            if (d < 0 && !(text[k] == '=' && k >= pad_from))
                return -1;
            v = v << 6 | (uint32_t)(d < 0 ? 0 : d);
        }
        for (int b = 0; b < 3 && o < n; b++)
            out[o++] = (uint8_t)(v >> (16 - 8 * b));
    }
    return 0;
}

char *f32b64_encode(const float *v, int64_t n)
{
    if (n < 0 || n > (int64_t)(SIZE_MAX / 8))
        return NULL;
    size_t bytes = (size_t)n * 4;
    char *text = malloc(enc_len(bytes) + 1);
    if (!text)
        return NULL;
    /* Little-endian bytes of each value, whatever the host's order, three
     * values (12 bytes, 16 characters) at a time. */
    uint8_t le[12];
    size_t at = 0;
    for (int64_t i = 0; i < n; i += 3) {
        int64_t m = n - i < 3 ? n - i : 3;
        for (int64_t j = 0; j < m; j++) {
            uint32_t u;
            memcpy(&u, &v[i + j], 4);
            for (int b = 0; b < 4; b++)
                le[4 * j + b] = (uint8_t)(u >> (8 * b));
        }
        encode(le, (size_t)m * 4, text + at);
        at += enc_len((size_t)m * 4);
    }
    text[at] = '\0';
    return text;
}

int f32b64_decode(const char *text, size_t len, float *out, int64_t n)
{
    /* The exact encoded length first: nothing is decoded for a lie. */
    if (n < 0 || n > (int64_t)(SIZE_MAX / 8) || len != enc_len((size_t)n * 4))
        return -1;
    if (n == 0)
        return 0;
    size_t bytes = (size_t)n * 4;
    if (decoded_len(text, len) != (long long)bytes || decode(text, len, (uint8_t *)out, bytes))
        return -1;
    for (int64_t i = 0; i < n; i++) {       /* in place: little-endian to the host's order */
        uint8_t b[4];
        memcpy(b, &out[i], 4);
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24;
        memcpy(&out[i], &u, 4);
    }
    return 0;
}

char *f32b64_bytes_encode(const void *p, size_t n)
{
    if (n > SIZE_MAX / 2)
        return NULL;
    char *text = malloc(enc_len(n) + 1);
    if (!text)
        return NULL;
    encode(p, n, text);
    text[enc_len(n)] = '\0';
    return text;
}

void *f32b64_bytes_decode(const char *text, size_t len, size_t max, size_t *n)
{
    /* Padded base64 of 1..max bytes: its length is checked before
     * anything is allocated. */
    long long got = max > SIZE_MAX / 2 || len > enc_len(max) ? -1 : decoded_len(text, len);
    if (got <= 0 || (size_t)got > max)
        return NULL;
    uint8_t *raw = malloc((size_t)got);
    if (!raw || decode(text, len, raw, (size_t)got) != 0) {
        free(raw);
        return NULL;
    }
    *n = (size_t)got;
    return raw;
}
