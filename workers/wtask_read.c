/* wtask_read.c - the poll answer's groups and TASKs, read from their text
 * (see wtask.h).
 *
 * A TASK is read in one pass over its text with the pull reader (jscan.h),
 * building no tree but its computation's, which the compiler takes (and a
 * send's rare "reshard" and the rare "full_values"): its members, in
 * whatever order they come, go into a wtask_raw_t (wtask_raw.h), which
 * wtask_check() then checks against each other and the placement, naming
 * the first fault. A tree of the whole TASK cost each computation of a
 * chain about as much again as its computation's own tree (stop 75).
 *
 * Untrusted input: every count is bounded before it grows anything
 * (ndevices, JOB_MAX_OPS, MESH_MAX_RANK, NAME_MAX_LEN), a value of the
 * wrong type is consumed and noted, never used, and a syntax error stops
 * the walk (-1). No I/O, no locks, no clock (fuzz_task runs it alone). */
#include "wtask.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jscan.h"
#include "util.h"
#include "wtask_raw.h"

/* Index of key in names[0..n), or -1 (jscan_str_eq settles most names
 * by their first byte). */
static int key_index(const jscan_str_t *key, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (jscan_str_eq(key, names[i]))
            return i;
    return -1;
}

/* Appends one zeroed item to *arr (*n items, capacity *cap, each sz
 * bytes), at most max: the new item, or NULL (full, or out of memory:
 * *oom set). */
static void *grow_one(void **arr, int *n, size_t *cap, size_t sz, int max, int *oom)
{
    if (*n >= max)
        return NULL;
    if (util_grow(arr, cap, (size_t)*n, sz, 1) != 0) {
        *oom = 1;
        return NULL;
    }
    unsigned char *item = (unsigned char *)*arr + sz * (size_t)(*n)++;
    memset(item, 0, sz);
    return item;
}

/* The next value as an integer: 1 with *v set, 0 when it is another value
 * (consumed), -1 on a syntax error. */
static int read_int(jscan_t *s, int64_t *v)
{
    jscan_num_t num;
    if (jscan_peek(s) != JSCAN_NUMBER)
        return jscan_skip(s) == 0 ? 0 : -1;
    if (jscan_number(s, &num) != 0)
        return -1;
    *v = num.i;
    return num.is_int;
}

/* The next value as a name into dst (n bytes): 1 when it is a string that
 * fits, 0 when not (consumed), -1 on a syntax error. */
static int read_name(jscan_t *s, char *dst, size_t n)
{
    jscan_str_t str;
    if (jscan_peek(s) != JSCAN_STRING)
        return jscan_skip(s) == 0 ? 0 : -1;
    if (jscan_string(s, &str) != 0)
        return -1;
    if (str.len < n) {                 /* decoded, it is no longer */
        jscan_str_decode(&str, dst);
        return 1;
    }
    char *b = str.escaped ? malloc(str.len + 1) : NULL;
    int ok = b && jscan_str_decode(&str, b) < n;
    if (ok)
        memcpy(dst, b, strlen(b) + 1);
    free(b);
    return ok;
}

/* The next value as an array of integers into dst (int64_t when wide,
 * else int32_t), at most cap stored; an element that is not an integer in
 * [lo, hi] is stored as lo - 1 and sets *bad. Returns the elements read
 * (cap + 1 when there were more), -2 when the value is not an array
 * (consumed), -1 on a syntax error. */
static int read_ints(jscan_t *s, void *dst, int wide, int cap, int64_t lo, int64_t hi,
                     int *bad)
{
    int n = 0, k = 0, more;
    if (jscan_peek(s) != JSCAN_ARRAY)
        return jscan_skip(s) == 0 ? -2 : -1;
    if (jscan_array(s) != 0)
        return -1;
    while ((more = jscan_element(s, &k)) == 1) {
        int64_t v;
        int r = read_int(s, &v);
        if (r < 0)
            return -1;
        if (!r || v < lo || v > hi) {
            v = lo - 1;
            *bad = 1;
        }
        if (n < cap && wide)
            ((int64_t *)dst)[n] = v;
        else if (n < cap)
            ((int32_t *)dst)[n] = (int32_t)v;
        n += n <= cap;
    }
    return more < 0 ? -1 : n;
}

