/* cmd_logs.c - atoll logs (a run computation's process output, DESIGN
 * Part F) and the processes table of atoll show. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "draw.h"

#define LOGS_PATH_MAX 512

/* Appends s percent-encoded (RFC 3986 unreserved characters kept) to dst
 * of capacity cap; -1 when it does not fit. */
static int append_escaped(char *dst, size_t cap, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(dst);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        int plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                    (ch >= '0' && ch <= '9') || strchr("-._~", ch);
        if (n + (plain ? 1 : 3) >= cap)
            return -1;
        if (plain) {
            dst[n++] = (char)ch;
        } else {
            dst[n++] = '%';
            dst[n++] = hex[ch >> 4];
            dst[n++] = hex[ch & 15];
        }
    }
    dst[n] = '\0';
    return 0;
}

/* A non-negative decimal integer option value into *v; -1 when not. */
static int parse_count(const char *text, long *v)
{
    char *end = NULL;
    if (!text || *text < '0' || *text > '9')
        return -1;
    *v = strtol(text, &end, 10);
    return *end == '\0' && *v >= 0 && *v < 1000000 ? 0 : -1;
}

typedef struct logs_args {
    long long id;
    const char *computation;    /* borrowed from argv; NULL: the server's default */
    long process, attempt;      /* attempt -1: the newest */
    int follow;
} logs_args_t;

static int logs_parse(int argc, char **argv, logs_args_t *a)
{
    static const struct option opts[] = {{"computation", required_argument, NULL, 'c'},
                                         {"process", required_argument, NULL, 'p'},
                                         {"attempt", required_argument, NULL, 'a'},
                                         {"follow", no_argument, NULL, 'f'},
                                         {0, 0, 0, 0}};
    int c;
    memset(a, 0, sizeof *a);
    a->attempt = -1;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "c:p:a:f", opts, NULL)) != -1) {
        if (c == 'c' && *optarg)
            a->computation = optarg;
        else if (c == 'p' && parse_count(optarg, &a->process) == 0)
            ;
        else if (c == 'a' && parse_count(optarg, &a->attempt) == 0 && a->attempt > 0)
            ;
        else if (c == 'f')
            a->follow = 1;
        else
            return cli_usage_error("logs", "bad option '%s'", argv[optind - 1]);
    }
    if (optind != argc - 1 || cli_parse_id(argv[optind], &a->id) != 0)
        return cli_usage_error("logs", "expected one job ID");
    return CLI_EXIT_OK;
}

int cmd_logs(cli_ctx_t *ctx, int argc, char **argv)
{
    logs_args_t a;
    char path[LOGS_PATH_MAX], tail[64];
    int code = logs_parse(argc, argv, &a);
    if (code != CLI_EXIT_OK)
        return code;
    snprintf(path, sizeof path, "/v1/jobs/%lld/logs?process=%ld", a.id, a.process);
    if (a.computation && (strlen(path) + 14 >= sizeof path ||
                          (strcat(path, "&computation="), 0) ||
                          append_escaped(path, sizeof path, a.computation) != 0))
        return cli_usage_error("logs", "--computation is too long");
    snprintf(tail, sizeof tail, "%s%s", a.follow ? "&follow=1" : "",
             a.attempt > 0 ? "&attempt=" : "");
    if (strlen(path) + strlen(tail) + 12 >= sizeof path)
        return cli_usage_error("logs", "--computation is too long");
    strcat(path, tail);
    if (a.attempt > 0)
        snprintf(path + strlen(path), sizeof path - strlen(path), "%ld", a.attempt);
    cli_resp_t r;
    if (cli_stream(ctx->cl, path, stdout, &r) != 0)
        return CLI_EXIT_USAGE;
    code = r.status == 200 ? CLI_EXIT_OK : cli_print_problem("logs", &r);
    cli_resp_clear(&r);
    return code;
}

/* "exited 0", "killed SIGKILL(9)" or "running" for one process. */
static void process_state(char *buf, size_t cap, const json_t *p)
{
    const char *state = json_string_value(json_object_get(p, "state"));
    const json_t *code = json_object_get(p, "exit_code"), *sig = json_object_get(p, "signal");
    if (!state)
        state = "?";
    if (json_is_integer(code))
        snprintf(buf, cap, "%s %lld", state, (long long)json_integer_value(code));
    else if (json_is_integer(sig))
        snprintf(buf, cap, "%s signal %lld", state, (long long)json_integer_value(sig));
    else
        snprintf(buf, cap, "%s", state);
}

int cli_show_processes(cli_ctx_t *ctx, long long id)
{
    char path[64];
    json_t *doc = NULL, *p;
    size_t i;
    snprintf(path, sizeof path, "/v1/jobs/%lld/processes", id);
    int code = cli_get_json(ctx->cl, path, &doc);
    if (code != CLI_EXIT_OK)
        return code;
    json_t *procs = json_object_get(doc, "processes");
    if (json_array_size(procs) > 0)
        printf("processes:\n  %-7s %-20s %-7s %-8s %-8s %-16s %s\n", "ATTEMPT", "COMPUTATION",
               "PROCESS", "WORKER", "PID", "STATE", "RAN");
    json_array_foreach(procs, i, p) {
        char state[48], ran[24] = "-";
        const json_t *t0 = json_object_get(p, "started_at_us");
        const json_t *t1 = json_object_get(p, "ended_at_us");
        process_state(state, sizeof state, p);
        if (json_is_integer(t0) && json_is_integer(t1))
            draw_duration(ran, sizeof ran, json_integer_value(t1) - json_integer_value(t0));
        printf("  %-7lld %-20.20s %-7lld %-8lld %-8lld %-16s %s\n",
               (long long)json_integer_value(json_object_get(p, "attempt")),
               json_string_value(json_object_get(p, "computation")) ? json_string_value(
                   json_object_get(p, "computation")) : "?",
               (long long)json_integer_value(json_object_get(p, "process")),
               (long long)json_integer_value(json_object_get(p, "worker")),
               (long long)json_integer_value(json_object_get(p, "pid")), state, ran);
    }
    json_decref(doc);
    return CLI_EXIT_OK;
}
