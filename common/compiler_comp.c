/* compiler_comp.c - one computation (compiler_comp.h): the header
 * fields, a run computation lowered to input and run_output ops, the body
 * op by op (compiler_shapes.c) and its outputs; and compiler_comp()
 * (compiler.h), the worker's entry point.
 *
 * Invariants:
 *  - c->nops == c->nvalues: each op defines exactly one value, in slot j;
 *  - c->inputs has room for every `input` op (counted before compiling),
 *    and c->ninputs counts those compiled so far;
 *  - every output names a value of c, at most once;
 *  - a run computation never also has ops the user wrote: its ops are the
 *    ones run_lower() derives from "inputs" and "outputs";
 *  - the JSON is borrowed: nothing here keeps a pointer into it. */
#include "compiler.h"
#include "compiler_comp.h"
#include "compiler_shapes.h"
#include "compiler_util.h"
#include "runspec.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cc_outputs(cc_t *x, const json_t *outs)
{
    comp_t *c = x->c;
    size_t n = json_array_size(outs);
    c->outputs = util_zalloc(n ? n : 1, sizeof *c->outputs);
    if (!c->outputs)
        return err_set(x->e, 500, "", "out of memory");
    for (size_t k = 0; k < n; k++) {
        char sub[32];
        const json_t *s = json_array_get(outs, k);
        int slot = json_is_string(s) ? nidx_find(&x->values, json_string_value(s)) : -1, dup = 0;
        for (int i = 0; slot >= 0 && i < c->noutputs; i++)
            dup |= c->outputs[i] == slot;
        if (slot < 0 || dup)    /* the field's name is printed only for an error */
            fmt(sub, sizeof sub, "outputs[%zu]", k);
        if (slot < 0)
            return comp_fail(x->prefix, x->e, sub, "computation '%s': output %zu must name a "
                             "value the computation defines", c->name, k);
        if (dup)
            return comp_fail(x->prefix, x->e, sub, "computation '%s': output '%s' is "
                             "listed twice", c->name, c->vnames[slot]);
        c->outputs[c->noutputs++] = slot;
    }
    return 0;
}

/* Counts `input` ops so c->inputs can be sized exactly. */
static size_t count_inputs(const json_t *ops)
{
    size_t n = 0;
    for (size_t j = 0; j < json_array_size(ops); j++) {
        const char *s = json_string_value(json_object_get(json_array_get(ops, j), "op"));
        if (s && strcmp(s, "input") == 0)
            n++;
    }
    return n;
}

static int cc_alloc(comp_t *c, size_t nops, size_t ninputs)
{
    c->ops = util_zalloc(nops, sizeof *c->ops);
    c->vnames = util_zalloc(nops, sizeof *c->vnames);
    c->vshapes = util_zalloc(nops, sizeof *c->vshapes);
    c->inputs = util_zalloc(ninputs ? ninputs : 1, sizeof *c->inputs);
    return c->ops && c->vnames && c->vshapes && c->inputs ? 0 : -1;
}

/* Header checks shared by both entry points: an object with only the known
 * keys, a valid name and a string `slice`; `ops` or `run` (a program Atoll
 * wrote, `internal`, has both: a run computation's lowered form). Fills
 * c->name and c->global. */
int comp_head(const json_t *cj, const char *prefix, int internal, comp_t *c, err_t *e)
{
    static const char *const keys[] = {"name", "slice", "ops", "outputs", "global", "run",
                                       "inputs"};
    const char *key;
    json_t *val;
    if (!json_is_object(cj))
        return comp_fail(prefix, e, "", "each computation must be an object");
    json_object_foreach((json_t *)cj, key, val) {
        int known = 0;
        for (int i = 0; i < 7; i++)
            known |= strcmp(key, keys[i]) == 0;
        if (!known)
            return comp_fail(prefix, e, key, "unknown field '%s' in a computation", key);
    }
    const json_t *name = json_object_get(cj, "name");
    if (!json_name(name))
        return comp_fail(prefix, e, "name", "computation name must be 1 to %d characters "
                         "[A-Za-z0-9_-]", NAME_MAX_LEN - 1);
    copy_str(c->name, sizeof c->name, json_string_value(name));
    const json_t *global = json_object_get(cj, "global");
    if (global && !json_is_boolean(global))
        return comp_fail(prefix, e, "global", "computation '%s': global must be true or false",
                         c->name);
    c->global = json_is_true(global);
    int run = json_object_get(cj, "run") != NULL;
    if (run && !internal && json_object_get(cj, "ops"))
        return comp_fail(prefix, e, "run", "computation '%s': give ops or run, not both",
                         c->name);
    if (run && c->global)
        return comp_fail(prefix, e, "global", "computation '%s': a run computation cannot be "
                         "global", c->name);
    if (json_object_get(cj, "inputs") && (!run || internal))
        return comp_fail(prefix, e, "inputs", "computation '%s': inputs belong to run "
                         "computations (ops computations use input ops)", c->name);
    if (!json_is_string(json_object_get(cj, "slice")))
        return comp_fail(prefix, e, "slice", "computation '%s': slice must be a slice name",
                         c->name);
    return 0;
}

