/* draw.h - the atoll client's terminal output: durations, progress bars,
 * island meshes and job tables, from the API's JSON (borrowed throughout).
 *
 * `color` turns on ANSI escape sequences; callers pass it only when stdout
 * is a terminal, so pipes and files get plain text. Nothing here blocks or
 * allocates beyond a few bytes of stack. */
#ifndef ATOLL_CLI_DRAW_H
#define ATOLL_CLI_DRAW_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

/* Distinct holder jobs one drawing names with letters (A-Z, a-z); later
 * holders are drawn as '*'. */
#define DRAW_LEGEND_MAX 52

/* Unix time now, in microseconds. */
long long draw_now_us(void);
/* "850ms", "12.3s", "5m03s", "2h05m", "3d04h"; "-" when us < 0. */
void draw_duration(char *buf, size_t cap, long long us);
/* "2x4" from a JSON array of integers ("?" when not one). */
void draw_shape(char *buf, size_t cap, const json_t *shape);
/* The ANSI colour sequence for a job state ("" when color is 0 or the
 * state has none); pair with draw_reset(). */
const char *draw_state_color(const char *state, int color);
const char *draw_reset(int color);
/* "[#####-----]" of width cells, then " done/total". */
void draw_bar(FILE *out, long long done, long long total, int width);

/* Every island of a GET /v1/islands answer ({"islands": [...]}) drawn as
 * its mesh, one character per device ('.' free, 'x' down, a letter per
 * holder job), then one legend for all of them. */
void draw_islands(FILE *out, const json_t *islands_answer, int color);

/* A table of job objects (ID NAME STATE PRIO SLICES PROGRESS AGE); slices
 * are shown when the objects carry them (full job objects). */
void draw_jobs_table(FILE *out, const json_t *jobs, int color);

#endif
