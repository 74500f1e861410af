/* report_decode.c - see report_decode.h. A report is read from its text
 * in one pass (jscan.h) into report_prep_t: until 2026-11 it was parsed
 * into a jansson tree, copied per batch item and walked by the same
 * checks, ~100K instructions an item on the request thread, as much as
 * the SQL that applies it.
 *
 * How a fault is answered: each item keeps the first fault of the lowest
 * rank it met (rank_t, the order the checks ran in before); a refused
 * item's remaining values are read past (jscan_skip); once anything is
 * refused, jansson reads the whole text, so a text jansson would refuse is
 * the body's 400 with jansson's message, whatever this reader found. The
 * text this reader accepts without refusing anything it reads entirely
 * itself, duplicate keys included (jansson's JSON_REJECT_DUPLICATES). An
 * output's element count is checked before each multiplication (a shape
 * like [16777216, 1099511627776] overflowed int64_t once). */
#include "report_decode.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "f32b64.h"
#include "jscan.h"

/* The order of the checks: an item answers its lowest-ranked fault. */
typedef enum {
    RANK_TASK, RANK_FIELD, RANK_STATE, RANK_ERROR, RANK_PEER, RANK_OUTPUTS, RANK_TENSOR,
    RANK_NONE
} rank_t;

/* One item being read. */
typedef struct item {
    jscan_t *s;
    report_prep_t *p;
    rank_t rank;                /* of p->e; RANK_NONE while nothing is refused */
    err_t tensor;               /* a tensor's fault: counts only for a succeeded report */
    int *consult;               /* set when jansson must judge the text: a key came twice
                                   (it refuses that), or a value was read past (not
                                   checked for repeated keys) */
} item_t;

static void item_fail(item_t *it, rank_t rank, int status, const char *field, const char *fmt,
                      ...) __attribute__((format(printf, 5, 6)));

