/* test_compiler.c - job document validation and shape inference.
 *
 * Documents are written with single quotes for readability; doc_load()
 * turns them into JSON. Islands of the test cluster: west 4x4, east 2x4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"

static const island_desc_t islands[] = {
    {"west", {2, {4, 4, 0, 0}}},
    {"east", {2, {2, 4, 0, 0}}},
};

static json_t *doc_load(const char *text)
{
    char *buf = strdup(text);
    assert_non_null(buf);
    for (char *p = buf; *p; p++) {
        if (*p == '\'')
            *p = '"';
    }
    json_error_t jerr;
    json_t *doc = json_loads(buf, 0, &jerr);
    if (!doc)
        fail_msg("bad test JSON: %s: %s", jerr.text, buf);
    free(buf);
    return doc;
}

/* Compiles text; returns the status (0 = ok) and the plan (or NULL). */
static int compile_text(const char *text, job_plan_t **plan, err_t *e)
{
    json_t *doc = doc_load(text);
    memset(e, 0, sizeof *e);
    *plan = NULL;
    int rc = compiler_job(doc, islands, 2, plan, e);
    json_decref(doc);
    return rc;
}

static void expect_error(const char *text, int status, const char *field, const char *detail_part)
{
    job_plan_t *plan;
    err_t e;
    int rc = compile_text(text, &plan, &e);
    if (rc != status || strcmp(e.field, field) != 0 ||
        (detail_part && !strstr(e.detail, detail_part)))
        fail_msg("want %d at '%s' (%s), got %d at '%s': %s\n  doc: %s", status, field,
                 detail_part ? detail_part : "-", rc, e.field, e.detail, text);
    assert_null(plan);
    assert_int_equal(e.status, status);
}

/* Compiles text that must be valid; fails with the error otherwise. */
static job_plan_t *compile_ok(const char *text)
{
    job_plan_t *plan;
    err_t e;
    if (compile_text(text, &plan, &e) != 0)
        fail_msg("compile failed: %d at '%s': %s", e.status, e.field, e.detail);
    return plan;
}

static void assert_shape(const shape_t *s, int rank, int64_t d0, int64_t d1, int64_t d2)
{
    int64_t want[3] = {d0, d1, d2};
    assert_int_equal(s->rank, rank);
    for (int i = 0; i < rank && i < 3; i++)
        assert_int_equal(s->dim[i], want[i]);
}

#define DESIGN_DOC \
    "{'name': 'demo', 'priority': 0," \
    " 'slices': {'a': {'shape': [2, 2]}, 'b': {'shape': [2, 2], 'island': 'east'}}," \
    " 'computations': [" \
    "  {'name': 'produce', 'slice': 'a', 'ops': [" \
    "     {'op': 'shard_index', 'out': 'i'}," \
    "     {'op': 'fill', 'out': 'x', 'shape': [4], 'value': 1.0}," \
    "     {'op': 'mul', 'out': 'y', 'args': ['x', 'i']}," \
    "     {'op': 'all_reduce', 'out': 'z', 'args': ['y'], 'reduce': 'sum'}]," \
    "   'outputs': ['z']}," \
    "  {'name': 'consume', 'slice': 'b', 'ops': [" \
    "     {'op': 'input', 'out': 'z', 'from': 'produce.z'}," \
    "     {'op': 'scale', 'out': 'w', 'args': ['z'], 'factor': 0.5}]," \
    "   'outputs': ['w']}]}"

static void test_design_example(void **state)
{
    (void)state;
    job_plan_t *plan;
    plan = compile_ok(DESIGN_DOC);
    assert_string_equal(plan->name, "demo");
    assert_int_equal(plan->priority, 0);
    assert_int_equal(plan->max_retries, 2);
    assert_int_equal(plan->nslices, 2);
    assert_string_equal(plan->slices[0].name, "a");
    assert_string_equal(plan->slices[0].island, "");
    assert_string_equal(plan->slices[1].island, "east");
    assert_int_equal(plan->ncomps, 2);
    assert_int_equal(plan->topo[0], 0);
    assert_int_equal(plan->topo[1], 1);

    const comp_t *p = &plan->comps[0];
    assert_string_equal(p->name, "produce");
    assert_int_equal(p->slice, 0);
    assert_int_equal(p->nshards, 4);
    assert_int_equal(p->nops, 4);
    assert_int_equal(p->ops[0].code, OP_SHARD_INDEX);
    assert_shape(&p->vshapes[0], 0, 0, 0, 0);
    assert_int_equal(p->ops[1].code, OP_FILL);
    assert_true(p->ops[1].value == 1.0f);
    assert_shape(&p->vshapes[1], 1, 4, 0, 0);
    assert_int_equal(p->ops[2].arg[0], 1);
    assert_int_equal(p->ops[2].arg[1], 0);
    assert_shape(&p->ops[2].shape, 1, 4, 0, 0);
    assert_int_equal(p->ops[3].code, OP_ALL_REDUCE);
    assert_int_equal(p->ops[3].reduce, REDUCE_SUM);
    assert_int_equal(p->ops[3].mesh_axes, 0);
    assert_int_equal(p->noutputs, 1);
    assert_int_equal(p->outputs[0], 3);
    assert_string_equal(p->vnames[3], "z");

    const comp_t *c = &plan->comps[1];
    assert_int_equal(c->ninputs, 1);
    assert_string_equal(c->inputs[0].from, "produce.z");
    assert_string_equal(c->inputs[0].producer_name, "produce");
    assert_string_equal(c->inputs[0].value, "z");
    assert_int_equal(c->inputs[0].producer, 0);
    assert_int_equal(c->inputs[0].op_index, 0);
    assert_shape(&c->inputs[0].shape, 1, 4, 0, 0);
    assert_int_equal(c->ops[0].input, 0);
    assert_true(c->ops[1].factor == 0.5f);
    assert_shape(&c->vshapes[1], 1, 4, 0, 0);
    job_plan_free(plan);
}

/* A consumer listed before its producer: topo puts the producer first, and
 * independent computations keep document order. */
