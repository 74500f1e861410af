/* auth.c - bearer-token identification; see auth.h for the roles. */
#include "auth.h"

#include <nettle/base16.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#define HEX_LEN AUTH_HASH_HEX_LEN

/* Hashes of the fixed tokens; "" when unset. Written once at start-up,
 * before any thread reads them. */
static char admin_hash[HEX_LEN], worker_hash[HEX_LEN], read_hash[HEX_LEN];

static int auth_keep(const char *token, char hash[HEX_LEN])
{
    hash[0] = '\0';
    if (!token || !*token)
        return 0;
    if (strlen(token) < AUTH_MIN_TOKEN || strlen(token) > AUTH_MAX_TOKEN)
        return -1;
    auth_hash_token(token, hash);
    return 0;
}

void auth_hash_token(const char *token, char hex[HEX_LEN])
{
    struct sha256_ctx ctx;
    uint8_t digest[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(token), (const uint8_t *)token);
    sha256_digest(&ctx, sizeof digest, digest);
    base16_encode_update(hex, sizeof digest, digest);   /* lowercase */
    hex[2 * sizeof digest] = '\0';
}

int auth_setup(const char *admin, const char *worker, const char *read)
{
    if (auth_keep(admin, admin_hash) != 0 || auth_keep(worker, worker_hash) != 0 ||
        auth_keep(read, read_hash) != 0)
        return -1;
    return 0;
}

int auth_enabled(void) { return admin_hash[0] != '\0'; }

/* Constant-time comparison of two equal-length hex digests, so response
 * timing does not reveal how much of a hash matched. */
static int hash_equal(const char *a, const char *b)
{
    unsigned char diff = 0;
    for (int i = 0; i < HEX_LEN - 1; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

int auth_identify(const char *authorization, auth_tenant_fn lookup, void *ctx,
                  auth_who_t *who)
{
    who->role = auth_enabled() ? AUTH_NONE : AUTH_ADMIN;
    who->tenant = 0;
    if (!auth_enabled() || !authorization || strncmp(authorization, "Bearer ", 7) != 0)
        return 0;
    const char *token = authorization + 7;
    size_t len = strnlen(token, AUTH_MAX_TOKEN + 1);
    if (len < AUTH_MIN_TOKEN || len > AUTH_MAX_TOKEN)
        return 0;
    char hash[HEX_LEN];
    auth_hash_token(token, hash);
    if (hash_equal(hash, admin_hash)) {
        who->role = AUTH_ADMIN;
    } else if (worker_hash[0] && hash_equal(hash, worker_hash)) {
        who->role = AUTH_WORKER;
    } else if (read_hash[0] && hash_equal(hash, read_hash)) {
        who->role = AUTH_READ;
    } else if (lookup) {
        int64_t tenant = lookup(ctx, hash);
        if (tenant < 0)
            return -1;
        if (tenant > 0) {
            who->role = AUTH_TENANT;
            who->tenant = tenant;
        }
    }
    return 0;
}

int auth_allows(const auth_who_t *who, auth_access_t access)
{
    switch (access) {
    case ACCESS_PUBLIC: return 1;
    case ACCESS_READ:
        return who->role == AUTH_READ || who->role == AUTH_TENANT || who->role == AUTH_ADMIN;
    case ACCESS_SUBMIT: return who->role == AUTH_TENANT || who->role == AUTH_ADMIN;
    case ACCESS_WORKER: return who->role == AUTH_WORKER || who->role == AUTH_ADMIN;
    case ACCESS_ADMIN: return who->role == AUTH_ADMIN;
    }
    return 0;
}

int auth_new_token(char out[64])
{
    unsigned char raw[24];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return -1;
    memcpy(out, "atl_", 4);
    base16_encode_update(out + 4, sizeof raw, raw);
    out[4 + 2 * sizeof raw] = '\0';
    return 0;
}
