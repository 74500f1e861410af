/* report_decode.c - see report_decode.h. Moved here from api_worker.c
 * (report_outputs_ok, the batch envelope) and the store's report code
 * (report_validate, batch_item, report_output's checks). An output's
 * element count is checked before each multiplication (a shape like
 * [16777216, 1099511627776] overflowed int64_t and passed). Since host
 * tasks (issue 9) an output is an array of tensors, one per shard of the
 * task, checked against the task's shard count by report_output_count. */
#include "report_decode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "f32b64.h"

int report_batch_envelope(const json_t *body, const json_t **reports, err_t *e)
{
    const json_t *r = json_object_get(body, "reports");
    if (json_object_size(body) != 1 || !json_is_array(r) || json_array_size(r) == 0 ||
        json_array_size(r) > REPORT_BATCH_MAX)
        return err_set(e, 400, "reports", "body is {\"reports\": [1..%d reports]}",
                       REPORT_BATCH_MAX);
    *reports = r;
    return 0;
}

json_t *report_batch_item(const json_t *item, int64_t *task, err_t *e)
{
    json_t *t = json_object_get(item, "task");
    if (!json_is_object(item) || !json_is_integer(t) || json_integer_value(t) < 1) {
        err_set(e, 400, "task", "each report is an object with a positive integer task");
        return NULL;
    }
    *task = json_integer_value(t);
    json_t *body = json_copy((json_t *)item);
    if (!body) {
        err_set(e, 500, "", "out of memory");
        return NULL;
    }
    json_object_del(body, "task");
    return body;
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

int report_outputs_check(const json_t *body, err_t *e)
{
    json_t *outs = json_object_get(body, "outputs"), *o;
    const char *name;
    if (!outs)
        return 0;
    if (!json_is_object(outs))
        return err_set(e, 400, "outputs", "outputs must be an object");
    json_object_foreach(outs, name, o) {
        if (!value_name_ok(name))
            return err_set(e, 400, "outputs", "output names are value names (1 to %d "
                           "characters [A-Za-z0-9_-])", NAME_MAX_LEN - 1);
        if (!json_is_array(o) || json_array_size(o) == 0 ||
            json_array_size(o) > REPORT_SHARDS_MAX)
            return err_set(e, 400, "outputs", "output '%s' must be an array of 1 to %d tensors,"
                           " one per shard of the task", name, REPORT_SHARDS_MAX);
        size_t k;
        json_t *t;
        json_array_foreach(o, k, t) {
            json_t *vals = json_object_get(t, "values_f32");
            if (vals && !json_is_string(vals))
                return err_set(e, 400, "outputs", "output '%s': values_f32 must be a base64"
                               " string", name);
        }
    }
    return 0;
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


int report_validate(const json_t *body, const char **state, err_t *e)
{
    static const char *const allowed[] = {"state", "error", "started_us", "inputs_ready_us",
                                          "finished_us", "outputs", "unreachable_peer", NULL};
    if (!json_is_object(body))
        return err_set(e, 400, "", "the report must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        int ok = 0;
        for (int i = 0; allowed[i]; i++)
            ok |= strcmp(key, allowed[i]) == 0;
        if (!ok)
            return err_set(e, 400, key, "unknown field '%s'", key);
        if (strstr(key, "_us") && (!json_is_integer(v) || json_integer_value(v) < 0 ||
                                   json_integer_value(v) > REPORT_TIME_MAX_US))
            return err_set(e, 400, key, "%s must be an integer (unix microseconds, 0..2^52)",
                           key);
    }
    *state = json_string_value(json_object_get(body, "state"));
    if (!*state || (strcmp(*state, "succeeded") != 0 && strcmp(*state, "failed") != 0 &&
                    strcmp(*state, "cancelled") != 0))
        return err_set(e, 400, "state", "state must be succeeded, failed or cancelled");
    json_t *err = json_object_get(body, "error");
    if (err && !json_is_string(err))
        return err_set(e, 400, "error", "error must be a string");
    json_t *peer = json_object_get(body, "unreachable_peer");
    if (peer && (!json_is_string(peer) || json_string_length(peer) == 0 ||
                 json_string_length(peer) > 63))
        return err_set(e, 400, "unreachable_peer", "unreachable_peer is a data address");
    return 0;
}

/* The shape array into out->shape and out->numel. 0 or 400. */
static int output_shape(const json_t *shape, const char *field, report_output_t *out,
                        err_t *e)
{
    size_t i;
    json_t *v;
    out->numel = 1;
    json_array_foreach(shape, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || i >= TENSOR_MAX_RANK)
            return err_set(e, 400, field, "shape must be up to 4 positive integers");
        /* Checked before multiplying: numel stays <= TENSOR_MAX_ELEMS. */
        if (json_integer_value(v) > TENSOR_MAX_ELEMS / out->numel)
            return err_set(e, 400, field, "tensor too large");
        out->numel *= json_integer_value(v);
        out->shape.dim[i] = json_integer_value(v);
        out->shape.rank = (int)i + 1;
    }
    return 0;
}

int report_output_decode(const char *name, int index, const json_t *o, report_output_t *out,
                         err_t *e)
{
    char field[96];
    memset(out, 0, sizeof *out);
    snprintf(field, sizeof field, "outputs.%.60s[%d]", name, index);
    json_t *shape = json_object_get(o, "shape"), *sum = json_object_get(o, "sum");
    json_t *vals = json_object_get(o, "values_f32");
    /* A non-finite sum travels as null (JSON has no NaN or infinity). */
    if (!json_is_object(o) || !json_is_array(shape) || !(json_is_number(sum) || json_is_null(sum)) ||
        (vals && !json_is_string(vals)) || json_object_size(o) != 2u + (vals != NULL))
        return err_set(e, 400, field, "an output is {shape: [..], sum: number, values_f32?:"
                       " base64}");
    int rc = output_shape(shape, field, out, e);
    if (rc != 0)
        return rc;
    out->has_sum = !json_is_null(sum);
    out->sum = out->has_sum ? json_number_value(sum) : 0;
    if (!vals)
        return 0;
    if (out->numel > REPORT_VALUES_MAX)
        return err_set(e, 400, field, "values_f32 of at most %d elements", REPORT_VALUES_MAX);
    if (!(out->values = malloc(sizeof *out->values * (size_t)out->numel)))
        return -1;
    if (f32b64_decode(json_string_value(vals), json_string_length(vals), out->values,
                      out->numel) != 0) {
        free(out->values);
        out->values = NULL;
        return err_set(e, 400, field, "values_f32 must be base64 of all %lld elements as"
                       " little-endian f32", (long long)out->numel);
    }
    return 0;
}

void report_output_clear(report_output_t *out)
{
    free(out->values);
    memset(out, 0, sizeof *out);
}

/* out's meta tail. Dims and counts are at most TENSOR_MAX_ELEMS (8
 * digits), a %.17g double at most 24 characters: "[" 4 x (8 + 1) "],"
 * 24 "," 8 "]" and the NUL are 75 bytes, under REPORT_TAIL_MAX. */
_Static_assert(TENSOR_MAX_ELEMS < 100000000 && TENSOR_MAX_RANK == 4 && REPORT_TAIL_MAX >= 75,
               "a meta tail fits REPORT_TAIL_MAX");
static void prep_tail(const report_output_t *out, char tail[REPORT_TAIL_MAX])
{
    char dims[4 * 9 + 1] = "";
    int n = 0;
    for (int d = 0; d < out->shape.rank && d < TENSOR_MAX_RANK; d++)
        n += snprintf(dims + n, sizeof dims - (size_t)n, "%s%lld", d ? "," : "",
                      (long long)out->shape.dim[d]);
    long long nvals = out->values ? (long long)out->numel : 0;
    if (out->has_sum)
        snprintf(tail, REPORT_TAIL_MAX, "[%s],%.17g,%lld]", dims, out->sum, nvals);
    else
        snprintf(tail, REPORT_TAIL_MAX, "[%s],null,%lld]", dims, nvals);
}

/* Decodes output name's tensors (arr, checked an array of 1 to
 * REPORT_SHARDS_MAX by report_outputs_check) into o. 0, 400 or -1. */
static int prep_output(const char *name, const json_t *arr, report_prep_out_t *o, err_t *e)
{
    size_t n = json_array_size(arr);
    o->name = name;
    if (!(o->t = calloc(n, sizeof *o->t)) || !(o->tail = calloc(n, sizeof *o->tail)))
        return -1;
    for (size_t k = 0; k < n; k++) {
        o->n++;                 /* counted before decoding: cleared in every case */
        int rc = report_output_decode(name, (int)k, json_array_get(arr, k), &o->t[k], e);
        if (rc != 0)
            return rc;
        prep_tail(&o->t[k], o->tail[k]);
    }
    return 0;
}

int report_prepare(json_t *body, int64_t task, report_prep_t *p)
{
    memset(p, 0, sizeof *p);
    p->task = task;
    p->body = body;
    if (!body)
        return err_set(&p->e, 500, "", "out of memory");
    if (report_validate(body, &p->state, &p->e) != 0 || report_outputs_check(body, &p->e) != 0)
        return p->e.status;
    /* Only a succeeded report's outputs are kept (store_progress.c). */
    json_t *outs = json_object_get(body, "outputs"), *arr;
    size_t n = json_object_size(outs);
    if (strcmp(p->state, "succeeded") != 0 || n == 0)
        return 0;
    if (!(p->out = calloc(n, sizeof *p->out)))
        return err_set(&p->e, 500, "", "out of memory");
    const char *name;
    json_object_foreach(outs, name, arr) {
        int rc = prep_output(name, arr, &p->out[p->nout++], &p->e);
        if (rc == -1)
            return err_set(&p->e, 500, "", "out of memory");
        if (rc != 0)
            return rc;
    }
    return 0;
}

int report_prepare_item(const json_t *item, report_prep_t *p)
{
    err_t e = {0};
    int64_t task = 0;
    json_t *body = report_batch_item(item, &task, &e);
    if (!body) {
        memset(p, 0, sizeof *p);
        p->task = task;
        p->e = e;
        return e.status;
    }
    return report_prepare(body, task, p);
}

void report_prep_clear(report_prep_t *p)
{
    for (int i = 0; i < p->nout; i++) {
        for (int k = 0; k < p->out[i].n; k++)
            report_output_clear(&p->out[i].t[k]);
        free(p->out[i].t);
        free(p->out[i].tail);
    }
    free(p->out);
    json_decref(p->body);
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
