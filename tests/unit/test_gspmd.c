/* test_gspmd.c - the GSPMD partitioner (DESIGN.md Part C), in-process.
 *
 * Every check runs a job document through compiler_job(), then evaluates
 * it twice: the global program as written, on one device (the reference),
 * and the partitioned per-shard program on every shard of its mesh, with
 * collectives played by coll_piece()/coll_combine() as a worker's data
 * plane would. Each shard's piece of every output must equal its part of
 * the reference (rtol 1e-4), wherever the partitioner put it.
 *
 *  - property test: 1,000 random global programs (random ops, shapes,
 *    meshes 1-D to 3-D, random annotations); a failure prints its document
 *    (keep it below as a regression case);
 *  - quality: the Megatron MLP compiles to exactly one collective, an
 *    all_reduce over `model`; a data-parallel gradient to one all_reduce;
 *  - errors name the op and field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"
#include "compiler.h"
#include "gspmd.h"
#include "kernels.h"

#define MAXSH 64

/* ------------------------------------------------------------------ */
/* Evaluation. vals[shard][value] for one computation. */

typedef struct evalc {
    int nshards;
    tensor_t ***v;              /* [shard][value] */
    const comp_t *c;
} evalc_t;

static void evalc_free(evalc_t *e)
{
    for (int s = 0; e->v && s < e->nshards; s++) {
        for (int i = 0; e->v[s] && i < e->c->nvalues; i++)
            tensor_free(e->v[s][i]);
        free(e->v[s]);
    }
    free(e->v);
}

static int value_slot(const comp_t *c, const char *name)
{
    for (int v = 0; v < c->nvalues; v++)
        if (strcmp(c->vnames[v], name) == 0)
            return v;
    return -1;
}

