/* fuzz_report.c - libFuzzer target for the controller's reading of
 * worker reports (store/report_decode.c over common/jscan.c): the raw
 * bytes of a request body, as a batch (POST /v1/workers/{id}/reports,
 * report_parse_batch) and as a single report (POST
 * /v1/workers/{id}/tasks/{task}, report_parse_one).
 *
 * The oracle is jansson, which the router uses for every other body:
 * the same bytes are parsed with JSON_REJECT_DUPLICATES, and the rules of
 * report_decode.h are checked on that tree by an independent model here.
 * The same bytes also go through jscan_load (common/jscan.c), with and
 * without duplicate keys refused: it must read exactly what jansson reads.
 * Invariants (a violation aborts, which libFuzzer reports):
 *  - text jansson refuses is refused as a whole, 400 naming "body"; a
 *    top-level value that is not an object likewise; so is text jansson
 *    reads only because it skips a NUL byte (nul_refused), and no other;
 *  - otherwise a batch is refused as a whole (400, "reports") exactly when
 *    its envelope is not {"reports": [1..REPORT_BATCH_MAX items]}, and then
 *    has one prepared report per item;
 *  - an item (or the single report) is prepared exactly when the model
 *    accepts it: an object, a positive integer "task" in a batch, known
 *    fields only, *_us integers in 0..REPORT_TIME_MAX_US, a known state,
 *    error a string, unreachable_peer a string of 1..63 bytes, comp an
 *    integer in 0..INT32_MAX, outputs an
 *    object of value names each an array of 1..REPORT_SHARDS_MAX tensors
 *    whose "values_f32" (if any) are strings; for a succeeded report each
 *    tensor exactly {shape, sum, values_f32?} with an independent 128-bit
 *    model of its shape (up to 4 dims >= 1, at most TENSOR_MAX_ELEMS
 *    elements), a number or null sum, values of the right base64 length
 *    (at most REPORT_VALUES_MAX; a string of that length may still be
 *    refused as not base64);
 *  - a refusal is a 400 (500 only for out of memory) with a detail;
 *  - a prepared report carries the tree's task, state, stamps (0 when
 *    absent), error and peer; a succeeded one every output, each tensor's
 *    shape, sum (bit for bit) and values (bit for bit, against decoding
 *    the tree's string) and a meta tail that reads back as the same shape,
 *    sum and value count; any other state keeps no output. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "f32b64.h"
#include "jscan.h"
#include "report_decode.h"

static void check_err(int rc, const err_t *e)
{
    if ((rc != 400 && rc != 500) || e->status != rc || !e->detail[0] ||
        !memchr(e->detail, '\0', sizeof e->detail) || !memchr(e->field, '\0', sizeof e->field))
        abort();
}

/* 1 when the model accepts shape; sets *numel. */
static int shape_model(const json_t *shape, int64_t *numel)
{
    __int128 n = 1;
    size_t i;
    const json_t *v;
    if (!json_is_array(shape) || json_array_size(shape) > TENSOR_MAX_RANK)
        return 0;
    json_array_foreach(shape, i, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            return 0;
        n *= json_integer_value(v);
        if (n > TENSOR_MAX_ELEMS)
            return 0;
    }
    *numel = (int64_t)n;
    return 1;
}

static int name_ok(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    return n == strlen(s) && n >= 1 && n < NAME_MAX_LEN;
}

/* Whether tensor o decodes (a succeeded report's), by the model. */
static int tensor_model(const json_t *o)
{
    const json_t *shape = json_object_get(o, "shape"), *sum = json_object_get(o, "sum");
    const json_t *vals = json_object_get(o, "values_f32");
    int64_t numel = 0;
    if (!json_is_object(o) || !shape_model(shape, &numel) ||
        !(json_is_number(sum) || json_is_null(sum)) || (vals && !json_is_string(vals)) ||
        json_object_size(o) != 2u + (vals != NULL))
        return 0;
    if (!vals)
        return 1;
    if (numel > REPORT_VALUES_MAX ||
        json_string_length(vals) != (size_t)(numel * 4 + 2) / 3 * 4)
        return 0;
    /* The right length; whether it is base64 is the codec's to say. */
    float *v = malloc(sizeof *v * (size_t)(numel ? numel : 1));
    int ok = v && f32b64_decode(json_string_value(vals), json_string_length(vals), v, numel) == 0;
    free(v);
    return ok;
}

