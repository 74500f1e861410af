/* support_http.c - a libcurl client for the public API.
 *
 * One CURL easy handle per hx_client_t, reset before every request but
 * never closed between them, so keep-alive connections are reused (the
 * bench measures the server, not TCP handshakes). */
#include "support_harness.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HTTP_TIMEOUT_MS 20000L

int hx_client_init(hx_client_t *cl, const char *base_url)
{
    memset(cl, 0, sizeof *cl);
    snprintf(cl->base, sizeof cl->base, "%s", base_url);
    cl->curl = curl_easy_init();
    if (!cl->curl) {
        fprintf(stderr, "harness: curl_easy_init failed\n");
        return -1;
    }
    return 0;
}

void hx_client_cleanup(hx_client_t *cl)
{
    if (cl->curl)
        curl_easy_cleanup(cl->curl);
    cl->curl = NULL;
}

void hx_resp_clear(hx_resp_t *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

/* Growable body buffer; `failed` set on OOM (the transfer is aborted). */
typedef struct http_buf {
    char *data;
    size_t len, cap;
} http_buf_t;

static size_t http_on_data(char *ptr, size_t size, size_t nmemb, void *ud)
{
    http_buf_t *b = ud;
    size_t n = size * nmemb;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p)
            return 0;   /* makes curl fail the transfer: reported as -1 */
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* Copies text into dst, flattening newlines and cutting at cap. */
static void http_excerpt(char *dst, size_t cap, const char *prefix, const char *text)
{
    int n = snprintf(dst, cap, "%s", prefix);
    if (n < 0 || (size_t)n >= cap || !text)
        return;
    size_t i = (size_t)n;
    for (; *text && i + 1 < cap; text++)
        dst[i++] = (*text == '\n' || *text == '\r') ? ' ' : *text;
    dst[i] = '\0';
}

static void http_fill_headers(CURL *curl, hx_resp_t *r)
{
    char *ct = NULL;
    if (curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct)
        snprintf(r->ctype, sizeof r->ctype, "%s", ct);
    struct curl_header *h = NULL;
    if (curl_easy_header(curl, "Location", 0, CURLH_HEADER, -1, &h) == CURLHE_OK && h)
        snprintf(r->location, sizeof r->location, "%s", h->value);
}

static void http_record(hx_client_t *cl, const char *method, const char *path,
                        const char *body, const hx_resp_t *r, const char *curl_err)
{
    char head[300];
    snprintf(head, sizeof head, "%s %s ", method, path);
    char shortbody[600];
    if (body && strlen(body) > 500)
        snprintf(shortbody, sizeof shortbody, "%.480s...(%zu bytes)", body, strlen(body));
    else
        snprintf(shortbody, sizeof shortbody, "%s", body ? body : "");
    http_excerpt(cl->last_req, sizeof cl->last_req, head, shortbody);
    if (curl_err) {
        http_excerpt(cl->last_resp, sizeof cl->last_resp, "transport error: ", curl_err);
        return;
    }
    char status[160];
    snprintf(status, sizeof status, "%ld [%s] ", r->status, r->ctype);
    http_excerpt(cl->last_resp, sizeof cl->last_resp, status, r->body);
}

int hx_client_set_auth(hx_client_t *cl, const char *token, const char *ca_file)
{
    cl->auth_header[0] = '\0';
    cl->ca_file[0] = '\0';
    if (token) {
        int n = snprintf(cl->auth_header, sizeof cl->auth_header, "Authorization: Bearer %s",
                         token);
        if (n < 0 || (size_t)n >= sizeof cl->auth_header)
            goto too_long;
    }
    if (ca_file) {
        int n = snprintf(cl->ca_file, sizeof cl->ca_file, "%s", ca_file);
        if (n < 0 || (size_t)n >= sizeof cl->ca_file)
            goto too_long;
    }
    return 0;
too_long:
    fprintf(stderr, "harness: token or CA file path too long\n");
    cl->auth_header[0] = '\0';
    cl->ca_file[0] = '\0';
    return -1;
}

int hx_request(hx_client_t *cl, const char *method, const char *path,
               const char *body, size_t body_len, hx_resp_t *r)
{
    return hx_request_h(cl, method, path, body, body_len, NULL, r);
}

/* Appends one header to *list; 0 or -1 (OOM: *list is left as it was). */
static int http_add_header(struct curl_slist **list, const char *h)
{
    struct curl_slist *n = curl_slist_append(*list, h);
    if (!n)
        return -1;
    *list = n;
    return 0;
}

int hx_request_h(hx_client_t *cl, const char *method, const char *path, const char *body,
                 size_t body_len, const char *const *headers, hx_resp_t *r)
{
    CURL *curl = cl->curl;
    struct curl_slist *hdrs = NULL;
    http_buf_t buf = {0};
    char url[HX_URL_MAX + 512];
    int rc = -1;
    memset(r, 0, sizeof *r);
    snprintf(url, sizeof url, "%s%s", cl->base, path);

    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, http_on_data);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, HTTP_TIMEOUT_MS);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (cl->ca_file[0])
        curl_easy_setopt(curl, CURLOPT_CAINFO, cl->ca_file);
    if (cl->auth_header[0] && http_add_header(&hdrs, cl->auth_header) != 0)
        goto cleanup;
    for (int i = 0; headers && headers[i]; i++)
        if (http_add_header(&hdrs, headers[i]) != 0)
            goto cleanup;
    if (body && http_add_header(&hdrs, "Content-Type: application/json") != 0)
        goto cleanup;
    if (hdrs)
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdrs);
    if (body) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    CURLcode cc = curl_easy_perform(curl);
    if (cc != CURLE_OK) {
        http_record(cl, method, path, body, r, curl_easy_strerror(cc));
        goto cleanup;
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r->status);
    http_fill_headers(curl, r);
    if (!buf.data) {
        buf.data = calloc(1, 1);
        if (!buf.data)
            goto cleanup;
    }
    r->body = buf.data;         /* ownership moves to r */
    r->len = buf.len;
    buf.data = NULL;
    r->json = json_loadb(r->body, r->len, 0, NULL);
    http_record(cl, method, path, body, r, NULL);
    rc = 0;
cleanup:
    free(buf.data);
    curl_slist_free_all(hdrs);
    return rc;
}

long hx_worker_call(hx_client_t *cl, const char *secret, const char *method, const char *path,
                    const char *body, size_t len, json_t **out)
{
    char hdr[300];
    const char *hdrs[] = {hdr, NULL};
    snprintf(hdr, sizeof hdr, "X-Atoll-Worker-Secret: %s", secret ? secret : "");
    hx_resp_t r;
    int rc = hx_request_h(cl, method, path, body, len, secret ? hdrs : NULL, &r);
    if (out)
        *out = rc == 0 ? json_incref(r.json) : NULL;
    long st = rc == 0 ? r.status : 0;
    if (rc == 0)
        hx_resp_clear(&r);
    return st;
}

void hx_client_print_last(const hx_client_t *cl)
{
    fprintf(stderr, "  last request : %s\n  last response: %s\n", cl->last_req, cl->last_resp);
}

double hx_metric_in(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, name, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    return -1;
}

double hx_metric(hx_client_t *cl, const char *name)
{
    hx_resp_t r;
    double v = -1;
    if (hx_request(cl, "GET", "/metrics", NULL, 0, &r) != 0)
        return -1;
    if (r.status == 200 && r.body)
        v = hx_metric_in(r.body, name);
    hx_resp_clear(&r);
    return v;
}