/* The next value as a shape of at most max_rank dims >= min_dim: 1 when it
 * is one, 0 when not (consumed), -1 on a syntax error. */
static int read_shape(jscan_t *s, int max_rank, int64_t min_dim, shape_t *out)
{
    int bad = 0;
    memset(out, 0, sizeof *out);
    int n = read_ints(s, out->dim, 1, max_rank, min_dim, TENSOR_MAX_ELEMS, &bad);
    if (n == -1)
        return -1;
    if (n < 0 || n > max_rank || bad) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    out->rank = n;
    return 1;
}

/* "input_shapes": {from: shape}, at most JOB_MAX_OPS. 0 or -1 (syntax). */
static int read_inputs(jscan_t *s, wtask_raw_t *r)
{
    jscan_str_t key;
    int n = 0, more;
    if (jscan_peek(s) != JSCAN_OBJECT) {
        r->inputs_bad = 1;
        return jscan_skip(s);
    }
    if (jscan_object(s) != 0)
        return -1;
    while ((more = jscan_member(s, &n, &key)) == 1) {
        wtask_raw_input_t *in = grow_one((void **)&r->inputs, &r->ninputs, &r->cap_inputs,
                                         sizeof *in, JOB_MAX_OPS, &r->oom);
        if (!in) {
            r->inputs_bad |= !r->oom;
            if (jscan_skip(s) != 0)
                return -1;
            continue;
        }
        in->from = key;
        if ((in->ok = read_shape(s, TENSOR_MAX_RANK, 1, &in->shape)) < 0)
            return -1;
    }
    return more < 0 ? -1 : 0;
}

/* One send object's members into d. 0 or -1 (syntax). */
static int read_send(jscan_t *s, wtask_raw_send_t *d, const wplace_t *place)
{
    static const char *const names[] = {"value", "comp", "op", "slice", "reshard"};
    jscan_str_t key;
    int n = 0, more;
    d->comp = d->op = -1;
    d->slice = -1;
    if (jscan_peek(s) != JSCAN_OBJECT)
        return jscan_skip(s);
    if (jscan_object(s) != 0)
        return -1;
    while ((more = jscan_member(s, &n, &key)) == 1) {
        char slice[NAME_MAX_LEN];
        int64_t v = -1;
        int rc;
        switch (key_index(&key, names, 5)) {
        case 0: rc = d->value_ok = read_name(s, d->value, sizeof d->value); break;
        case 1: rc = read_int(s, &v); d->comp = rc > 0 && v >= 0 && v <= INT32_MAX ? v : -1; break;
        case 2: rc = read_int(s, &v); d->op = rc > 0 && v >= 0 && v < JOB_MAX_OPS ? v : -1; break;
        case 3:
            rc = read_name(s, slice, sizeof slice);
            d->slice = rc > 0 ? wplace_slice_index(place, slice) : -1;
            break;
        case 4:
            json_decref(d->reshard);
            rc = (d->reshard = jscan_tree(s, 0)) ? 0 : -1;
            break;
        default: rc = jscan_skip(s); break;
        }
        if (rc < 0)
            return -1;
    }
    return more < 0 ? -1 : 0;
}

/* "sends": [send], at most JOB_MAX_OPS. 0 or -1 (syntax). */
static int read_sends(jscan_t *s, wtask_raw_t *r, const wplace_t *place)
{
    int k = 0, more;
    if (jscan_peek(s) != JSCAN_ARRAY) {
        r->sends_bad = 1;
        return jscan_skip(s);
    }
    if (jscan_array(s) != 0)
        return -1;
    while ((more = jscan_element(s, &k)) == 1) {
        wtask_raw_send_t *d = grow_one((void **)&r->sends, &r->nsends, &r->cap_sends, sizeof *d,
                                       JOB_MAX_OPS, &r->oom);
        r->sends_bad |= !d && !r->oom;
        if (d ? read_send(s, d, place) != 0 : jscan_skip(s) != 0)
            return -1;
    }
    return more < 0 ? -1 : 0;
}

