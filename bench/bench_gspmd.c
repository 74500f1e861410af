/* bench_gspmd.c - what the GSPMD partitioner's programs cost (issue 10).
 *
 *   bench_gspmd [RUNS]     (jobs per variant, default 10)
 *
 * One pre-norm transformer block (layer norm, multi-head attention, MLP,
 * residuals; B=8 S=32 D=64 heads 8x8, MLP 256) on three meshes, batch split
 * over the data axes and heads/MLP columns over `model`:
 *   1-D [4]       axes (model)
 *   2-D [2,4]     axes (data, model)
 *   3-D [2,2,2]   axes (data, pipe, model), batch over [data, pipe]
 * For each it prints, from the compiled plan: the bytes each shard sends
 * for the collectives the partitioner inserted (ring all_reduce 2(g-1)/g of
 * its tensor, all_gather / reduce_scatter / all_to_all (g-1)/g, ppermute
 * its whole argument, an upper bound: a pair may stay home) against the
 * minimum for that sharding (Megatron's two all_reduces of the block's
 * local activations over `model`); then, on real cpu workers (islands
 * line=2x4, cube=2x2x2), the median run time (started -> finished) of the
 * global document against the same block written by hand per shard with
 * its two all_reduces, and their ratio. Weights are constants in both, so
 * the two programs do the same arithmetic. Exits 1 on a failed job. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compiler.h"
#include "gspmd.h"
#include "support_harness.h"

enum { B = 8, S = 32, D = 64, H = 8, K = 8, F = 256, RUNS_MAX = 100 };

typedef struct mesh_cfg {
    const char *name, *island;
    int rank;
    int dims[3];
    const char *axes[3];
    int ndata;                  /* leading axes splitting the batch */
} mesh_cfg_t;

static const mesh_cfg_t meshes[] = {
    {"1d", "line", 1, {4}, {"model"}, 0},
    {"2d", "line", 2, {2, 4}, {"data", "model"}, 1},
    {"3d", "cube", 3, {2, 2, 2}, {"data", "pipe", "model"}, 2},
};

/* Builds one op; `args` NULL-terminated. New reference. */
static json_t *mk(const char *op, const char *out, const char *const *args)
{
    json_t *o = json_pack("{s:s, s:s}", "op", op, "out", out);
    if (args) {
        json_t *a = json_array();
        for (int i = 0; args[i]; i++)
            json_array_append_new(a, json_string(args[i]));
        json_object_set_new(o, "args", a);
    }
    return o;
}

static json_t *dims3(int64_t a, int64_t b, int64_t c, int rank)
{
    json_t *s = json_array();
    int64_t d[3] = {a, b, c};
    for (int i = 0; i < rank; i++)
        json_array_append_new(s, json_integer(d[i]));
    return s;
}

/* Sharding entry: the data axes (batch), "model", or null. */
static json_t *sh_data(const mesh_cfg_t *m)
{
    if (m->ndata == 0)
        return json_null();
    if (m->ndata == 1)
        return json_string(m->axes[0]);
    return json_pack("[s,s]", m->axes[0], m->axes[1]);
}

typedef struct gen {
    json_t *ops;
    const mesh_cfg_t *m;
    int global;
    int64_t bl, hl, fl;         /* local batch, heads, MLP width (global: full) */
} gen_t;

static void add(gen_t *g, json_t *op)
{
    json_array_append_new(g->ops, op);
}

static void fill(gen_t *g, const char *out, json_t *shape, double v, json_t *sharding)
{
    json_t *o = mk("fill", out, NULL);
    json_object_set_new(o, "shape", shape);
    json_object_set_new(o, "value", json_real(v));
    if (g->global && sharding)
        json_object_set_new(o, "sharding", sharding);
    else
        json_decref(sharding);
    add(g, o);
}

static void ein(gen_t *g, const char *out, const char *a, const char *b, const char *spec)
{
    const char *args[] = {a, b, NULL};
    json_t *o = mk("einsum", out, args);
    json_object_set_new(o, "spec", json_string(spec));
    add(g, o);
}

static void unary(gen_t *g, const char *op, const char *out, const char *a)
{
    const char *args[] = {a, NULL};
    add(g, mk(op, out, args));
}

static void binary(gen_t *g, const char *op, const char *out, const char *a, const char *b)
{
    const char *args[] = {a, b, NULL};
    add(g, mk(op, out, args));
}

static void scale(gen_t *g, const char *out, const char *a, double f)
{
    const char *args[] = {a, NULL};
    json_t *o = mk("scale", out, args);
    json_object_set_new(o, "factor", json_real(f));
    add(g, o);
}

static void reduce(gen_t *g, const char *out, const char *a, int axis)
{
    const char *args[] = {a, NULL};
    json_t *o = mk("reduce_sum", out, args);
    json_object_set_new(o, "axis", json_integer(axis));
    add(g, o);
}