/* One collective on every shard at once. */
static int sim_coll(const comp_t *c, const op_t *op, tensor_t ***v)
{
    int members[MAXSH], n, pos;
    for (int s = 0; s < c->nshards; s++) {
        const tensor_t *pieces[MAXSH];
        tensor_t *own[MAXSH] = {0};
        if (coll_group(&c->slice_shape, op->mesh_axes, s, members, &n, &pos) != 0)
            return -1;
        if (op->code == OP_PPERMUTE) {  /* one piece, from the source (none: zeros) */
            int src = coll_ppermute_source(op, n, pos);
            pieces[0] = src >= 0 ? v[members[src]][op->arg[0]] : NULL;
            if (coll_combine(op, pieces, n, pos, &v[s][op->out]) != 0)
                return -1;
            continue;
        }
        for (int q = 0; q < n; q++) {
            own[q] = coll_piece(op, v[members[q]][op->arg[0]], n, q, pos);
            pieces[q] = own[q];
        }
        int rc = coll_combine(op, pieces, n, pos, &v[s][op->out]);
        for (int q = 0; q < n; q++)
            tensor_free(own[q]);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Consumer shard c's piece of a cross-mesh edge, assembled from the
 * producer shards' values the edge names (what two workers do). */
static tensor_t *sim_reshard(const gspmd_edge_t *e, const evalc_t *prod, int pv, int c,
                             const shape_t *shape)
{
    gspmd_mesh_t pm = {.shape = e->from_mesh}, cm = {.shape = e->to_mesh};
    int64_t po[TENSOR_MAX_RANK], co[TENSOR_MAX_RANK], lo[TENSOR_MAX_RANK], hi[TENSOR_MAX_RANK];
    int64_t sat[TENSOR_MAX_RANK], dat[TENSOR_MAX_RANK], ext[TENSOR_MAX_RANK];
    tensor_t *out = tensor_new(shape);
    int64_t covered = 0;
    gspmd_shard_offsets(&e->to, &cm, &e->global, c, co);
    for (int p = 0; out && p < prod->nshards; p++) {
        if (!gspmd_edge_piece(e, p, c, lo, hi))
            continue;
        gspmd_shard_offsets(&e->from, &pm, &e->global, p, po);
        int64_t n = 1;
        for (int d = 0; d < e->global.rank; d++) {
            ext[d] = hi[d] - lo[d];
            sat[d] = lo[d] - po[d];
            dat[d] = lo[d] - co[d];
            n *= ext[d];
        }
        const tensor_t *src = prod->v[p][pv];
        gspmd_box_copy(src->data, &src->shape, sat, out->data, &out->shape, dat, ext);
        covered += n;
    }
    /* Every element arrives exactly once: the pieces tile the box. */
    if (out && covered != shape_numel(shape)) {
        tensor_free(out);
        return NULL;
    }
    return out;
}

/* Runs comp c on nshards shards; inputs come from the producers' results
 * (same shard, same value name) in done[]. */
static int sim_comp(const comp_t *c, int nshards, const evalc_t *done, evalc_t *out)
{
    out->c = c;
    out->nshards = nshards;
    out->v = calloc((size_t)nshards, sizeof *out->v);
    for (int s = 0; s < nshards; s++)
        out->v[s] = calloc((size_t)c->nvalues, sizeof **out->v);
    for (int j = 0; j < c->nops; j++) {
        const op_t *op = &c->ops[j];
        if (opcode_is_collective(op->code)) {
            if (sim_coll(c, op, out->v) != 0)
                return -1;
            continue;
        }
        for (int s = 0; s < nshards; s++) {
            if (op->code == OP_INPUT) {
                const comp_input_t *in = &c->inputs[op->input];
                const evalc_t *p = &done[in->producer];
                int pv = value_slot(p->c, in->value);
                out->v[s][j] = in->edge ? sim_reshard(in->edge, p, pv, s, &op->shape)
                                        : tensor_clone(p->v[s][pv]);
                if (!out->v[s][j])
                    return -1;
                continue;
            }
            const tensor_t *args[2] = {NULL, NULL};
            for (int k = 0; k < op->nargs; k++)
                args[k] = out->v[s][op->arg[k]];
            if (kernel_run(op, args, s, &out->v[s][j]) != 0)
                return -1;
        }
    }
    return 0;
}

static int64_t flat_index(const shape_t *gs, const int64_t *idx)
{
    int64_t f = 0;
    for (int d = 0; d < gs->rank; d++)
        f = f * gs->dim[d] + idx[d];
    return f;
}

/* Compares every shard's piece of global value gv with the reference. */
static int check_value(const comp_t *lc, const evalc_t *loc, const evalc_t *ref, int gv,
                       const gspmd_mesh_t *mesh, char *why, size_t whylen)
{
    const gspmd_t *g = lc->gspmd;
    const shape_t *gs = &g->global->vshapes[gv];
    const tensor_t *R = ref->v[0][gv];
    int lv = value_slot(lc, g->global->vnames[gv]);
    for (int s = 0; s < loc->nshards; s++) {
        const tensor_t *T = loc->v[s][lv];
        int64_t off[TENSOR_MAX_RANK], idx[TENSOR_MAX_RANK];
        shape_t ls;
        gspmd_local_shape(gs, &g->vshd[gv], mesh, &ls);
        gspmd_shard_offsets(&g->vshd[gv], mesh, gs, s, off);
        if (!shape_equal(&T->shape, &ls)) {
            snprintf(why, whylen, "value %s shard %d: local shape differs", lc->vnames[lv], s);
            return -1;
        }
        for (int64_t e = 0; e < shape_numel(&ls); e++) {
            int64_t r = e;
            for (int d = ls.rank - 1; d >= 0; d--) {
                idx[d] = off[d] + r % ls.dim[d];
                r /= ls.dim[d];
            }
            float a = T->data[e], b = R->data[flat_index(gs, idx)];
            if (!(fabsf(a - b) <= 1e-4f * fabsf(b) + 1e-4f)) {
                snprintf(why, whylen, "value %s shard %d element %lld: %g, reference %g",
                         lc->vnames[lv], s, (long long)e, (double)a, (double)b);
                return -1;
            }
        }
    }
    return 0;
}

/* Partitions doc, runs both ways, compares every value of every global
 * computation (not only outputs: a wrong intermediate is a bug too).
 * Returns 0, or -1 with why filled. */
static int run_doc(json_t *doc, char *why, size_t whylen, job_plan_t **keep)
{
    job_plan_t *plan = NULL;
    err_t e = {0};
    int rc = compiler_job(doc, NULL, 0, &plan, &e);
    if (rc != 0) {
        snprintf(why, whylen, "compile %d at %s: %s", rc, e.field, e.detail);
        return -1;
    }
    evalc_t *loc = calloc((size_t)plan->ncomps, sizeof *loc);
    evalc_t *ref = calloc((size_t)plan->ncomps, sizeof *ref);
    rc = 0;
    for (int t = 0; t < plan->ncomps && !rc; t++) {
        const comp_t *c = &plan->comps[plan->topo[t]];
        int i = plan->topo[t];
        const job_slice_t *sl = &plan->slices[c->slice];
        gspmd_mesh_t mesh = {.shape = sl->shape};
        memcpy(mesh.axes, sl->axes, sizeof mesh.axes);
        if (sim_comp(c, c->nshards, loc, &loc[i]) != 0 ||
            sim_comp(c->gspmd->global, 1, ref, &ref[i]) != 0) {
            snprintf(why, whylen, "evaluation of '%s' failed", c->name);
            rc = -1;
        }
        for (int v = 0; !rc && v < c->gspmd->global->nvalues; v++)
            rc = check_value(c, &loc[i], &ref[i], v, &mesh, why, whylen);
    }
    for (int i = 0; i < plan->ncomps; i++) {
        evalc_free(&loc[i]);
        evalc_free(&ref[i]);
    }
    free(loc);
    free(ref);
    if (keep && !rc)
        *keep = plan;
    else
        job_plan_free(plan);
    return rc;
}

static json_t *parse(const char *text)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j)
        fail_msg("bad test JSON: %s", je.text);
    return j;
}

/* Partitions and checks a document (JSON text); fails the test unless
 * every value is right. Returns the plan (caller frees). */
static job_plan_t *partition_ok(const char *text)
{
    json_t *doc = parse(text);
    char why[1024] = "";
    job_plan_t *plan = NULL;
    int rc = run_doc(doc, why, sizeof why, &plan);
    json_decref(doc);
    if (rc != 0)
        fail_msg("%s", why);
    return plan;
}

/* Counts lowered collectives of comp i by op name ("" = any). */
static int count_coll(const job_plan_t *plan, int i, const char *name)
{
    const comp_t *c = &plan->comps[i];
    int n = 0;
    for (int j = 0; j < c->nops; j++)
        if (opcode_is_collective(c->ops[j].code) &&
            (!name[0] || strcmp(opcode_name(c->ops[j].code), name) == 0))
            n++;
    return n;
}

/* ------------------------------------------------------------------ */
/* Quality: what GSPMD is judged by. */