static void test_topo_order(void **state)
{
    (void)state;
    job_plan_t *plan;
    const char *doc =
        "{'slices': {'s': {'shape': [2]}}, 'max_retries': 5, 'priority': -7, 'computations': ["
        " {'name': 'c', 'slice': 's', 'ops': [{'op': 'input', 'out': 'v', 'from': 'b.v'}]},"
        " {'name': 'a', 'slice': 's', 'ops': [{'op': 'iota', 'out': 'v', 'shape': [2, 3]}],"
        "  'outputs': ['v']},"
        " {'name': 'b', 'slice': 's', 'ops': [{'op': 'input', 'out': 'u', 'from': 'a.v'},"
        "   {'op': 'transpose', 'out': 'v', 'args': ['u']}], 'outputs': ['v']},"
        " {'name': 'd', 'slice': 's', 'ops': [{'op': 'compute', 'out': 'v', 'us': 10}]}]}";
    plan = compile_ok(doc);
    assert_int_equal(plan->priority, -7);
    assert_int_equal(plan->max_retries, 5);
    assert_string_equal(plan->name, "");
    int want[] = {1, 2, 0, 3};
    for (int i = 0; i < 4; i++)
        assert_int_equal(plan->topo[i], want[i]);
    /* Shapes flow through the edges: a.v [2,3] -> b.v [3,2] -> c.v. */
    assert_shape(&plan->comps[0].inputs[0].shape, 2, 3, 2, 0);
    assert_int_equal(plan->comps[0].inputs[0].producer, 2);
    assert_int_equal(plan->comps[3].ops[0].us, 10);
    job_plan_free(plan);
}

static void test_shapes_and_collectives(void **state)
{
    (void)state;
    job_plan_t *plan;
    const char *doc =
        "{'slices': {'m': {'shape': [2, 4]}}, 'computations': [{'name': 'k', 'slice': 'm', 'ops': ["
        " {'op': 'iota', 'out': 'a', 'shape': [8, 2]},"
        " {'op': 'fill', 'out': 's', 'shape': [], 'value': -2},"
        " {'op': 'sub', 'out': 'b', 'args': ['s', 'a']},"
        " {'op': 'reduce_sum', 'out': 'r0', 'args': ['b'], 'axis': 0},"
        " {'op': 'reduce_sum', 'out': 'r', 'args': ['b']},"
        " {'op': 'all_gather', 'out': 'g', 'args': ['a'], 'axis': 1, 'mesh_axes': [1]},"
        " {'op': 'all_gather', 'out': 'g2', 'args': ['a'], 'axis': 0},"
        " {'op': 'reduce_scatter', 'out': 'rs', 'args': ['a'], 'axis': 0, 'reduce': 'max'},"
        " {'op': 'ppermute', 'out': 'p', 'args': ['a'], 'shift': -3, 'mesh_axes': [1, 0]},"
        " {'op': 'all_to_all', 'out': 't', 'args': ['a'], 'split_axis': 0, 'concat_axis': 1,"
        "  'mesh_axes': [0]},"
        " {'op': 'matmul', 'out': 'mm', 'args': ['g', 'a']},"
        " {'op': 'reshape', 'out': 'rh', 'args': ['mm'], 'shape': [4, 2, 2]},"
        " {'op': 'all_reduce', 'out': 'ar', 'args': ['r'], 'reduce': 'min', 'mesh_axes': [0]}],"
        " 'outputs': ['rh', 'ar']}]}";
    plan = compile_ok(doc);
    const comp_t *c = &plan->comps[0];
    assert_shape(&c->vshapes[2], 2, 8, 2, 0);     /* scalar broadcast on the left */
    assert_shape(&c->vshapes[3], 1, 2, 0, 0);
    assert_int_equal(c->ops[3].axis, 0);
    assert_shape(&c->vshapes[4], 0, 0, 0, 0);
    assert_int_equal(c->ops[4].axis, -1);
    assert_shape(&c->vshapes[5], 2, 8, 8, 0);     /* group of 4 along mesh axis 1 */
    assert_int_equal(c->ops[5].mesh_axes, 2u);
    assert_shape(&c->vshapes[6], 2, 64, 2, 0);    /* whole slice: 8 shards */
    assert_shape(&c->vshapes[7], 2, 1, 2, 0);
    assert_int_equal(c->ops[7].reduce, REDUCE_MAX);
    assert_int_equal(c->ops[8].shift, -3);
    assert_int_equal(c->ops[8].mesh_axes, 3u);
    assert_shape(&c->vshapes[9], 2, 4, 4, 0);     /* group of 2: [8/2, 2*2] */
    assert_int_equal(c->ops[9].split_axis, 0);
    assert_int_equal(c->ops[9].concat_axis, 1);
    assert_shape(&c->vshapes[10], 2, 8, 2, 0);
    assert_shape(&c->vshapes[11], 3, 4, 2, 2);
    assert_int_equal(c->ops[12].mesh_axes, 1u);
    assert_int_equal(c->noutputs, 2);
    assert_int_equal(c->outputs[0], 11);
    assert_int_equal(c->outputs[1], 12);
    job_plan_free(plan);
}

/* One computation on slice 's' [2,2] with the given ops (a JSON fragment). */
#define ONE(ops) \
    "{'slices': {'s': {'shape': [2, 2]}}, 'computations': [{'name': 'produce', 'slice': 's'," \
    " 'ops': [" ops "]}]}"
#define F4 "{'op': 'fill', 'out': 'x', 'shape': [4], 'value': 1}"
#define M23 "{'op': 'iota', 'out': 'm', 'shape': [2, 3]}"
#define OP1 "computations[0].ops[1]."

