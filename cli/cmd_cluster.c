/* cmd_cluster.c - atoll islands, atoll workers (top is in cmd_top.c). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "draw.h"

int cli_draw_islands(cli_ctx_t *ctx, FILE *out)
{
    json_t *ans = NULL;
    int code = cli_get_json(ctx->cl, "/v1/islands", &ans);
    if (code == CLI_EXIT_OK)
        draw_islands(out, ans, ctx->tty);
    json_decref(ans);
    return code;
}

int cmd_islands(cli_ctx_t *ctx, int argc, char **argv)
{
    if (argc != 1)
        return cli_usage_error("islands", "unexpected argument '%s'", argv[1]);
    return cli_draw_islands(ctx, stdout);
}

/* "0-3" or "0,2,5-7" from an array of device indexes. */
static void device_ranges(char *buf, size_t cap, const json_t *devs)
{
    size_t n = json_array_size(devs), used = 0;
    snprintf(buf, cap, "-");
    for (size_t i = 0; i < n && used < cap;) {
        long long first = json_integer_value(json_array_get(devs, i)), last = first;
        while (++i < n && json_integer_value(json_array_get(devs, i)) == last + 1)
            last++;
        int w = last > first
                    ? snprintf(buf + used, cap - used, "%s%lld-%lld", used ? "," : "", first, last)
                    : snprintf(buf + used, cap - used, "%s%lld", used ? "," : "", first);
        if (w < 0)
            return;
        used += (size_t)w;
    }
}

static void human_bytes(char *buf, size_t cap, double b)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4)
        b /= 1024, u++;
    snprintf(buf, cap, u ? "%.1f%s" : "%.0f%s", b, units[u]);
}

static void worker_row(const json_t *w, int color)
{
    char devs[64], used[24], capb[24], hb[24], store[64];
    const json_t *st = json_object_get(w, "store");
    const char *state = json_string_value(json_object_get(w, "state"));
    const char *host = json_string_value(json_object_get(w, "host"));
    const char *backend = json_string_value(json_object_get(w, "backend"));
    const char *island = json_string_value(json_object_get(w, "island"));
    device_ranges(devs, sizeof devs, json_object_get(w, "devices"));
    human_bytes(used, sizeof used, (double)json_integer_value(json_object_get(st, "bytes")));
    human_bytes(capb, sizeof capb, (double)json_integer_value(json_object_get(st, "cap_bytes")));
    snprintf(store, sizeof store, "%lld obj %s/%s",
             (long long)json_integer_value(json_object_get(st, "objects")), used, capb);
    draw_duration(hb, sizeof hb,
                  (long long)(json_number_value(json_object_get(w, "heartbeat_age_s")) * 1e6));
    /* Tenants are not shown host and pid (DESIGN Part E): "-" then. */
    printf("%-4lld %-10.10s %-12.12s %s%-5s%s %-7.7s %-14.14s %-8lld %-9s %-6lld %s\n",
           (long long)json_integer_value(json_object_get(w, "id")),
           island ? island : "?", devs,
           color && state && strcmp(state, "live") != 0 ? "\033[31m" : "", state ? state : "?",
           draw_reset(color), backend ? backend : "-", host ? host : "-",
           (long long)json_integer_value(json_object_get(w, "pid")), hb,
           (long long)json_integer_value(json_object_get(w, "tasks_leased")), store);
}

int cmd_workers(cli_ctx_t *ctx, int argc, char **argv)
{
    json_t *ans = NULL;
    size_t i;
    json_t *w;
    if (argc != 1)
        return cli_usage_error("workers", "unexpected argument '%s'", argv[1]);
    int code = cli_get_json(ctx->cl, "/v1/workers", &ans);
    if (code != CLI_EXIT_OK)
        return code;
    printf("%-4s %-10s %-12s %-5s %-7s %-14s %-8s %-9s %-6s %s\n", "ID", "ISLAND", "DEVICES",
           "STATE", "BACKEND", "HOST", "PID", "HEARTBEAT", "TASKS", "STORE");
    json_array_foreach(json_object_get(ans, "workers"), i, w)
        worker_row(w, ctx->tty);
    json_int_t omitted = json_integer_value(json_object_get(ans, "gone_omitted"));
    if (omitted > 0)
        printf("(%lld older gone workers not listed)\n", (long long)omitted);
    json_decref(ans);
    return CLI_EXIT_OK;
}