static void test_megatron_one_allreduce(void **state)
{
    (void)state;
    job_plan_t *plan = partition_ok(
        "{\"slices\": {\"m\": {\"shape\": [2, 4], \"axes\": [\"data\", \"model\"]}},"
        " \"computations\": [{\"name\": \"mlp\", \"slice\": \"m\", \"global\": true, \"ops\": ["
        "  {\"op\": \"iota\", \"out\": \"xi\", \"shape\": [8, 16], \"sharding\": [\"data\", null]},"
        "  {\"op\": \"scale\", \"out\": \"x\", \"args\": [\"xi\"], \"factor\": 0.01},"
        "  {\"op\": \"fill\", \"out\": \"w1\", \"shape\": [16, 32], \"value\": 0.05,"
        "   \"sharding\": [null, \"model\"]},"
        "  {\"op\": \"fill\", \"out\": \"w2\", \"shape\": [32, 16], \"value\": -0.03,"
        "   \"sharding\": [\"model\", null]},"
        "  {\"op\": \"einsum\", \"out\": \"h\", \"args\": [\"x\", \"w1\"], \"spec\": \"bd,dh->bh\"},"
        "  {\"op\": \"relu\", \"out\": \"r\", \"args\": [\"h\"]},"
        "  {\"op\": \"einsum\", \"out\": \"y\", \"args\": [\"r\", \"w2\"], \"spec\": \"bh,hd->bd\","
        "   \"sharding\": [\"data\", null]}],"
        " \"outputs\": [\"y\"]}]}");
    assert_int_equal(count_coll(plan, 0, ""), 1);
    assert_int_equal(count_coll(plan, 0, "all_reduce"), 1);
    const comp_t *c = &plan->comps[0];
    for (int j = 0; j < c->nops; j++)
        if (c->ops[j].code == OP_ALL_REDUCE)
            assert_int_equal(c->ops[j].mesh_axes, 1u << 1);     /* model only */
    assert_int_equal(c->gspmd->ncoll, 1);
    job_plan_free(plan);
}

static void test_data_parallel_grad(void **state)
{
    (void)state;
    job_plan_t *plan = partition_ok(
        "{\"slices\": {\"m\": {\"shape\": [4], \"axes\": [\"data\"]}},"
        " \"computations\": [{\"name\": \"g\", \"slice\": \"m\", \"global\": true, \"ops\": ["
        "  {\"op\": \"iota\", \"out\": \"xi\", \"shape\": [16, 8], \"sharding\": [\"data\", null]},"
        "  {\"op\": \"scale\", \"out\": \"x\", \"args\": [\"xi\"], \"factor\": 0.001},"
        "  {\"op\": \"fill\", \"out\": \"dy\", \"shape\": [16, 4], \"value\": 0.5,"
        "   \"sharding\": [\"data\", null]},"
        "  {\"op\": \"einsum\", \"out\": \"grad\", \"args\": [\"x\", \"dy\"], \"spec\": \"bi,bo->io\"}],"
        " \"outputs\": [\"grad\"]}]}");
    assert_int_equal(count_coll(plan, 0, ""), 1);
    assert_int_equal(count_coll(plan, 0, "all_reduce"), 1);
    job_plan_free(plan);
}

/* A sum along a split dim wanted split on another dim ends in one
 * reduce_scatter, not all_reduce + slice. */
static void test_reduce_scatter_chosen(void **state)
{
    (void)state;
    job_plan_t *plan = partition_ok(
        "{\"slices\": {\"m\": {\"shape\": [4]}},"
        " \"computations\": [{\"name\": \"g\", \"slice\": \"m\", \"global\": true, \"ops\": ["
        "  {\"op\": \"iota\", \"out\": \"a\", \"shape\": [8, 16], \"sharding\": [null, \"x\"]},"
        "  {\"op\": \"fill\", \"out\": \"b\", \"shape\": [16, 8], \"value\": 0.25,"
        "   \"sharding\": [\"x\", null]},"
        "  {\"op\": \"matmul\", \"out\": \"c\", \"args\": [\"a\", \"b\"], \"sharding\": [\"x\", null]}],"
        " \"outputs\": [\"c\"]}]}");
    assert_int_equal(count_coll(plan, 0, ""), 1);
    assert_int_equal(count_coll(plan, 0, "reduce_scatter"), 1);
    job_plan_free(plan);
}

/* Moving a split from one dim to another is one all_to_all. */
static void test_all_to_all_reshard(void **state)
{
    (void)state;
    job_plan_t *plan = partition_ok(
        "{\"slices\": {\"m\": {\"shape\": [4]}},"
        " \"computations\": [{\"name\": \"g\", \"slice\": \"m\", \"global\": true, \"ops\": ["
        "  {\"op\": \"iota\", \"out\": \"a\", \"shape\": [8, 12], \"sharding\": [\"x\", null]},"
        "  {\"op\": \"neg\", \"out\": \"b\", \"args\": [\"a\"], \"sharding\": [null, \"x\"]}],"
        " \"outputs\": [\"b\"]}]}");
    assert_int_equal(count_coll(plan, 0, ""), 1);
    assert_int_equal(count_coll(plan, 0, "all_to_all"), 1);
    job_plan_free(plan);
}

/* A split moved to another mesh axis of the same size (or two swapped, or
 * the order of two axes on one dim turned): every shard needs exactly one
 * other shard's piece, so the reshard is one ppermute with explicit pairs
 * (a gather + slice would move the whole dim). Values checked by run_doc. */