static void test_errors_fields(void **state)
{
    (void)state;
    expect_error("{'nmae': 'x', 'slices': {'s': {'shape': [1]}}, 'computations': []}", 400,
                 "nmae", "unknown field");
    expect_error(ONE(F4 ", {'op': 'neg', 'out': 'y', 'args': ['x'], 'valu': 1}"), 400,
                 OP1 "valu", "unknown field 'valu'");
    expect_error(ONE(F4 ", {'op': 'neg', 'out': 'y', 'args': ['x'], 'shape': [4]}"), 400,
                 OP1 "shape", "unknown field");
    expect_error(ONE("{'op': 'conv', 'out': 'y'}"), 400, "computations[0].ops[0].op",
                 "unknown op 'conv'");
    expect_error(ONE("{'out': 'y'}"), 400, "computations[0].ops[0].op", "missing");
    expect_error(ONE(F4 ", {'op': 'neg', 'args': ['x']}"), 400, OP1 "out", "missing");
    expect_error(ONE(F4 ", {'op': 'fill', 'out': 'y', 'shape': [4]}"), 400, OP1 "value",
                 "missing field 'value'");
    expect_error(ONE("{'op': 'fill', 'out': 'a b', 'shape': [4], 'value': 1}"), 400,
                 "computations[0].ops[0].out", NULL);
    expect_error(ONE(F4 ", {'op': 'fill', 'out': 'x', 'shape': [4], 'value': 2}"), 400,
                 OP1 "out", "already defined by op 0");
    expect_error("{'slices': {'s': {'shape': [2]}}, 'computations': ["
                 "{'name': 'a', 'slice': 's', 'ops': [" F4 "]},"
                 "{'name': 'a', 'slice': 's', 'ops': [" F4 "]}]}",
                 400, "computations[1].name", "duplicate");
    expect_error("{'slices': {'s': {'shape': [2]}}, 'computations': [{'name': 'a', "
                 "'slice': 's', 'ops': [" F4 "], 'outputs': ['x'], 'extra': 1}]}",
                 400, "computations[0].extra", "unknown field");
    expect_error("{'slices': {'s': {'shape': [2]}}, 'computations': [{'name': 'a', "
                 "'slice': 't', 'ops': [" F4 "]}]}", 400, "computations[0].slice", "'t'");
    expect_error("{'slices': {'s': {'shape': [2]}}, 'computations': []}", 400,
                 "computations", NULL);
    expect_error("{'slices': {'s': {'shape': [2]}}}", 400, "computations", "missing");
    expect_error("{'slices': {'s': {'shape': [2]}}, 'computations': [{'name': 'a', "
                 "'slice': 's', 'ops': []}]}", 400, "computations[0].ops", NULL);
}

/* DESIGN.md Part C's new ops: shapes, and every spec rule with its field. */
static void test_new_ops(void **state)
{
    (void)state;
    job_plan_t *p = compile_ok(ONE(M23 ", {'op': 'iota', 'out': 'w', 'shape': [4, 3]},"
        "{'op': 'einsum', 'out': 'mm', 'args': ['m', 'w'], 'spec': 'ij,kj->ik'},"
        "{'op': 'einsum', 'out': 's', 'args': ['m'], 'spec': 'ij->'},"
        "{'op': 'einsum', 'out': 'o', 'args': ['m', 'w'], 'spec': 'ij,kl->jlik'},"
        "{'op': 'softmax', 'out': 'sm', 'args': ['m'], 'axis': 0},"
        "{'op': 'reduce_max', 'out': 'r', 'args': ['m'], 'axis': 1},"
        "{'op': 'reduce_max', 'out': 'ra', 'args': ['m']},"
        "{'op': 'rsqrt', 'out': 'q', 'args': ['m']}, {'op': 'log', 'out': 'l', 'args': ['m']}"));
    const comp_t *c = &p->comps[0];
    int64_t want[][5] = {{2, 2, 4}, {0}, {4, 3, 3, 2, 4}, {2, 2, 3}, {1, 2}, {0}, {2, 2, 3},
                         {2, 2, 3}};
    for (int j = 2; j < c->nops; j++) {
        assert_int_equal(c->ops[j].shape.rank, want[j - 2][0]);
        for (int d = 0; d < c->ops[j].shape.rank; d++)
            assert_int_equal(c->ops[j].shape.dim[d], want[j - 2][d + 1]);
    }
    job_plan_free(p);
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m'], 'spec': 'ij'}"), 400,
                 OP1 "spec", "->");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m', 'm'], 'spec': 'ij->i'}"),
                 400, OP1 "spec", "ij,jk->ik");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m'], 'spec': 'ii->i'}"), 400,
                 OP1 "spec", "distinct");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m'], 'spec': 'iJ->i'}"), 400,
                 OP1 "spec", "lower-case");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m'], 'spec': 'ijk->i'}"), 400,
                 OP1 "spec", "rank 2");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m'], 'spec': 'ij->k'}"), 400,
                 OP1 "spec", "'k' is in no operand");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m', 'm'], "
                     "'spec': 'ij,ij->iij'}"), 400, OP1 "spec", "distinct");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m', 'm'], "
                     "'spec': 'ij,jk->ik'}"), 400, OP1 "spec", "size 3 and 2");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m'], 'spec': 3}"), 400,
                 OP1 "spec", NULL);
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': [], 'spec': '->'}"), 400,
                 OP1 "args", "1 or 2");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m', 'm', 'm'], "
                     "'spec': 'i,j,k->'}"), 400, OP1 "args", "1 or 2");
    expect_error(ONE(M23 ", {'op': 'einsum', 'out': 'y', 'args': ['m']}"), 400, OP1 "spec",
                 "missing");
    expect_error(ONE(M23 ", {'op': 'softmax', 'out': 'y', 'args': ['m']}"), 400, OP1 "axis",
                 "missing");
    expect_error(ONE(M23 ", {'op': 'softmax', 'out': 'y', 'args': ['m'], 'axis': 2}"), 400,
                 OP1 "axis", "0..1");
    expect_error(ONE(M23 ", {'op': 'reduce_max', 'out': 'y', 'args': ['m'], 'axis': 5}"), 400,
                 OP1 "axis", "0..1");
    expect_error(ONE(M23 ", {'op': 'log', 'out': 'y', 'args': ['m'], 'axis': 0}"), 400,
                 OP1 "axis", "unknown field");
}

