/* fuzz_http.c - libFuzzer target for atolld's routing and auth layer: the
 * pure core route_decide_method() and route_decide() (server/route_core.c)
 * with auth.c, exactly as router.c calls them for each request, without
 * MHD or a database.
 *
 * Input: fields separated by '\n': flags byte, method, decoded path, raw
 * request target, Authorization value, ?access_token= value. A missing
 * field is NULL (as an absent header or query). flags bit 0: auth off.
 * The tenant lookup plays the store: one known tenant token, and any hash
 * starting "00" fails as an unavailable database would.
 *
 * Invariants (a violation aborts, which libFuzzer reports):
 *  - the status is one of 0/400/401/403/404/405/503;
 *  - a path or raw path holding a control character is 400;
 *  - "go" names a row whose method is the request's, with one capture per
 *    ":x" segment, or a dashboard file for a GET outside /v1/;
 *  - GET /healthz is never refused whatever the token; public rows and
 *    dashboard files never look up a tenant; with auth off nothing is
 *    401/403;
 *  - without an Authorization header a non-public route other than the
 *    event stream is 401 whatever the query says (?access_token= is the
 *    stream's only);
 *  - the tenant is set only for the tenant token;
 *  - a HEAD is decided as a GET only where the path has a GET row that
 *    serves HEAD (never the event stream, the worker poll, the backup), or
 *    a dashboard file; anything else stays a HEAD (405 or 404). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "route_core.h"

#define FUZZ_ADMIN "fuzz-admin-token-0123456789"
#define FUZZ_WORKER "fuzz-worker-token-0123456789"
#define FUZZ_READ "fuzz-read-token-0123456789"
#define FUZZ_TENANT "fuzz-tenant-token-0123456789"
#define FUZZ_TENANT_ID 7

static char tenant_hash[AUTH_HASH_HEX_LEN];
static int lookups;

static int64_t fuzz_lookup(void *ctx, const char *hash)
{
    (void)ctx;
    lookups++;
    if (strlen(hash) != AUTH_HASH_HEX_LEN - 1)
        abort();
    if (strcmp(hash, tenant_hash) == 0)
        return FUZZ_TENANT_ID;
    return strncmp(hash, "00", 2) == 0 ? -1 : 0;
}

static void fuzz_init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    /* FIPS 180-4 example: the hash is standard SHA-256 (tokens stored by
     * older atolld versions still match). */
    char hex[AUTH_HASH_HEX_LEN];
    auth_hash_token("abc", hex);
    if (strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") != 0)
        abort();
    auth_hash_token(FUZZ_TENANT, tenant_hash);
}

/* Splits data into at most n '\n'-separated NUL-terminated fields in buf;
 * fields past the input stay NULL. */
static void split(const uint8_t *data, size_t size, char *buf, const char **f, int n)
{
    memcpy(buf, data, size);
    buf[size] = '\0';
    for (int i = 0; i < n; i++)
        f[i] = NULL;
    char *p = buf;
    for (int i = 0; i < n && p; i++) {
        f[i] = p;
        char *nl = i < n - 1 ? memchr(p, '\n', (size_t)(buf + size - p)) : NULL;
        if (nl)
            *nl = '\0';
        p = nl ? nl + 1 : NULL;
    }
}

static int count_captures(const char *pattern)
{
    int n = 0;
    for (const char *p = pattern; *p; p++)
        n += p[0] == '/' && p[1] == ':';
    return n;
}

static int has_ctl(const char *s)
{
    for (; s && *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init();
    if (size > 8192)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    const char *f[6];
    split(data, size, buf, f, 6);
    int auth_off = f[0] && (f[0][0] & 1);
    if (auth_off ? auth_setup(NULL, NULL, NULL) : auth_setup(FUZZ_ADMIN, FUZZ_WORKER, FUZZ_READ))
        abort();
    const char *path = f[2] ? f[2] : "";
    const char *method = route_decide_method(f[1], path);
    int head = f[1] && strcmp(f[1], "HEAD") == 0;
    if (method != f[1] && (!head || strcmp(method, "GET") != 0))
        abort();                /* only a HEAD is ever decided as another method */
    if (head && method != f[1] &&
        (strcmp(path, "/v1/events/stream") == 0 || strcmp(path, "/v1/admin/backup") == 0 ||
         (strncmp(path, "/v1/workers/", 12) == 0 && strstr(path, "/tasks") &&
          strlen(strstr(path, "/tasks")) == 6)))
        abort();                /* a HEAD of an endless, leasing or whole-database GET */
    route_input_t in = {method, path, f[3], f[4], f[5], fuzz_lookup, NULL};
    route_decision_t d;
    char caps[512];
    lookups = 0;
    route_decide(&in, caps, sizeof caps, &d);

    int s = d.status;
    if (s != 0 && s != 400 && s != 401 && s != 403 && s != 404 && s != 405 && s != 503)
        abort();
    if (has_ctl(in.path) && s != 400)
        abort();
    if (s == 0 && d.row == ROUTE_WEB_FILE) {
        if (!in.method || strcmp(in.method, "GET") != 0 || strncmp(in.path, "/v1/", 4) == 0 ||
            lookups)
            abort();
    } else if (s == 0) {
        if (d.row < 0 || d.row >= route_count() || !in.method ||
            strcmp(in.method, route_method(d.row)) != 0)
            abort();
        int nc = count_captures(route_pattern(d.row));
        for (int i = 0; i < HTTP_MAX_PARAMS; i++)
            if ((i < nc) != (d.params[i] != NULL) || (d.params[i] && !d.params[i][0]))
                abort();
    }
    int get = in.method && strcmp(in.method, "GET") == 0;
    int ctl = s == 400;
    int is_public = (s == 0 && d.row == ROUTE_WEB_FILE) ||
                    (s == 0 && strcmp(route_pattern(d.row), "/healthz") == 0);
    if (is_public && lookups)
        abort();
    if (get && !ctl && strcmp(in.path, "/healthz") == 0 && s != 0)
        abort();    /* public: no token of any kind refuses it */
    if (auth_off && (s == 401 || s == 403 || lookups))
        abort();
    int stream = get && strcmp(in.path, "/v1/events/stream") == 0;
    if (!auth_off && !in.authorization && !stream && s == 0 && !is_public)
        abort();    /* let in without a header: only the stream takes ?access_token= */
    if (d.tenant != 0 && d.tenant != FUZZ_TENANT_ID)
        abort();
    free(buf);
    return 0;
}
