/* fuzz_report.c - libFuzzer target for the controller's decoding of
 * worker reports (store/report_decode.c), in the order atolld applies it:
 *   single report (POST /v1/workers/{id}/tasks/{task}): report_outputs_check,
 *     report_validate, then for each output report_output_count (against
 *     its own length and a wrong one) and report_output_decode of each of
 *     its tensors (one per shard of the host task);
 *   batch (POST /v1/workers/{id}/reports, a body with "reports"):
 *     report_batch_envelope, then per item (a refusal is that item's
 *     alone) report_batch_item, report_outputs_check, report_validate and
 *     the outputs.
 * Each report also goes through report_prepare (what the controller runs,
 * built of the same checks): prepared iff they pass (and, succeeded, every
 * tensor decodes), each output's tails the meta of its decoded tensors.
 * The body is parsed as the router parses it (JSON_REJECT_DUPLICATES).
 * Outputs are decoded whatever the state (the store decodes them only for
 * succeeded reports), so every report reaches the shape/values decoder.
 *
 * Invariants (a violation aborts, which libFuzzer reports):
 *  - a refusal is a 400 (500 only for out of memory) with a detail;
 *  - a validated report has a known state and only known fields;
 *  - an accepted batch item has a positive task and is the item minus
 *    "task"; accepted output names are value names and each accepted
 *    output is an array of 1..REPORT_SHARDS_MAX tensors;
 *  - report_output_count accepts exactly the array's own length;
 *  - a decoded output is accepted iff an independent 128-bit model of its
 *    shape accepts it (up to 4 dims >= 1, at most TENSOR_MAX_ELEMS
 *    elements) and its "values_f32", when listed, is a string of exactly
 *    the base64 length of numel f32 (at most REPORT_VALUES_MAX; a string of
 *    that length may still be refused as not base64); its shape and element
 *    count are the declared ones, its values (when listed) encode back to
 *    text that decodes to the same bits, its sum present iff not null. */
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "f32b64.h"
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
    if (json_array_size(shape) > TENSOR_MAX_RANK)
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

static void check_output(const char *name, int index, const json_t *o)
{
    report_output_t out;
    err_t e;
    memset(&e, 0, sizeof e);
    int rc = report_output_decode(name, index, o, &out, &e);
    const json_t *shape = json_object_get(o, "shape"), *sum = json_object_get(o, "sum");
    const json_t *vals = json_object_get(o, "values_f32");
    int64_t numel = 0;
    int form = json_is_object(o) && json_is_array(shape) && (json_is_number(sum) || json_is_null(sum)) &&
               (!vals || json_is_string(vals)) && json_object_size(o) == 2u + (vals != NULL);
    int model = form && shape_model(shape, &numel) &&
                (!vals || (numel <= REPORT_VALUES_MAX &&
                           json_string_length(vals) == (size_t)(numel * 4 + 2) / 3 * 4));
    if (rc == -1) {             /* out of memory: nothing to check */
        report_output_clear(&out);
        return;
    }
    /* A string of the right length may still not be base64: refused. */
    if ((rc == 0 && !model) || (rc != 0 && model && !vals))
        abort();
    if (rc != 0) {
        check_err(rc, &e);
        report_output_clear(&out);
        return;
    }
    if (out.numel != numel || out.shape.rank != (int)json_array_size(shape) ||
        !shape_valid(&out.shape) || shape_numel(&out.shape) != numel ||
        out.has_sum != !json_is_null(sum) || (vals != NULL) != (out.values != NULL))
        abort();
    for (int i = 0; i < out.shape.rank; i++)
        if (out.shape.dim[i] != json_integer_value(json_array_get(shape, (size_t)i)))
            abort();
    if (vals) {                 /* the values survive a round trip bit for bit */
        char *text = f32b64_encode(out.values, numel);
        float *back = malloc(sizeof *back * (size_t)(numel ? numel : 1));
        if (text && back &&
            (f32b64_decode(text, strlen(text), back, numel) != 0 ||
             memcmp(back, out.values, sizeof *back * (size_t)numel) != 0))
            abort();
        free(text);
        free(back);
    }
    report_output_clear(&out);
}

static int name_ok(const char *s)
{
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-");
    return n == strlen(s) && n >= 1 && n < NAME_MAX_LEN;
}

static int outputs_ok(const json_t *body)
{
    err_t e;
    memset(&e, 0, sizeof e);
    int rc = report_outputs_check(body, &e);
    if (rc != 0) {
        check_err(rc, &e);
        return 0;
    }
    const char *name;
    const json_t *o;
    json_object_foreach((json_t *)json_object_get(body, "outputs"), name, o)
        if (!name_ok(name) || !json_is_array(o) || json_array_size(o) < 1 ||
            json_array_size(o) > REPORT_SHARDS_MAX)
            abort();
    return 1;
}

/* One output's array: its length is the shard count it is checked against
 * (accepted), one more is refused; then every tensor is decoded. */
static void check_output_array(const char *name, const json_t *arr)
{
    err_t e;
    memset(&e, 0, sizeof e);
    int n = (int)json_array_size(arr);
    if (report_output_count(name, (size_t)n, n, &e) != 0)
        abort();
    int rc = report_output_count(name, (size_t)n, n + 1, &e);
    if (rc == 0)
        abort();
    check_err(rc, &e);
    size_t i;
    const json_t *o;
    json_array_foreach(arr, i, o)
        check_output(name, (int)i, o);
}

