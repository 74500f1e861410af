/* cmd_show.c - atoll show and atoll result: one job, and its outputs. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "draw.h"

#define RESULT_FIRST_VALUES 8   /* values printed per output before "..." */

static const char *str_or(const json_t *obj, const char *key, const char *dflt)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : dflt;
}

static long long int_of(const json_t *obj, const char *key)
{
    return (long long)json_integer_value(json_object_get(obj, key));
}

static void show_header(const json_t *job, int color)
{
    const char *state = str_or(job, "state", "?");
    printf("job %lld \"%s\"  %s%s%s  priority %lld  attempt %lld (retries %lld/%lld, "
           "restarts %lld)\n",
           int_of(job, "id"), str_or(job, "name", ""), draw_state_color(state, color), state,
           draw_reset(color), int_of(job, "priority"), int_of(job, "attempt"),
           int_of(job, "retries"), int_of(job, "max_retries"), int_of(job, "restarts"));
    printf("progress   ");
    draw_bar(stdout, int_of(job, "computations_done"), int_of(job, "computations_total"), 20);
    printf(" computations\n");
    if (json_is_string(json_object_get(job, "pending_reason")))
        printf("pending    %s\n", str_or(job, "pending_reason", ""));
    if (json_is_string(json_object_get(job, "error")))
        printf("error      %s\n", str_or(job, "error", ""));
}

static void show_times(const json_t *job)
{
    static const char *const names[] = {"created_at", "allocated_at", "started_at",
                                        "finished_at"};
    const json_t *t = json_object_get(job, "times_us");
    for (size_t i = 0; i < 4; i++)
        printf("%-10.*s %s\n", (int)(strchr(names[i], '_') - names[i]), names[i],
               str_or(job, names[i], "-"));
    json_t *c = json_object_get(t, "created"), *a = json_object_get(t, "allocated");
    json_t *f = json_object_get(t, "finished");
    char wait[24] = "-", ran[24] = "-";
    if (json_is_integer(c) && json_is_integer(a))
        draw_duration(wait, sizeof wait, json_integer_value(a) - json_integer_value(c));
    if (json_is_integer(a) && json_is_integer(f))
        draw_duration(ran, sizeof ran, json_integer_value(f) - json_integer_value(a));
    printf("waited     %s, ran %s\n", wait, ran);
}

static void show_slices(const json_t *job)
{
    const char *name;
    json_t *sl;
    printf("slices:\n");
    json_object_foreach(json_object_get(job, "slices"), name, sl) {
        char shape[48];
        size_t i;
        json_t *d;
        draw_shape(shape, sizeof shape, json_object_get(sl, "shape"));
        printf("  %-12s %-8s [%s]  devices", name, str_or(sl, "island", "?"), shape);
        json_array_foreach(json_object_get(sl, "devices"), i, d)
            printf(" %lld", int_of(d, "index"));
        printf("\n");
    }
}

static void show_computations(const json_t *job, int color)
{
    size_t i;
    json_t *c;
    printf("computations:\n  %-3s %-20s %-10s %-8s %-10s %-9s %-9s %s\n", "#", "NAME", "SLICE",
           "ISLAND", "STATE", "SHARDS", "BUSY", "SEQ");
    json_array_foreach(json_object_get(job, "computations"), i, c) {
        char shards[32], busy[24], seq[24] = "-";
        const char *state = str_or(c, "state", "?");
        snprintf(shards, sizeof shards, "%lld/%lld", int_of(c, "shards_done"),
                 int_of(c, "shards_total"));
        draw_duration(busy, sizeof busy, int_of(c, "busy_us"));
        if (json_is_integer(json_object_get(c, "seq")))
            snprintf(seq, sizeof seq, "%lld", int_of(c, "seq"));
        printf("  %-3lld %-20.20s %-10.10s %-8.8s %s%-10s%s %-9s %-9s %s\n", int_of(c, "index"),
               str_or(c, "name", "?"), str_or(c, "slice", "?"), str_or(c, "island", "-"),
               draw_state_color(state, color), state, draw_reset(color), shards, busy, seq);
    }
}