/* Hand-written: the partial sums of a row-split contraction, finished. */
static void allreduce_model(gen_t *g, const char *out, const char *a)
{
    const char *args[] = {a, NULL};
    json_t *o = mk("all_reduce", out, args);
    json_object_set_new(o, "reduce", json_string("sum"));
    json_object_set_new(o, "mesh_axes", json_pack("[i]", g->m->rank - 1));
    add(g, o);
}

static void layer_norm(gen_t *g, const char *p, const char *x)
{
    char n[12][24];
    static const char *const sfx[] = {"o", "s", "m", "mb", "c", "q", "v", "vv", "e", "ve", "i",
                                      "y"};
    for (int i = 0; i < 12; i++)
        snprintf(n[i], sizeof n[i], "%s%s", p, sfx[i]);
    fill(g, n[0], dims3(D, 0, 0, 1), 1.0, NULL);
    reduce(g, n[1], x, 2);
    scale(g, n[2], n[1], 1.0 / D);
    ein(g, n[3], n[2], n[0], "bs,d->bsd");
    binary(g, "sub", n[4], x, n[3]);
    binary(g, "mul", n[5], n[4], n[4]);
    reduce(g, n[6], n[5], 2);
    scale(g, n[7], n[6], 1.0 / D);
    fill(g, n[8], json_array(), 1e-5, NULL);
    binary(g, "add", n[9], n[7], n[8]);
    unary(g, "rsqrt", n[10], n[9]);
    ein(g, n[11], n[4], n[10], "bsd,bs->bsd");
}

static json_t *block_doc(const mesh_cfg_t *m, int global)
{
    int64_t model = m->dims[m->rank - 1], data = 1;
    for (int i = 0; i < m->ndata; i++)
        data *= m->dims[i];
    gen_t g = {json_array(), m, global, global ? B : B / data, global ? H : H / model,
               global ? F : F / model};
    json_t *xs = json_pack("[o,n,n]", sh_data(m));
    fill(&g, "x", dims3(g.bl, S, D, 3), 0.01, xs);
    fill(&g, "wq", dims3(D, g.hl, K, 3), 0.02, json_pack("[n,s,n]", "model"));
    fill(&g, "wk", dims3(D, g.hl, K, 3), 0.03, json_pack("[n,s,n]", "model"));
    fill(&g, "wv", dims3(D, g.hl, K, 3), 0.05, json_pack("[n,s,n]", "model"));
    fill(&g, "wo", dims3(g.hl, K, D, 3), 0.04, json_pack("[s,n,n]", "model"));
    fill(&g, "w1", dims3(D, g.fl, 0, 2), 0.03, json_pack("[n,s]", "model"));
    fill(&g, "w2", dims3(g.fl, D, 0, 2), 0.02, json_pack("[s,n]", "model"));
    layer_norm(&g, "a_", "x");
    ein(&g, "q", "a_y", "wq", "bsd,dhk->bshk");
    ein(&g, "k", "a_y", "wk", "bsd,dhk->bshk");
    ein(&g, "v", "a_y", "wv", "bsd,dhk->bshk");
    ein(&g, "sc", "q", "k", "bshk,bthk->bhst");
    scale(&g, "scs", "sc", 1.0 / 2.8284271247);
    json_t *sm = mk("softmax", "p", (const char *const[]){"scs", NULL});
    json_object_set_new(sm, "axis", json_integer(3));
    add(&g, sm);
    ein(&g, "o", "p", "v", "bhst,bthk->bshk");
    ein(&g, global ? "att" : "attp", "o", "wo", "bshk,hkd->bsd");
    if (!global)
        allreduce_model(&g, "att", "attp");
    binary(&g, "add", "x1", "x", "att");
    layer_norm(&g, "b_", "x1");
    ein(&g, "f", "b_y", "w1", "bsd,df->bsf");
    unary(&g, "tanh", "t", "f");
    ein(&g, global ? "mlp" : "mlpp", "t", "w2", "bsf,fd->bsd");
    if (!global)
        allreduce_model(&g, "mlp", "mlpp");
    binary(&g, "add", "y", "x1", "mlp");
    if (global) {   /* the result stays split like the input */
        json_t *last = json_array_get(g.ops, json_array_size(g.ops) - 1);
        json_object_set_new(last, "sharding", json_pack("[o,n,n]", sh_data(m)));
    }
    json_t *axes = json_array();
    for (int i = 0; i < m->rank; i++)
        json_array_append_new(axes, json_string(m->axes[i]));
    return json_pack("{s:s, s:{s:{s:o, s:o, s:s}}, s:[{s:s, s:s, s:b, s:o, s:[s]}]}", "name",
                     global ? "block-global" : "block-by-hand", "slices", "m", "shape",
                     dims3(m->dims[0], m->dims[1], m->dims[2], m->rank), "axes", axes, "island",
                     m->island, "computations", "name", "block", "slice", "m", "global", global,
                     "ops", g.ops, "outputs", "y");
}