static void test_errors_args_and_shapes(void **state)
{
    (void)state;
    expect_error(ONE(F4 ", {'op': 'add', 'out': 'y', 'args': ['x', 'nope']}"), 400,
                 OP1 "args[1]", "unknown value 'nope'");
    /* Arguments must come from EARLIER ops, not the op itself or later ones. */
    expect_error(ONE(F4 ", {'op': 'add', 'out': 'y', 'args': ['y', 'x']}"), 400,
                 OP1 "args[0]", NULL);
    expect_error(ONE(F4 ", {'op': 'neg', 'out': 'y', 'args': ['z']}, "
                     "{'op': 'neg', 'out': 'z', 'args': ['x']}"), 400, OP1 "args[0]", NULL);
    expect_error(ONE(F4 ", {'op': 'add', 'out': 'y', 'args': ['x']}"), 400, OP1 "args",
                 "2 value names");
    expect_error(ONE(F4 ", {'op': 'neg', 'out': 'y', 'args': 'x'}"), 400, OP1 "args", NULL);
    expect_error(ONE(F4 ", {'op': 'iota', 'out': 'y', 'shape': [3]}, "
                     "{'op': 'add', 'out': 'z', 'args': ['x', 'y']}"), 400,
                 "computations[0].ops[2].args", "[4] and [3]");
    expect_error(ONE(M23 ", {'op': 'matmul', 'out': 'y', 'args': ['m', 'm']}"), 400,
                 OP1 "args", "[2,3] x [2,3]");
    expect_error(ONE(F4 ", {'op': 'transpose', 'out': 'y', 'args': ['x']}"), 400, OP1 "args",
                 "rank-2");
    expect_error(ONE(M23 ", {'op': 'reshape', 'out': 'y', 'args': ['m'], 'shape': [5]}"), 400,
                 OP1 "shape", "element counts");
    expect_error(ONE(M23 ", {'op': 'reduce_sum', 'out': 'y', 'args': ['m'], 'axis': 2}"), 400,
                 OP1 "axis", "0..1");
    expect_error(ONE(M23 ", {'op': 'reduce_sum', 'out': 'y', 'args': ['m'], 'axis': -1}"), 400,
                 OP1 "axis", NULL);
    expect_error(ONE("{'op': 'shard_index', 'out': 'i'}, "
                     "{'op': 'all_gather', 'out': 'y', 'args': ['i'], 'axis': 0}"), 400,
                 OP1 "axis", "rank >= 1");
    expect_error(ONE("{'op': 'fill', 'out': 'x', 'shape': [1, 1, 1, 1, 1], 'value': 1}"), 400,
                 "computations[0].ops[0].shape", NULL);
    expect_error(ONE("{'op': 'fill', 'out': 'x', 'shape': [4096, 4097], 'value': 1}"), 400,
                 "computations[0].ops[0].shape", NULL);
    expect_error(ONE("{'op': 'fill', 'out': 'x', 'shape': [0], 'value': 1}"), 400,
                 "computations[0].ops[0].shape", NULL);
    expect_error(ONE("{'op': 'fill', 'out': 'x', 'shape': [2.0], 'value': 1}"), 400,
                 "computations[0].ops[0].shape", NULL);
    /* all_gather output too large: 4096*4096 per shard, times 4 shards. */
    expect_error(ONE("{'op': 'fill', 'out': 'x', 'shape': [4096, 4096], 'value': 1}, "
                     "{'op': 'all_gather', 'out': 'y', 'args': ['x'], 'axis': 0}"), 400,
                 "computations[0].ops[1]", "exceeds");
}

/* A job name of "rep" repeated n times: accepted when want_ok. */
static void expect_name(const char *rep, int n, int want_ok)
{
    char doc[1024] = "{'name': '";
    for (int i = 0; i < n; i++)
        strcat(doc, rep);
    strcat(doc, "', 'slices': {}, 'computations': []}");
    job_plan_t *plan;
    err_t e;
    int rc = compile_text(doc, &plan, &e);
    /* An empty job is refused after its name: past the name is enough. */
    if (want_ok ? strcmp(e.field, "name") == 0 : rc != 400 || strcmp(e.field, "name") != 0)
        fail_msg("name of %d x '%s': want %s, got %d at '%s'", n, rep,
                 want_ok ? "accepted" : "refused", rc, e.field);
    job_plan_free(plan);
}

/* Names are counted in characters (code points), not bytes: 63 of them
 * whatever their UTF-8 length; control characters (C0, DEL, C1) are not
 * printable. */
static void expect_name_limits(void)
{
    expect_name("a", 63, 1);
    expect_name("a", 64, 0);
    expect_name("\\u00e9", 63, 1);              /* 2 bytes each: 126 bytes */
    expect_name("\\u00e9", 64, 0);
    expect_name("\\ud83d\\ude00", 63, 1);       /* 4 bytes each: 252 bytes */
    expect_name("\\ud83d\\ude00", 64, 0);
    expect_name("\\u0085", 1, 0);               /* C1: NEXT LINE */
    expect_name("\\u009f", 1, 0);
    expect_name("\\u00a0", 1, 1);               /* first printable after C1 */
    expect_name("\\u007f", 1, 0);
    expect_name("\\u001f", 1, 0);
}