/* Reads member m's value into r (shards and devices into t's arrays). 0,
 * or -1 on a syntax error (or a tree out of memory). */
static int read_member(jscan_t *s, int m, wtask_raw_t *r, wtask_t *t, int ndevices)
{
    int bad = 0, ok;
    if (m < 0)
        return jscan_skip(s);
    if (r->seen >> m & 1)
        r->repeated = m;
    r->seen |= 1u << m;
    switch (m) {
    case WT_TASK: case WT_JOB: case WT_ATTEMPT: case WT_COMP: case WT_SEQ:
        if ((ok = read_int(s, &r->ints[m])) > 0)
            r->int_ok |= 1u << m;
        return ok < 0 ? -1 : 0;
    case WT_SLICE:
        return (r->slice_ok = read_name(s, r->slice, sizeof r->slice)) < 0 ? -1 : 0;
    case WT_SLICE_SHAPE:
        return (r->shape_ok = read_shape(s, MESH_MAX_RANK, 1, &t->slice_shape)) < 0 ? -1 : 0;
    case WT_COMPUTATION: {
        /* Kept as text: the plan cache keys it without a tree. */
        int obj = jscan_peek(s) == JSCAN_OBJECT;
        const char *start = (const char *)s->p;
        r->comp_text = NULL;
        if (jscan_skip(s) != 0)
            return -1;
        if (obj) {
            r->comp_text = start;
            r->comp_len = (size_t)((const char *)s->p - start);
        }
        return 0;
    }
    case WT_INPUT_SHAPES:
        return read_inputs(s, r);
    case WT_SHARDS:
        r->nshards = read_ints(s, t->shards, 0, ndevices, 0, INT32_MAX, &bad);
        return r->nshards == -1 ? -1 : 0;
    case WT_DEVICES:
        r->ndevs = read_ints(s, t->devices, 0, ndevices, 0, INT32_MAX, &bad);
        return r->ndevs == -1 ? -1 : 0;
    case WT_SENDS:
        return read_sends(s, r, t->place);
    case WT_FULL_VALUES:
        json_decref(r->full);
        return (r->full = jscan_tree(s, 0)) ? 0 : -1;
    default:
        return jscan_skip(s);
    }
}

/* Reads a TASK object's members into r and t. 0 or -1 (syntax). */
static int read_task(jscan_t *s, wtask_raw_t *r, wtask_t *t, int ndevices)
{
    jscan_str_t key;
    int n = 0, more;
    if (jscan_object(s) != 0)
        return -1;
    while ((more = jscan_member(s, &n, &key)) == 1)
        if (read_member(s, key_index(&key, wtask_member_names, WT_COUNT), r, t, ndevices) != 0)
            return -1;
    return more < 0 ? -1 : 0;
}

/* Reads the TASK object next in s into a task (see wtask_parse); *id and
 * *comp are set whenever they could be read (else -1). 0, or -1 with err
 * set; s->bad tells a syntax error. */
static int task_read(jscan_t *s, wplace_t *place, int ndevices, wtask_t **out, int64_t *id,
                     int32_t *comp, char *err, size_t errlen)
{
    wtask_raw_t r = {.repeated = -1, .nshards = -2, .ndevs = -2};
    *out = NULL;
    *id = *comp = -1;
    wtask_t *t = jscan_peek(s) == JSCAN_OBJECT ? util_zalloc(1, sizeof *t) : NULL;
    if (!t) {
        snprintf(err, errlen, jscan_peek(s) == JSCAN_OBJECT ? "out of memory"
                                                             : "task is not an object");
        jscan_skip(s);
        return -1;
    }
    t->place = wplace_ref(place);
    size_t cap = ndevices > 0 ? (size_t)ndevices : 1;
    if (!(t->shards = util_zalloc(cap, sizeof *t->shards)) ||
        !(t->devices = util_zalloc(cap, sizeof *t->devices)))
        r.oom = 1;
    if ((r.oom ? jscan_skip(s) : read_task(s, &r, t, ndevices)) != 0) {
        snprintf(err, errlen, "task is not JSON");
        goto fail;
    }
    if (r.int_ok >> WT_COMP & 1 && r.ints[WT_COMP] >= 0 && r.ints[WT_COMP] <= INT32_MAX)
        *comp = (int32_t)r.ints[WT_COMP];
    if (!(r.int_ok >> WT_TASK & 1) || r.ints[WT_TASK] < 0) {
        snprintf(err, errlen, "field 'task' missing or out of range");
        goto fail;
    }
    *id = t->id = r.ints[WT_TASK];
    if (wtask_check(&r, t, ndevices, err, errlen) != 0)
        goto fail;
    wtask_raw_free(&r);
    *out = t;
    return 0;
fail:
    wtask_raw_free(&r);
    wtask_free(t);
    return -1;
}

