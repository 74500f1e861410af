/* test_global.c - global programs (DESIGN.md Part C) on real workers.
 *
 * Islands west=4x4 (4 cpu workers) and east=2x4 (2). Jobs are written at global shapes
 * with sharding annotations; atolld partitions them, workers run the
 * per-shard programs, and GET .../result?view=global must give the global
 * values, checked element by element against references written here as
 * plain loops (not through Atoll's kernels). GET .../program must show the
 * partitioner's work: the Megatron MLP with exactly one inserted
 * collective, an all_reduce over `model`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "itest.h"

/* GET /v1/jobs/ID/PART as the test client: the answer (new reference);
 * fails the test unless 200. */
static json_t *job_part(int64_t id, const char *part)
{
    json_t *j = hx_job_part(&itest_client, id, part);
    T_CHECK(j != NULL, "GET /v1/jobs/%lld/%s failed", (long long)id, part);
    return j;
}

static void check_global(int64_t id, const char *key, const int64_t *shape, int rank,
                         const double *want)
{
    json_t *res = job_part(id, "result?view=global");
    json_t *v = json_object_get(json_object_get(res, "outputs"), key);
    json_t *sh = json_object_get(v, "shape"), *vals = json_object_get(v, "values");
    int64_t n = 1;
    int ok = json_array_size(sh) == (size_t)rank;
    for (int d = 0; ok && d < rank; d++) {
        ok = json_integer_value(json_array_get(sh, (size_t)d)) == shape[d];
        n *= shape[d];
    }
    ok = ok && json_array_size(vals) == (size_t)n;
    double sum = 0.0;
    for (int64_t e = 0; ok && e < n; e++) {
        double got = json_number_value(json_array_get(vals, (size_t)e));
        ok = fabs(got - want[e]) <= 1e-4 * fabs(want[e]) + 1e-5;
        if (!ok)
            fprintf(stderr, "%s[%lld] = %g, want %g\n", key, (long long)e, got, want[e]);
        sum += want[e];
    }
    ok = ok && fabs(json_number_value(json_object_get(v, "sum")) - sum) <= 1e-3 * (1 + fabs(sum));
    json_decref(res);
    T_CHECK(ok, "global value %s of job %lld differs from the reference", key, (long long)id);
}

/* x = iota[8,16]/100 split by data; w1 = 0.05 split by model (columns);
 * w2 = -0.03 split by model (rows); y = relu(x w1) w2 wanted split by data. */
static void test_megatron_mlp(void **state)
{
    (void)state;
    static const char doc[] =
        "{'slices':{'m':{'shape':[2,4],'axes':['data','model']}},'computations':[{'name':'mlp',"
        "'slice':'m','global':true,'ops':["
        "{'op':'iota','out':'xi','shape':[8,16],'sharding':['data',null]},"
        "{'op':'scale','out':'x','args':['xi'],'factor':0.01},"
        "{'op':'fill','out':'w1','shape':[16,32],'value':0.05,'sharding':[null,'model']},"
        "{'op':'fill','out':'w2','shape':[32,16],'value':-0.03,'sharding':['model',null]},"
        "{'op':'einsum','out':'h','args':['x','w1'],'spec':'bd,dh->bh'},"
        "{'op':'relu','out':'r','args':['h']},"
        "{'op':'einsum','out':'y','args':['r','w2'],'spec':'bh,hd->bd','sharding':['data',null]}],"
        "'outputs':['y']}]}";
    int64_t id;
    json_decref(itest_run_ok(doc, &id));
    double want[8 * 16];
    for (int b = 0; b < 8; b++) {
        double xs = 0.0;
        for (int d = 0; d < 16; d++)
            xs += 0.01 * (b * 16 + d);
        double h = xs * 0.05, r = h > 0 ? h : 0;
        for (int d = 0; d < 16; d++)
            want[b * 16 + d] = 32 * r * -0.03;
    }
    check_global(id, "mlp.y", (const int64_t[]){8, 16}, 2, want);

    json_t *prog = job_part(id, "program");
    json_t *comp = json_array_get(json_object_get(prog, "computations"), 0);
    json_t *ops = json_object_get(comp, "ops"), *op;
    size_t i;
    int inserted_coll = 0, allreduce_model = 0;
    json_array_foreach(ops, i, op) {
        const char *name = json_string_value(json_object_get(op, "op"));
        if (!json_is_true(json_object_get(op, "inserted")) || strcmp(name, "shard_slice") == 0)
            continue;
        inserted_coll++;
        json_t *ma = json_object_get(op, "mesh_axes");
        allreduce_model += strcmp(name, "all_reduce") == 0 && json_array_size(ma) == 1 &&
                           json_integer_value(json_array_get(ma, 0)) == 1;
    }
    int ncoll = (int)json_integer_value(json_object_get(comp, "collectives_inserted"));
    json_t *ysh = NULL;
    json_array_foreach(ops, i, op)
        if (strcmp(json_string_value(json_object_get(op, "out")), "y") == 0)
            ysh = json_object_get(op, "shape");
    int local_ok = json_integer_value(json_array_get(ysh, 0)) == 4 &&
                   json_integer_value(json_array_get(ysh, 1)) == 16;
    json_decref(prog);
    T_CHECK(inserted_coll == 1 && allreduce_model == 1 && ncoll == 1,
            "Megatron MLP: %d collectives inserted (%d all_reduce over model), want exactly 1",
            inserted_coll, allreduce_model);
    T_CHECK(local_ok, "y's local shape is not [4,16]");
}

