/* cli.h - the `atoll` command-line client: what its modules share.
 *
 * main.c parses the global flags and dispatches to one cmd_* function per
 * subcommand (cmd_jobs.c: submit/jobs/show/cancel/result; cmd_wait.c: the
 * --wait loop; cmd_cluster.c: islands/workers/top; cmd_logs.c: logs and
 * the processes of run computations). client.c speaks HTTP,
 * draw.c turns JSON into terminal text. Nothing here keeps global state
 * except top's SIGINT flag.
 *
 * Exit codes (documented in docs/operations.md, "The atoll command"):
 *   0  success (for submit --wait: the job succeeded)
 *   1  submit --wait: the job failed
 *   2  submit --wait: the job was cancelled
 *   3  usage error, unreadable file, or the server could not be reached
 *   4  the server refused the request (its problem detail is on stderr) */
#ifndef ATOLL_CLI_H
#define ATOLL_CLI_H

#include <stdio.h>

#include "client.h"

enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_FAILED = 1,
    CLI_EXIT_CANCELLED = 2,
    CLI_EXIT_USAGE = 3,
    CLI_EXIT_REFUSED = 4,
};

typedef struct cli_ctx {
    cli_client_t *cl;           /* borrowed from main */
    int tty;                    /* stdout is a terminal: colours, redraw in place */
} cli_ctx_t;

/* One subcommand: argv[0] is its name, getopt_long() may be used on argv
 * (each resets optind). Returns a CLI_EXIT_* code. */
typedef int (*cli_cmd_fn)(cli_ctx_t *ctx, int argc, char **argv);

int cmd_submit(cli_ctx_t *ctx, int argc, char **argv);
int cmd_jobs(cli_ctx_t *ctx, int argc, char **argv);
int cmd_show(cli_ctx_t *ctx, int argc, char **argv);
int cmd_cancel(cli_ctx_t *ctx, int argc, char **argv);
int cmd_result(cli_ctx_t *ctx, int argc, char **argv);
int cmd_islands(cli_ctx_t *ctx, int argc, char **argv);
int cmd_workers(cli_ctx_t *ctx, int argc, char **argv);
int cmd_top(cli_ctx_t *ctx, int argc, char **argv);
int cmd_logs(cli_ctx_t *ctx, int argc, char **argv);

/* cmd_logs.c: the job's run processes as a table on stdout (nothing when
 * it has none). Returns a CLI exit code. */
int cli_show_processes(cli_ctx_t *ctx, long long id);

/* cmd_wait.c: follows job `id` until it is final, drawing progress on
 * stdout (a bar when ctx->tty, else a line per change). Returns 0/1/2 from
 * the final state, or 3/4 when the server cannot be asked. */
int cli_wait_job(cli_ctx_t *ctx, long long id);

/* cmd_jobs.c: GET /v1/jobs?limit=N[&state=S] (state: letters only), each
 * summary replaced by the full job object. *jobs: new reference. Returns a
 * CLI exit code (printed why when not 0). */
int cli_jobs_fetch(cli_ctx_t *ctx, const char *state, long limit, json_t **jobs);

/* cmd_cluster.c: GET /v1/islands drawn on out (shared with top). */
int cli_draw_islands(cli_ctx_t *ctx, FILE *out);

/* Prints "atoll CMD: MSG" and a hint to use --help on stderr; returns
 * CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses a job id (a positive decimal integer) into *id; 0 or -1. */
int cli_parse_id(const char *text, long long *id);

#endif