int wtask_parse(const char *text, size_t len, wplace_t *place, int ndevices, wtask_t **out,
                int64_t *task_id, char *err, size_t errlen)
{
    jscan_t s;
    int32_t comp;
    jscan_init(&s, text, len);
    int rc = task_read(&s, place, ndevices, out, task_id, &comp, err, errlen);
    if (rc == 0 && jscan_finish(&s) != 0) {
        wtask_free(*out);
        *out = NULL;
        snprintf(err, errlen, "task is not one JSON object");
        rc = -1;
    }
    return rc;
}

/* The task and comp members of the TASK next in s, each -1 when not an
 * integer in range (they name a task refused whole). 0 or -1 (syntax). */
static int task_names(jscan_t *s, int64_t *id, int32_t *comp)
{
    jscan_str_t key;
    int n = 0, more;
    *id = *comp = -1;
    if (jscan_peek(s) != JSCAN_OBJECT)
        return jscan_skip(s);
    if (jscan_object(s) != 0)
        return -1;
    while ((more = jscan_member(s, &n, &key)) == 1) {
        int m = key_index(&key, wtask_member_names, WT_COMP + 1);
        int64_t v = -1;
        if (m != WT_TASK && m != WT_COMP) {
            if (jscan_skip(s) != 0)
                return -1;
        } else if (read_int(s, &v) < 0) {
            return -1;
        } else if (m == WT_TASK) {
            *id = v >= 0 ? v : -1;
        } else {
            *comp = v >= 0 && v <= INT32_MAX ? (int32_t)v : -1;
        }
    }
    return more < 0 ? -1 : 0;
}

/* ---- a poll answer's groups ---- */

enum { G_JOB, G_ATTEMPT, G_KEY, G_PLACEMENT, G_TASKS, G_COUNT };
static const char *const wgroup_names[G_COUNT] = {"job", "attempt", "key", "placement", "tasks"};

typedef struct walk {
    const char *self_addr;
    int ndevices;
    wtask_fn fn;
    void *ctx;
} walk_t;

/* A group as read so far. */
typedef struct wgroup {
    unsigned seen;                     /* bit per G_* read */
    int64_t job, attempt;              /* -1: not an integer in range */
    char key[2 * MBOX_KEY_SIZE + 1];
    int key_ok;
    json_t *placement;                 /* owned, until the group is prepared */
    int prepared;
    wplace_t *place;                   /* one reference, or NULL */
    const char *err;                   /* set: every task of the group is refused so */
    char errbuf[256];
    const unsigned char *tasks_at, *tasks_end;  /* "tasks" met before the rest */
} wgroup_t;

static void hand(walk_t *w, wtask_t *t, int64_t id, int32_t comp, const char *err)
{
    wtask_item_t it = {t, id, comp, err};
    w->fn(w->ctx, &it);
}

/* The group's placement and key, once, before its first task. */
static void wgroup_prepare(walk_t *w, wgroup_t *g)
{
    g->prepared = 1;
    if (wplace_parse(g->placement, w->self_addr, &g->place, g->errbuf, sizeof g->errbuf) != 0 ||
        wplace_set_key(g->place, g->key_ok > 0 ? g->key : NULL, g->errbuf,
                       sizeof g->errbuf) != 0)
        g->err = g->errbuf;
    json_decref(g->placement);
    g->placement = NULL;
}

