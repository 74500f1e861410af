/* cmd_top.c - atoll top: islands and live jobs, redrawn every second.
 *
 * On a terminal the frame is built in memory and written at once after a
 * cursor-home + clear, so it does not flicker; stdin goes to non-canonical
 * mode so 'q' quits without Enter, and SIGINT only sets top_stop. Both are
 * restored on every way out. Not a terminal: one frame, exit. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "draw.h"

#define TOP_REFRESH_MS 1000
#define TOP_JOBS_PER_STATE 20

static volatile sig_atomic_t top_stop;

static void top_on_signal(int sig)
{
    (void)sig;
    top_stop = 1;
}

/* Appends the live jobs (running, allocated, queued) of `state` to all. */
static int top_add_jobs(cli_ctx_t *ctx, const char *state, json_t *all)
{
    json_t *jobs = NULL;
    int code = cli_jobs_fetch(ctx, state, TOP_JOBS_PER_STATE, &jobs);
    if (code == CLI_EXIT_OK && json_array_extend(all, jobs) != 0)
        code = CLI_EXIT_USAGE;
    json_decref(jobs);
    return code;
}

static int top_frame(cli_ctx_t *ctx, FILE *out)
{
    static const char *const live[] = {"running", "allocated", "queued"};
    char clock[16];
    time_t now = time(NULL);
    struct tm tm;
    strftime(clock, sizeof clock, "%H:%M:%S", localtime_r(&now, &tm));
    fprintf(out, "atoll top  %s  %s%s\n\n", cli_client_url(ctx->cl), clock,
            ctx->tty ? "  (q or Ctrl-C quits)" : "");
    int code = cli_draw_islands(ctx, out);
    json_t *all = json_array();
    if (!all)
        return CLI_EXIT_USAGE;
    for (size_t i = 0; i < 3 && code == CLI_EXIT_OK; i++)
        code = top_add_jobs(ctx, live[i], all);
    if (code == CLI_EXIT_OK) {
        fprintf(out, "\n%zu live job(s)\n", json_array_size(all));
        draw_jobs_table(out, all, ctx->tty);
    }
    json_decref(all);
    return code;
}

/* Draws one frame at the top of the cleared screen. */
static void top_redraw(cli_ctx_t *ctx)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return;
    top_frame(ctx, mem);
    if (fclose(mem) == 0) {
        fputs("\033[H\033[2J", stdout);
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    free(text);
}

/* Waits up to ms for a key; returns 1 when it was q/Q. */
static int top_wait_key(int have_tty_in, int ms)
{
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int n = poll(&p, have_tty_in ? 1 : 0, ms);
    char ch;
    if (n > 0 && read(STDIN_FILENO, &ch, 1) == 1)
        return ch == 'q' || ch == 'Q';
    return 0;
}

static void top_live(cli_ctx_t *ctx)
{
    struct termios saved, raw;
    int tty_in = isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = top_on_signal;      /* no SA_RESTART: poll() wakes */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (tty_in) {
        raw = saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 1, raw.c_cc[VTIME] = 0;
        tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    }
    fputs("\033[?25l", stdout);         /* hide the cursor while redrawing */
    while (!top_stop) {
        top_redraw(ctx);
        if (top_wait_key(tty_in, TOP_REFRESH_MS))
            break;
    }
    fputs("\033[?25h", stdout);
    fflush(stdout);
    if (tty_in)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
}

int cmd_top(cli_ctx_t *ctx, int argc, char **argv)
{
    if (argc != 1)
        return cli_usage_error("top", "unexpected argument '%s'", argv[1]);
    if (!ctx->tty)
        return top_frame(ctx, stdout);
    top_live(ctx);
    return CLI_EXIT_OK;
}