static void test_errors_values_and_collectives(void **state)
{
    (void)state;
    /* NaN/inf cannot be written in JSON and Jansson refuses to build them;
     * a number beyond f32 range, booleans and strings are refused by us. */
    json_error_t jerr;
    assert_null(json_loads("{\"v\": NaN}", 0, &jerr));
    expect_error(ONE("{'op': 'fill', 'out': 'x', 'shape': [4], 'value': 1e39}"), 400,
                 "computations[0].ops[0].value", "finite");
    /* The largest f32 as it is usually written rounds to FLT_MAX: taken;
     * past FLT_MAX + half its last place it rounds to infinity: not. */
    job_plan_free(compile_ok(ONE("{'op': 'fill', 'out': 'x', 'shape': [4],"
                                 " 'value': -3.4028235e38}")));
    expect_error(ONE("{'op': 'fill', 'out': 'x', 'shape': [4], 'value': 3.4028236e38}"), 400,
                 "computations[0].ops[0].value", "finite");
    expect_error(ONE("{'op': 'fill', 'out': 'x', 'shape': [4], 'value': true}"), 400,
                 "computations[0].ops[0].value", NULL);
    expect_error(ONE(F4 ", {'op': 'scale', 'out': 'y', 'args': ['x'], 'factor': 'NaN'}"), 400,
                 OP1 "factor", NULL);
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'], 'shift': 1.5}"), 400,
                 OP1 "shift", NULL);
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'], 'shift': false}"),
                 400, OP1 "shift", NULL);
    /* pairs: instead of shift, [source, target] positions of the group (4) */
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x']}"), 400, OP1 "shift",
                 "neither");
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'], 'shift': 1,"
                     " 'pairs': [[0, 1]]}"), 400, OP1 "pairs", "both");
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'], 'pairs': []}"), 400,
                 OP1 "pairs", NULL);
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'], 'pairs': [[0, 4]]}"),
                 400, OP1 "pairs", "0..3");
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'], 'pairs': [[0]]}"),
                 400, OP1 "pairs", NULL);
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'],"
                     " 'pairs': [[0, 1], [0, 2]]}"), 400, OP1 "pairs", "at most once");
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'],"
                     " 'pairs': [[0, 1], [2, 1]]}"), 400, OP1 "pairs", "at most once");
    expect_error(ONE(F4 ", {'op': 'ppermute', 'out': 'y', 'args': ['x'], 'mesh_axes': [0],"
                     " 'pairs': [[0, 1], [1, 2]]}"), 400, OP1 "pairs", NULL);   /* group of 2 */
    expect_error(ONE("{'op': 'compute', 'out': 'c', 'us': 10000001}"), 400,
                 "computations[0].ops[0].us", NULL);
    expect_error(ONE("{'op': 'shard_index', 'out': 'i'}, " F4 ", "
                     "{'op': 'mul', 'out': 'y', 'args': ['x', 'i']}, "
                     "{'op': 'all_reduce', 'out': 'z', 'args': ['y'], 'reduce': 'avg'}"), 400,
                 "computations[0].ops[3].reduce",
                 "computation 'produce' op 3 (all_reduce): reduce must be one of sum, max, min");
    expect_error(ONE(F4 ", {'op': 'all_reduce', 'out': 'y', 'args': ['x'], 'reduce': 'sum', "
                     "'mesh_axes': [0, 0]}"), 400, OP1 "mesh_axes", "distinct");
    expect_error(ONE(F4 ", {'op': 'all_reduce', 'out': 'y', 'args': ['x'], 'reduce': 'sum', "
                     "'mesh_axes': [2]}"), 400, OP1 "mesh_axes", NULL);
    expect_error(ONE(F4 ", {'op': 'all_reduce', 'out': 'y', 'args': ['x'], 'reduce': 'sum', "
                     "'mesh_axes': []}"), 400, OP1 "mesh_axes", NULL);
    /* [3] over 4 shards does not divide; over the 2 of one mesh axis neither. */
    expect_error(ONE("{'op': 'iota', 'out': 'x', 'shape': [6]}, {'op': 'reduce_scatter', "
                     "'out': 'y', 'args': ['x'], 'axis': 0, 'reduce': 'sum'}"), 400,
                 OP1 "axis", "not divisible by the group size 4");
    expect_error(ONE("{'op': 'iota', 'out': 'x', 'shape': [6]}, {'op': 'shard_slice', "
                     "'out': 'y', 'args': ['x'], 'axis': 0, 'mesh_axes': [0, 1]}"), 400,
                 OP1 "axis", "not divisible by the group size 4");
    expect_error(ONE("{'op': 'iota', 'out': 'x', 'shape': [3, 4]}, {'op': 'all_to_all', "
                     "'out': 'y', 'args': ['x'], 'split_axis': 0, 'concat_axis': 1, "
                     "'mesh_axes': [1]}"), 400, OP1 "split_axis", "group size 2");
    expect_error(ONE(F4 ", {'op': 'all_to_all', 'out': 'y', 'args': ['x'], 'split_axis': 0}"),
                 400, OP1 "concat_axis", "missing");
    expect_error(ONE(F4 "], 'outputs': ['x', 'q'"), 400, "computations[0].outputs[1]", NULL);
    expect_error(ONE(F4 "], 'outputs': ['x', 'x'"), 400, "computations[0].outputs[1]",
                 "twice");
}

#define TWO(sa, sb, extra_a, extra_b) \
    "{'slices': {'a': {'shape': " sa "}, 'b': {'shape': " sb "}}, 'computations': [" \
    " {'name': 'p', 'slice': 'a', 'ops': [" F4 extra_a "], 'outputs': ['x']}," \
    " {'name': 'q', 'slice': 'b', 'ops': [{'op': 'input', 'out': 'x', 'from': 'p.x'}" \
    extra_b "], 'outputs': ['x']}]}"