/* Two global computations on two slices of one shape, joined by an edge;
 * the consumer reduces and normalises along the producer's split dim. A
 * per-shard computation in the same job keeps its per-shard result. */
static void test_edge_softmax(void **state)
{
    (void)state;
    static const char doc[] =
        "{'slices':{'a':{'shape':[2,2],'axes':['p','q']},'b':{'shape':[2,2],'axes':['r','s']},"
        "'c':{'shape':[2]}},'computations':["
        "{'name':'prod','slice':'a','global':true,'ops':["
        "{'op':'iota','out':'i','shape':[4,6]},"
        "{'op':'scale','out':'x','args':['i'],'factor':0.1,'sharding':['p','q']}],"
        "'outputs':['x']},"
        "{'name':'cons','slice':'b','global':true,'ops':["
        "{'op':'input','out':'x','from':'prod.x'},"
        "{'op':'softmax','out':'sm','args':['x'],'axis':1},"
        "{'op':'reduce_sum','out':'rs','args':['x'],'axis':1,'sharding':['r']}],"
        "'outputs':['sm','rs']},"
        "{'name':'plain','slice':'c','ops':[{'op':'shard_index','out':'k'}],'outputs':['k']}]}";
    int64_t id;
    json_decref(itest_run_ok(doc, &id));
    double sm[24], rs[4];
    for (int row = 0; row < 4; row++) {
        double mx = -1e30, z = 0.0;
        rs[row] = 0.0;
        for (int c = 0; c < 6; c++) {
            double x = 0.1 * (row * 6 + c);
            mx = x > mx ? x : mx;
            rs[row] += x;
        }
        for (int c = 0; c < 6; c++)
            z += exp(0.1 * (row * 6 + c) - mx);
        for (int c = 0; c < 6; c++)
            sm[row * 6 + c] = exp(0.1 * (row * 6 + c) - mx) / z;
    }
    check_global(id, "cons.sm", (const int64_t[]){4, 6}, 2, sm);
    check_global(id, "cons.rs", (const int64_t[]){4}, 1, rs);
    json_t *res = hx_job_result(&itest_client, id);
    T_CHECK(json_array_size(json_object_get(json_object_get(res, "outputs"), "plain.k")) == 2,
            "the per-shard computation's result is not per shard");
    json_decref(res);
}

/* A cross-mesh, cross-island edge: [2,4] on west to [2,2] on east, the
 * consumer splitting the value its own way; pieces go worker to worker. */
