/* auth.h - bearer tokens: who is calling, and what may they do.
 *
 * Auth is off unless an admin token is configured (--admin-token). Then
 * every /v1 request needs `Authorization: Bearer TOKEN`:
 *   admin token   everything, all tenants' jobs, tenant management;
 *   tenant token  submit, list, get, cancel its own jobs; read the cluster;
 *   read token    read everything (the dashboard);
 *   worker token  the worker protocol only.
 * Tenant tokens live in the store as SHA-256 hashes (nettle); the fixed
 * tokens from the command line are kept hashed in memory too.
 *
 * Pure: no store, no I/O but getrandom. A tenant token is resolved through
 * the caller's lookup function, so the router can be fuzzed without a
 * database (tests/fuzz/fuzz_http.c). */
#ifndef ATOLL_AUTH_H
#define ATOLL_AUTH_H

#include <stdint.h>

/* Hex of a SHA-256 digest plus its NUL. */
#define AUTH_HASH_HEX_LEN 65
/* Bounds of a bearer token that can ever match (shorter: refused at
 * start-up and never issued; longer: not hashed at all). */
#define AUTH_MIN_TOKEN 16
#define AUTH_MAX_TOKEN 200

typedef enum auth_role {
    AUTH_NONE = 0,      /* no valid token */
    AUTH_READ,
    AUTH_TENANT,
    AUTH_WORKER,
    AUTH_ADMIN,
} auth_role_t;

/* What a route needs. */
typedef enum auth_access {
    ACCESS_PUBLIC = 0,  /* /healthz, dashboard files */
    ACCESS_READ,        /* GET of jobs, islands, workers, metrics */
    ACCESS_SUBMIT,      /* POST/DELETE of jobs */
    ACCESS_WORKER,      /* the worker protocol */
    ACCESS_ADMIN,       /* tenants */
} auth_access_t;

typedef struct auth_who {
    auth_role_t role;
    int64_t tenant;     /* tenant id for AUTH_TENANT, else 0 (sees all) */
} auth_who_t;

/* Tokens may be NULL or "". Auth is enabled iff admin is non-empty.
 * Returns 0, or -1 when a given token is too short (< 16 characters). */
int auth_setup(const char *admin, const char *worker, const char *read);
int auth_enabled(void);
/* Resolves a token hash to a tenant: its id (> 0), 0 when no active
 * tenant has it, -1 when the lookup could not be made (no database). */
typedef int64_t (*auth_tenant_fn)(void *ctx, const char *hash);
/* Identifies the caller from the Authorization header value (may be NULL;
 * any bytes). With auth disabled everyone is admin. A token that is none of
 * the fixed ones is looked up with `lookup` (may be NULL: then it is
 * nobody). Returns 0, or -1 when lookup failed (who is then AUTH_NONE). */
int auth_identify(const char *authorization, auth_tenant_fn lookup, void *ctx,
                  auth_who_t *who);
/* May `who` use a route that needs `access`? */
int auth_allows(const auth_who_t *who, auth_access_t access);
/* Lower-case hex SHA-256 of a NUL-terminated token: what the store keeps. */
void auth_hash_token(const char *token, char hex[AUTH_HASH_HEX_LEN]);
/* A new random token "atl_" + 48 hex digits (from getrandom). 0 or -1. */
int auth_new_token(char out[64]);

#endif
