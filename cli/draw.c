/* draw.c - durations, bars and the jobs table (see draw.h); the island
 * meshes are in draw_mesh.c. */
#include "draw.h"

#include <string.h>
#include <time.h>

long long draw_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void draw_duration(char *buf, size_t cap, long long us)
{
    long long s = us / 1000000;
    if (us < 0)
        snprintf(buf, cap, "-");
    else if (us < 1000000)
        snprintf(buf, cap, "%lldms", us / 1000);
    else if (s < 60)
        snprintf(buf, cap, "%.1fs", (double)us / 1e6);
    else if (s < 3600)
        snprintf(buf, cap, "%lldm%02llds", s / 60, s % 60);
    else if (s < 86400)
        snprintf(buf, cap, "%lldh%02lldm", s / 3600, s / 60 % 60);
    else
        snprintf(buf, cap, "%lldd%02lldh", s / 86400, s / 3600 % 24);
}

void draw_shape(char *buf, size_t cap, const json_t *shape)
{
    size_t used = 0;
    buf[0] = '\0';
    if (!json_is_array(shape) || json_array_size(shape) == 0) {
        snprintf(buf, cap, "?");
        return;
    }
    for (size_t i = 0; i < json_array_size(shape) && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%lld", i ? "x" : "",
                         (long long)json_integer_value(json_array_get(shape, i)));
        if (n < 0)
            return;
        used += (size_t)n;
    }
}

const char *draw_state_color(const char *state, int color)
{
    static const struct {
        const char *state, *seq;
    } colors[] = {
        {"succeeded", "\033[32m"}, {"failed", "\033[31m"}, {"cancelled", "\033[33m"},
        {"running", "\033[36m"},   {"allocated", "\033[34m"},
    };
    for (size_t i = 0; color && state && i < sizeof colors / sizeof colors[0]; i++)
        if (strcmp(state, colors[i].state) == 0)
            return colors[i].seq;
    return "";
}

const char *draw_reset(int color)
{
    return color ? "\033[0m" : "";
}

void draw_bar(FILE *out, long long done, long long total, int width)
{
    int full = total > 0 ? (int)(done * width / total) : 0;
    if (full > width)
        full = width;
    fputc('[', out);
    for (int i = 0; i < width; i++)
        fputc(i < full ? '#' : '-', out);
    fprintf(out, "] %lld/%lld", done, total);
}

/* "a:west[2x2] b:east[2x2]" from a full job's granted slices, "-" when
 * none (queued, or a summary without them). */
static void job_slices(char *buf, size_t cap, const json_t *job)
{
    const char *name;
    json_t *sl;
    size_t used = 0;
    snprintf(buf, cap, "-");
    json_object_foreach(json_object_get(job, "slices"), name, sl) {
        char shape[48];
        draw_shape(shape, sizeof shape, json_object_get(sl, "shape"));
        const char *isl = json_string_value(json_object_get(sl, "island"));
        int n = snprintf(buf + used, cap - used, "%s%s:%s[%s]", used ? " " : "", name,
                         isl ? isl : "?", shape);
        if (n < 0 || (size_t)n >= cap - used)
            return;     /* truncated: what fits is shown */
        used += (size_t)n;
    }
}

static void job_row(FILE *out, const json_t *job, long long now, int color)
{
    char slices[64], progress[32], age[24];
    const char *state = json_string_value(json_object_get(job, "state"));
    const char *name = json_string_value(json_object_get(job, "name"));
    json_t *created = json_object_get(json_object_get(job, "times_us"), "created");
    job_slices(slices, sizeof slices, job);
    snprintf(progress, sizeof progress, "%lld/%lld",
             (long long)json_integer_value(json_object_get(job, "computations_done")),
             (long long)json_integer_value(json_object_get(job, "computations_total")));
    draw_duration(age, sizeof age,
                  json_is_integer(created) ? now - json_integer_value(created) : -1);
    fprintf(out, "%-6lld %-16.16s %s%-10s%s %5lld %-28.28s %-9s %s\n",
            (long long)json_integer_value(json_object_get(job, "id")), name ? name : "",
            draw_state_color(state, color), state ? state : "?", draw_reset(color),
            (long long)json_integer_value(json_object_get(job, "priority")), slices, progress,
            age);
}

void draw_jobs_table(FILE *out, const json_t *jobs, int color)
{
    long long now = draw_now_us();
    size_t i;
    json_t *job;
    fprintf(out, "%-6s %-16s %-10s %5s %-28s %-9s %s\n", "ID", "NAME", "STATE", "PRIO",
            "SLICES", "PROGRESS", "AGE");
    json_array_foreach(jobs, i, job)
        job_row(out, job, now, color);
}