/* Bytes one shard sends for comp c's collectives (inserted ones when
 * the computation was partitioned). */
static double coll_bytes(const comp_t *c)
{
    double bytes = 0;
    for (int j = 0; j < c->nops; j++) {
        const op_t *op = &c->ops[j];
        if (!opcode_is_collective(op->code))
            continue;
        int64_t gsz = 1;
        for (int a = 0; a < c->slice_shape.rank; a++)
            if (!op->mesh_axes || (op->mesh_axes & (1u << a)))
                gsz *= c->slice_shape.dim[a];
        const shape_t *in = &c->vshapes[op->arg[0]];
        double n = 4.0 * (double)(op->code == OP_ALL_GATHER ? shape_numel(&op->shape)
                                                            : shape_numel(in));
        double f = (double)(gsz - 1) / (double)gsz;
        bytes += op->code == OP_ALL_REDUCE ? 2 * f * n : op->code == OP_PPERMUTE ? n : f * n;
    }
    return bytes;
}

/* Median run time (µs, started -> finished) of `runs` jobs of doc. */
static int64_t run_median(hx_client_t *cl, const char *doc, int runs)
{
    int64_t t[RUNS_MAX];
    for (int i = 0; i < runs; i++) {
        int64_t id;
        json_t *job = NULL;
        if (hx_job_submit(cl, doc, &id, NULL) != 201 ||
            hx_job_wait(cl, id, 120000, 2, &job) != 0 ||
            strcmp(hx_job_state(job), "succeeded") != 0) {
            fprintf(stderr, "bench_gspmd: job failed\n");
            hx_client_print_last(cl);
            json_decref(job);
            return -1;
        }
        t[i] = hx_job_time_us(job, "finished") - hx_job_time_us(job, "started");
        json_decref(job);
    }
    qsort(t, (size_t)runs, sizeof *t, hx_cmp_i64);
    return t[runs / 2];
}

static int bench_mesh(hx_client_t *cl, const mesh_cfg_t *m, int runs)
{
    json_t *gdoc = block_doc(m, 1), *hdoc = block_doc(m, 0);
    job_plan_t *gp = NULL, *hp = NULL;
    err_t e = {0};
    char *gtext = json_dumps(gdoc, JSON_COMPACT), *htext = json_dumps(hdoc, JSON_COMPACT);
    int rc = -1;
    if (compiler_job(gdoc, NULL, 0, &gp, &e) != 0 || compiler_job(hdoc, NULL, 0, &hp, &e) != 0) {
        fprintf(stderr, "bench_gspmd: %s does not compile: %s at %s\n", m->name, e.detail,
                e.field);
        goto cleanup;
    }
    double got = coll_bytes(&gp->comps[0]), min = coll_bytes(&hp->comps[0]);
    printf("gspmd_%s_collectives_inserted %d\n", m->name, gp->comps[0].gspmd->ncoll);
    printf("gspmd_%s_bytes_per_shard %.0f\n", m->name, got);
    printf("gspmd_%s_bytes_per_shard_minimum %.0f\n", m->name, min);
    printf("gspmd_%s_bytes_ratio %.2f\n", m->name, min > 0 ? got / min : (got > 0 ? -1 : 1));
    int64_t tg = run_median(cl, gtext, runs), th = run_median(cl, htext, runs);
    if (tg < 0 || th < 0)
        goto cleanup;
    printf("gspmd_%s_step_us %" PRId64 "\n", m->name, tg);
    printf("gspmd_%s_step_us_by_hand %" PRId64 "\n", m->name, th);
    printf("gspmd_%s_step_ratio %.2f\n", m->name, (double)tg / (double)th);
    rc = 0;
cleanup:
    job_plan_free(gp);
    job_plan_free(hp);
    json_decref(gdoc);
    json_decref(hdoc);
    free(gtext);
    free(htext);
    return rc;
}

int main(int argc, char **argv)
{
    int runs = argc > 1 ? atoi(argv[1]) : 10;
    if (runs < 1 || runs > RUNS_MAX) {
        fprintf(stderr, "usage: bench_gspmd [RUNS 1..%d]\n", RUNS_MAX);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    hx_cluster_t c;
    hx_client_t cl;
    static const char *const islands[] = {"line=2x4", "cube=2x2x2"};
    if (hx_init() != 0 || hx_cluster_start(&c, islands, 2) != 0)
        return 1;
    int rc = 0;
    for (int i = 0; i < 2 && !rc; i++)
        rc = hx_worker_start(&c, "line", 4) || hx_worker_start(&c, "cube", 4);
    if (!rc)
        rc = hx_client_init(&cl, c.url);
    for (size_t i = 0; !rc && i < sizeof meshes / sizeof meshes[0]; i++)
        rc = bench_mesh(&cl, &meshes[i], runs);
    hx_client_cleanup(&cl);
    hx_cluster_stop(&c);
    return rc ? 1 : 0;
}