static void test_errors_edges(void **state)
{
    (void)state;
    job_plan_t *plan;
    plan = compile_ok(TWO("[2, 2]", "[4]", "", ""));
    job_plan_free(plan);
    expect_error(TWO("[2, 2]", "[2]", "", ""), 400, "computations[1].ops[0].from",
                 "4 shards");
    expect_error("{'slices': {'a': {'shape': [2]}}, 'computations': ["
                 " {'name': 'p', 'slice': 'a', 'ops': [" F4 "], 'outputs': ['x']},"
                 " {'name': 'q', 'slice': 'a', 'ops': [{'op': 'input', 'out': 'y', "
                 "'from': 'p.zz'}]}]}", 400, "computations[1].ops[0].from", "no output 'zz'");
    expect_error("{'slices': {'a': {'shape': [2]}}, 'computations': ["
                 " {'name': 'p', 'slice': 'a', 'ops': [" F4 "]},"
                 " {'name': 'q', 'slice': 'a', 'ops': [{'op': 'input', 'out': 'y', "
                 "'from': 'p.x'}]}]}", 400, "computations[1].ops[0].from", "no output 'x'");
    expect_error("{'slices': {'a': {'shape': [2]}}, 'computations': ["
                 " {'name': 'q', 'slice': 'a', 'ops': [{'op': 'input', 'out': 'y', "
                 "'from': 'r.x'}]}]}", 400, "computations[0].ops[0].from", "'r'");
    expect_error("{'slices': {'a': {'shape': [2]}}, 'computations': ["
                 " {'name': 'q', 'slice': 'a', 'ops': [" F4 ", {'op': 'input', 'out': 'y', "
                 "'from': 'q.x'}], 'outputs': ['x']}]}", 400, "computations[0].ops[1].from",
                 "itself");
    expect_error("{'slices': {'a': {'shape': [2]}}, 'computations': ["
                 " {'name': 'q', 'slice': 'a', 'ops': [{'op': 'input', 'out': 'y', "
                 "'from': 'nodot'}]}]}", 400, "computations[0].ops[0].from", NULL);
    /* p <- q <- r <- q: the cycle is q/r (p only hangs off it). */
    expect_error("{'slices': {'a': {'shape': [2]}}, 'computations': ["
                 " {'name': 'p', 'slice': 'a', 'ops': [{'op': 'input', 'out': 'x', "
                 "'from': 'q.x'}], 'outputs': ['x']},"
                 " {'name': 'q', 'slice': 'a', 'ops': [{'op': 'input', 'out': 'x', "
                 "'from': 'r.x'}], 'outputs': ['x']},"
                 " {'name': 'r', 'slice': 'a', 'ops': [{'op': 'input', 'out': 'x', "
                 "'from': 'q.x'}], 'outputs': ['x']}]}", 400, "computations[1].ops[0].from",
                 "cycle");
}

#define SL(slices) \
    "{'slices': " slices ", 'computations': [{'name': 'c', 'slice': 'a', 'ops': [" F4 "]}]}"

/* A job of n slices s0..s{n-1} of shape [1] (its computation on s0):
 * compiled, 0 or the status. */
static int compile_slices(int n, err_t *e)
{
    char doc[8192] = "{'slices': {";
    for (int i = 0; i < n; i++)
        snprintf(doc + strlen(doc), sizeof doc - strlen(doc), "%s's%d': {'shape': [1]}",
                 i ? ", " : "", i);
    snprintf(doc + strlen(doc), sizeof doc - strlen(doc),
             "}, 'computations': [{'name': 'c', 'slice': 's0', 'ops': [" F4 "]}]}");
    job_plan_t *plan;
    int rc = compile_text(doc, &plan, e);
    job_plan_free(plan);
    return rc;
}

/* A job has 1 to 64 slices (SLICES_MAX). */
static void expect_slice_count(void)
{
    err_t e;
    assert_int_equal(compile_slices(64, &e), 0);
    assert_int_equal(compile_slices(65, &e), 400);
    assert_string_equal(e.field, "slices");
}

/* A name whose JSON string holds a NUL (jansson builds one through
 * json_stringn; the router's parser refuses \u0000, other callers may
 * not) is refused: the name stored would be cut at the NUL. */
static void expect_name_nul(void)
{
    json_t *doc = doc_load(SL("{'a': {'shape': [2]}}"));
    json_object_set_new(doc, "name", json_stringn("a\0b", 3));
    job_plan_t *plan = NULL;
    err_t e;
    memset(&e, 0, sizeof e);
    int rc = compiler_job(doc, islands, 2, &plan, &e);
    json_decref(doc);
    job_plan_free(plan);
    assert_int_equal(rc, 400);
    assert_string_equal(e.field, "name");
}

static void test_errors_slices_and_top(void **state)
{
    (void)state;
    expect_error(SL("{'a': {'shape': [2], 'island': 'north'}}"), 400, "slices.a.island",
                 "unknown island 'north'");
    expect_error(SL("{'a': {'shape': [8, 8]}}"), 422, "slices.a.shape", "fits no island");
    /* [4,4] fits west but not east, the island it names. */
    expect_error(SL("{'a': {'shape': [4, 4], 'island': 'east'}}"), 422, "slices.a.shape",
                 "not its island");
    expect_error(SL("{'a': {'shape': [2, 2, 2]}}"), 422, "slices.a.shape", NULL);
    expect_error(SL("{'a': {'shape': [2], 'isle': 'west'}}"), 400, "slices.a.isle", NULL);
    expect_error(SL("{'a': {'shape': [1, 1, 1, 1]}}"), 400, "slices.a.shape", NULL);
    expect_error(SL("{'a': {'shape': []}}"), 400, "slices.a.shape", NULL);
    expect_error(SL("{'a': {'shape': [4097]}}"), 400, "slices.a.shape", NULL);
    expect_error(SL("{'a': {}}"), 400, "slices.a.shape", NULL);
    expect_error(SL("{'a': {'shape': [2]}, 'b c': {'shape': [2]}}"), 400, "slices.b c", NULL);
    expect_error(SL("{}"), 400, "slices", NULL);
    /* axes name each dim of the shape: not fewer, not more. */
    expect_error(SL("{'a': {'shape': [2, 2], 'axes': ['x']}}"), 400, "slices.a.axes",
                 "each of its 2 dims");
    expect_error(SL("{'a': {'shape': [2], 'axes': ['x', 'y']}}"), 400, "slices.a.axes",
                 "each of its 1 dims");
    expect_slice_count();
    expect_error(SL("[]"), 400, "slices", NULL);
    expect_error("{'computations': []}", 400, "slices", "missing");
    expect_error("[1]", 400, "", NULL);
    expect_error("{'priority': 1.5, 'slices': {}, 'computations': []}", 400, "priority", NULL);
    expect_error("{'priority': 1001, 'slices': {}, 'computations': []}", 400, "priority", NULL);
    expect_error("{'priority': true, 'slices': {}, 'computations': []}", 400, "priority", NULL);
    expect_error("{'max_retries': 11, 'slices': {}, 'computations': []}", 400, "max_retries",
                 NULL);
    expect_error("{'name': 7, 'slices': {}, 'computations': []}", 400, "name", NULL);
    expect_name_limits();
    expect_name_nul();

    /* Without an island list (NULL) the island checks are skipped. */
    json_t *doc = doc_load(SL("{'a': {'shape': [64, 64], 'island': 'anywhere'}}"));
    job_plan_t *plan = NULL;
    err_t e;
    assert_int_equal(compiler_job(doc, NULL, 0, &plan, &e), 0);
    assert_string_equal(plan->slices[0].island, "anywhere");
    job_plan_free(plan);
    json_decref(doc);
    /* With an empty cluster every slice is 422. */
    doc = doc_load(SL("{'a': {'shape': [1]}}"));
    assert_int_equal(compiler_job(doc, islands, 0, &plan, &e), 422);
    json_decref(doc);
}