/* A report without "task": validated, then every output decoded. */
static void check_report(const json_t *body)
{
    static const char *const known[] = {"state", "error", "started_us", "inputs_ready_us",
                                        "finished_us", "outputs", "unreachable_peer"};
    const char *state = NULL;
    err_t e;
    memset(&e, 0, sizeof e);
    int rc = report_validate(body, &state, &e);
    if (rc != 0) {
        check_err(rc, &e);
        return;
    }
    if (!state || (strcmp(state, "succeeded") && strcmp(state, "failed") && strcmp(state, "cancelled")))
        abort();
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        size_t k = 0;
        while (k < sizeof known / sizeof known[0] && strcmp(key, known[k]) != 0)
            k++;
        if (k == sizeof known / sizeof known[0])
            abort();
        if (strstr(key, "_us") && (json_integer_value(v) < 0 ||
                                   json_integer_value(v) > REPORT_TIME_MAX_US))
            abort();               /* an accepted stamp is in range */
    }
    json_object_foreach((json_t *)json_object_get(body, "outputs"), key, v)
        check_output_array(key, v);
}

/* Whether every tensor of every output of body decodes (what
 * report_prepare adds to the checks for a succeeded report). */
static int tensors_decode(const json_t *body)
{
    const char *name;
    const json_t *arr, *o;
    size_t i;
    json_object_foreach((json_t *)json_object_get(body, "outputs"), name, arr)
        json_array_foreach(arr, i, o) {
            report_output_t out;
            err_t e;
            memset(&e, 0, sizeof e);
            int rc = report_output_decode(name, (int)i, o, &out, &e);
            report_output_clear(&out);
            if (rc != 0)
                return 0;
        }
    return 1;
}

/* A prepared output's tails: "[0," + tail is the meta entry [shard, shape,
 * sum or null, nvals] of its decoded tensor, the sum bit for bit. */
static void check_tails(const report_prep_out_t *o)
{
    for (int k = 0; k < o->n; k++) {
        char text[REPORT_TAIL_MAX + 8];
        snprintf(text, sizeof text, "[0,%s", o->tail[k]);
        json_t *m = json_loads(text, 0, NULL);
        const report_output_t *t = &o->t[k];
        json_t *sum = json_array_get(m, 2);
        if (!json_is_array(m) || json_array_size(m) != 4 ||
            json_array_size(json_array_get(m, 1)) != (size_t)t->shape.rank ||
            json_integer_value(json_array_get(m, 3)) != (t->values ? t->numel : 0) ||
            (t->has_sum ? !json_is_number(sum) || json_number_value(sum) != t->sum
                        : !json_is_null(sum)))
            abort();
        for (int d = 0; d < t->shape.rank; d++)
            if (json_integer_value(json_array_get(json_array_get(m, 1), (size_t)d)) !=
                t->shape.dim[d])
                abort();
        json_decref(m);
    }
}

/* report_prepare on body (a report without "task") against the checks it
 * is made of: prepared iff the fields, state and outputs pass and, for a
 * succeeded report, every tensor decodes; then one prepared output per
 * output, one tensor per entry, each tail the tensor's meta. */
static void check_prepared(const json_t *body, int64_t task)
{
    const char *state = NULL;
    err_t e;
    memset(&e, 0, sizeof e);
    int want = report_validate(body, &state, &e) == 0 && report_outputs_check(body, &e) == 0 &&
               (strcmp(state, "succeeded") != 0 || tensors_decode(body));
    report_prep_t p;
    int rc = report_prepare(json_incref((json_t *)body), task, &p);
    if (rc == 500) {            /* out of memory: nothing to check */
        report_prep_clear(&p);
        return;
    }
    if ((rc == 0) != want || p.task != task)
        abort();
    if (rc != 0) {
        check_err(rc, &p.e);
    } else {
        const json_t *outs = json_object_get(body, "outputs");
        int kept = strcmp(p.state, "succeeded") == 0;
        if (p.nout != (kept ? (int)json_object_size(outs) : 0))
            abort();
        for (int i = 0; i < p.nout; i++) {
            if ((size_t)p.out[i].n != json_array_size(json_object_get(outs, p.out[i].name)))
                abort();
            check_tails(&p.out[i]);
        }
    }
    report_prep_clear(&p);
}

static void check_batch(const json_t *doc)
{
    const json_t *reports = NULL;
    err_t e;
    memset(&e, 0, sizeof e);
    int rc = report_batch_envelope(doc, &reports, &e);
    if (rc != 0) {
        check_err(rc, &e);
        return;
    }
    if (!json_is_array(reports) || json_array_size(reports) < 1 ||
        json_array_size(reports) > REPORT_BATCH_MAX)
        abort();
    size_t i;
    const json_t *item;
    json_array_foreach(reports, i, item) {
        int64_t task = 0;
        memset(&e, 0, sizeof e);
        json_t *body = report_batch_item(item, &task, &e);
        if (!body) {
            check_err(e.status, &e);
            continue;
        }
        if (task < 1 || json_object_get(body, "task") ||
            json_object_size(body) + 1 != json_object_size(item))
            abort();
        if (outputs_ok(body))   /* else only this item is refused */
            check_report(body);
        check_prepared(body, task);
        json_decref(body);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!doc)
        return 0;
    if (json_object_get(doc, "reports"))
        check_batch(doc);
    else if (outputs_ok(doc))
        check_report(doc);
    if (!json_object_get(doc, "reports"))
        check_prepared(doc, 1);
    json_decref(doc);
    return 0;
}