static void show_events(const json_t *job)
{
    size_t i;
    json_t *e;
    printf("events:\n");
    json_array_foreach(json_object_get(job, "events"), i, e)
        printf("  %s  %-10s %s\n", str_or(e, "at", "?"), str_or(e, "kind", "?"),
               str_or(e, "detail", ""));
}

int cmd_show(cli_ctx_t *ctx, int argc, char **argv)
{
    long long id;
    char path[64];
    json_t *job = NULL;
    if (argc != 2 || cli_parse_id(argv[1], &id) != 0)
        return cli_usage_error("show", "expected one job ID");
    snprintf(path, sizeof path, "/v1/jobs/%lld", id);
    int code = cli_get_json(ctx->cl, path, &job);
    if (code != CLI_EXIT_OK)
        return code;
    show_header(job, ctx->tty);
    show_times(job);
    show_slices(job);
    show_computations(job, ctx->tty);
    show_events(job);
    json_decref(job);
    return cli_show_processes(ctx, id);
}

/* "shape [4]  sum 24  values 6 6 6 6" of one shard or global output. */
static void print_tensor(const json_t *t)
{
    char shape[64];
    size_t i;
    json_t *v;
    const json_t *values = json_object_get(t, "values");
    const json_t *sum = json_object_get(t, "sum");
    draw_shape(shape, sizeof shape, json_object_get(t, "shape"));
    if (json_array_size(json_object_get(t, "shape")) == 0)
        snprintf(shape, sizeof shape, "scalar");
    char sums[32] = "null";     /* null: a non-finite sum */
    if (json_is_number(sum))
        snprintf(sums, sizeof sums, "%.9g", json_number_value(sum));
    printf("shape [%s]  sum %s", shape, sums);
    if (!json_is_array(values)) {
        printf("  (values not sent: too many elements)\n");
        return;
    }
    printf("  values");
    json_array_foreach(values, i, v) {
        if (i == RESULT_FIRST_VALUES) {
            printf(" ... (%zu in all)", json_array_size(values));
            break;
        }
        if (json_is_number(v))
            printf(" %.9g", json_number_value(v));
        else
            printf(" null");
    }
    printf("\n");
}

static void print_outputs(const json_t *outputs)
{
    const char *key;
    json_t *out;
    json_object_foreach((json_t *)outputs, key, out) {
        size_t i;
        json_t *shard;
        if (json_is_object(out)) {      /* ?view=global: one assembled value */
            printf("%s  global  ", key);
            print_tensor(out);
            continue;
        }
        printf("%s  (%zu shards)\n", key, json_array_size(out));
        json_array_foreach(out, i, shard) {
            printf("  shard %-4lld ", int_of(shard, "shard"));
            print_tensor(shard);
        }
    }
}

int cmd_result(cli_ctx_t *ctx, int argc, char **argv)
{
    static const struct option opts[] = {{"global", no_argument, NULL, 'g'},
                                         {"json", no_argument, NULL, 'j'},
                                         {0, 0, 0, 0}};
    int global = 0, raw = 0, c;
    long long id;
    optind = 0;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "gj", opts, NULL)) != -1) {
        if (c == 'g')
            global = 1;
        else if (c == 'j')
            raw = 1;
        else
            return cli_usage_error("result", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind != argc - 1 || cli_parse_id(argv[optind], &id) != 0)
        return cli_usage_error("result", "expected one job ID");
    char path[96];
    cli_resp_t r;
    snprintf(path, sizeof path, "/v1/jobs/%lld/result%s", id, global ? "?view=global" : "");
    if (cli_request(ctx->cl, "GET", path, NULL, 0, &r) != 0)
        return CLI_EXIT_USAGE;
    int code = CLI_EXIT_OK;
    if (r.status != 200 || !r.json)
        code = cli_print_problem("result", &r);
    else if (raw)
        printf("%s%s", r.body, r.len && r.body[r.len - 1] == '\n' ? "" : "\n");
    else
        print_outputs(json_object_get(r.json, "outputs"));
    cli_resp_clear(&r);
    return code;
}
