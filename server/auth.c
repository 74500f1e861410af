/* auth.c - bearer-token identification; see auth.h for the roles. */
#include "auth.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "sha256.h"

#define AUTH_MIN_TOKEN 16
#define HEX_LEN (2 * SHA256_DIGEST_LEN + 1)

/* Hashes of the fixed tokens; "" when unset. Written once at start-up,
 * before any thread reads them. */
static char admin_hash[HEX_LEN], worker_hash[HEX_LEN], read_hash[HEX_LEN];

static int auth_keep(const char *token, char hash[HEX_LEN])
{
    hash[0] = '\0';
    if (!token || !*token)
        return 0;
    if (strlen(token) < AUTH_MIN_TOKEN)
        return -1;
    sha256_hex(token, hash);
    return 0;
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

void auth_identify(store_t *st, const char *authorization, auth_who_t *who)
{
    who->role = auth_enabled() ? AUTH_NONE : AUTH_ADMIN;
    who->tenant = 0;
    if (!auth_enabled() || !authorization || strncmp(authorization, "Bearer ", 7) != 0)
        return;
    const char *token = authorization + 7;
    if (strlen(token) < AUTH_MIN_TOKEN || strlen(token) > 200)
        return;
    char hash[HEX_LEN];
    sha256_hex(token, hash);
    if (hash_equal(hash, admin_hash)) {
        who->role = AUTH_ADMIN;
    } else if (worker_hash[0] && hash_equal(hash, worker_hash)) {
        who->role = AUTH_WORKER;
    } else if (read_hash[0] && hash_equal(hash, read_hash)) {
        who->role = AUTH_READ;
    } else {
        int64_t tenant = store_tenant_by_hash(st, hash);
        if (tenant > 0) {
            who->role = AUTH_TENANT;
            who->tenant = tenant;
        }
    }
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
    for (size_t i = 0; i < sizeof raw; i++)
        snprintf(out + 4 + 2 * i, 3, "%02x", raw[i]);
    return 0;
}
