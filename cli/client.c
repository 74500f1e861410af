/* client.c - see client.h. */
#include "client.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct cli_client {
    CURL *curl;                 /* owned; reused for keep-alive */
    char *base;                 /* owned, no trailing '/' */
    char *auth_header;          /* owned "Authorization: Bearer ..." or NULL */
};

typedef struct body_buf {
    char *data;
    size_t len;
} body_buf_t;

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    body_buf_t *b = userdata;
    size_t n = size * nmemb;
    if (b->len + n > CLI_MAX_BODY)
        return 0;                       /* curl fails the transfer */
    char *grown = realloc(b->data, b->len + n + 1);
    if (!grown)
        return 0;
    b->data = grown;
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

cli_client_t *cli_client_new(const char *url, const char *token)
{
    cli_client_t *cl = calloc(1, sizeof *cl);
    if (!cl)
        return NULL;
    if (!(cl->base = strdup(url)) || !(cl->curl = curl_easy_init()))
        goto fail;
    size_t n = strlen(cl->base);
    while (n > 0 && cl->base[n - 1] == '/')
        cl->base[--n] = '\0';
    if (token && *token) {
        size_t cap = strlen(token) + 32;
        if (!(cl->auth_header = malloc(cap)))
            goto fail;
        snprintf(cl->auth_header, cap, "Authorization: Bearer %s", token);
    }
    return cl;
fail:
    cli_client_free(cl);
    return NULL;
}

void cli_client_free(cli_client_t *cl)
{
    if (!cl)
        return;
    if (cl->curl)
        curl_easy_cleanup(cl->curl);
    free(cl->base);
    free(cl->auth_header);
    free(cl);
}

const char *cli_client_url(const cli_client_t *cl)
{
    return cl->base;
}

/* The request headers: a new list or NULL on OOM. */
static struct curl_slist *make_headers(const cli_client_t *cl, int has_body)
{
    const char *lines[3] = {"Accept: application/json", NULL, NULL};
    int n = 1;
    if (has_body)
        lines[n++] = "Content-Type: application/json";
    if (cl->auth_header)
        lines[n++] = cl->auth_header;
    struct curl_slist *list = NULL;
    for (int i = 0; i < n; i++) {
        struct curl_slist *grown = curl_slist_append(list, lines[i]);
        if (!grown) {
            curl_slist_free_all(list);
            return NULL;
        }
        list = grown;
    }
    return list;
}

/* Options of one exchange whose body goes to write(sink); timeout_ms 0:
 * none (a log follow lasts as long as its process). */
static int setup_sink(CURL *c, const char *url, const char *method, const char *body,
                      size_t len, struct curl_slist *hdrs, curl_write_callback write,
                      void *sink, long timeout_ms)
{
    int bad = 0;
    curl_easy_reset(c);     /* keeps the connection cache, forgets last options */
    bad |= curl_easy_setopt(c, CURLOPT_URL, url) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 5000L) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write) != CURLE_OK;
    bad |= curl_easy_setopt(c, CURLOPT_WRITEDATA, sink) != CURLE_OK;
    if (body) {
        bad |= curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len) != CURLE_OK;
        bad |= curl_easy_setopt(c, CURLOPT_POSTFIELDS, body) != CURLE_OK;
    }
    return bad ? -1 : 0;
}

/* One exchange with the body handed to write(sink): 0 with *status set
 * when an HTTP answer came back, else -1 after printing why. */