static void test_cross_mesh_edge(void **state)
{
    (void)state;
    static const char doc[] =
        "{'slices':{'a':{'shape':[2,4],'axes':['data','model'],'island':'west'},"
        "'b':{'shape':[2,2],'island':'east'}},'computations':["
        "{'name':'prod','slice':'a','global':true,'ops':["
        "{'op':'iota','out':'i','shape':[8,12]},"
        "{'op':'scale','out':'x','args':['i'],'factor':0.5,'sharding':['data','model']}],"
        "'outputs':['x']},"
        "{'name':'cons','slice':'b','global':true,'ops':["
        "{'op':'input','out':'x','from':'prod.x'},"
        "{'op':'neg','out':'z','args':['x'],'sharding':[null,['x','y']]},"
        "{'op':'reduce_sum','out':'s','args':['x'],'axis':1,'sharding':['y']}],"
        "'outputs':['z','s']}]}";
    int64_t id;
    json_decref(itest_run_ok(doc, &id));
    double z[96], rs[8];
    for (int row = 0; row < 8; row++) {
        rs[row] = 0.0;
        for (int c = 0; c < 12; c++) {
            z[row * 12 + c] = -0.5 * (row * 12 + c);
            rs[row] += 0.5 * (row * 12 + c);
        }
    }
    check_global(id, "cons.z", (const int64_t[]){8, 12}, 2, z);
    check_global(id, "cons.s", (const int64_t[]){8}, 1, rs);
}

/* examples/gspmd/mlp_train.json: SGD on real workers, the loss read from
 * the global view goes down at every step (and by 10x over the run). */
static void test_mlp_training_example(void **state)
{
    (void)state;
    char path[512], *text = NULL;
    const char *src = getenv("ATOLL_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/examples/gspmd/mlp_train.json", src ? src : ".");
    json_t *doc = json_load_file(path, 0, NULL);
    T_CHECK(doc && (text = json_dumps(doc, JSON_COMPACT)), "cannot read %s", path);
    int steps = (int)json_array_size(json_object_get(doc, "computations"));
    json_decref(doc);
    int64_t id = -1;
    int status = hx_job_submit(&itest_client, text, &id, NULL);
    free(text);
    T_CHECK(status == 201, "submit returned %d", status);
    json_decref(itest_wait_state(id, "succeeded"));
    json_t *res = job_part(id, "result?view=global");
    double prev = 1e30, first = 0, last = 0;
    int ok = steps >= 4;
    for (int i = 0; ok && i < steps; i++) {
        char key[64];
        snprintf(key, sizeof key, "step%d.loss", i);
        json_t *v = json_object_get(json_object_get(res, "outputs"), key);
        double loss = json_number_value(json_object_get(v, "sum"));
        ok = v && loss < prev && loss > 0;
        fprintf(stderr, "step %d loss %.6f\n", i, loss);
        if (i == 0)
            first = loss;
        last = prev = loss;
    }
    json_decref(res);
    T_CHECK(ok && last < first / 10, "the MLP's loss did not go down at every step (%g -> %g)",
            first, last);
}

/* A split moved from mesh axis x to y (both 4) on a [4,4] slice over four
 * workers: one inserted ppermute with explicit pairs (16 of them) moves
 * each shard's piece, across processes, and the global value is exact. */
static void test_ppermute_reshard(void **state)
{
    (void)state;
    static const char doc[] =
        "{'slices':{'m':{'shape':[4,4],'island':'west'}},'computations':[{'name':'p',"
        "'slice':'m','global':true,'ops':["
        "{'op':'iota','out':'a','shape':[8,12],'sharding':['x',null]},"
        "{'op':'neg','out':'b','args':['a'],'sharding':['y',null]}],'outputs':['b']}]}";
    double want[8 * 12];
    int64_t id;
    json_decref(itest_run_ok(doc, &id));
    for (int e = 0; e < 8 * 12; e++)
        want[e] = -e;
    check_global(id, "p.b", (const int64_t[]){8, 12}, 2, want);
    json_t *prog = job_part(id, "program");
    json_t *comp = json_array_get(json_object_get(prog, "computations"), 0), *op;
    size_t i;
    int npermute = 0, npairs = 0;
    json_array_foreach(json_object_get(comp, "ops"), i, op) {
        if (strcmp(json_string_value(json_object_get(op, "op")) ?: "", "ppermute") == 0) {
            npermute++;
            npairs = (int)json_array_size(json_object_get(op, "pairs"));
        }
    }
    int ncoll = (int)json_integer_value(json_object_get(comp, "collectives_inserted"));
    json_decref(prog);
    T_CHECK(ncoll == 1 && npermute == 1 && npairs == 16,
            "want one inserted ppermute of 16 pairs, got %d collectives, %d ppermute(s), %d pairs",
            ncoll, npermute, npairs);
}