/* A run computation ("run", DESIGN Part F) in its lowered form: {name,
 * slice, run, ops: [input op per "inputs" entry, run_output op per
 * output], outputs}, the form workers compile. New reference in *out, or a
 * 400 at the culprit's field. */
int run_lower(const json_t *cj, const char *prefix, const char *cname, json_t **out,
              err_t *e)
{
    const json_t *ins = json_object_get(cj, "inputs"), *outs = json_object_get(cj, "outputs");
    const json_t *run = json_object_get(cj, "run");
    const json_t *shapes = json_object_get(run, "shapes");
    const char *key;
    json_t *v;
    if (ins && (!json_is_object(ins) || json_object_size(ins) > RUNSPEC_MAX_VALUES))
        return comp_fail(prefix, e, "inputs", "computation '%s': inputs must be an object of "
                         "at most %d name: \"computation.value\" entries", cname,
                         RUNSPEC_MAX_VALUES);
    if (outs && (!json_is_array(outs) || json_array_size(outs) > RUNSPEC_MAX_VALUES))
        return comp_fail(prefix, e, "outputs", "computation '%s': outputs must be an array of "
                         "at most %d names", cname, RUNSPEC_MAX_VALUES);
    if (shapes && !json_is_object(shapes))
        return comp_fail(prefix, e, "run.shapes", "computation '%s': run.shapes must be an "
                         "object of output name: shape", cname);
    json_t *ops = json_array(), *low = NULL;
    if (!ops)
        return err_set(e, 500, "", "out of memory");
    json_object_foreach((json_t *)ins, key, v) {
        char sub[ERR_FIELD_MAX];
        fmt(sub, sizeof sub, "inputs.%s", key);
        if (!name_valid(key) || !json_is_string(v)) {
            json_decref(ops);
            return comp_fail(prefix, e, sub, "computation '%s': each input is name: "
                             "\"computation.value\" (names [A-Za-z0-9_-])", cname);
        }
        json_array_append_new(ops, json_pack("{s:s, s:s, s:O}", "op", "input", "out", key,
                                             "from", v));
    }
    for (size_t k = 0; k < json_array_size(outs); k++) {
        const json_t *o = json_array_get(outs, k);
        json_t *op = json_pack("{s:s, s:O}", "op", "run_output", "out", o);
        const json_t *shape = json_string_value(o) ? json_object_get(shapes,
                                                                     json_string_value(o)) : NULL;
        if (op && shape)
            json_object_set(op, "shape", (json_t *)shape);
        json_array_append_new(ops, op);
    }
    json_object_foreach((json_t *)shapes, key, v) {
        int listed = 0;
        for (size_t k = 0; k < json_array_size(outs); k++)
            listed |= json_is_string(json_array_get(outs, k)) &&
                      strcmp(json_string_value(json_array_get(outs, k)), key) == 0;
        if (!listed) {
            char sub[ERR_FIELD_MAX];
            fmt(sub, sizeof sub, "run.shapes.%s", key);
            json_decref(ops);
            return comp_fail(prefix, e, sub, "computation '%s': '%s' is not one of its "
                             "outputs", cname, key);
        }
    }
    if (json_array_size(ops) == 0)
        json_array_append_new(ops, json_pack("{s:s, s:s}", "op", "run_output", "out", "_"));
    /* "o" steals: ops and a new reference to the outputs (a fresh [] when
     * absent), also when json_pack fails. */
    low = json_pack("{s:O, s:O, s:O, s:o, s:o}", "name", json_object_get(cj, "name"), "slice",
                    json_object_get(cj, "slice"), "run", run, "ops", ops, "outputs",
                    outs ? json_incref((json_t *)outs) : json_array());
    if (!low)
        return err_set(e, 500, "", "out of memory");
    *out = low;
    return 0;
}

/* An error found compiling a run computation's lowered form names an op of
 * it ("PREFIX.ops[k]..."): name what the user wrote instead. */