static void test_ppermute_reshard(void **state)
{
    (void)state;
    static const char *const cases[][3] = {
        {"[2, 2]", "[\"x\", null]", "[\"y\", null]"},        /* moved to an unused axis */
        {"[2, 2]", "[\"x\", \"y\"]", "[\"y\", \"x\"]"},      /* swapped */
        {"[2, 2]", "[[\"x\", \"y\"], null]", "[[\"y\", \"x\"], null]"},   /* reordered */
        {"[2, 2, 2]", "[\"x\", \"y\"]", "[\"z\", \"x\"]"},   /* 3-D, replicas on both */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "{\"slices\": {\"m\": {\"shape\": %s}},"
                 " \"computations\": [{\"name\": \"g\", \"slice\": \"m\", \"global\": true,"
                 " \"ops\": [{\"op\": \"iota\", \"out\": \"a\", \"shape\": [8, 12],"
                 " \"sharding\": %s}, {\"op\": \"neg\", \"out\": \"b\", \"args\": [\"a\"],"
                 " \"sharding\": %s}], \"outputs\": [\"b\"]}]}",
                 cases[i][0], cases[i][1], cases[i][2]);
        job_plan_t *plan = partition_ok(text);
        if (count_coll(plan, 0, "") != 1 || count_coll(plan, 0, "ppermute") != 1) {
            job_plan_free(plan);
            fail_msg("case %zu: want exactly one collective, a ppermute", i);
        }
        job_plan_free(plan);
    }
}

/* softmax along a split axis (rank 2 and rank 1): partial max and sum,
 * each finished by one all_reduce over the split's axes; nothing gathered. */
static void test_softmax_split_axis(void **state)
{
    (void)state;
    static const char *const cases[][2] = {{"[8, 12]", "[null, \"x\"]"}, {"[12]", "[\"x\"]"}};
    for (size_t i = 0; i < 2; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "{\"slices\": {\"m\": {\"shape\": [4]}},"
                 " \"computations\": [{\"name\": \"g\", \"slice\": \"m\", \"global\": true,"
                 " \"ops\": [{\"op\": \"iota\", \"out\": \"a\", \"shape\": %s,"
                 " \"sharding\": %s}, {\"op\": \"scale\", \"out\": \"b\", \"args\": [\"a\"],"
                 " \"factor\": 0.1}, {\"op\": \"softmax\", \"out\": \"p\", \"args\": [\"b\"],"
                 " \"axis\": %d, \"sharding\": %s}], \"outputs\": [\"p\"]}]}",
                 cases[i][0], cases[i][1], i == 0 ? 1 : 0, cases[i][1]);
        job_plan_t *plan = partition_ok(text);
        int all = count_coll(plan, 0, ""), ar = count_coll(plan, 0, "all_reduce");
        job_plan_free(plan);
        if (all != 2 || ar != 2)
            fail_msg("case %zu: %d collectives (%d all_reduce), want 2 all_reduce", i, all, ar);
    }
}

/* Two global computations joined by an edge on one mesh shape: the
 * consumer gets the producer's pieces and reshards them itself. */
static void test_edge_between_globals(void **state)
{
    (void)state;
    job_plan_t *plan = partition_ok(
        "{\"slices\": {\"a\": {\"shape\": [2, 2], \"axes\": [\"p\", \"q\"]},"
        "             \"b\": {\"shape\": [2, 2], \"axes\": [\"r\", \"s\"]}},"
        " \"computations\": ["
        "  {\"name\": \"prod\", \"slice\": \"a\", \"global\": true, \"ops\": ["
        "    {\"op\": \"iota\", \"out\": \"x\", \"shape\": [4, 6], \"sharding\": [\"p\", \"q\"]}],"
        "   \"outputs\": [\"x\"]},"
        "  {\"name\": \"cons\", \"slice\": \"b\", \"global\": true, \"ops\": ["
        "    {\"op\": \"input\", \"out\": \"x\", \"from\": \"prod.x\"},"
        "    {\"op\": \"reduce_sum\", \"out\": \"s\", \"args\": [\"x\"], \"axis\": 1},"
        "    {\"op\": \"softmax\", \"out\": \"sm\", \"args\": [\"x\"], \"axis\": 1}],"
        "   \"outputs\": [\"s\", \"sm\"]}]}");
    job_plan_free(plan);
}

/* Cross-mesh edges: every pair of meshes and producer shardings below, the
 * consumer's split chosen by its own annotation; each consumer element
 * must arrive exactly once and right. */
static void test_cross_mesh_edges(void **state)
{
    (void)state;
    static const char *const pmesh[] = {"[2, 3]", "[4]", "[2, 2, 2]", "[1]"};
    static const char *const psh[] = {"[\"x\", \"y\"]", "[null, \"x\"]",
                                      "[[\"x\", \"z\"], \"y\"]", "[null, null]"};
    static const char *const cmesh[] = {"[4]", "[2, 3]", "[3, 2]", "[8]", "[2]"};
    static const char *const csh[] = {"[\"x\", null]", "[\"y\", \"x\"]", "[null, \"x\"]",
                                      "[\"x\", null]", "[null, null]"};
    char doc[2048];
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 5; b++) {
            snprintf(doc, sizeof doc,
                     "{\"slices\": {\"p\": {\"shape\": %s}, \"c\": {\"shape\": %s}},"
                     " \"computations\": ["
                     "  {\"name\": \"prod\", \"slice\": \"p\", \"global\": true, \"ops\": ["
                     "    {\"op\": \"iota\", \"out\": \"x\", \"shape\": [24, 12],"
                     "     \"sharding\": %s}], \"outputs\": [\"x\"]},"
                     "  {\"name\": \"cons\", \"slice\": \"c\", \"global\": true, \"ops\": ["
                     "    {\"op\": \"input\", \"out\": \"x\", \"from\": \"prod.x\"},"
                     "    {\"op\": \"neg\", \"out\": \"y\", \"args\": [\"x\"],"
                     "     \"sharding\": %s}], \"outputs\": [\"y\"]}]}",
                     pmesh[a], cmesh[b], psh[a], csh[b]);
            json_t *j = parse(doc);
            char why[1024] = "";
            if (run_doc(j, why, sizeof why, NULL) != 0)
                fail_msg("mesh %s -> %s: %s", pmesh[a], cmesh[b], why);
            json_decref(j);
        }
}