/* Pieces above 4096 elements of a global value of at most 65,536: one
 * replica of each piece reports it whole ("full_values"), so view=global
 * lists every value (y = iota[128,256] * 0.001, split by data, replicated
 * over model: 4 pieces of 16,384 over 2 distinct); the per-shard view
 * keeps DESIGN Part A's 4096 limit and gives sums only. */
static void test_global_large_pieces(void **state)
{
    (void)state;
    static const char doc[] =
        "{'slices':{'m':{'shape':[2,2],'axes':['data','model']}},'computations':[{'name':'big',"
        "'slice':'m','global':true,'ops':["
        "{'op':'iota','out':'x','shape':[128,256],'sharding':['data',null]},"
        "{'op':'scale','out':'y','args':['x'],'factor':0.001}],'outputs':['y']}]}";
    static double want[128 * 256];
    int64_t id;
    json_decref(itest_run_ok(doc, &id));
    for (int e = 0; e < 128 * 256; e++)
        want[e] = (double)((float)e * 0.001f);
    check_global(id, "big.y", (const int64_t[]){128, 256}, 2, want);
    json_t *res = job_part(id, "result");
    const json_t *shards = json_object_get(json_object_get(res, "outputs"), "big.y");
    int ok = json_array_size(shards) == 4;
    for (size_t k = 0; ok && k < 4; k++) {
        const json_t *sh = json_array_get(shards, k);
        ok = !json_object_get(sh, "values") && json_is_number(json_object_get(sh, "sum"));
    }
    json_decref(res);
    T_CHECK(ok, "the per-shard view must list 4 shards with sums and no values of 16,384");
}

static void test_bad_requests(void **state)
{
    (void)state;
    hx_resp_t r;
    itest_submit_bad(
        "{'slices':{'m':{'shape':[2,2],'axes':['data','model']}},'computations':[{'name':'c',"
        "'slice':'m','global':true,'ops':[{'op':'fill','out':'a','shape':[4,4],'value':1,"
        "'sharding':['data','nope']}]}]}",
        "computations[0].ops[0].sharding");
    int64_t id;
    json_decref(itest_run_ok("{'slices':{'m':{'shape':[2]}},'computations':[{'name':'c',"
                             "'slice':'m','global':true,'ops':[{'op':'fill','out':'a',"
                             "'shape':[4],'value':1}],'outputs':['a']}]}", &id));
    char path[96];
    snprintf(path, sizeof path, "/v1/jobs/%lld/result?view=sideways", (long long)id);
    T_CHECK(hx_request(&itest_client, "GET", path, NULL, 0, &r) == 0, "GET failed");
    const char *field = json_string_value(json_object_get(r.json, "field"));
    int ok = r.status == 400 && field && strcmp(field, "view") == 0;
    hx_resp_clear(&r);
    T_CHECK(ok, "view=sideways: want 400 at view");
}

static int group_setup(void **state)
{
    (void)state;
    static const itest_island_t isl[] = {{"west=4x4", "west", 4, 4, NULL},
                                         {"east=2x4", "east", 2, 4, NULL}};
    return itest_start(isl, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_megatron_mlp, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_edge_softmax, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_cross_mesh_edge, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_mlp_training_example, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_ppermute_reshard, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_global_large_pieces, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_bad_requests, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
