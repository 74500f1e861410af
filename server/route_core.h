/* route_core.h - where a request may go, decided without I/O: the pure
 * core of the router (router.c runs the handler it picks).
 *
 * Given the method, the decoded path, the raw request target as received
 * (to see what URL decoding hid, such as %00), the Authorization header and
 * an ?access_token= value, route_decide() finds the row of routes.def that
 * matches, checks who the caller is (auth.h) and whether that row lets
 * them in, and answers either "run row N" / "serve a dashboard file" or the
 * refusal status. No MHD, no store, no clock: the tenant lookup is the
 * caller's function; tests/fuzz/fuzz_http.c drives this directly.
 *
 * Order of checks (each a status):
 *   400 path (or raw target's path) holds a control character (< 0x20, 0x7f)
 *   404 no row's pattern matches and it is not a dashboard file (GET, not /v1/)
 *   405 a pattern matches but not with this method (allow: the methods that
 *       path has, for the Allow header)
 *   401 no valid identity for a non-public route; 403 identity lacks access
 *   503 the tenant lookup could not be made
 * Public rows and dashboard files never identify the caller at all.
 *
 * HEAD (RFC 9110 §9.3.2: the GET's answer without its body) is decided as
 * the GET of the same path, except on a row flagged ROUTE_F_NO_HEAD: a
 * GET with side effects, a long poll that leases, an endless stream, where
 * a HEAD is 405 and Allow lists only GET. route_decide() itself runs a
 * method only on a row of that method: the caller passes it the method
 * route_decide_method() gives. */
#ifndef ATOLL_ROUTE_CORE_H
#define ATOLL_ROUTE_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "http.h"

/* routes.def flags */
#define ROUTE_F_QUERY_TOKEN 1   /* ?access_token= stands in for the header */
#define ROUTE_F_NO_HEAD 2       /* a GET that a HEAD may not run (405) */

/* A dashboard file (api_web_file), not a row. */
#define ROUTE_WEB_FILE (-1)

typedef struct route_input {
    const char *method;
    const char *path;               /* decoded (a %00 stays as sent, see http.h) */
    const char *raw_target;         /* as received, path?query; may be NULL */
    const char *authorization;      /* header value or NULL; any bytes */
    const char *query_token;        /* ?access_token= value or NULL */
    auth_tenant_fn lookup;          /* may be NULL: tenant tokens are nobody */
    void *lookup_ctx;
} route_input_t;

typedef struct route_decision {
    int status;                     /* 0: go (row or web file); else 400/401/403/404/405/503 */
    int row;                        /* index in routes.def, or ROUTE_WEB_FILE; -1 when refused */
    const char *field;              /* problem's field when refused (static) */
    const char *params[HTTP_MAX_PARAMS];  /* ":x" captures, pointing into the caller's buf */
    int64_t tenant;                 /* the caller's tenant (0: sees all tenants' jobs) */
    char allow[HTTP_ALLOW_MAX];     /* 405: the path's methods ("GET, HEAD, POST"); else "" */
} route_decision_t;

/* Decides; captures are copied into buf (cap bytes; a path whose captures
 * do not fit matches no row). Never fails otherwise. */
void route_decide(const route_input_t *in, char *buf, size_t cap, route_decision_t *d);
/* The method to decide `method` on path as: "GET" for a HEAD of a path
 * whose GET row runs for a HEAD, or of a dashboard file (no row, not
 * under /v1/); method itself otherwise (NULL stays NULL). */
const char *route_decide_method(const char *method, const char *path);
/* Number of rows in routes.def; the method and pattern of row i. */
int route_count(void);
const char *route_method(int row);
const char *route_pattern(int row);
/* 1 when text holds a byte < 0x20 or 0x7f, or (with decode) a %XX that
 * decodes to one; scans at most up to '?' when stop_at_query. */
int route_has_control(const char *text, int decode, int stop_at_query);

#endif