/* examples/gspmd: the transformer block partitions to Megatron's two
 * all_reduces over `model` (attention output, MLP output) and nothing else;
 * the MLP training chain computes the same values partitioned. */
static json_t *load_example(const char *name)
{
    char path[512];
    json_error_t je;
    snprintf(path, sizeof path, "%s/examples/gspmd/%s", ATOLL_SOURCE_DIR, name);
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc)
        fail_msg("%s: %s", path, je.text);
    return doc;
}

static void test_examples(void **state)
{
    (void)state;
    char why[1024] = "";
    job_plan_t *plan = NULL;
    json_t *doc = load_example("transformer_block.json");
    int rc = run_doc(doc, why, sizeof why, &plan);
    json_decref(doc);
    if (rc != 0)
        fail_msg("transformer block: %s", why);
    assert_int_equal(count_coll(plan, 0, ""), 2);
    assert_int_equal(count_coll(plan, 0, "all_reduce"), 2);
    const comp_t *c = &plan->comps[0];
    for (int j = 0; j < c->nops; j++)
        if (c->ops[j].code == OP_ALL_REDUCE)
            assert_int_equal(c->ops[j].mesh_axes, 1u << 1);
    job_plan_free(plan);
    doc = load_example("mlp_train.json");
    rc = run_doc(doc, why, sizeof why, NULL);
    json_decref(doc);
    if (rc != 0)
        fail_msg("MLP training: %s", why);
}

/* ------------------------------------------------------------------ */
/* Errors name the op and field. */

static void expect_error(const char *text, const char *field, const char *needle)
{
    json_t *doc = parse(text);
    job_plan_t *plan = NULL;
    err_t e = {0};
    int rc = compiler_job(doc, NULL, 0, &plan, &e);
    if (rc != 400 || strcmp(e.field, field) != 0 || !strstr(e.detail, needle))
        fail_msg("want 400 at %s (%s), got %d at %s: %s", field, needle, rc, e.field, e.detail);
    json_decref(doc);
}

#define ONE_OP(SLICE, OP)                                                                     \
    "{\"slices\": {\"m\": " SLICE "}, \"computations\": [{\"name\": \"c\", \"slice\": \"m\","  \
    " \"global\": true, \"ops\": [{\"op\": \"fill\", \"out\": \"a\", \"shape\": [4, 6],"       \
    " \"value\": 1}, " OP "]}]}"

/* A neg of ONE_OP's [4, 6] on a 2x2 mesh annotated with `sharding` (JSON)
 * is refused at its sharding with needle. */
static void expect_sharding_error(const char *sharding, const char *needle)
{
    char buf[1024], op[256];
    snprintf(op, sizeof op, "{\"op\": \"neg\", \"out\": \"b\", \"args\": [\"a\"],"
             " \"sharding\": %s}", sharding);
    snprintf(buf, sizeof buf, ONE_OP("%s", "%s"),
             "{\"shape\": [2, 2], \"axes\": [\"data\", \"model\"]}", op);
    expect_error(buf, "computations[0].ops[1].sharding", needle);
}

static void test_errors(void **state)
{
    (void)state;
    const char *mesh = "{\"shape\": [2, 2], \"axes\": [\"data\", \"model\"]}";
    char buf[1024];
    expect_sharding_error("[\"nope\", null]", "unknown mesh axis 'nope'");
    expect_sharding_error("[\"data\", \"data\"]", "used twice");
    expect_sharding_error("[\"data\"]", "rank 2");
    expect_sharding_error("[\"data\", null, null]", "rank 2");
    expect_sharding_error("[[], null]", "a list of axes has 1 to");
    snprintf(buf, sizeof buf, ONE_OP("{\"shape\": [3], \"axes\": [\"t\"]}",
             "{\"op\": \"neg\", \"out\": \"b\", \"args\": [\"a\"], \"sharding\": [\"t\", null]}"));
    expect_error(buf, "computations[0].ops[1].sharding", "not divisible");
    snprintf(buf, sizeof buf, ONE_OP("%s", "{\"op\": \"all_reduce\", \"out\": \"b\","
             " \"args\": [\"a\"], \"reduce\": \"sum\"}"), mesh);
    expect_error(buf, "computations[0].ops[1].op", "not allowed in a global computation");
    snprintf(buf, sizeof buf, ONE_OP("%s", "{\"op\": \"shard_index\", \"out\": \"b\"}"), mesh);
    expect_error(buf, "computations[0].ops[1].op", "not allowed in a global computation");
    expect_error("{\"slices\": {\"m\": {\"shape\": [2]}}, \"computations\": [{\"name\": \"c\","
                 " \"slice\": \"m\", \"ops\": [{\"op\": \"fill\", \"out\": \"a\", \"shape\": [4],"
                 " \"value\": 1, \"sharding\": [\"x\"]}]}]}",
                 "computations[0].ops[0].sharding", "needs a global computation");
    expect_error("{\"slices\": {\"m\": {\"shape\": [2, 2], \"axes\": [\"a\", \"a\"]}},"
                 " \"computations\": [{\"name\": \"c\", \"slice\": \"m\", \"ops\": ["
                 "{\"op\": \"fill\", \"out\": \"a\", \"shape\": [4], \"value\": 1}]}]}",
                 "slices.m.axes", "used twice");
    expect_error("{\"slices\": {\"m\": {\"shape\": [2]}, \"n\": {\"shape\": [2]}},"
                 " \"computations\": [{\"name\": \"p\", \"slice\": \"m\", \"ops\": ["
                 "{\"op\": \"fill\", \"out\": \"a\", \"shape\": [4], \"value\": 1}],"
                 " \"outputs\": [\"a\"]}, {\"name\": \"c\", \"slice\": \"n\", \"global\": true,"
                 " \"ops\": [{\"op\": \"input\", \"out\": \"a\", \"from\": \"p.a\"}]}]}",
                 "computations[1].ops[0].from", "cannot be joined");
    expect_error("{\"slices\": {\"m\": {\"shape\": [2], \"axes\": [\"t\"]}},"
                 " \"computations\": [{\"name\": \"p\", \"slice\": \"m\", \"global\": true,"
                 " \"ops\": [{\"op\": \"fill\", \"out\": \"a\", \"shape\": [4], \"value\": 1}],"
                 " \"outputs\": [\"a\"]}, {\"name\": \"c\", \"slice\": \"m\", \"global\": true,"
                 " \"ops\": [{\"op\": \"input\", \"out\": \"a\", \"from\": \"p.a\","
                 " \"sharding\": [\"t\"]}]}]}",
                 "computations[1].ops[0].sharding", "an input has its producer's sharding");
}