static int lookup_input(void *ctx, const char *from, shape_t *shape)
{
    int *calls = ctx;
    (*calls)++;
    if (strcmp(from, "produce.z") != 0)
        return -1;
    memset(shape, 0, sizeof *shape);
    shape->rank = 2;
    shape->dim[0] = 2;
    shape->dim[1] = 3;
    return 0;
}

/* The worker's path: one computation, slice shape and input shapes given. */
static void test_compiler_comp(void **state)
{
    (void)state;
    shape_t slice = {2, {2, 4, 0, 0}};
    int calls = 0;
    comp_t *c = NULL;
    err_t e;
    json_t *cj = doc_load(
        "{'name': 'consume', 'slice': 'whatever', 'ops': ["
        " {'op': 'input', 'out': 'z', 'from': 'produce.z'},"
        " {'op': 'all_gather', 'out': 'g', 'args': ['z'], 'axis': 1, 'mesh_axes': [0]},"
        " {'op': 'reduce_sum', 'out': 's', 'args': ['g'], 'axis': 1}], 'outputs': ['s']}");
    assert_int_equal(compiler_comp(cj, &slice, lookup_input, &calls, &c, &e), 0);
    assert_int_equal(calls, 1);
    assert_int_equal(c->slice, -1);
    assert_int_equal(c->nshards, 8);
    assert_int_equal(c->ninputs, 1);
    assert_int_equal(c->inputs[0].producer, -1);
    assert_shape(&c->vshapes[1], 2, 2, 6, 0);
    assert_shape(&c->vshapes[2], 1, 2, 0, 0);
    comp_free(c);
    json_decref(cj);

    cj = doc_load("{'name': 'c', 'slice': 's', 'ops': [{'op': 'input', 'out': 'z', "
                  "'from': 'other.z'}]}");
    c = NULL;
    assert_int_equal(compiler_comp(cj, &slice, lookup_input, &calls, &c, &e), 400);
    assert_string_equal(e.field, "ops[0].from");
    assert_null(c);
    json_decref(cj);

    cj = doc_load("{'name': 'c', 'slice': 3, 'ops': [" F4 "]}");
    assert_int_equal(compiler_comp(cj, &slice, NULL, NULL, &c, &e), 400);
    assert_string_equal(e.field, "slice");
    json_decref(cj);
}

/* The worker's path refuses what compiler_job would: a slice dim past
 * SLICE_DIM_MAX, a global computation (partitioned by compiler_job, never
 * compiled per shard), an input whose producer's shape is invalid, in a
 * run computation's lowered form any op but its inputs and outputs, and a
 * cross-mesh edge that does not fit its input or its slice. */
/* Every input has the shape ctx points to. */
static int lookup_given(void *ctx, const char *from, shape_t *shape)
{
    (void)from;
    *shape = *(const shape_t *)ctx;
    return 0;
}

/* compiler_comp() on text must answer 400 at field; input: every input's
 * shape (NULL: no input resolves). */
static void expect_comp_error(const char *text, const shape_t *slice, const shape_t *input,
                              const char *field, const char *detail_part)
{
    json_t *cj = doc_load(text);
    comp_t *c = NULL;
    err_t e = {0};
    int rc = compiler_comp(cj, slice, input ? lookup_given : NULL, (void *)input, &c, &e);
    if (rc != 400 || strcmp(e.field, field) != 0 || !strstr(e.detail, detail_part))
        fail_msg("want 400 at '%s' (%s), got %d at '%s': %s", field, detail_part, rc, e.field,
                 e.detail);
    assert_null(c);
    json_decref(cj);
}

static void test_compiler_comp_refusals(void **state)
{
    (void)state;
    shape_t slice = {1, {2, 0, 0, 0}}, wide = {1, {SLICE_DIM_MAX + 1, 0, 0, 0}};
    shape_t invalid = {1, {0, 0, 0, 0}}, three = {1, {3, 0, 0, 0}}, four = {1, {4, 0, 0, 0}};
    expect_comp_error("{'name': 'c', 'slice': 's', 'ops': [" F4 "]}", &wide, NULL,
                      "slice_shape", "1..4096");
    expect_comp_error("{'name': 'c', 'slice': 's', 'global': true, 'ops': [" F4 "]}", &slice,
                      NULL, "global", "per-shard");
    expect_comp_error("{'name': 'c', 'slice': 's', 'ops': [{'op': 'input', 'out': 'z',"
                      " 'from': 'p.z'}]}", &slice, &invalid, "ops[0].from",
                      "invalid shape");
    expect_comp_error("{'name': 'r', 'slice': 's', 'run': {'command': ['true']}, 'ops': ["
                      F4 "], 'outputs': ['x']}", &slice, NULL, "ops[0].op",
                      "only its inputs and outputs");

    /* A cross-mesh edge (gspmd.h): [4] split over a mesh of 2 gives the
     * producer's pieces of [2], gathered whole here on a slice of 2. The
     * pieces must be what the input holds, the mesh this slice. */
    static const char reshard[] =
        "{'name': 'c', 'slice': 's', 'ops': [{'op': 'input', 'out': 'z', 'from': 'p.z',"
        " 'reshard': {'global': [4], 'from_mesh': [2], 'from': [[0]], 'to_mesh': [2],"
        " 'to': [[]]}}], 'outputs': ['z']}";
    json_t *cj = doc_load(reshard);
    comp_t *c = NULL;
    err_t e = {0};
    assert_int_equal(compiler_comp(cj, &slice, lookup_given, &slice, &c, &e), 0);
    assert_shape(&c->vshapes[0], 1, 4, 0, 0);
    comp_free(c);
    json_decref(cj);
    expect_comp_error(reshard, &four, &slice, "ops[0].reshard", "does not match");
    expect_comp_error(reshard, &slice, &three, "ops[0].reshard", "does not match");
}

