/* client.h - the atoll client's HTTP exchange with atolld (libcurl +
 * Jansson).
 *
 * One cli_client_t keeps one curl handle, so consecutive requests reuse
 * the connection (top asks several things every second). Not thread-safe;
 * the CLI has one thread. curl_global_init() must have run first. */
#ifndef ATOLL_CLI_CLIENT_H
#define ATOLL_CLI_CLIENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

/* Largest answer accepted: a result may carry 4,096 values per shard of
 * many shards, a job object its whole document. */
#define CLI_MAX_BODY (256u << 20)

typedef struct cli_client cli_client_t;

typedef struct cli_resp {
    long status;                /* HTTP status; 0 until an answer came */
    char *body;                 /* owned, NUL-terminated, may be "" */
    size_t len;
    json_t *json;               /* owned (one ref), NULL when not JSON */
} cli_resp_t;

/* Copies url (trailing '/' removed) and token (may be NULL or ""). NULL on
 * OOM or when curl cannot start. */
cli_client_t *cli_client_new(const char *url, const char *token);
void cli_client_free(cli_client_t *cl);
const char *cli_client_url(const cli_client_t *cl);

/* One exchange: body (borrowed, may be NULL) is sent as JSON. Fills *r
 * (release with cli_resp_clear). Returns 0 when an HTTP answer came back,
 * whatever its status, or -1 after printing why not on stderr. */
int cli_request(cli_client_t *cl, const char *method, const char *path, const char *body,
                size_t body_len, cli_resp_t *r);
void cli_resp_clear(cli_resp_t *r);

/* GET path with no time limit, writing a 200 answer's body to out as it
 * arrives (flushed per chunk: a log follow shows lines live). Any other
 * status leaves its body in *r for cli_print_problem; a 200 leaves r->body
 * "". Returns as cli_request. */
int cli_stream(cli_client_t *cl, const char *path, FILE *out, cli_resp_t *r);

/* Prints "atoll: WHAT: STATUS TITLE: DETAIL (field: F)" on stderr from the
 * answer's problem document (or its raw text). Returns CLI_EXIT_REFUSED. */
int cli_print_problem(const char *what, const cli_resp_t *r);

/* GET path expecting 200 with a JSON body: *out is a new reference. On
 * anything else prints why and returns the CLI exit code (3 transport, 4
 * refused); 0 on success. */
int cli_get_json(cli_client_t *cl, const char *path, json_t **out);

#endif