/* A cross-mesh edge's JSON is refused unless valid on both meshes (an axis
 * once, every split dividing its dim, exactly its five keys); a piece held
 * by several producer shards (replicas) goes to each consumer shard from
 * exactly one of them (replica ordinal c mod their number). */
static void test_edge_parse_and_one_sender(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "{\"global\": [4, 4], \"from_mesh\": [2], \"from\": [[0], [0]], \"to_mesh\": [2],"
        " \"to\": [[], []]}",
        "{\"global\": [3], \"from_mesh\": [2], \"from\": [[0]], \"to_mesh\": [2],"
        " \"to\": [[]]}",
        "{\"global\": [4], \"from_mesh\": [2], \"from\": [[0]], \"to_mesh\": [2],"
        " \"to\": [[]], \"extra\": 1}",
    };
    char why[256];
    gspmd_edge_t e;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = parse(bad[i]);
        if (gspmd_edge_parse(j, &e, why, sizeof why) != -1)
            fail_msg("edge taken: %s", bad[i]);
        json_decref(j);
    }
    json_t *j = parse("{\"global\": [4], \"from_mesh\": [2], \"from\": [[]],"
                      " \"to_mesh\": [2], \"to\": [[0]]}");
    assert_int_equal(gspmd_edge_parse(j, &e, why, sizeof why), 0);
    json_decref(j);
    for (int c = 0; c < 2; c++) {
        int64_t lo[TENSOR_MAX_RANK], hi[TENSOR_MAX_RANK];
        int senders = 0;
        for (int p = 0; p < 2; p++) {
            if (!gspmd_edge_piece(&e, p, c, lo, hi))
                continue;
            senders++;
            assert_int_equal(p, c);
            assert_int_equal(lo[0], 2 * c);
            assert_int_equal(hi[0], 2 * c + 2);
        }
        assert_int_equal(senders, 1);
    }
}

/* ------------------------------------------------------------------ */
/* Property test: random global programs. */

typedef struct rng {
    uint64_t s;
} rng_t;

/* Uniform-ish in 0..n-1; n >= 1. */
static uint32_t rnd(rng_t *r, uint32_t n)
{
    assert_true(n >= 1);
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(r->s >> 33) % n;
}

typedef struct gval {
    char name[16];
    shape_t shape;
    int positive;               /* all elements > 0 (exp, softmax): log/rsqrt/div safe */
} gval_t;

typedef struct gen {
    rng_t r;
    shape_t mesh;
    json_t *ops;
    gval_t v[64];
    int nv;
} gen_t;

static json_t *shape_j(const shape_t *s)
{
    json_t *a = json_array();
    for (int d = 0; d < s->rank; d++)
        json_array_append_new(a, json_integer(s->dim[d]));
    return a;
}

/* A random valid sharding for shape s, or NULL (no annotation). */
static json_t *rand_sharding(gen_t *g, const shape_t *s)
{
    static const char *const axn[] = {"x", "y", "z"};
    if (rnd(&g->r, 10) >= 4)
        return NULL;
    json_t *a = json_array();
    unsigned used = 0;
    for (int d = 0; d < s->rank; d++) {
        json_t *list = json_array();
        int64_t f = 1;
        int want = (int)rnd(&g->r, 3);      /* 0..2 axes on this dim */
        for (int k = 0; k < want; k++) {
            int ax = (int)rnd(&g->r, (uint32_t)g->mesh.rank);
            if ((used & (1u << ax)) || s->dim[d] % (f * g->mesh.dim[ax]) != 0)
                continue;
            used |= 1u << ax;
            f *= g->mesh.dim[ax];
            json_array_append_new(list, json_string(axn[ax]));
        }
        if (json_array_size(list) == 0) {
            json_decref(list);
            json_array_append_new(a, json_null());
        } else if (json_array_size(list) == 1) {
            json_array_append_new(a, json_incref(json_array_get(list, 0)));
            json_decref(list);
        } else {
            json_array_append_new(a, list);
        }
    }
    return a;
}

