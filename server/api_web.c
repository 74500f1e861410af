/* api_web.c - the dashboard's static files from --web-dir. Only plain
 * file names directly under that folder are served (no "..", no
 * subfolders), so a request can never read outside it. */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WEB_FILE_MAX (8u << 20)

/* The dashboard's pages: scripts, styles and requests from this origin
 * only (web/ has no inline script or style; app.js sets styles through the
 * CSSOM, which CSP allows), and no framing (clickjacking). */
static const char web_csp[] =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'";

static const char *web_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return "application/octet-stream";
    if (strcmp(dot, ".html") == 0)
        return "text/html; charset=utf-8";
    if (strcmp(dot, ".js") == 0)
        return "text/javascript; charset=utf-8";
    if (strcmp(dot, ".css") == 0)
        return "text/css; charset=utf-8";
    if (strcmp(dot, ".svg") == 0)
        return "image/svg+xml";
    if (strcmp(dot, ".png") == 0)
        return "image/png";
    if (strcmp(dot, ".json") == 0)
        return "application/json";
    return "application/octet-stream";
}

static int web_name_ok(const char *name)
{
    if (!*name || name[0] == '.' || strlen(name) > 64)
        return 0;
    for (const char *p = name; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '-' || c == '_'))
            return 0;
    }
    return 1;
}

void api_web_file(http_req_t *req, http_resp_t *resp)
{
    const char *name = req->path[0] == '/' ? req->path + 1 : req->path;
    if (!*name)
        name = "index.html";
    if (!web_name_ok(name)) {
        http_problem(resp, 404, "path", "no such file");
        return;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", api_cfg.web_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        http_problem(resp, 404, "path", "no such file: %s", name);
        return;
    }
    char *buf = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || (unsigned long)size > WEB_FILE_MAX || fseek(f, 0, SEEK_SET) != 0 ||
        !(buf = malloc((size_t)size + 1)) || fread(buf, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(buf);
        http_problem(resp, 500, NULL, "could not read %s", name);
        return;
    }
    fclose(f);
    free(resp->body);
    resp->body = buf;
    resp->len = (size_t)size;
    resp->status = 200;
    resp->content_type = web_type(name);
    if (strncmp(resp->content_type, "text/html", 9) == 0)
        resp->csp = web_csp;
}