static void item_fail(item_t *it, rank_t rank, int status, const char *field, const char *fmt,
                      ...)
{
    err_t *e = rank == RANK_TENSOR ? &it->tensor : &it->p->e;
    if (rank == RANK_TENSOR ? e->status != 0 : rank >= it->rank)
        return;
    if (rank != RANK_TENSOR)
        it->rank = rank;
    char detail[ERR_DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    err_set(e, status, field, "%s", detail);
}

/* Which tensor is being read: output name's k-th. Its field name
 * ("outputs.NAME[K]") is printed only when it is refused. */
typedef struct tensor_ref {
    const char *name;
    int k;
} tensor_ref_t;

static void tensor_fail(item_t *it, const tensor_ref_t *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void tensor_fail(item_t *it, const tensor_ref_t *t, const char *fmt, ...)
{
    if (it->tensor.status != 0)
        return;
    char field[96], detail[ERR_DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    snprintf(field, sizeof field, "outputs.%.60s[%d]", t->name, t->k);
    item_fail(it, RANK_TENSOR, 400, field, "%s", detail);
}

/* Reads past a value this item will not use: 0 or -1 (syntax). */
static int item_skip(item_t *it)
{
    *it->consult = 1;
    return jscan_skip(it->s);
}

/* str decoded into a new string (NULL on OOM). */
static char *str_dup(const jscan_str_t *str)
{
    char *b = malloc(str->len + 1);
    if (b)
        jscan_str_decode(str, b);
    return b;
}

static int value_name_ok(const char *name)
{
    size_t n = strlen(name);
    int ok = n >= 1 && n < NAME_MAX_LEN;
    for (size_t i = 0; ok && i < n; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-';
    }
    return ok;
}

int report_output_count(const char *name, size_t n, int nshards, err_t *e)
{
    if (nshards >= 0 && n == (size_t)nshards)
        return 0;
    char field[80];
    snprintf(field, sizeof field, "outputs.%.60s", name);
    return err_set(e, 400, field, "%s must list exactly one tensor per shard of the task (%d),"
                   " got %zu", field, nshards, n);
}

/* Output `name` (len bytes) of the report, or NULL. */
static const report_prep_out_t *out_named(const report_prep_out_t *out, int nout,
                                          const char *name, size_t len)
{
    for (int i = 0; i < nout; i++)
        if (strlen(out[i].name) == len && memcmp(out[i].name, name, len) == 0)
            return &out[i];
    return NULL;
}

/* Whether every tensor of o has the shape written in dims (dims_len
 * bytes: decimal dims joined by ','; empty for a scalar). Sets *bad to the
 * first tensor that does not. */
static int out_shapes_are(const report_prep_out_t *o, const char *dims, size_t dims_len,
                          int *bad)
{
    shape_t want = {0};
    for (size_t i = 0; i < dims_len; want.rank++) {
        if (want.rank == TENSOR_MAX_RANK)
            return 0;
        int64_t d = 0;
        for (; i < dims_len && dims[i] != ','; i++)
            d = d * 10 + (dims[i] - '0');
        want.dim[want.rank] = d;
        i += i < dims_len;                   /* the ',' */
    }
    for (*bad = 0; *bad < o->n; (*bad)++) {
        const shape_t *got = &o->t[*bad].shape;
        if (got->rank != want.rank || memcmp(got->dim, want.dim, sizeof *got->dim * (size_t)got->rank))
            return 0;
    }
    return 1;
}

int report_outputs_check(const char *sig, const report_prep_out_t *out, int nout, err_t *e)
{
    if (!sig)
        return 0;
    int nsig = 0;
    for (const char *q = sig; *q; nsig++) {
        const char *colon = strchr(q, ':'), *end = colon ? strchr(colon, ';') : NULL;
        if (!end)
            return err_set(e, 500, NULL, "the computation's outputs do not read back");
        const report_prep_out_t *o = out_named(out, nout, q, (size_t)(colon - q));
        int bad = 0;
        if (!o)
            return err_set(e, 400, "outputs", "output '%.*s' of the computation is missing",
                           (int)(colon - q), q);
        if (strncmp(colon + 1, "?;", 2) != 0 &&
            !out_shapes_are(o, colon + 1, (size_t)(end - colon - 1), &bad)) {
            char field[96];
            snprintf(field, sizeof field, "outputs.%.60s[%d].shape", o->name, bad);
            return err_set(e, 400, field, "%s is not the shape the computation makes ([%.*s]"
                           " on every shard)", field, (int)(end - colon - 1), colon + 1);
        }
        q = end + 1;
    }
    for (int i = 0; nsig != nout && i < nout; i++) {
        size_t len = strlen(out[i].name);
        int known = 0;
        for (const char *q = sig; *q && !known; q = strchr(q, ';') + 1)
            known = strncmp(q, out[i].name, len) == 0 && q[len] == ':';
        if (!known) {
            char field[80];
            snprintf(field, sizeof field, "outputs.%.60s", out[i].name);
            return err_set(e, 400, field, "%s is not an output of the computation", field);
        }
    }
    return 0;
}

static void report_output_clear(report_output_t *out)
{
    free(out->values);
    memset(out, 0, sizeof *out);
}

/* v in decimal at b: the characters written (at most 20, no NUL). */
static size_t put_int(char *b, long long v)
{
    char tmp[24];
    size_t n = 0, k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do
        tmp[n++] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        b[k++] = '-';
    while (n > 0)
        b[k++] = tmp[--n];
    return k;
}

/* out's meta tail: "[d0,..],SUM,NVALS]" with SUM as "%.17g" prints it (or
 * null). Dims and counts are at most TENSOR_MAX_ELEMS (8 digits), a %.17g
 * double at most 24 characters: "[" 4 x (8 + 1) "]," 24 "," 8 "]" and the
 * NUL are 75 bytes, under REPORT_TAIL_MAX. A sum that is an integer below
 * 1e17 in magnitude (most are) is written digit by digit: "%.17g" prints
 * exactly those digits for it (fixed notation, no fraction), and printf's
 * float path was a third of decoding a report. */
_Static_assert(TENSOR_MAX_ELEMS < 100000000 && TENSOR_MAX_RANK == 4 && REPORT_TAIL_MAX >= 75,
               "a meta tail fits REPORT_TAIL_MAX");
static void prep_tail(const report_output_t *out, char tail[REPORT_TAIL_MAX])
{
    size_t n = 0;
    tail[n++] = '[';
    for (int d = 0; d < out->shape.rank && d < TENSOR_MAX_RANK; d++) {
        if (d)
            tail[n++] = ',';
        n += put_int(tail + n, (long long)out->shape.dim[d]);
    }
    tail[n++] = ']';
    tail[n++] = ',';
    double v = out->sum;
    if (!out->has_sum) {
        memcpy(tail + n, "null", 4);
        n += 4;
    } else if (v > -1e17 && v < 1e17 && v == (double)(long long)v && !(v == 0 && signbit(v))) {
        n += put_int(tail + n, (long long)v);
    } else {
        n += (size_t)snprintf(tail + n, REPORT_TAIL_MAX - n, "%.17g", v);
    }
    tail[n++] = ',';
    n += put_int(tail + n, out->values ? (long long)out->numel : 0);
    tail[n++] = ']';
    tail[n] = '\0';
}

/* ---- one tensor ---- */

static const char tensor_form[] =
    "an output is {shape: [..], sum: number, values_f32?: base64}";

/* The shape array (next in the text) into out. 0, or -1 (syntax). */
static int tensor_shape(item_t *it, const tensor_ref_t *field, report_output_t *out)
{
    int n = 0, more, bad = 0;
    jscan_num_t v;
    if (jscan_array(it->s) != 0)
        return -1;
    out->numel = 1;
    while ((more = jscan_element(it->s, &n)) == 1) {
        int i = n - 1;
        if (bad || jscan_peek(it->s) != JSCAN_NUMBER) {
            if (!bad)
                tensor_fail(it, field, "shape must be up to 4 positive integers");
            bad = 1;
            if (item_skip(it) != 0)
                return -1;
            continue;
        }
        if (jscan_number(it->s, &v) != 0)
            return -1;
        if (!v.is_int || v.i < 1 || i >= TENSOR_MAX_RANK) {
            tensor_fail(it, field, "shape must be up to 4 positive integers");
            bad = 1;
        } else if (v.i > TENSOR_MAX_ELEMS / out->numel) {  /* checked before multiplying */
            tensor_fail(it, field, "tensor too large");
            bad = 1;
        } else {
            out->numel *= v.i;
            out->shape.dim[i] = v.i;
            out->shape.rank = i + 1;
        }
    }
    return more < 0 ? -1 : 0;
}

/* The tensor's listed values (vals) into out->values. 0 or -1 (OOM). */
static int tensor_values(item_t *it, const tensor_ref_t *field, const jscan_str_t *vals,
                         report_output_t *out)
{
    if (out->numel > REPORT_VALUES_MAX) {
        tensor_fail(it, field, "values_f32 of at most %d elements",
                  REPORT_VALUES_MAX);
        return 0;
    }
    char *text = vals->escaped ? str_dup(vals) : NULL;
    if ((vals->escaped && !text) ||
        !(out->values = malloc(sizeof *out->values * (size_t)out->numel))) {
        free(text);
        return -1;
    }
    if (f32b64_decode(text ? text : vals->p, text ? strlen(text) : vals->len, out->values,
                      out->numel) != 0) {
        free(out->values);
        out->values = NULL;
        tensor_fail(it, field, "values_f32 must be base64 of all %lld elements"
                  " as little-endian f32", (long long)out->numel);
    }
    free(text);
    return 0;
}

/* Tensor k of output name (next in the text) into out. 0, or -1 (syntax
 * or OOM: the caller tells them apart by s->bad). */
static int tensor_read(item_t *it, const char *name, int k, report_output_t *out)
{
    const tensor_ref_t ref = {name, k}, *field = &ref;
    memset(out, 0, sizeof *out);
    if (jscan_peek(it->s) != JSCAN_OBJECT) {
        tensor_fail(it, field, "%s", tensor_form);
        return item_skip(it);
    }
    enum { K_SHAPE = 1, K_SUM = 2, K_VALS = 4 };
    unsigned seen = 0;
    int n = 0, more, form_ok = 1;
    jscan_str_t key, vals = {0};
    jscan_num_t num;
    if (jscan_object(it->s) != 0)
        return -1;
    while ((more = jscan_member(it->s, &n, &key)) == 1) {
        unsigned bit = jscan_str_eq(&key, "shape") ? K_SHAPE : jscan_str_eq(&key, "sum") ? K_SUM
                     : jscan_str_eq(&key, "values_f32") ? K_VALS : 0;
        int t = jscan_peek(it->s), rc = 0;
        *it->consult |= (seen & bit) != 0;
        seen |= bit;
        if (bit == K_SHAPE && t == JSCAN_ARRAY) {
            rc = tensor_shape(it, field, out);
        } else if (bit == K_SUM && t == JSCAN_NUMBER) {
            rc = jscan_number(it->s, &num);
            out->has_sum = 1;
            out->sum = num.d;
        } else if (bit == K_SUM && t == JSCAN_NULL) {
            rc = jscan_literal(it->s, &t);  /* a non-finite sum travels as null */
        } else if (bit == K_VALS && t == JSCAN_STRING) {
            rc = jscan_string(it->s, &vals);
        } else {
            if (bit == K_VALS)
                item_fail(it, RANK_OUTPUTS, 400, "outputs", "output '%s': values_f32 must be a"
                          " base64 string", name);
            form_ok = 0;
            rc = item_skip(it);
        }
        if (rc != 0)
            return -1;
    }
    if (more < 0)
        return -1;
    if (!form_ok || (seen & (K_SHAPE | K_SUM)) != (K_SHAPE | K_SUM)) {
        tensor_fail(it, field, "%s", tensor_form);
        return 0;
    }
    if ((seen & K_VALS) && it->tensor.status == 0 && tensor_values(it, field, &vals, out) != 0)
        return -1;
    return 0;
}

/* ---- outputs ---- */

static int out_name_cmp(const void *a, const void *b)
{
    return strcmp(((const report_prep_out_t *)a)->name, ((const report_prep_out_t *)b)->name);
}

/* One output's array (next in the text) into o, its name set. 0, or -1
 * (syntax or OOM). */
static int output_read(item_t *it, report_prep_out_t *o)
{
    int n = 0, more, cap = 0;
    if (jscan_array(it->s) != 0)
        return -1;
    while ((more = jscan_element(it->s, &n)) == 1) {
        if (n > REPORT_SHARDS_MAX) {
            item_fail(it, RANK_OUTPUTS, 400, "outputs", "output '%s' must be an array of 1 to %d"
                      " tensors, one per shard of the task", o->name, REPORT_SHARDS_MAX);
            if (item_skip(it) != 0)
                return -1;
            continue;
        }
        if (o->n == cap) {
            int c = cap ? cap * 2 : 4;
            report_output_t *t = realloc(o->t, sizeof *t * (size_t)c);
            char(*tail)[REPORT_TAIL_MAX] = t ? realloc(o->tail, sizeof *tail * (size_t)c) : NULL;
            if (t)
                o->t = t;
            if (!tail)
                return -1;
            o->tail = tail;
            cap = c;
        }
        report_output_t *t = &o->t[o->n++];     /* counted first: cleared in every case */
        if (tensor_read(it, o->name, o->n - 1, t) != 0)
            return -1;
        prep_tail(t, o->tail[o->n - 1]);
    }
    if (more < 0)
        return -1;
    if (n == 0)
        item_fail(it, RANK_OUTPUTS, 400, "outputs", "output '%s' must be an array of 1 to %d"
                  " tensors, one per shard of the task", o->name, REPORT_SHARDS_MAX);
    return 0;
}

static void outputs_free(report_prep_t *p);

/* The "outputs" object (next in the text) into p->out, replacing any read
 * before (a repeated key: the text is refused anyway, jansson's verdict).
 * 0, or -1 (syntax or OOM). */
static int outputs_read(item_t *it)
{
    report_prep_t *p = it->p;
    int n = 0, more, cap = 0;
    jscan_str_t key;
    outputs_free(p);
    if (jscan_peek(it->s) != JSCAN_OBJECT) {
        item_fail(it, RANK_OUTPUTS, 400, "outputs", "outputs must be an object");
        return item_skip(it);
    }
    if (jscan_object(it->s) != 0)
        return -1;
    while ((more = jscan_member(it->s, &n, &key)) == 1) {
        char *name = str_dup(&key);
        if (!name)
            return -1;
        if (!value_name_ok(name) || jscan_peek(it->s) != JSCAN_ARRAY) {
            if (!value_name_ok(name))
                item_fail(it, RANK_OUTPUTS, 400, "outputs", "output names are value names (1 to"
                          " %d characters [A-Za-z0-9_-])", NAME_MAX_LEN - 1);
            else
                item_fail(it, RANK_OUTPUTS, 400, "outputs", "output '%s' must be an array of 1"
                          " to %d tensors, one per shard of the task", name, REPORT_SHARDS_MAX);
            free(name);
            if (item_skip(it) != 0)
                return -1;
            continue;
        }
        if (p->nout == cap) {
            int c = cap ? cap * 2 : 2;
            report_prep_out_t *o = realloc(p->out, sizeof *o * (size_t)c);
            if (!o) {
                free(name);
                return -1;
            }
            p->out = o;
            cap = c;
        }
        report_prep_out_t *o = &p->out[p->nout++];
        *o = (report_prep_out_t){name, 0, NULL, NULL};
        if (output_read(it, o) != 0)
            return -1;
    }
    if (more < 0)
        return -1;
    /* Names are unique (jansson refuses a text that repeats a key). */
    if (p->nout > 1) {
        qsort(p->out, (size_t)p->nout, sizeof *p->out, out_name_cmp);
        for (int i = 1; i < p->nout; i++)
            *it->consult |= strcmp(p->out[i - 1].name, p->out[i].name) == 0;
    }
    return 0;
}

/* ---- one report ---- */

/* A *_us stamp (next in the text) into *v. 0 or -1 (syntax). */
static int stamp_read(item_t *it, const char *key, int64_t *v)
{
    jscan_num_t num;
    if (jscan_peek(it->s) == JSCAN_NUMBER) {
        if (jscan_number(it->s, &num) != 0)
            return -1;
        if (num.is_int && num.i >= 0 && num.i <= REPORT_TIME_MAX_US) {
            *v = num.i;
            return 0;
        }
    } else if (item_skip(it) != 0) {
        return -1;
    }
    item_fail(it, RANK_FIELD, 400, key, "%s must be an integer (unix microseconds, 0..2^52)", key);
    return 0;
}

/* A string field (next in the text) of min..max bytes into *out (owned),
 * or a fault of `rank` naming key with msg. 0 or -1 (syntax or OOM). */
static int string_read(item_t *it, rank_t rank, const char *key, const char *msg, size_t min,
                       size_t max, char **out)
{
    jscan_str_t str;
    if (jscan_peek(it->s) != JSCAN_STRING) {
        item_fail(it, rank, 400, key, "%s", msg);
        return item_skip(it);
    }
    if (jscan_string(it->s, &str) != 0)
        return -1;
    free(*out);
    if (!(*out = str_dup(&str)))
        return -1;
    /* jscan refuses \u0000 and raw control bytes: strlen is the length. */
    size_t n = strlen(*out);
    if (n < min || n > max)
        item_fail(it, rank, 400, key, "%s", msg);
    return 0;
}

/* The "state" value (next in the text) into p->state. 0 or -1. */
static int state_read(item_t *it)
{
    static const char *const states[] = {"succeeded", "failed", "cancelled"};
    jscan_str_t str;
    it->p->state = NULL;
    if (jscan_peek(it->s) != JSCAN_STRING)
        return item_skip(it);
    if (jscan_string(it->s, &str) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (jscan_str_eq(&str, states[i]))
            it->p->state = states[i];
    return 0;
}

/* The "task" of a batch item (next in the text). 0 or -1. */
static int task_read(item_t *it, int *have)
{
    jscan_num_t num;
    if (jscan_peek(it->s) != JSCAN_NUMBER)
        return item_skip(it);
    if (jscan_number(it->s, &num) != 0)
        return -1;
    if (num.is_int && num.i >= 1) {
        it->p->task = num.i;
        *have = 1;
    }
    return 0;
}

/* The "comp" of a report (next in the text): which computation of its
 * host task's run it reports (0..INT32_MAX). 0 or -1. */
static int comp_read(item_t *it)
{
    jscan_num_t num;
    if (jscan_peek(it->s) == JSCAN_NUMBER) {
        if (jscan_number(it->s, &num) != 0)
            return -1;
        if (num.is_int && num.i >= 0 && num.i <= INT32_MAX) {
            it->p->has_comp = 1;
            it->p->comp = (int32_t)num.i;
            return 0;
        }
    } else if (item_skip(it) != 0) {
        return -1;
    }
    item_fail(it, RANK_FIELD, 400, "comp", "comp must be a computation index (0..2^31-1)");
    return 0;
}

enum {
    F_TASK = 1, F_STATE = 2, F_ERROR = 4, F_STARTED = 8, F_READY = 16, F_FINISHED = 32,
    F_OUTPUTS = 64, F_PEER = 128, F_COMP = 256
};

/* Which known field key names (batch: "task" too), 0 for none. */
static unsigned field_of(const jscan_str_t *key, int batch)
{
    static const struct { const char *name; unsigned bit; } fields[] = {
        {"state", F_STATE}, {"error", F_ERROR}, {"started_us", F_STARTED},
        {"inputs_ready_us", F_READY}, {"finished_us", F_FINISHED}, {"outputs", F_OUTPUTS},
        {"unreachable_peer", F_PEER}, {"task", F_TASK}, {"comp", F_COMP}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if ((fields[i].bit != F_TASK || batch) && jscan_str_eq(key, fields[i].name))
            return fields[i].bit;
    return 0;
}

/* One member's value of a report (the key already read). 0 or -1. */
static int field_read(item_t *it, unsigned f, const jscan_str_t *key, int *have_task)
{
    report_prep_t *p = it->p;
    switch (f) {
    case F_TASK: return task_read(it, have_task);
    case F_STATE: return state_read(it);
    case F_ERROR:
        return string_read(it, RANK_ERROR, "error", "error must be a string", 0, (size_t)-1,
                           &p->error);
    case F_PEER:
        return string_read(it, RANK_PEER, "unreachable_peer",
                           "unreachable_peer is a data address", 1, 63, &p->unreachable_peer);
    case F_STARTED: return stamp_read(it, "started_us", &p->started_us);
    case F_READY: return stamp_read(it, "inputs_ready_us", &p->inputs_ready_us);
    case F_FINISHED: return stamp_read(it, "finished_us", &p->finished_us);
    case F_OUTPUTS: return outputs_read(it);
    case F_COMP: return comp_read(it);
    default: break;
    }
    char *name = str_dup(key);
    if (!name)
        return -1;
    item_fail(it, RANK_FIELD, 400, name, "unknown field '%.100s'", name);
    free(name);
    return item_skip(it);
}

/* Frees a report's outputs. */
static void outputs_free(report_prep_t *p)
{
    for (int i = 0; i < p->nout; i++) {
        for (int k = 0; k < p->out[i].n; k++)
            report_output_clear(&p->out[i].t[k]);
        free(p->out[i].t);
        free(p->out[i].tail);
        free(p->out[i].name);
    }
    free(p->out);
    p->out = NULL;
    p->nout = 0;
}

/* The report object next in s into p (batch: an item with "task"). 0, or
 * -1 on a syntax error (p then holds what was read; clear it) or OOM
 * (p->e 500). *consult set as item_t says, and when p is refused. */
static int report_read(jscan_t *s, report_prep_t *p, int batch, int *consult)
{
    item_t it = {s, p, RANK_NONE, {0}, consult};
    int n = 0, more, have_task = 0;
    unsigned seen = 0;
    jscan_str_t key;
    if (jscan_peek(s) != JSCAN_OBJECT) {
        item_fail(&it, RANK_TASK, 400, "task", "each report is an object with a positive"
                  " integer task");
        return item_skip(&it);
    }
    if (jscan_object(s) != 0)
        return -1;
    while ((more = jscan_member(s, &n, &key)) == 1) {
        unsigned f = field_of(&key, batch);
        *consult |= (seen & f) != 0;
        seen |= f;
        if (field_read(&it, f, &key, &have_task) != 0) {
            if (!s->bad)
                err_set(&p->e, 500, "", "out of memory");
            return -1;
        }
    }
    if (more < 0)
        return -1;
    if (batch && !have_task)
        item_fail(&it, RANK_TASK, 400, "task", "each report is an object with a positive"
                  " integer task");
    if (!p->state)
        item_fail(&it, RANK_STATE, 400, "state", "state must be succeeded, failed or cancelled");
    int succeeded = p->state && strcmp(p->state, "succeeded") == 0;
    if (succeeded && it.tensor.status != 0 && it.rank == RANK_NONE)
        p->e = it.tensor;
    /* Only a succeeded report's outputs are kept (store_progress.c). */
    if (p->e.status != 0 || !succeeded)
        outputs_free(p);
    if (p->e.status != 0) {
        p->state = NULL;
        *consult = 1;
    }
    return 0;
}

/* ---- bodies ---- */

/* jansson's verdict on the text, as the router parses bodies: 0 when it
 * reads it, else 400 naming "body" with its message. */
static int body_json_ok(const char *body, size_t len, err_t *e)
{
    json_error_t je;
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!doc)
        return err_set(e, 400, "body", "invalid JSON at line %d column %d: %s", je.line,
                       je.column, je.text);
    json_decref(doc);
    return 0;
}

int report_parse_one(const char *body, size_t len, int64_t task, report_prep_t *p)
{
    jscan_t s;
    int consult = 0;
    memset(p, 0, sizeof *p);
    p->task = task;
    jscan_init(&s, body, len);
    int object = jscan_peek(&s) == JSCAN_OBJECT;
    int rc = object ? report_read(&s, p, 0, &consult) : -1;
    if (rc != 0 && p->e.status == 500)
        return 500;
    int syntax = rc != 0 || jscan_finish(&s) != 0;
    if (!syntax && !consult)
        return p->e.status;
    err_t e = {0};
    if (body_json_ok(body, len, &e) == 0 && syntax)
        err_set(&e, 400, "body", object ? "invalid JSON" : "the body must be a JSON object");
    if (e.status != 0) {
        report_prep_clear(p);
        p->task = task;
        p->e = e;
    }
    return p->e.status;
}

static void preps_free(report_prep_t *preps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        report_prep_clear(&preps[i]);
    free(preps);
}

/* The "reports" array (next in s) into *preps. 0, or -1 on a syntax
 * error or OOM (e 500). *env set when it is not 1..REPORT_BATCH_MAX
 * items; *consult as report_read sets it. */
static int items_read(jscan_t *s, report_prep_t **preps, size_t *n, int *env, int *consult,
                      err_t *e)
{
    int k = 0, more;
    if (jscan_peek(s) != JSCAN_ARRAY) {
        *env = *consult = 1;
        return jscan_skip(s);
    }
    if (jscan_array(s) != 0)
        return -1;
    while ((more = jscan_element(s, &k)) == 1) {
        if (k > REPORT_BATCH_MAX) {
            *env = *consult = 1;
            if (jscan_skip(s) != 0)
                return -1;
            continue;
        }
        if (*n == 0 || (*n & (*n - 1)) == 0) {     /* grown at powers of two */
            report_prep_t *p = realloc(*preps, sizeof *p * (*n ? *n * 2 : 1));
            if (!p) {
                err_set(e, 500, "", "out of memory");
                return -1;
            }
            *preps = p;
        }
        report_prep_t *p = &(*preps)[(*n)++];
        memset(p, 0, sizeof *p);
        if (report_read(s, p, 1, consult) != 0) {
            if (p->e.status == 500)
                err_set(e, 500, "", "out of memory");
            return -1;
        }
    }
    if (more < 0)
        return -1;
    *env |= k == 0;
    return 0;
}

int report_parse_batch(const char *body, size_t len, report_prep_t **preps, size_t *n,
                       err_t *e)
{
    jscan_t s;
    int members = 0, more = -1, env = 0, consult = 0, have = 0;
    jscan_str_t key;
    *preps = NULL;
    *n = 0;
    jscan_init(&s, body, len);
    int object = jscan_peek(&s) == JSCAN_OBJECT;
    if (object && jscan_object(&s) == 0) {
        while ((more = jscan_member(&s, &members, &key)) == 1) {
            int rc;
            if (jscan_str_eq(&key, "reports")) {
                consult |= have;                /* repeated */
                have = 1;
                rc = items_read(&s, preps, n, &env, &consult, e);
            } else {
                env = consult = 1;
                rc = jscan_skip(&s);
            }
            if (rc != 0 && e->status == 500)
                goto refuse;
            if (rc != 0)
                break;
        }
    }
    if (more != 0 || jscan_finish(&s) != 0) {
        if (body_json_ok(body, len, e) == 0)
            err_set(e, 400, "body", object ? "invalid JSON" : "the body must be a JSON object");
        goto refuse;
    }
    if (consult && body_json_ok(body, len, e) != 0)
        goto refuse;
    if (env || !have) {
        err_set(e, 400, "reports", "body is {\"reports\": [1..%d reports]}", REPORT_BATCH_MAX);
        goto refuse;
    }
    return 0;
refuse:
    preps_free(*preps, *n);
    *preps = NULL;
    *n = 0;
    return e->status;
}

void report_prep_clear(report_prep_t *p)
{
    outputs_free(p);
    free(p->error);
    free(p->unreachable_peer);
    memset(p, 0, sizeof *p);
}

int report_log_segments(const void *body, size_t len, report_log_seg_t *segs, int max)
{
    const unsigned char *b = body;
    int n = 0;
    size_t pos = 0;
    while (pos < len) {
        if (len - pos < 5 || n == max)
            return -1;
        const unsigned char *h = b + pos;
        size_t sl = (size_t)h[1] | (size_t)h[2] << 8 | (size_t)h[3] << 16 | (size_t)h[4] << 24;
        if ((h[0] != 1 && h[0] != 2) || sl > len - pos - 5)
            return -1;
        segs[n++] = (report_log_seg_t){h[0], b + pos + 5, sl};
        pos += 5 + sl;
    }
    return n;
}