static int add_op(gen_t *g, json_t *op, const shape_t *shape, int positive)
{
    gval_t *v = &g->v[g->nv];
    snprintf(v->name, sizeof v->name, "v%d", g->nv);
    v->shape = *shape;
    v->positive = positive;
    json_object_set_new(op, "out", json_string(v->name));
    json_t *sh = rand_sharding(g, shape);
    if (sh)
        json_object_set_new(op, "sharding", sh);
    json_array_append_new(g->ops, op);
    return g->nv++;
}

static shape_t rand_shape(gen_t *g)
{
    static const int64_t dims[] = {1, 2, 4, 6, 8, 12};
    shape_t s = {0};
    s.rank = 1 + (int)rnd(&g->r, 3);
    for (int d = 0; d < s.rank; d++)
        s.dim[d] = dims[rnd(&g->r, 6)];
    return s;
}

/* A new source value: fill, or iota scaled to [0, 1). */
static int gen_source(gen_t *g, const shape_t *s)
{
    if (rnd(&g->r, 2)) {
        float val = (float)((int)rnd(&g->r, 200) - 100) / 100.0f;
        return add_op(g, json_pack("{s:s, s:o, s:f}", "op", "fill", "shape", shape_j(s), "value",
                                   (double)val), s, val > 0);
    }
    int i = add_op(g, json_pack("{s:s, s:o}", "op", "iota", "shape", shape_j(s)), s, 0);
    return add_op(g, json_pack("{s:s, s:[s], s:f}", "op", "scale", "args", g->v[i].name,
                               "factor", 1.0 / (double)shape_numel(s)), s, 0);
}

static int find_shape(gen_t *g, const shape_t *s, int not)
{
    for (int k = 0; k < 4; k++) {
        int i = (int)rnd(&g->r, (uint32_t)g->nv);
        if (i != not && shape_equal(&g->v[i].shape, s))
            return i;
    }
    return gen_source(g, s);
}

static void gen_einsum(gen_t *g, int a)
{
    const shape_t *as = &g->v[a].shape;
    char ta[8] = "", tb[8] = "", to[8] = "", spec[32];
    int64_t size[26] = {0};
    int nl = 0, ob = 0, oo = 0;
    for (int d = 0; d < as->rank; d++) {
        ta[d] = (char)('a' + nl);
        size[nl++] = as->dim[d];
    }
    shape_t bs = {0}, os = {0};
    int two = (int)rnd(&g->r, 3) != 0;
    if (two) {
        for (int d = 0; d < as->rank; d++)      /* share some of a's letters */
            if (rnd(&g->r, 2) && bs.rank < 3) {
                tb[ob++] = ta[d];
                bs.dim[bs.rank++] = as->dim[d];
            }
        if (rnd(&g->r, 2) || ob == 0) {         /* and a new one */
            static const int64_t dims[] = {2, 4, 6};
            tb[ob++] = (char)('a' + nl);
            size[nl] = dims[rnd(&g->r, 3)];
            bs.dim[bs.rank++] = size[nl++];
        }
    }
    for (int l = 0; l < nl && oo < 3; l++)
        if (rnd(&g->r, 3) != 0) {
            to[oo++] = (char)('a' + l);
            os.dim[os.rank++] = size[l];
        }
    snprintf(spec, sizeof spec, "%s%s%s->%s", ta, two ? "," : "", two ? tb : "", to);
    if (!two) {
        add_op(g, json_pack("{s:s, s:[s], s:s}", "op", "einsum", "args", g->v[a].name, "spec",
                            spec), &os, 0);
        return;
    }
    int b = gen_source(g, &bs);
    add_op(g, json_pack("{s:s, s:[s,s], s:s}", "op", "einsum", "args", g->v[a].name,
                        g->v[b].name, "spec", spec), &os, 0);
}

static void gen_reshape(gen_t *g, int a)
{
    const shape_t *as = &g->v[a].shape;
    shape_t o = {0};
    if (as->rank == 0)
        return;
    if (as->rank >= 2 && rnd(&g->r, 2)) {       /* merge two adjacent dims */
        int d = (int)rnd(&g->r, (uint32_t)(as->rank - 1));
        for (int i = 0; i < as->rank; i++) {
            if (i == d + 1)
                o.dim[o.rank - 1] *= as->dim[i];
            else
                o.dim[o.rank++] = as->dim[i];
        }
    } else if (as->rank < 4) {                  /* split a dim by 2 when even */
        int d = (int)rnd(&g->r, (uint32_t)as->rank);
        for (int i = 0; i < as->rank; i++) {
            if (i == d && as->dim[i] % 2 == 0 && as->dim[i] > 2) {
                o.dim[o.rank++] = 2;
                o.dim[o.rank++] = as->dim[i] / 2;
            } else {
                o.dim[o.rank++] = as->dim[i];
            }
        }
    } else {
        o = *as;
    }
    if (shape_numel(&o) > 4096)
        return;
    add_op(g, json_pack("{s:s, s:[s], s:o}", "op", "reshape", "args", g->v[a].name, "shape",
                        shape_j(&o)), &o, g->v[a].positive);
}