/* Whether outputs (present) pass the structure checks; decode: also every
 * tensor (succeeded). */
static int outputs_model(const json_t *outs, int decode)
{
    const char *name;
    const json_t *arr, *t;
    size_t k;
    if (!json_is_object(outs))
        return 0;
    json_object_foreach((json_t *)outs, name, arr) {
        if (!name_ok(name) || !json_is_array(arr) || json_array_size(arr) < 1 ||
            json_array_size(arr) > REPORT_SHARDS_MAX)
            return 0;
        json_array_foreach(arr, k, t) {
            const json_t *vals = json_object_get(t, "values_f32");
            if (json_is_object(t) && vals && !json_is_string(vals))
                return 0;
            if (decode && !tensor_model(t))
                return 0;
        }
    }
    return 1;
}

/* Whether the model accepts report r (batch: an item with "task"). */
static int report_model(const json_t *r, int batch)
{
    static const char *const known[] = {"state", "error", "started_us", "inputs_ready_us",
                                        "finished_us", "outputs", "unreachable_peer", "comp",
                                        "task"};
    const char *key;
    const json_t *v;
    if (!json_is_object(r))
        return 0;
    if (batch && (!json_is_integer(json_object_get(r, "task")) ||
                  json_integer_value(json_object_get(r, "task")) < 1))
        return 0;
    json_object_foreach((json_t *)r, key, v) {
        size_t k = 0, nk = sizeof known / sizeof known[0] - !batch;
        while (k < nk && strcmp(key, known[k]) != 0)
            k++;
        if (k == nk)
            return 0;
        if (strstr(key, "_us") && (!json_is_integer(v) || json_integer_value(v) < 0 ||
                                   json_integer_value(v) > REPORT_TIME_MAX_US))
            return 0;
    }
    const json_t *comp = json_object_get(r, "comp");
    if (comp && (!json_is_integer(comp) || json_integer_value(comp) < 0 ||
                 json_integer_value(comp) > INT32_MAX))
        return 0;
    const char *state = json_string_value(json_object_get(r, "state"));
    if (!state || (strcmp(state, "succeeded") && strcmp(state, "failed") &&
                   strcmp(state, "cancelled")))
        return 0;
    const json_t *err = json_object_get(r, "error"), *peer = json_object_get(r, "unreachable_peer");
    if ((err && !json_is_string(err)) ||
        (peer && (!json_is_string(peer) || json_string_length(peer) < 1 ||
                  json_string_length(peer) > 63)))
        return 0;
    const json_t *outs = json_object_get(r, "outputs");
    return !outs || outputs_model(outs, strcmp(state, "succeeded") == 0);
}

static int64_t stamp(const json_t *r, const char *key)
{
    return json_integer_value(json_object_get(r, key));       /* 0 when absent */
}

static int same_text(const char *a, const json_t *b)
{
    return b ? a && strlen(a) == json_string_length(b) && strcmp(a, json_string_value(b)) == 0
             : a == NULL;
}

/* A prepared tensor against the tree's, and its tail: "[0," + tail is the
 * meta entry [shard, shape, sum or null, nvals], the sum bit for bit. */
