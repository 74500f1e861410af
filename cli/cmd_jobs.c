/* cmd_jobs.c - atoll submit, jobs, cancel. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "draw.h"

#define JOBS_DEFAULT_LIMIT 20
#define SUBMIT_MAX_FILE (64u << 20)     /* far past atolld's --max-body; it answers 413 */

/* Reads all of `path` ('-' = stdin) into a malloc'd NUL-terminated buffer
 * (caller frees). NULL after printing why. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    char *data = NULL;
    size_t cap = 0, n = 0;
    if (!f) {
        fprintf(stderr, "atoll submit: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (n + 4096 + 1 > cap) {
            char *grown = cap >= SUBMIT_MAX_FILE ? NULL : realloc(data, cap ? cap * 2 : 8192);
            if (!grown) {
                fprintf(stderr, "atoll submit: %s: too large or out of memory\n", path);
                goto fail;
            }
            data = grown;
            cap = cap ? cap * 2 : 8192;
        }
        size_t got = fread(data + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        fprintf(stderr, "atoll submit: cannot read %s: %s\n", path, strerror(errno));
        goto fail;
    }
    data[n] = '\0';
    *len = n;
    if (f != stdin)
        fclose(f);
    return data;
fail:
    free(data);
    if (f != stdin)
        fclose(f);
    return NULL;
}

/* A file that is not JSON at all is the caller's mistake (exit 3), told
 * with its line and column; the document's meaning is atolld's to judge. */
static int check_json(const char *path, const char *data, size_t len)
{
    json_error_t err;
    json_t *doc = json_loadb(data, len, 0, &err);
    if (!doc) {
        fprintf(stderr, "atoll submit: %s is not JSON: line %d, column %d: %s\n",
                strcmp(path, "-") == 0 ? "stdin" : path, err.line, err.column, err.text);
        return -1;
    }
    json_decref(doc);
    return 0;
}

/* POSTs the document; on 201 stores the id. Returns a CLI exit code. The
 * id is all it reads: the answer is the summary (view=summary), not the
 * whole job echoed back. */
static int post_job(cli_ctx_t *ctx, const char *data, size_t len, long long *id)
{
    cli_resp_t r;
    if (cli_request(ctx->cl, "POST", "/v1/jobs?view=summary", data, len, &r) != 0)
        return CLI_EXIT_USAGE;
    json_t *jid = json_object_get(r.json, "id");
    int code = CLI_EXIT_OK;
    if ((r.status == 201 || r.status == 200) && json_is_integer(jid))
        *id = json_integer_value(jid);
    else
        code = cli_print_problem("submit", &r);
    cli_resp_clear(&r);
    return code;
}

int cmd_submit(cli_ctx_t *ctx, int argc, char **argv)
{
    static const struct option opts[] = {{"wait", no_argument, NULL, 'w'}, {0, 0, 0, 0}};
    int wait = 0, c;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "w", opts, NULL)) != -1) {
        if (c != 'w')
            return cli_usage_error("submit", "unknown option '%s'", argv[optind - 1]);
        wait = 1;
    }
    if (optind != argc - 1)
        return cli_usage_error("submit", "expected one FILE (or '-' for stdin)");
    size_t len = 0;
    long long id = 0;
    char *data = read_all(argv[optind], &len);
    if (!data || check_json(argv[optind], data, len) != 0) {
        free(data);
        return CLI_EXIT_USAGE;
    }
    int code = post_job(ctx, data, len, &id);
    free(data);
    if (code != CLI_EXIT_OK)
        return code;
    printf("%lld\n", id);
    fflush(stdout);
    return wait ? cli_wait_job(ctx, id) : CLI_EXIT_OK;
}

/* Replaces each summary of `jobs` by the full job object (for its slices);
 * a job that vanished meanwhile keeps its summary. */
static void jobs_expand(cli_ctx_t *ctx, json_t *jobs)
{
    size_t i;
    json_t *job;
    json_array_foreach(jobs, i, job) {
        char path[64];
        cli_resp_t r;
        snprintf(path, sizeof path, "/v1/jobs/%lld",
                 (long long)json_integer_value(json_object_get(job, "id")));
        if (cli_request(ctx->cl, "GET", path, NULL, 0, &r) != 0)
            return;
        if (r.status == 200 && json_is_object(r.json))
            json_array_set(jobs, i, r.json);
        cli_resp_clear(&r);
    }
}

int cli_jobs_fetch(cli_ctx_t *ctx, const char *state, long limit, json_t **jobs)
{
    char path[128];
    json_t *ans = NULL;
    *jobs = NULL;
    snprintf(path, sizeof path, "/v1/jobs?limit=%ld%s%s", limit, state ? "&state=" : "",
             state ? state : "");
    int code = cli_get_json(ctx->cl, path, &ans);
    if (code != CLI_EXIT_OK)
        return code;
    json_t *list = json_object_get(ans, "jobs");
    if (!json_is_array(list)) {
        fprintf(stderr, "atoll: %s: the answer has no jobs array\n", path);
        json_decref(ans);
        return CLI_EXIT_REFUSED;
    }
    *jobs = json_incref(list);
    json_decref(ans);
    jobs_expand(ctx, *jobs);
    return CLI_EXIT_OK;
}

/* A state word goes into the query string as is: letters only. */
static int plain_word(const char *s)
{
    if (!*s || strlen(s) > 32)
        return 0;
    for (; *s; s++)
        if (*s < 'a' || *s > 'z')
            return 0;
    return 1;
}

int cmd_jobs(cli_ctx_t *ctx, int argc, char **argv)
{
    static const struct option opts[] = {{"state", required_argument, NULL, 's'},
                                         {"limit", required_argument, NULL, 'n'},
                                         {0, 0, 0, 0}};
    const char *state = NULL;
    long limit = JOBS_DEFAULT_LIMIT;
    int c;
    char *end;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "s:n:", opts, NULL)) != -1) {
        if (c == 's' && plain_word(optarg))
            state = optarg;
        else if (c == 'n' && (limit = strtol(optarg, &end, 10)) > 0 && *end == '\0')
            continue;
        else if (c == 's' || c == 'n')
            return cli_usage_error("jobs", "bad value '%s' for --%s", optarg,
                                   c == 's' ? "state" : "limit");
        else
            return cli_usage_error("jobs", "unknown option or missing value '%s'",
                                   argv[optind - 1]);
    }
    if (optind != argc)
        return cli_usage_error("jobs", "unexpected argument '%s'", argv[optind]);
    json_t *jobs = NULL;
    int code = cli_jobs_fetch(ctx, state, limit, &jobs);
    if (code == CLI_EXIT_OK)
        draw_jobs_table(stdout, jobs, ctx->tty);
    json_decref(jobs);
    return code;
}

int cmd_cancel(cli_ctx_t *ctx, int argc, char **argv)
{
    long long id;
    char path[64];
    cli_resp_t r;
    if (argc != 2 || cli_parse_id(argv[1], &id) != 0)
        return cli_usage_error("cancel", "expected one job ID");
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    if (cli_request(ctx->cl, "DELETE", path, NULL, 0, &r) != 0)
        return CLI_EXIT_USAGE;
    int code = CLI_EXIT_OK;
    if (r.status == 200)
        printf("job %lld cancelled\n", id);
    else
        code = cli_print_problem("cancel", &r);
    cli_resp_clear(&r);
    return code;
}
