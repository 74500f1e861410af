/* sha256.h - SHA-256 (FIPS 180-4), used to store API tokens only as
 * hashes. One-shot interface; no allocation. */
#ifndef ATOLL_SHA256_H
#define ATOLL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_DIGEST_LEN 32

void sha256(const void *data, size_t len, uint8_t out[SHA256_DIGEST_LEN]);
/* Lower-case hex of the digest of a NUL-terminated string; hex has room
 * for 2 * SHA256_DIGEST_LEN + 1 bytes. */
void sha256_hex(const char *text, char hex[2 * SHA256_DIGEST_LEN + 1]);

#endif