/* Run computations (DESIGN Part F): ops or run, never both; never global;
 * "inputs" only with run; run.shapes names its outputs only. And at most
 * JOB_MAX_OPS ops in a computation. */
#define RUN1(fields) \
    "{'slices': {'s': {'shape': [2]}}, 'computations': [{'name': 'r', 'slice': 's'" fields "}]}"

static void test_errors_run_and_ops(void **state)
{
    (void)state;
    expect_error(RUN1(", 'global': true, 'run': {'command': ['true']}"), 400,
                 "computations[0].global", "cannot be global");
    expect_error(RUN1(", 'run': {'command': ['true']}, 'ops': [" F4 "]"), 400,
                 "computations[0].run", "not both");
    expect_error(RUN1(", 'inputs': {'a': 'p.x'}, 'ops': [" F4 "]"), 400,
                 "computations[0].inputs", "belong to run");
    expect_error(RUN1(", 'outputs': ['y'], 'run': {'command': ['true'], 'shapes': {'z': [3]}}"),
                 400, "computations[0].run.shapes.z", "not one of its outputs");

    size_t cap = 64 * (JOB_MAX_OPS + 1) + 256, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    len += (size_t)snprintf(text + len, cap - len, "%s", "{'slices': {'s': {'shape': [2]}},"
                            " 'computations': [{'name': 'c', 'slice': 's', 'ops': [");
    for (int j = 0; j <= JOB_MAX_OPS; j++)
        len += (size_t)snprintf(text + len, cap - len, "%s{'op': 'fill', 'out': 'x%d',"
                                " 'shape': [1], 'value': 1}", j ? ", " : "", j);
    snprintf(text + len, cap - len, "]}]}");
    expect_error(text, 400, "computations[0].ops", "1 to 4096 ops");
    free(text);
}

static void test_slice_fits_and_mesh_parse(void **state)
{
    (void)state;
    shape_t isl = {2, {4, 2, 0, 0}}, s;
    assert_int_equal(mesh_shape_parse("4", &s), 0);
    assert_true(compiler_slice_fits(&s, &isl));         /* as [4,1] */
    assert_int_equal(mesh_shape_parse("2", &s), 0);
    assert_true(compiler_slice_fits(&s, &isl));
    assert_int_equal(mesh_shape_parse("5", &s), 0);
    assert_false(compiler_slice_fits(&s, &isl));
    assert_int_equal(mesh_shape_parse("2x4", &s), 0);
    assert_false(compiler_slice_fits(&s, &isl));        /* axes keep their order */
    assert_int_equal(mesh_shape_parse("4x2", &s), 0);
    assert_true(compiler_slice_fits(&s, &isl));
    assert_int_equal(mesh_shape_parse("1x1x1", &s), 0);
    assert_false(compiler_slice_fits(&s, &isl));        /* higher rank than the island */
    shape_t cube = {3, {2, 3, 4, 0}};
    assert_int_equal(mesh_shape_parse("2x4", &s), 0);
    assert_true(compiler_slice_fits(&s, &cube));        /* as [2,1,4] */
    assert_int_equal(mesh_shape_parse("3x4", &s), 0);
    assert_true(compiler_slice_fits(&s, &cube));        /* as [1,3,4] */
    assert_int_equal(mesh_shape_parse("4x3", &s), 0);
    assert_false(compiler_slice_fits(&s, &cube));

    assert_int_equal(mesh_shape_parse("2x2x2", &s), 0);
    assert_shape(&s, 3, 2, 2, 2);
    const char *bad[] = {"", "x4", "4x", "4xx4", "0", "4x0", "1x2x3x4", "-4", "4 x4", "a",
                         "99999999999999999999", "4096x4097"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (mesh_shape_parse(bad[i], &s) != -1)
            fail_msg("'%s' parsed", bad[i]);
    }
}

static void test_opcode_names(void **state)
{
    (void)state;
    assert_int_equal(opcode_from_name("all_reduce"), OP_ALL_REDUCE);
    assert_int_equal(opcode_from_name("reduce_sum"), OP_REDUCE_SUM);
    assert_int_equal(opcode_from_name("Add"), -1);
    for (int i = 0; i < OP__COUNT; i++)
        assert_int_equal(opcode_from_name(opcode_name((opcode_t)i)), i);
    int ncoll = 0;
    for (int i = 0; i < OP__COUNT; i++)
        ncoll += opcode_is_collective((opcode_t)i) != 0;
    assert_int_equal(ncoll, 5);
    assert_true(opcode_is_collective(OP_PPERMUTE));
    assert_false(opcode_is_collective(OP_INPUT));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_design_example),
        cmocka_unit_test(test_topo_order),
        cmocka_unit_test(test_shapes_and_collectives),
        cmocka_unit_test(test_errors_fields),
        cmocka_unit_test(test_errors_args_and_shapes),
        cmocka_unit_test(test_new_ops),
        cmocka_unit_test(test_errors_values_and_collectives),
        cmocka_unit_test(test_errors_edges),
        cmocka_unit_test(test_errors_slices_and_top),
        cmocka_unit_test(test_compiler_comp),
        cmocka_unit_test(test_compiler_comp_refusals),
        cmocka_unit_test(test_errors_run_and_ops),
        cmocka_unit_test(test_slice_fits_and_mesh_parse),
        cmocka_unit_test(test_opcode_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