static void check_tensor(const report_output_t *t, const char *tail, const json_t *o)
{
    const json_t *shape = json_object_get(o, "shape"), *sum = json_object_get(o, "sum");
    const json_t *vals = json_object_get(o, "values_f32");
    int64_t numel = 0;
    if (!shape_model(shape, &numel) || t->numel != numel ||
        t->shape.rank != (int)json_array_size(shape) || t->has_sum != !json_is_null(sum) ||
        (t->has_sum && memcmp(&t->sum, &(double){json_number_value(sum)}, sizeof t->sum) != 0) ||
        (vals != NULL) != (t->values != NULL))
        abort();
    for (int d = 0; d < t->shape.rank; d++)
        if (t->shape.dim[d] != json_integer_value(json_array_get(shape, (size_t)d)))
            abort();
    if (vals) {
        float *v = malloc(sizeof *v * (size_t)(numel ? numel : 1));
        if (v && (f32b64_decode(json_string_value(vals), json_string_length(vals), v, numel) != 0 ||
                  memcmp(v, t->values, sizeof *v * (size_t)numel) != 0))
            abort();
        free(v);
    }
    char text[REPORT_TAIL_MAX + 8];
    snprintf(text, sizeof text, "[0,%s", tail);
    json_t *m = json_loads(text, 0, NULL);
    json_t *msum = json_array_get(m, 2);
    if (!json_is_array(m) || json_array_size(m) != 4 ||
        json_array_size(json_array_get(m, 1)) != (size_t)t->shape.rank ||
        json_integer_value(json_array_get(m, 3)) != (t->values ? t->numel : 0) ||
        (t->has_sum ? !json_is_number(msum) || json_number_value(msum) != t->sum
                    : !json_is_null(msum)))
        abort();
    /* The tail prints the sum as "%.17g" does, whichever way it took. */
    if (t->has_sum) {
        char want[40];
        const char *got = strchr(tail, ']');    /* "],SUM,NVALS]" */
        got = got ? got + 2 : NULL;
        snprintf(want, sizeof want, "%.17g,", t->sum);
        if (!got || strncmp(got, want, strlen(want)) != 0)
            abort();
    }
    for (int d = 0; d < t->shape.rank; d++)
        if (json_integer_value(json_array_get(json_array_get(m, 1), (size_t)d)) != t->shape.dim[d])
            abort();
    json_decref(m);
}

/* A prepared report p (status rc) against the tree r. */
static void check_prep(const report_prep_t *p, int rc, const json_t *r, int batch, int64_t task)
{
    if (rc == 500)
        return;                 /* out of memory: nothing to check */
    if ((rc == 0) != report_model(r, batch))
        abort();
    if (rc != 0) {
        check_err(rc, &p->e);
        return;
    }
    const char *state = json_string_value(json_object_get(r, "state"));
    if (p->task != (batch ? json_integer_value(json_object_get(r, "task")) : task) ||
        !p->state || strcmp(p->state, state) != 0 ||
        p->started_us != stamp(r, "started_us") ||
        p->inputs_ready_us != stamp(r, "inputs_ready_us") ||
        p->finished_us != stamp(r, "finished_us") ||
        p->has_comp != (json_object_get(r, "comp") != NULL) ||
        p->comp != (int32_t)json_integer_value(json_object_get(r, "comp")) ||
        !same_text(p->error, json_object_get(r, "error")) ||
        !same_text(p->unreachable_peer, json_object_get(r, "unreachable_peer")))
        abort();
    const json_t *outs = json_object_get(r, "outputs");
    int kept = strcmp(state, "succeeded") == 0;
    if (p->nout != (kept ? (int)json_object_size(outs) : 0))
        abort();
    for (int i = 0; i < p->nout; i++) {
        const json_t *arr = json_object_get(outs, p->out[i].name);
        if (!arr || (size_t)p->out[i].n != json_array_size(arr))
            abort();
        for (int k = 0; k < p->out[i].n; k++)
            check_tensor(&p->out[i].t[k], p->out[i].tail[k], json_array_get(arr, (size_t)k));
    }
}