/* One TASK of the group, handed over parsed or refused. 0 or -1 (syntax). */
static int wgroup_task(jscan_t *s, walk_t *w, wgroup_t *g)
{
    char err[256];
    wtask_t *t = NULL;
    int64_t id;
    int32_t comp;
    if (g->err) {
        if (task_names(s, &id, &comp) != 0)
            return -1;
        hand(w, NULL, id, comp, g->err);
        return 0;
    }
    if (task_read(s, g->place, w->ndevices, &t, &id, &comp, err, sizeof err) != 0) {
        if (s->bad)
            return -1;
        hand(w, NULL, id, comp, err);
        return 0;
    }
    /* A task must belong to its group: the placement is the attempt's. */
    if (t->job != g->job || t->attempt != g->attempt) {
        wtask_free(t);
        hand(w, NULL, id, comp, "task's job or attempt differs from its group's");
        return 0;
    }
    hand(w, t, id, comp, NULL);
    return 0;
}

static int wgroup_tasks(jscan_t *s, walk_t *w, wgroup_t *g)
{
    int k = 0, more;
    if (!g->prepared)
        wgroup_prepare(w, g);
    if (jscan_peek(s) != JSCAN_ARRAY)
        return jscan_skip(s);
    if (jscan_array(s) != 0)
        return -1;
    while ((more = jscan_element(s, &k)) == 1)
        if (wgroup_task(s, w, g) != 0)
            return -1;
    return more < 0 ? -1 : 0;
}

/* Group member m. Its tasks are read in place when everything they need
 * came before them (the controller's order), else after the group. */
static int wgroup_member(jscan_t *s, int m, walk_t *w, wgroup_t *g)
{
    int64_t v = -1;
    int rc;
    unsigned before = (1u << G_TASKS) - 1;
    if (m >= 0)
        g->seen |= 1u << m;
    switch (m) {
    case G_JOB: case G_ATTEMPT:
        rc = read_int(s, &v);
        if (v < (m == G_JOB) || v > (m == G_JOB ? INT64_MAX : INT32_MAX))
            v = -1;
        *(m == G_JOB ? &g->job : &g->attempt) = rc > 0 ? v : -1;
        return rc < 0 ? -1 : 0;
    case G_KEY:
        return (g->key_ok = read_name(s, g->key, sizeof g->key)) < 0 ? -1 : 0;
    case G_PLACEMENT:
        json_decref(g->placement);
        return (g->placement = jscan_tree(s, 0)) ? 0 : -1;
    case G_TASKS:
        if ((g->seen & before) == before)
            return wgroup_tasks(s, w, g);
        g->tasks_at = s->p;
        rc = jscan_skip(s);
        g->tasks_end = s->p;
        return rc;
    default:
        return jscan_skip(s);
    }
}

/* The group object next in s. 0 or -1 (syntax). */
static int wgroup_read(jscan_t *s, walk_t *w)
{
    wgroup_t g = {.job = -1, .attempt = -1};
    jscan_str_t key;
    int n = 0, more = -1;
    if (jscan_peek(s) != JSCAN_OBJECT)
        return jscan_skip(s);
    if (jscan_object(s) == 0)
        while ((more = jscan_member(s, &n, &key)) == 1)
            if (wgroup_member(s, key_index(&key, wgroup_names, G_COUNT), w, &g) != 0) {
                more = -1;
                break;
            }
    if (more == 0 && g.tasks_at) {
        jscan_t ts;
        jscan_init(&ts, g.tasks_at, (size_t)(g.tasks_end - g.tasks_at));
        more = wgroup_tasks(&ts, w, &g);
    }
    json_decref(g.placement);
    wplace_unref(g.place);
    return more == 0 ? 0 : -1;
}

int wtask_walk(jscan_t *s, int one, const char *self_addr, int ndevices, wtask_fn fn,
               void *ctx)
{
    walk_t w = {self_addr, ndevices, fn, ctx};
    int k = 0, more = 0;
    if (one)
        more = wgroup_read(s, &w);
    else if (jscan_peek(s) != JSCAN_ARRAY)
        more = jscan_skip(s);
    else if ((more = jscan_array(s)) == 0)
        while ((more = jscan_element(s, &k)) == 1)
            if (wgroup_read(s, &w) != 0) {
                more = -1;
                break;
            }
    return more == 0 ? 0 : -1;
}
