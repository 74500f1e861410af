/* main.c - `atoll`, the terminal client of atolld: global flags, the
 * subcommand table, --help and --version. The composition root: it makes
 * the one HTTP client and hands it to the subcommand. */
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define CLI_DEFAULT_URL "http://127.0.0.1:8080"

typedef struct cli_command {
    const char *name;
    cli_cmd_fn fn;
    const char *usage;          /* printed by `atoll NAME --help` */
} cli_command_t;

static const cli_command_t commands[] = {
    {"submit", cmd_submit,
     "usage: atoll submit FILE [--wait]\n"
     "Submits the job document in FILE ('-' reads stdin) and prints its id.\n"
     "  --wait   follow the job to its end: a progress bar of computations on a\n"
     "           terminal, a line per change otherwise; the exit code is the\n"
     "           outcome (0 succeeded, 1 failed, 2 cancelled)\n"},
    {"jobs", cmd_jobs,
     "usage: atoll jobs [--state STATE] [--limit N]\n"
     "Lists jobs, newest first: id, name, state, priority, slices, progress, age.\n"
     "  --state STATE  queued, allocated, running, succeeded, failed or cancelled\n"
     "  --limit N      at most N jobs (1..500, default 20)\n"},
    {"show", cmd_show,
     "usage: atoll show ID\n"
     "Shows one job: state, slices granted, per-computation progress, times,\n"
     "error, events, and the processes of its run computations.\n"},
    {"cancel", cmd_cancel, "usage: atoll cancel ID\nCancels a job; its devices are freed.\n"},
    {"result", cmd_result,
     "usage: atoll result ID [--global] [--json]\n"
     "Prints a succeeded job's outputs: per shard its shape, sum and first values.\n"
     "  --global  outputs of global computations assembled (?view=global)\n"
     "  --json    the server's JSON answer as is\n"},
    {"logs", cmd_logs,
     "usage: atoll logs ID [--computation C] [--process K] [--attempt A] [-f]\n"
     "Prints what process K (default 0) of run computation C (default the job's\n"
     "only one) wrote, stdout and stderr interleaved, newest attempt by default.\n"
     "  -f, --follow  keep printing until the process has ended\n"},
    {"islands", cmd_islands,
     "usage: atoll islands\n"
     "Draws every island as its mesh, one cell per device: '.' free, 'x' down,\n"
     "a letter per holder job (coloured on a terminal), then a legend.\n"},
    {"workers", cmd_workers,
     "usage: atoll workers\nLists workers: island, devices, state, heartbeat age, tasks, store.\n"},
    {"top", cmd_top,
     "usage: atoll top\n"
     "Live view of islands and running/queued jobs, redrawn every second until\n"
     "q or Ctrl-C. When stdout is not a terminal, prints one frame and exits.\n"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    fprintf(out,
            "usage: atoll [--url URL] [--token TOKEN] COMMAND [ARGS]\n"
            "       atoll --version | --help | COMMAND --help\n\n"
            "commands: submit, jobs, show, cancel, result, logs, islands, workers, top\n\n"
            "  --url URL      atolld's address (env ATOLL_URL, default %s)\n"
            "  --token TOKEN  bearer token (env ATOLL_TOKEN)\n\n"
            "exit codes: 0 success; 1 job failed, 2 job cancelled (submit --wait);\n"
            "3 usage error, unreadable file or server unreachable; 4 server refused.\n",
            CLI_DEFAULT_URL);
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "atoll %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see atoll %s --help)\n", cmd);
    return CLI_EXIT_USAGE;
}

int cli_parse_id(const char *text, long long *id)
{
    char *end = NULL;
    if (!text || *text < '0' || *text > '9')
        return -1;
    long long v = strtoll(text, &end, 10);
    if (*end != '\0' || v <= 0)
        return -1;
    *id = v;
    return 0;
}

/* Global flags: values of --url/--token (either form) wherever they appear
 * before "--"; they are taken out of argv (compacted in place). Returns the
 * new argc, or -1 when a flag lacks its value. */
static int take_globals(int argc, char **argv, const char **url, const char **token)
{
    int out = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (strcmp(a, "--") == 0) {
            while (i < argc)
                argv[out++] = argv[i++];
            break;
        }
        if (strcmp(a, "--url") == 0 || strncmp(a, "--url=", 6) == 0)
            dst = url;
        else if (strcmp(a, "--token") == 0 || strncmp(a, "--token=", 8) == 0)
            dst = token;
        if (!dst) {
            argv[out++] = argv[i];
            continue;
        }
        const char *eq = strchr(a, '=');
        if (eq)
            *dst = eq + 1;
        else if (i + 1 < argc)
            *dst = argv[++i];
        else
            return -1;
    }
    argv[out] = NULL;
    return out;
}

static const cli_command_t *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0)
            return &commands[i];
    return NULL;
}

static int wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    return 0;
}

static int run(const cli_command_t *cmd, const char *url, const char *token, int argc,
               char **argv)
{
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        fprintf(stderr, "atoll: --url/ATOLL_URL must start with http:// or https://: %s\n", url);
        return CLI_EXIT_USAGE;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "atoll: cannot initialise libcurl\n");
        return CLI_EXIT_USAGE;
    }
    cli_ctx_t ctx = {.cl = cli_client_new(url, token), .tty = isatty(STDOUT_FILENO)};
    int code = CLI_EXIT_USAGE;
    if (!ctx.cl)
        fprintf(stderr, "atoll: out of memory\n");
    else
        code = cmd->fn(&ctx, argc, argv);
    cli_client_free(ctx.cl);
    curl_global_cleanup();
    return code;
}

int main(int argc, char **argv)
{
    const char *url = getenv("ATOLL_URL");
    const char *token = getenv("ATOLL_TOKEN");
    if (!url || !*url)
        url = CLI_DEFAULT_URL;
    argc = take_globals(argc, argv, &url, &token);
    if (argc < 0) {
        fprintf(stderr, "atoll: --url and --token need a value\n");
        return CLI_EXIT_USAGE;
    }
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return CLI_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("atoll %s\n", ATOLL_VERSION);
        return CLI_EXIT_OK;
    }
    const cli_command_t *cmd = find_command(argv[1]);
    if (!cmd) {
        fprintf(stderr, "atoll: unknown command '%s' (see atoll --help)\n", argv[1]);
        return CLI_EXIT_USAGE;
    }
    if (wants_help(argc - 1, argv + 1)) {
        fputs(cmd->usage, stdout);
        return CLI_EXIT_OK;
    }
    return run(cmd, url, token, argc - 1, argv + 1);
}