static void gen_op(gen_t *g)
{
    static const char *const bin[] = {"add", "sub", "mul", "max", "min"};
    static const char *const un[] = {"neg", "relu", "tanh"};
    int a = (int)rnd(&g->r, (uint32_t)g->nv);
    const gval_t *av = &g->v[a];
    const char *an = av->name;
    shape_t s = av->shape, t;
    switch (rnd(&g->r, 11)) {
    case 0: {
        int b = find_shape(g, &s, a);
        add_op(g, json_pack("{s:s, s:[s,s]}", "op", bin[rnd(&g->r, 5)], "args", g->v[a].name,
                            g->v[b].name), &s, 0);
        break;
    }
    case 1:
        add_op(g, json_pack("{s:s, s:[s]}", "op", un[rnd(&g->r, 3)], "args", an), &s, 0);
        break;
    case 2: {       /* exp of tanh: bounded and positive, then log, rsqrt or div */
        int t1 = add_op(g, json_pack("{s:s, s:[s]}", "op", "tanh", "args", an), &s, 0);
        int t2 = add_op(g, json_pack("{s:s, s:[s]}", "op", "exp", "args", g->v[t1].name), &s, 1);
        static const char *const pos[] = {"log", "rsqrt"};
        if (rnd(&g->r, 3) == 0)
            add_op(g, json_pack("{s:s, s:[s,s]}", "op", "div", "args", g->v[t1].name,
                                g->v[t2].name), &s, 0);
        else
            add_op(g, json_pack("{s:s, s:[s]}", "op", pos[rnd(&g->r, 2)], "args",
                                g->v[t2].name), &s, 0);
        break;
    }
    case 3:
        if (s.rank == 2) {
            t = s;
            t.dim[0] = s.dim[1], t.dim[1] = s.dim[0];
            add_op(g, json_pack("{s:s, s:[s]}", "op", "transpose", "args", an), &t, av->positive);
        }
        break;
    case 4:
        gen_reshape(g, a);
        break;
    case 5:
    case 6: {
        const char *op = rnd(&g->r, 2) ? "reduce_sum" : "reduce_max";
        if (rnd(&g->r, 4) == 0 || s.rank == 0) {
            t = (shape_t){0};
            add_op(g, json_pack("{s:s, s:[s]}", "op", op, "args", an), &t, 0);
        } else {
            int d = (int)rnd(&g->r, (uint32_t)s.rank);
            t = (shape_t){0};
            for (int i = 0; i < s.rank; i++)
                if (i != d)
                    t.dim[t.rank++] = s.dim[i];
            add_op(g, json_pack("{s:s, s:[s], s:i}", "op", op, "args", an, "axis", d), &t, 0);
        }
        break;
    }
    case 7:
        if (s.rank > 0)
            add_op(g, json_pack("{s:s, s:[s], s:i}", "op", "softmax", "args", an, "axis",
                                (int)rnd(&g->r, (uint32_t)s.rank)), &s, 1);
        break;
    case 8:
    case 9:
        if (s.rank >= 1)
            gen_einsum(g, a);
        break;
    default:
        if (s.rank == 2) {
            static const int64_t dims[] = {2, 4, 6, 8};
            shape_t bs = {2, {s.dim[1], dims[rnd(&g->r, 4)]}};
            int b = gen_source(g, &bs);
            t = (shape_t){2, {s.dim[0], bs.dim[1]}};
            add_op(g, json_pack("{s:s, s:[s,s]}", "op", "matmul", "args", g->v[a].name,
                                g->v[b].name), &t, 0);
        }
        break;
    }
}

static json_t *gen_doc(uint64_t seed)
{
    static const int64_t mdims[] = {1, 2, 2, 3, 4};
    gen_t g = {.r = {seed * 2654435761ULL + 1}};
    g.mesh.rank = 1 + (int)rnd(&g.r, 3);
    for (int d = 0; d < g.mesh.rank; d++)
        g.mesh.dim[d] = mdims[rnd(&g.r, 5)];
    g.ops = json_array();
    shape_t s = rand_shape(&g);
    gen_source(&g, &s);
    int n = 2 + (int)rnd(&g.r, 8);
    for (int i = 0; i < n && g.nv < 50; i++)
        gen_op(&g);
    json_t *outs = json_array();
    json_array_append_new(outs, json_string(g.v[g.nv - 1].name));
    json_t *mesh = shape_j(&g.mesh);
    return json_pack("{s:{s:{s:o}}, s:[{s:s, s:s, s:b, s:o, s:o}]}", "slices", "m", "shape",
                     mesh, "computations", "name", "c", "slice", "m", "global", 1, "ops", g.ops,
                     "outputs", outs);
}

static void test_property_random_programs(void **state)
{
    (void)state;
    const int runs = 1000;
    int failures = 0, permuted = 0;
    for (int i = 0; i < runs; i++) {
        json_t *doc = gen_doc((uint64_t)i);
        char why[1024] = "";
        job_plan_t *plan = NULL;
        if (run_doc(doc, why, sizeof why, &plan) == 0) {
            permuted += count_coll(plan, 0, "ppermute") > 0;
            job_plan_free(plan);
        } else {
            char *text = json_dumps(doc, JSON_COMPACT);
            print_message("seed %d: %s\n  %s\n", i, why, text ? text : "?");
            free(text);
            failures++;
        }
        json_decref(doc);
    }
    print_message("%d of %d random programs reshard with a ppermute\n", permuted, runs);
    assert_int_equal(failures, 0);
    assert_true(permuted > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_megatron_one_allreduce),
        cmocka_unit_test(test_data_parallel_grad),
        cmocka_unit_test(test_reduce_scatter_chosen),
        cmocka_unit_test(test_all_to_all_reshard),
        cmocka_unit_test(test_ppermute_reshard),
        cmocka_unit_test(test_softmax_split_axis),
        cmocka_unit_test(test_edge_between_globals),
        cmocka_unit_test(test_cross_mesh_edges),
        cmocka_unit_test(test_edge_parse_and_one_sender),
        cmocka_unit_test(test_examples),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_property_random_programs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
