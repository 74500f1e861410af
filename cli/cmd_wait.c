/* cmd_wait.c - submit --wait: follows a job to its final state.
 *
 * It asks GET /v1/jobs/{id}?view=summary&wait_ms=WAIT_POLL_MS in a loop:
 * atolld answers as soon as the job is final (so the command returns then,
 * not up to a poll interval later) or after WAIT_POLL_MS with its progress
 * to draw. A controller that answers at once (one without wait_ms) is
 * asked again after WAIT_POLL_MS. A controller that restarts or answers
 * 503 meanwhile is waited for, up to WAIT_OUTAGE_MS in a row. */
#include <string.h>
#include <time.h>

#include "cli.h"
#include "draw.h"

#define WAIT_POLL_MS 200
#define WAIT_OUTAGE_MS 60000
#define WAIT_BAR_WIDTH 30

typedef struct wait_seen {
    char state[16];
    long long done, total;
    int printed;                /* a line was printed for this (state, done) */
} wait_seen_t;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int final_code(const char *state)
{
    if (strcmp(state, "succeeded") == 0)
        return CLI_EXIT_OK;
    if (strcmp(state, "failed") == 0)
        return CLI_EXIT_FAILED;
    if (strcmp(state, "cancelled") == 0)
        return CLI_EXIT_CANCELLED;
    return -1;
}

/* Draws the job's progress: redrawn in place on a terminal, one line per
 * change of state or computations done otherwise. */
static void draw_progress(cli_ctx_t *ctx, long long id, const json_t *job, wait_seen_t *seen,
                          long long t0_us)
{
    const char *state = json_string_value(json_object_get(job, "state"));
    long long done = json_integer_value(json_object_get(job, "computations_done"));
    long long total = json_integer_value(json_object_get(job, "computations_total"));
    if (!state)
        state = "?";
    if (ctx->tty) {
        char el[24];
        draw_duration(el, sizeof el, draw_now_us() - t0_us);
        printf("\r\033[Kjob %lld %s%-9s%s ", id, draw_state_color(state, 1), state,
               draw_reset(1));
        draw_bar(stdout, done, total, WAIT_BAR_WIDTH);
        printf(" computations  %s", el);
    } else if (final_code(state) >= 0) {
        /* print_final() says it */
    } else if (!seen->printed || strcmp(seen->state, state) != 0 || seen->done != done) {
        printf("job %lld %s %lld/%lld computations\n", id, state, done, total);
    }
    snprintf(seen->state, sizeof seen->state, "%s", state);
    seen->done = done, seen->total = total, seen->printed = 1;
    fflush(stdout);
}

/* One poll: 0 with *job (new ref), 1 when worth retrying, or a CLI exit
 * code + 1 (>1) when not. */
static int poll_job(cli_ctx_t *ctx, const char *path, json_t **job)
{
    cli_resp_t r;
    *job = NULL;
    if (cli_request(ctx->cl, "GET", path, NULL, 0, &r) != 0)
        return 1;
    int rc = 0;
    if (r.status == 200 && json_is_object(r.json))
        *job = json_incref(r.json);
    else if (r.status == 503)
        rc = 1;
    else
        rc = cli_print_problem("wait", &r) + 1;
    cli_resp_clear(&r);
    return rc;
}

static void print_final(cli_ctx_t *ctx, long long id, const json_t *job, long long t0_us)
{
    char el[24];
    const char *state = json_string_value(json_object_get(job, "state"));
    const char *err = json_string_value(json_object_get(job, "error"));
    draw_duration(el, sizeof el, draw_now_us() - t0_us);
    if (ctx->tty)
        printf("\n");
    printf("job %lld %s after %s%s%s\n", id, state, el, err ? ": " : "", err ? err : "");
}

int cli_wait_job(cli_ctx_t *ctx, long long id)
{
    char path[96];
    wait_seen_t seen;
    long long t0 = draw_now_us(), outage_since = -1;
    memset(&seen, 0, sizeof seen);
    snprintf(path, sizeof path, "/v1/jobs/%lld?view=summary&wait_ms=%d", id, WAIT_POLL_MS);
    for (;;) {
        json_t *job = NULL;
        long long asked = draw_now_us();
        int rc = poll_job(ctx, path, &job);
        if (rc > 1)
            return rc - 1;
        if (rc == 1) {
            long long now = draw_now_us();
            outage_since = outage_since < 0 ? now : outage_since;
            if (now - outage_since > (long long)WAIT_OUTAGE_MS * 1000) {
                fprintf(stderr, "atoll: gave up waiting for job %lld: atolld unreachable\n", id);
                return CLI_EXIT_USAGE;
            }
        } else {
            outage_since = -1;
            draw_progress(ctx, id, job, &seen, t0);
            int code = final_code(seen.state);
            if (code >= 0) {
                print_final(ctx, id, job, t0);
                json_decref(job);
                return code;
            }
            json_decref(job);
        }
        if (draw_now_us() - asked < (long long)WAIT_POLL_MS * 1000 / 2)
            sleep_ms(WAIT_POLL_MS);     /* answered at once: an error, or no wait_ms */
    }
}
