/* draw_mesh.c - islands drawn as their meshes (see draw.h), like the
 * dashboard's Cluster view: 1-D and 2-D meshes as rows of cells, 3-D
 * meshes as layers (first axis) side by side, wrapped to ~100 columns. */
#include "draw.h"

#include <string.h>

#define MESH_WIDTH 100          /* columns a band of layers may use */
#define LAYER_MIN_WIDTH 8       /* room for the "layer N" heading */

typedef struct legend {
    long long jobs[DRAW_LEGEND_MAX];    /* holder job ids, in order of first sight */
    int n;
    int other;                  /* a holder shown as {"tenant": "other"} */
    int overflow;               /* more holders than letters */
} legend_t;

static const int holder_bg[] = {41, 42, 43, 44, 45, 46, 101, 102, 103, 104, 105, 106};
#define HOLDER_COLORS ((int)(sizeof holder_bg / sizeof holder_bg[0]))

static char slot_letter(int slot)
{
    return slot < 26 ? (char)('A' + slot) : (char)('a' + slot - 26);
}

/* The letter slot of holder job `id`, added on first sight; -1 when full. */
static int legend_slot(legend_t *lg, long long id)
{
    for (int i = 0; i < lg->n; i++)
        if (lg->jobs[i] == id)
            return i;
    if (lg->n == DRAW_LEGEND_MAX) {
        lg->overflow = 1;
        return -1;
    }
    lg->jobs[lg->n] = id;
    return lg->n++;
}

static void put_holder(FILE *out, int slot, int color)
{
    char ch = slot < 0 ? '*' : slot_letter(slot);
    if (color && slot >= 0)
        fprintf(out, "\033[30;%dm%c\033[0m", holder_bg[slot % HOLDER_COLORS], ch);
    else
        fputc(ch, out);
}

static void draw_cell(FILE *out, const json_t *dev, legend_t *lg, int color)
{
    const char *state = json_string_value(json_object_get(dev, "state"));
    json_t *job = json_object_get(dev, "job");
    if (!dev) {
        fputc('?', out);
    } else if (state && strcmp(state, "down") == 0) {
        fputs(color ? "\033[2;31mx\033[0m" : "x", out);
    } else if (json_is_integer(job)) {
        put_holder(out, legend_slot(lg, json_integer_value(job)), color);
    } else if (json_is_object(job)) {
        lg->other = 1;      /* another tenant's job: no id is shown to us */
        fputc('o', out);
    } else {
        fputs(color ? "\033[2m.\033[0m" : ".", out);
    }
}

/* Device `idx` (row-major) of an island's devices array, or NULL. */
static const json_t *device_at(const json_t *devs, size_t idx)
{
    const json_t *d = json_array_get(devs, idx);
    if (d && (size_t)json_integer_value(json_object_get(d, "index")) == idx)
        return d;
    size_t i;
    json_t *v;
    json_array_foreach(devs, i, v)
        if ((size_t)json_integer_value(json_object_get(v, "index")) == idx)
            return v;
    return NULL;
}

typedef struct mesh_dims {
    size_t layers, rows, cols;
} mesh_dims_t;

static mesh_dims_t mesh_dims(const json_t *shape)
{
    mesh_dims_t m = {1, 1, 1};
    size_t nd = json_array_size(shape);
    size_t d[3] = {1, 1, 1};
    for (size_t i = 0; i < nd && i < 3; i++)
        d[3 - nd + i] = (size_t)json_integer_value(json_array_get(shape, i));
    m.layers = d[0], m.rows = d[1], m.cols = d[2];
    return m;
}

/* Layers [first, last) side by side: an optional heading, then the rows. */
static void draw_band(FILE *out, const json_t *devs, mesh_dims_t m, size_t first, size_t last,
                      legend_t *lg, int color)
{
    int lw = (int)(2 * m.cols) < LAYER_MIN_WIDTH ? LAYER_MIN_WIDTH : (int)(2 * m.cols);
    if (m.layers > 1) {
        fputs("  ", out);
        for (size_t l = first; l < last; l++)
            fprintf(out, "layer %-*zu  ", lw - 6, l);
        fputc('\n', out);
    }
    for (size_t r = 0; r < m.rows; r++) {
        fputs("  ", out);
        for (size_t l = first; l < last; l++) {
            for (size_t c = 0; c < m.cols; c++) {
                draw_cell(out, device_at(devs, (l * m.rows + r) * m.cols + c), lg, color);
                fputc(' ', out);
            }
            if (l + 1 < last)       /* the gap between layers */
                fprintf(out, "%*s", lw - (int)(2 * m.cols) + 2, "");
        }
        fputc('\n', out);
    }
}

static void draw_island(FILE *out, const json_t *isl, legend_t *lg, int color)
{
    char shape[48];
    const json_t *sh = json_object_get(isl, "shape");
    const char *name = json_string_value(json_object_get(isl, "name"));
    draw_shape(shape, sizeof shape, sh);
    fprintf(out, "%s%s%s [%s]  free %lld  allocated %lld  down %lld  utilization %.0f%% (last %llds)\n",
            color ? "\033[1m" : "", name ? name : "?", draw_reset(color), shape,
            (long long)json_integer_value(json_object_get(isl, "free")),
            (long long)json_integer_value(json_object_get(isl, "allocated")),
            (long long)json_integer_value(json_object_get(isl, "down")),
            100.0 * json_number_value(json_object_get(isl, "utilization_recent")),
            (long long)json_integer_value(json_object_get(isl, "utilization_window_s")));
    mesh_dims_t m = mesh_dims(sh);
    size_t lw = 2 * m.cols < LAYER_MIN_WIDTH ? LAYER_MIN_WIDTH : 2 * m.cols;
    size_t per_band = MESH_WIDTH / (lw + 2);
    if (per_band == 0)
        per_band = 1;
    const json_t *devs = json_object_get(isl, "devices");
    for (size_t l = 0; l < m.layers; l += per_band)
        draw_band(out, devs, m, l, l + per_band < m.layers ? l + per_band : m.layers, lg, color);
}

static void draw_legend(FILE *out, const legend_t *lg, int color)
{
    fputs("legend: . free  x down", out);
    for (int i = 0; i < lg->n; i++) {
        fputs("  ", out);
        put_holder(out, i, color);
        fprintf(out, " job %lld", lg->jobs[i]);
    }
    if (lg->other)
        fputs("  o another tenant's job", out);
    if (lg->overflow)
        fputs("  * other jobs", out);
    fputc('\n', out);
}

void draw_islands(FILE *out, const json_t *islands_answer, int color)
{
    legend_t lg;
    size_t i;
    json_t *isl;
    memset(&lg, 0, sizeof lg);
    json_array_foreach(json_object_get(islands_answer, "islands"), i, isl) {
        draw_island(out, isl, &lg, color);
        fputc('\n', out);
    }
    draw_legend(out, &lg, color);
}
