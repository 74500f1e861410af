/* route_core.c - route matching and access decisions; see route_core.h. */
#include "route_core.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

typedef struct route_row {
    const char *method;
    const char *pattern;
    auth_access_t access;
    int flags;
} route_row_t;

static const route_row_t rows[] = {
#define ROUTE(method, pattern, handler, access, flags) {method, pattern, access, flags},
#include "routes.def"
#undef ROUTE
};

#define NROWS ((int)(sizeof rows / sizeof rows[0]))

int route_count(void) { return NROWS; }
const char *route_method(int row) { return row >= 0 && row < NROWS ? rows[row].method : ""; }
const char *route_pattern(int row) { return row >= 0 && row < NROWS ? rows[row].pattern : ""; }

static int is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

int route_has_control(const char *text, int decode, int stop_at_query)
{
    for (const char *p = text; *p; p++) {
        if (stop_at_query && *p == '?')
            return 0;
        if (is_control((unsigned char)*p))
            return 1;
        if (decode && p[0] == '%') {
            int hi = util_hex_digit(p[1]), lo = hi < 0 ? -1 : util_hex_digit(p[2]);
            if (hi >= 0 && lo >= 0 && is_control((unsigned char)(hi * 16 + lo)))
                return 1;
        }
    }
    return 0;
}

/* Matches path against pattern, capturing ":x" segments into params.
 * Segments are compared in place; captures point into a copy in buf. With
 * buf NULL, only whether the pattern matches (params unused, no cap). */
static int route_match(const char *pattern, const char *path, char *buf, size_t len,
                       const char **params)
{
    int np = 0;
    size_t used = 0;
    while (*pattern && *path) {
        if (*pattern != '/' || *path != '/')
            return 0;
        pattern++;
        path++;
        size_t pl = strcspn(pattern, "/"), sl = strcspn(path, "/");
        if (pattern[0] == ':') {
            if (sl == 0 || np == HTTP_MAX_PARAMS || (buf && used + sl + 1 > len))
                return 0;
            if (buf) {
                memcpy(buf + used, path, sl);
                buf[used + sl] = '\0';
                params[np] = buf + used;
                used += sl + 1;
            }
            np++;
        } else if (pl != sl || strncmp(pattern, path, pl) != 0) {
            return 0;
        }
        pattern += pl;
        path += sl;
    }
    return *pattern == '\0' && *path == '\0';
}

/* A HEAD is run as its GET (RFC 9110 §9.3.2) unless the row says
 * otherwise; see route_core.h. */
static int head_allowed(int row)
{
    return strcmp(rows[row].method, "GET") == 0 && !(rows[row].flags & ROUTE_F_NO_HEAD);
}

const char *route_decide_method(const char *method, const char *path)
{
    if (!method || !path || strcmp(method, "HEAD") != 0)
        return method;
    int path_known = 0;
    for (int i = 0; i < NROWS; i++) {
        if (!route_match(rows[i].pattern, path, NULL, 0, NULL))
            continue;
        path_known = 1;
        if (strcmp(rows[i].method, "GET") == 0)    /* the row a GET would run */
            return head_allowed(i) ? "GET" : method;
    }
    /* No row: a GET outside /v1/ is a dashboard file, and so is its HEAD. */
    return path_known || strncmp(path, "/v1/", 4) == 0 ? method : "GET";
}

/* Appends method to the ", "-separated list (cap bytes) unless it is
 * there already; one that does not fit is left out (routes.def's methods
 * fit HTTP_ALLOW_MAX). */
static void allow_add(char *list, size_t cap, const char *method)
{
    size_t n = strlen(method), len = strlen(list);
    for (const char *p = list; *p;) {
        size_t t = strcspn(p, ",");
        if (t == n && strncmp(p, method, n) == 0)
            return;
        p += t;
        p += *p ? 2 : 0;    /* ", " */
    }
    if (len + (len ? 2 : 0) + n + 1 <= cap)
        snprintf(list + len, cap - len, "%s%s", len ? ", " : "", method);
}

/* The Allow header of a 405 (RFC 9110 §15.5.6): the method of every row
 * whose pattern matches path, HEAD beside a GET that runs for it. */
static void allow_list(const char *path, char *out, size_t cap)
{
    out[0] = '\0';
    for (int i = 0; i < NROWS; i++) {
        if (!route_match(rows[i].pattern, path, NULL, 0, NULL))
            continue;
        allow_add(out, cap, rows[i].method);
        if (head_allowed(i))
            allow_add(out, cap, "HEAD");
    }
}

static void refuse(route_decision_t *d, int status, const char *field)
{
    d->status = status;
    d->row = -1;
    d->field = field;
}

/* Identifies the caller and checks the row's access. The query token is
 * looked at only where the row allows it: anywhere else a token in the URL
 * would land in logs and browser history for nothing. */
static void authorize(const route_input_t *in, int row, route_decision_t *d)
{
    if (rows[row].access == ACCESS_PUBLIC)
        return;     /* public: nobody needs to be identified, nothing looked up */
    char bearer[8 + AUTH_MAX_TOKEN + 1];
    const char *header = in->authorization;
    if (!header && in->query_token && (rows[row].flags & ROUTE_F_QUERY_TOKEN) &&
        strlen(in->query_token) <= AUTH_MAX_TOKEN) {
        memcpy(bearer, "Bearer ", 7);
        memcpy(bearer + 7, in->query_token, strlen(in->query_token) + 1);
        header = bearer;
    }
    auth_who_t who;
    if (auth_identify(header, in->lookup, in->lookup_ctx, &who) != 0) {
        refuse(d, 503, NULL);
        return;
    }
    if (!auth_allows(&who, rows[row].access))
        refuse(d, who.role == AUTH_NONE ? 401 : 403, "Authorization");
    else
        d->tenant = who.role == AUTH_TENANT ? who.tenant : 0;
}

void route_decide(const route_input_t *in, char *buf, size_t cap, route_decision_t *d)
{
    memset(d, 0, sizeof *d);
    d->row = -1;
    const char *method = in->method ? in->method : "";
    const char *path = in->path ? in->path : "";
    if (route_has_control(path, 0, 0) ||
        (in->raw_target && route_has_control(in->raw_target, 1, 1))) {
        refuse(d, 400, "path");
        return;
    }
    int path_known = 0;
    for (int i = 0; i < NROWS; i++) {
        const char *params[HTTP_MAX_PARAMS] = {0};
        if (!route_match(rows[i].pattern, path, buf, cap, params))
            continue;
        path_known = 1;
        if (strcmp(rows[i].method, method) != 0)
            continue;
        d->row = i;
        memcpy(d->params, params, sizeof params);
        authorize(in, i, d);
        return;
    }
    if (path_known) {
        refuse(d, 405, "method");
        allow_list(path, d->allow, sizeof d->allow);
    } else if (strcmp(method, "GET") == 0 && strncmp(path, "/v1/", 4) != 0) {
        d->row = ROUTE_WEB_FILE;    /* public, like /healthz */
    } else {
        refuse(d, 404, "path");
    }
}