static int exchange(cli_client_t *cl, const char *method, const char *path, const char *body,
                    size_t body_len, curl_write_callback write, void *sink, long timeout_ms,
                    long *status)
{
    int rc = -1;
    struct curl_slist *hdrs = NULL;
    size_t url_len = strlen(cl->base) + strlen(path) + 1;
    char *url = malloc(url_len);
    if (url)
        snprintf(url, url_len, "%s%s", cl->base, path);
    if (!url || !(hdrs = make_headers(cl, body != NULL)) ||
        setup_sink(cl->curl, url, method, body, body_len, hdrs, write, sink, timeout_ms) != 0) {
        fprintf(stderr, "atoll: out of memory\n");
        goto cleanup;
    }
    CURLcode cc = curl_easy_perform(cl->curl);
    if (cc != CURLE_OK) {
        fprintf(stderr, "atoll: %s %s: %s\n", method, url, curl_easy_strerror(cc));
        goto cleanup;
    }
    curl_easy_getinfo(cl->curl, CURLINFO_RESPONSE_CODE, status);
    rc = 0;
cleanup:
    curl_slist_free_all(hdrs);
    free(url);
    return rc;
}

/* Moves a finished answer's body into r (parsed as JSON when it is). */
static int resp_take(cli_resp_t *r, body_buf_t *b)
{
    r->body = b->data ? b->data : strdup("");
    b->data = NULL;
    if (!r->body) {
        fprintf(stderr, "atoll: out of memory\n");
        return -1;
    }
    r->len = strlen(r->body);
    r->json = json_loadb(r->body, r->len, 0, NULL);
    return 0;
}

int cli_request(cli_client_t *cl, const char *method, const char *path, const char *body,
                size_t body_len, cli_resp_t *r)
{
    body_buf_t b = {0};
    memset(r, 0, sizeof *r);
    int rc = exchange(cl, method, path, body, body_len, on_body, &b, 60000L, &r->status);
    if (rc == 0)
        rc = resp_take(r, &b);
    free(b.data);
    return rc;
}

/* A streamed answer: a 200 body goes to out as it arrives, any other is
 * kept for the problem report. */
typedef struct stream_sink {
    CURL *curl;                 /* borrowed */
    FILE *out;                  /* borrowed */
    body_buf_t problem;         /* owned: a non-200 answer's body */
} stream_sink_t;

static size_t on_stream(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    stream_sink_t *s = userdata;
    long status = 0;
    size_t n = size * nmemb;
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200)
        return on_body(ptr, size, nmemb, &s->problem);
    if (fwrite(ptr, 1, n, s->out) != n)
        return 0;               /* stdout closed (a pipe's reader left): stop */
    fflush(s->out);
    return n;
}

int cli_stream(cli_client_t *cl, const char *path, FILE *out, cli_resp_t *r)
{
    stream_sink_t s = {.curl = cl->curl, .out = out};
    memset(r, 0, sizeof *r);
    int rc = exchange(cl, "GET", path, NULL, 0, on_stream, &s, 0L, &r->status);
    if (rc == 0)
        rc = resp_take(r, &s.problem);
    free(s.problem.data);
    return rc;
}

void cli_resp_clear(cli_resp_t *r)
{
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof *r);
}

int cli_print_problem(const char *what, const cli_resp_t *r)
{
    const char *title = json_string_value(json_object_get(r->json, "title"));
    const char *detail = json_string_value(json_object_get(r->json, "detail"));
    const char *field = json_string_value(json_object_get(r->json, "field"));
    fprintf(stderr, "atoll: %s: %ld %s", what, r->status, title ? title : "");
    if (detail)
        fprintf(stderr, ": %s", detail);
    else if (!r->json && r->len > 0)
        fprintf(stderr, ": %.300s", r->body);
    if (field)
        fprintf(stderr, " (field: %s)", field);
    fputc('\n', stderr);
    return CLI_EXIT_REFUSED;
}

int cli_get_json(cli_client_t *cl, const char *path, json_t **out)
{
    cli_resp_t r;
    *out = NULL;
    if (cli_request(cl, "GET", path, NULL, 0, &r) != 0)
        return CLI_EXIT_USAGE;
    if (r.status != 200 || !r.json) {
        int code = cli_print_problem(path, &r);
        cli_resp_clear(&r);
        return code;
    }
    *out = json_incref(r.json);
    cli_resp_clear(&r);
    return CLI_EXIT_OK;
}