static void check_body_refusal(int rc, const err_t *e)
{
    check_err(rc, e);
    if (rc == 400 && strcmp(e->field, "body") != 0)
        abort();
}

/* jansson 2.14 drops a NUL byte that follows a number or a literal (its
 * stream mistakes the byte pushed back for an empty buffer): it reads
 * `1\0,` as `1,`. The reader refuses every NUL outside strings, the one
 * place it is stricter; such a text gets the body's 400. */
static int nul_refused(const char *text, size_t len, int rc, const err_t *e)
{
    return rc == 400 && strcmp(e->field, "body") == 0 && memchr(text, '\0', len);
}

static void check_batch(const char *text, size_t len, const json_t *doc)
{
    report_prep_t *preps = NULL;
    size_t n = 0;
    err_t e = {0};
    int rc = report_parse_batch(text, len, &preps, &n, &e);
    if (rc == 500 || nul_refused(text, len, rc, &e))
        return;
    if (!json_is_object(doc)) {
        if (rc == 0)
            abort();
        check_body_refusal(rc, &e);
        return;
    }
    const json_t *reports = json_object_get(doc, "reports");
    int env = json_object_size(doc) == 1 && json_is_array(reports) &&
              json_array_size(reports) >= 1 && json_array_size(reports) <= REPORT_BATCH_MAX;
    if ((rc == 0) != env)
        abort();
    if (rc != 0) {
        check_err(rc, &e);
        if (strcmp(e.field, "reports") != 0)
            abort();
        return;
    }
    if (n != json_array_size(reports))
        abort();
    for (size_t i = 0; i < n; i++) {
        check_prep(&preps[i], preps[i].e.status, json_array_get(reports, i), 1, 0);
        report_prep_clear(&preps[i]);
    }
    free(preps);
}

static void check_one(const char *text, size_t len, const json_t *doc)
{
    report_prep_t p;
    int rc = report_parse_one(text, len, 77, &p);
    if (rc != 500 && !nul_refused(text, len, rc, &p.e)) {
        if (!json_is_object(doc)) {
            if (rc == 0)
                abort();
            check_body_refusal(rc, &p.e);
        } else {
            check_prep(&p, rc, doc, 0, 77);
        }
    }
    report_prep_clear(&p);
}

/* jscan_load (the tree builder atolld's bodies and the workers' answers
 * go through) reads the bytes as jansson does: the same verdict, the same
 * values in the same order. */
static void check_load(const char *text, size_t size, size_t flags, const json_t *want)
{
    json_t *got = jscan_load(text, size, flags, NULL);
    if ((got == NULL) != (want == NULL))
        abort();
    if (got) {
        char *x = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
        char *y = json_dumps(want, JSON_COMPACT | JSON_ENCODE_ANY);
        if (x && y && strcmp(x, y) != 0)
            abort();
        free(x);
        free(y);
    }
    json_decref(got);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    json_t *doc = json_loadb(text, size, JSON_REJECT_DUPLICATES, NULL);
    /* One flag set per input (by its length), to keep the rate up. */
    if (size % 2) {
        json_t *any = json_loadb(text, size, JSON_DECODE_ANY, NULL);
        check_load(text, size, JSON_DECODE_ANY, any);
        json_decref(any);
    } else {
        check_load(text, size, JSON_REJECT_DUPLICATES, doc);
    }
    if (!doc) {
        /* Text jansson refuses is the body's 400, both ways in. */
        report_prep_t *preps = NULL, p;
        size_t n = 0;
        err_t e = {0};
        int rc = report_parse_batch(text, size, &preps, &n, &e);
        if (rc != 500)
            check_body_refusal(rc, &e);
        if (preps || n)
            abort();
        rc = report_parse_one(text, size, 1, &p);
        if (rc != 500)
            check_body_refusal(rc, &p.e);
        report_prep_clear(&p);
        return 0;
    }
    check_batch(text, size, doc);
    check_one(text, size, doc);
    json_decref(doc);
    return 0;
}