void run_fix_field(const json_t *low, const char *prefix, err_t *e)
{
    char head[ERR_FIELD_MAX];
    int k = -1;
    fmt(head, sizeof head, "%s.ops[", prefix);
    if (strncmp(e->field, head, strlen(head)) != 0 ||
        sscanf(e->field + strlen(head), "%d", &k) != 1)
        return;
    const json_t *op = json_array_get(json_object_get(low, "ops"), (size_t)k);
    const char *out = json_string_value(json_object_get(op, "out"));
    const char *code = json_string_value(json_object_get(op, "op"));
    if (!out || !code)
        return;
    if (strcmp(code, "input") == 0) {
        fmt(e->field, sizeof e->field, "%s.inputs.%s", prefix, out);
        return;
    }
    const json_t *outs = json_object_get(low, "outputs");
    for (size_t i = 0; i < json_array_size(outs); i++)
        if (json_is_string(json_array_get(outs, i)) &&
            strcmp(json_string_value(json_array_get(outs, i)), out) == 0) {
            fmt(e->field, sizeof e->field, "%s.outputs[%zu]", prefix, i);
            return;
        }
}

/* Compiles ops and outputs into c (name, slice, slice_shape, nshards set by
 * the caller). On failure c may hold partial arrays: caller releases it. */
int comp_body(const json_t *cj, const char *prefix, comp_t *c, int global,
              int internal, resolve_fn resolve, void *rctx, err_t *e)
{
    cc_t x = {.prefix = prefix, .c = c, .global = global, .internal = internal,
              .resolve = resolve, .rctx = rctx, .e = e};
    const json_t *ops = json_object_get(cj, "ops");
    const json_t *outs = json_object_get(cj, "outputs");
    size_t nops = json_array_size(ops);
    int rc = 0;
    if (!json_is_array(ops) || nops < 1 || nops > JOB_MAX_OPS)
        return comp_fail(prefix, e, "ops", "computation '%s': ops must be an array of 1 to %d ops",
                         c->name, JOB_MAX_OPS);
    if (outs && !json_is_array(outs))
        return comp_fail(prefix, e, "outputs", "computation '%s': outputs must be an array of "
                         "value names", c->name);
    const json_t *run = json_object_get(cj, "run");
    char rprefix[ERR_FIELD_MAX];
    field_join(rprefix, sizeof rprefix, prefix, "run");
    if (run && (rc = runspec_parse(run, rprefix, &c->run, e)))
        return rc;
    if (cc_alloc(c, nops, count_inputs(ops)) || nidx_init(&x.values, nops))
        return err_set(e, 500, "", "out of memory");
    c->nops = c->nvalues = (int)nops;
    for (size_t j = 0; j < nops && !rc; j++)
        rc = cc_op(&x, (int)j, json_array_get(ops, j));
    if (!rc)
        rc = cc_outputs(&x, outs);
    nidx_free(&x.values);
    return rc;
}

void comp_set_slice(comp_t *c, int slice, const shape_t *slice_shape)
{
    c->slice = slice;
    c->slice_shape = *slice_shape;
    c->nshards = (int)shape_numel(slice_shape);
}

/* compiler_comp(): resolution through the caller's shape callback. */
typedef struct comp_rctx {
    compiler_input_fn fn;
    void *ctx;
} comp_rctx_t;

static int comp_resolve(void *rctx, cc_t *x, comp_input_t *in)
{
    comp_rctx_t *r = rctx;
    if (x->c->run && r->fn && r->fn(r->ctx, in->from, &in->shape) != 0) {
        in->shape.rank = -1;    /* a run computation takes what the producer wrote */
        return 0;
    }
    if (!r->fn || r->fn(r->ctx, in->from, &in->shape) != 0)
        return op_fail(x, "from", "unknown input '%s'", in->from);
    if (!shape_valid(&in->shape))
        return op_fail(x, "from", "input '%s' has an invalid shape", in->from);
    return 0;
}

static int slice_shape_valid(const shape_t *s)
{
    if (s->rank < 1 || s->rank > MESH_MAX_RANK)
        return 0;
    for (int i = 0; i < s->rank; i++) {
        if (s->dim[i] < 1 || s->dim[i] > SLICE_DIM_MAX)
            return 0;
    }
    return 1;
}

int compiler_comp(const json_t *comp_json, const shape_t *slice_shape,
                  compiler_input_fn input_shape, void *ctx, comp_t **out, err_t *e)
{
    comp_rctx_t r = {input_shape, ctx};
    if (!slice_shape || !slice_shape_valid(slice_shape))
        return err_set(e, 400, "slice_shape", "slice shape must have 1 to %d dims of 1..%d",
                       MESH_MAX_RANK, SLICE_DIM_MAX);
    comp_t *c = util_zalloc(1, sizeof *c);
    if (!c)
        return err_set(e, 500, "", "out of memory");
    comp_set_slice(c, -1, slice_shape);
    int rc = comp_head(comp_json, "", 1, c, e);
    if (!rc)
        rc = c->global ? comp_fail("", e, "global", "compiler_comp() takes per-shard "
                                   "computations (a global one is partitioned by compiler_job)")
                       : comp_body(comp_json, "", c, 0, 1, comp_resolve, &r, e);
    if (rc) {
        comp_free(c);
        return rc;
    }
    *out = c;
    return 0;
}
