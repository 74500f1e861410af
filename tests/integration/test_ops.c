/* test_ops.c - every op of the DESIGN.md table, run for real on a cluster
 * (west=4x4 by 4 workers of 4 devices, east=2x4 by 2 workers of 4) and
 * compared element-wise with support_ref.c, an independent reference.
 * East's workers run with --spin-us 0: their runners never poll the data
 * plane and every message reaches them through the progress thread's
 * wake-up (test_waiters_that_sleep), while west's poll as a host's do by
 * default.
 *
 * Shard values differ per shard (built from shard_index) so a value routed
 * to the wrong shard, or a collective combining the wrong peers, changes
 * the numbers. Each expect_* function computes what shard k of an output
 * must hold, from first principles. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "itest.h"
#include "support_ref.h"

typedef void (*expect_fn)(const char *key, int shard, rt_t *out);

static const int64_t D3[] = {3}, D23[] = {2, 3}, D2[] = {2};

/* Fetches the result of a succeeded job and compares every listed output
 * of every shard with expect(). */
static void check_outputs(int64_t id, const char *const *keys, int nkeys, int nshards,
                          expect_fn expect)
{
    json_t *res = hx_job_result(&itest_client, id);
    T_CHECK(res != NULL, "no result for job %" PRId64, id);
    char why[240] = "";
    for (int k = 0; k < nkeys && !why[0]; k++) {
        json_t *arr = json_object_get(json_object_get(res, "outputs"), keys[k]);
        if (!json_is_array(arr) || (int)json_array_size(arr) != nshards) {
            snprintf(why, sizeof why, "outputs[%s] missing or not %d shards", keys[k], nshards);
            break;
        }
        for (int s = 0; s < nshards; s++) {
            rt_t exp;
            char one[200];
            expect(keys[k], s, &exp);
            if (rt_compare(json_array_get(arr, (size_t)s), s, &exp, one, sizeof one) != 0) {
                snprintf(why, sizeof why, "%s shard %d: %s", keys[k], s, one);
                break;
            }
        }
    }
    json_decref(res);   /* before T_CHECK: a failure longjmps */
    T_CHECK(!why[0], "job %" PRId64 " %s", id, why);
}

/* Runs one document to success and checks its outputs. */
static void run_and_check(const char *doc_q, const char *const *keys, int nkeys, int nshards,
                          expect_fn expect)
{
    int64_t id;
    json_t *job = itest_run_ok(doc_q, &id);
    json_decref(job);
    check_outputs(id, keys, nkeys, nshards, expect);
}

#define NKEYS(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The usual shard-varying operand: iota[2,3] + k. */
static void base_a(int k, rt_t *out)
{
    rt_t t, i;
    rt_iota(&t, 2, D23);
    rt_scalar(&i, k);
    rt_binary(out, &t, &i, RT_ADD);
}

/* ---- fill, iota, shard_index ---- */

static void expect_fill(const char *key, int k, rt_t *out)
{
    if (strcmp(key, "c.i") == 0)
        rt_scalar(out, k);
    else if (strcmp(key, "c.x") == 0)
        rt_fill(out, 2, D23, 2.5);
    else if (strcmp(key, "c.t") == 0)
        rt_iota(out, 2, D23);
    else {
        rt_t x, i;
        rt_fill(&x, 2, D23, 2.5);
        rt_scalar(&i, k);
        rt_binary(out, &x, &i, RT_ADD);
    }
}

static void test_fill_iota_shard_index(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'fill','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
        "'ops':[{'op':'shard_index','out':'i'},"
        "{'op':'fill','out':'x','shape':[2,3],'value':2.5},"
        "{'op':'iota','out':'t','shape':[2,3]},"
        "{'op':'add','out':'y','args':['x','i']}],"
        "'outputs':['i','x','t','y']}]}";
    static const char *const keys[] = {"c.i", "c.x", "c.t", "c.y"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_fill);
}

/* ---- input: an edge between two computations ---- */

static void expect_input(const char *key, int k, rt_t *out)
{
    rt_t t, s, a;
    rt_iota(&t, 1, D3);
    rt_scalar(&s, 10.0 * k);
    rt_binary(&a, &t, &s, RT_ADD);
    if (strcmp(key, "q.w") == 0)
        rt_binary(out, &a, &a, RT_MUL);
    else
        *out = a;   /* p.a and q.z */
}

static void test_input(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'input','slices':{'sa':{'shape':[2,2]},'sb':{'shape':[2,2]}},'computations':["
        "{'name':'p','slice':'sa','ops':[{'op':'shard_index','out':'i'},"
        "{'op':'iota','out':'t','shape':[3]},{'op':'scale','out':'s','args':['i'],'factor':10},"
        "{'op':'add','out':'a','args':['t','s']}],'outputs':['a']},"
        "{'name':'q','slice':'sb','ops':[{'op':'input','out':'z','from':'p.a'},"
        "{'op':'mul','out':'w','args':['z','z']}],'outputs':['z','w']}]}";
    static const char *const keys[] = {"p.a", "q.z", "q.w"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_input);
}

/* ---- binary ops, tensor with tensor ---- */

static const struct {
    const char *key;
    rt_binop_t op;
} binops[] = {{"c.o_add", RT_ADD}, {"c.o_sub", RT_SUB}, {"c.o_mul", RT_MUL},
              {"c.o_div", RT_DIV}, {"c.o_max", RT_MAX_OP}, {"c.o_min", RT_MIN_OP}};

static void expect_binary(const char *key, int k, rt_t *out)
{
    rt_t a, b;
    base_a(k, &a);
    rt_fill(&b, 2, D23, 3.0);
    for (size_t i = 0; i < sizeof binops / sizeof binops[0]; i++)
        if (strcmp(key, binops[i].key) == 0)
            rt_binary(out, &a, &b, binops[i].op);
}

static void test_binary(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'binary','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
        "'ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2,3]},"
        "{'op':'add','out':'a','args':['t','i']},{'op':'fill','out':'b','shape':[2,3],'value':3},"
        "{'op':'add','out':'o_add','args':['a','b']},{'op':'sub','out':'o_sub','args':['a','b']},"
        "{'op':'mul','out':'o_mul','args':['a','b']},{'op':'div','out':'o_div','args':['a','b']},"
        "{'op':'max','out':'o_max','args':['a','b']},{'op':'min','out':'o_min','args':['a','b']}],"
        "'outputs':['o_add','o_sub','o_mul','o_div','o_max','o_min']}]}";
    static const char *const keys[] = {"c.o_add", "c.o_sub", "c.o_mul",
                                       "c.o_div", "c.o_max", "c.o_min"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_binary);
}

/* ---- binary ops with a scalar operand on either side ---- */

static void expect_broadcast(const char *key, int k, rt_t *out)
{
    rt_t a, s, s2, one, a1;
    base_a(k, &a);
    rt_scalar(&s, k + 1.0);
    rt_scalar(&s2, 2.0 * k);
    rt_scalar(&one, 1.0);
    rt_binary(&a1, &a, &one, RT_ADD);
    if (strcmp(key, "c.one") == 0) *out = one;
    else if (strcmp(key, "c.s") == 0) *out = s;
    else if (strcmp(key, "c.p1") == 0) rt_binary(out, &s, &a, RT_ADD);
    else if (strcmp(key, "c.p2") == 0) rt_binary(out, &s, &a, RT_SUB);
    else if (strcmp(key, "c.p3") == 0) rt_binary(out, &a, &s, RT_SUB);
    else if (strcmp(key, "c.p4") == 0) rt_binary(out, &a, &s, RT_MUL);
    else if (strcmp(key, "c.p5") == 0) rt_binary(out, &a, &s, RT_DIV);
    else if (strcmp(key, "c.p6") == 0) rt_binary(out, &s, &a1, RT_DIV);
    else if (strcmp(key, "c.p7") == 0) rt_binary(out, &a, &s2, RT_MAX_OP);
    else rt_binary(out, &s2, &a, RT_MIN_OP);
}

static void test_broadcast(void **state)
{
    (void)state;
    /* `one` comes from reduce_sum over all axes of fill([2], 0.5): a scalar. */
    static const char doc[] =
        "{'name':'bcast','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
        "'ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2,3]},"
        "{'op':'add','out':'a','args':['t','i']},{'op':'fill','out':'h','shape':[2],'value':0.5},"
        "{'op':'reduce_sum','out':'one','args':['h']},{'op':'add','out':'s','args':['i','one']},"
        "{'op':'scale','out':'s2','args':['i'],'factor':2},"
        "{'op':'add','out':'a1','args':['a','one']},"
        "{'op':'add','out':'p1','args':['s','a']},{'op':'sub','out':'p2','args':['s','a']},"
        "{'op':'sub','out':'p3','args':['a','s']},{'op':'mul','out':'p4','args':['a','s']},"
        "{'op':'div','out':'p5','args':['a','s']},{'op':'div','out':'p6','args':['s','a1']},"
        "{'op':'max','out':'p7','args':['a','s2']},{'op':'min','out':'p8','args':['s2','a']}],"
        "'outputs':['one','s','p1','p2','p3','p4','p5','p6','p7','p8']}]}";
    static const char *const keys[] = {"c.one", "c.s", "c.p1", "c.p2", "c.p3",
                                       "c.p4", "c.p5", "c.p6", "c.p7", "c.p8"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_broadcast);
}

/* ---- unary ops and scale ---- */

static void expect_unary(const char *key, int k, rt_t *out)
{
    rt_t a, three, d, q, h;
    base_a(k, &a);
    rt_fill(&three, 2, D23, 3.0);
    rt_binary(&d, &a, &three, RT_SUB);     /* j + k - 3: both signs */
    rt_scale(&q, &d, 0.25);
    rt_scale(&h, &d, 0.5);
    if (strcmp(key, "c.n") == 0) rt_unary(out, &d, RT_NEG);
    else if (strcmp(key, "c.r") == 0) rt_unary(out, &d, RT_RELU);
    else if (strcmp(key, "c.q") == 0) *out = q;
    else if (strcmp(key, "c.e") == 0) rt_unary(out, &q, RT_EXP);
    else rt_unary(out, &h, RT_TANH);
}

static void test_unary_scale(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'unary','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
        "'ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2,3]},"
        "{'op':'add','out':'a','args':['t','i']},"
        "{'op':'fill','out':'three','shape':[2,3],'value':3},"
        "{'op':'sub','out':'d','args':['a','three']},{'op':'neg','out':'n','args':['d']},"
        "{'op':'relu','out':'r','args':['d']},{'op':'scale','out':'q','args':['d'],'factor':0.25},"
        "{'op':'exp','out':'e','args':['q']},{'op':'scale','out':'h','args':['d'],'factor':0.5},"
        "{'op':'tanh','out':'th','args':['h']}],"
        "'outputs':['n','r','q','e','th']}]}";
    static const char *const keys[] = {"c.n", "c.r", "c.q", "c.e", "c.th"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_unary);
}

/* ---- matmul ---- */

static void expect_matmul(const char *key, int k, rt_t *out)
{
    (void)key;
    static const int64_t d34[] = {3, 4};
    rt_t a, u, b, i, b2;
    base_a(k, &a);
    rt_iota(&u, 2, d34);
    rt_scale(&b, &u, 0.5);
    rt_scalar(&i, k);
    rt_binary(&b2, &b, &i, RT_ADD);
    rt_matmul(out, &a, &b2);
}

static void test_matmul(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'matmul','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
        "'ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2,3]},"
        "{'op':'add','out':'a','args':['t','i']},{'op':'iota','out':'u','shape':[3,4]},"
        "{'op':'scale','out':'b','args':['u'],'factor':0.5},"
        "{'op':'add','out':'b2','args':['b','i']},"
        "{'op':'matmul','out':'m','args':['a','b2']}],'outputs':['m']}]}";
    static const char *const keys[] = {"c.m"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_matmul);
}

/* ---- transpose and reshape ---- */

static void expect_layout(const char *key, int k, rt_t *out)
{
    static const int64_t d32[] = {3, 2}, d6[] = {6}, d16[] = {1, 6};
    rt_t a, tr;
    base_a(k, &a);
    rt_transpose(&tr, &a);
    if (strcmp(key, "c.tr") == 0) *out = tr;
    else if (strcmp(key, "c.r1") == 0) rt_reshape(out, &a, 2, d32);
    else if (strcmp(key, "c.r2") == 0) rt_reshape(out, &a, 1, d6);
    else rt_reshape(out, &tr, 2, d16);
}

static void test_transpose_reshape(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'layout','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
        "'ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2,3]},"
        "{'op':'add','out':'a','args':['t','i']},{'op':'transpose','out':'tr','args':['a']},"
        "{'op':'reshape','out':'r1','args':['a'],'shape':[3,2]},"
        "{'op':'reshape','out':'r2','args':['a'],'shape':[6]},"
        "{'op':'reshape','out':'r3','args':['tr'],'shape':[1,6]}],"
        "'outputs':['tr','r1','r2','r3']}]}";
    static const char *const keys[] = {"c.tr", "c.r1", "c.r2", "c.r3"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_layout);
}

/* ---- reduce_sum: one axis (removed) or all ---- */

static void expect_reduce_sum(const char *key, int k, rt_t *out)
{
    static const int64_t d234[] = {2, 3, 4};
    rt_t a, t3, i, b;
    base_a(k, &a);
    rt_iota(&t3, 3, d234);
    rt_scalar(&i, k);
    rt_binary(&b, &t3, &i, RT_ADD);
    if (strcmp(key, "c.r0") == 0) rt_reduce_sum(out, &a, 0);
    else if (strcmp(key, "c.r1") == 0) rt_reduce_sum(out, &a, 1);
    else if (strcmp(key, "c.ra") == 0) rt_reduce_sum(out, &a, -1);
    else rt_reduce_sum(out, &b, 1);
}

static void test_reduce_sum(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'rsum','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
        "'ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2,3]},"
        "{'op':'add','out':'a','args':['t','i']},"
        "{'op':'reduce_sum','out':'r0','args':['a'],'axis':0},"
        "{'op':'reduce_sum','out':'r1','args':['a'],'axis':1},"
        "{'op':'reduce_sum','out':'ra','args':['a']},"
        "{'op':'iota','out':'t3','shape':[2,3,4]},{'op':'add','out':'b','args':['t3','i']},"
        "{'op':'reduce_sum','out':'rb','args':['b'],'axis':1}],"
        "'outputs':['r0','r1','ra','rb']}]}";
    static const char *const keys[] = {"c.r0", "c.r1", "c.ra", "c.rb"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_reduce_sum);
}

/* ---- rsqrt, log, reduce_max, softmax, einsum (DESIGN.md Part C's new
 * ops, per-shard mode) ---- */

static void expect_new_ops(const char *key, int k, rt_t *out)
{
    static const int64_t d234[] = {2, 3, 4}, d242[] = {2, 4, 2}, d43[] = {4, 3};
    rt_t a, one, p, t3, i, b3, u, w;
    base_a(k, &a);
    rt_scalar(&one, 1.0);
    rt_binary(&p, &a, &one, RT_ADD);
    rt_iota(&t3, 3, d234);
    rt_scalar(&i, k);
    rt_binary(&b3, &t3, &i, RT_ADD);
    rt_iota(&u, 3, d242);
    rt_iota(&w, 2, d43);
    if (strcmp(key, "c.rs") == 0) rt_unary(out, &p, RT_RSQRT);
    else if (strcmp(key, "c.lg") == 0) rt_unary(out, &p, RT_LOG);
    else if (strcmp(key, "c.m1") == 0) rt_reduce_max(out, &a, 1);
    else if (strcmp(key, "c.ma") == 0) rt_reduce_max(out, &a, -1);
    else if (strcmp(key, "c.s1") == 0) rt_softmax(out, &a, 1);
    else if (strcmp(key, "c.s0") == 0) rt_softmax(out, &b3, 0);
    else if (strcmp(key, "c.e_mm") == 0) rt_einsum(out, "ij,kj->ik", &a, &w);
    else if (strcmp(key, "c.e_t") == 0) rt_einsum(out, "ij->ji", &a, NULL);
    else if (strcmp(key, "c.e_sum") == 0) rt_einsum(out, "ij->", &a, NULL);
    else rt_einsum(out, "bij,bjk->bik", &b3, &u);      /* c.e_bmm */
}

static void test_new_ops(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'newops','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c','slice':'s',"
        "'ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2,3]},"
        "{'op':'add','out':'a','args':['t','i']},{'op':'fill','out':'one','shape':[],'value':1},"
        "{'op':'add','out':'p','args':['a','one']},"
        "{'op':'rsqrt','out':'rs','args':['p']},{'op':'log','out':'lg','args':['p']},"
        "{'op':'reduce_max','out':'m1','args':['a'],'axis':1},"
        "{'op':'reduce_max','out':'ma','args':['a']},"
        "{'op':'softmax','out':'s1','args':['a'],'axis':1},"
        "{'op':'iota','out':'t3','shape':[2,3,4]},{'op':'add','out':'b3','args':['t3','i']},"
        "{'op':'softmax','out':'s0','args':['b3'],'axis':0},"
        "{'op':'iota','out':'w','shape':[4,3]},{'op':'iota','out':'u','shape':[2,4,2]},"
        "{'op':'einsum','out':'e_mm','args':['a','w'],'spec':'ij,kj->ik'},"
        "{'op':'einsum','out':'e_t','args':['a'],'spec':'ij->ji'},"
        "{'op':'einsum','out':'e_sum','args':['a'],'spec':'ij->'},"
        "{'op':'einsum','out':'e_bmm','args':['b3','u'],'spec':'bij,bjk->bik'}],"
        "'outputs':['rs','lg','m1','ma','s1','s0','e_mm','e_t','e_sum','e_bmm']}]}";
    static const char *const keys[] = {"c.rs", "c.lg", "c.m1", "c.ma", "c.s1",
                                       "c.s0", "c.e_mm", "c.e_t", "c.e_sum", "c.e_bmm"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_new_ops);
}

/* ---- all_reduce sum/max/min over a [2,2] slice ---- */

/* A_k[j] = j * (k - 1.5) + k: max and min come from different shards per j. */
static void ar_operand(int k, rt_t *out)
{
    rt_t t, d, m, i;
    rt_iota(&t, 1, D3);
    rt_fill(&d, 1, D3, k - 1.5);
    rt_binary(&m, &t, &d, RT_MUL);
    rt_scalar(&i, k);
    rt_binary(out, &m, &i, RT_ADD);
}

static void expect_all_reduce(const char *key, int k, rt_t *out)
{
    (void)k;   /* every shard holds the same reduction */
    rt_binop_t op = strcmp(key, "c.rs") == 0 ? RT_ADD
                    : strcmp(key, "c.rmax") == 0 ? RT_MAX_OP : RT_MIN_OP;
    ar_operand(0, out);
    for (int s = 1; s < 4; s++) {
        rt_t x, acc = *out;
        ar_operand(s, &x);
        rt_binary(out, &acc, &x, op);
    }
}

static void test_all_reduce(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'allreduce','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c',"
        "'slice':'s','ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[3]},"
        "{'op':'fill','out':'h','shape':[3],'value':1.5},{'op':'sub','out':'d','args':['i','h']},"
        "{'op':'mul','out':'m','args':['t','d']},{'op':'add','out':'a','args':['m','i']},"
        "{'op':'all_reduce','out':'rs','args':['a'],'reduce':'sum'},"
        "{'op':'all_reduce','out':'rmax','args':['a'],'reduce':'max'},"
        "{'op':'all_reduce','out':'rmin','args':['a'],'reduce':'min'}],"
        "'outputs':['rs','rmax','rmin']}]}";
    static const char *const keys[] = {"c.rs", "c.rmax", "c.rmin"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_all_reduce);
}

/* ---- all_reduce over the whole west island: 16 shards on 4 workers ---- */

/* A job whose computation c, on a slice of `shape` of `island`, makes
 * x = iota([3]) + shard_index and outputs its all_reduce sum (ws) and max
 * (wm) over the slice's shards. */
#define ALL_REDUCES_DOC(name, shape, island)                                                \
    "{'name':'" name "','slices':{'s':{'shape':" shape ",'island':'" island "'}},"          \
    "'computations':[{'name':'c','slice':'s','ops':[{'op':'shard_index','out':'i'},"       \
    "{'op':'iota','out':'t','shape':[3]},{'op':'add','out':'x','args':['t','i']},"          \
    "{'op':'all_reduce','out':'ws','args':['x'],'reduce':'sum'},"                           \
    "{'op':'all_reduce','out':'wm','args':['x'],'reduce':'max'}],'outputs':['ws','wm']}]}"

static void expect_all_reduce16(const char *key, int k, rt_t *out)
{
    (void)k;
    rt_t t;
    rt_iota(&t, 1, D3);
    for (int64_t j = 0; j < 3; j++)   /* sum_k (j + k) = 16j + 120; max = j + 15 */
        t.v[j] = strcmp(key, "c.ws") == 0 ? 16.0 * (double)j + 120.0 : (double)j + 15.0;
    *out = t;
}

static void test_all_reduce_16_shards(void **state)
{
    (void)state;
    static const char *const keys[] = {"c.ws", "c.wm"};
    run_and_check(ALL_REDUCES_DOC("allreduce16", "[4,4]", "west"), keys, NKEYS(keys), 16,
                  expect_all_reduce16);
}

/* [3] per shard k of 8: j + k; sum_k = 8j + 28, max = j + 7. */
static void expect_all_reduce8(const char *key, int k, rt_t *out)
{
    (void)k;
    rt_t t;
    rt_iota(&t, 1, D3);
    for (int64_t j = 0; j < 3; j++)
        t.v[j] = strcmp(key, "c.ws") == 0 ? 8.0 * (double)j + 28.0 : (double)j + 7.0;
    *out = t;
}

/* Whether the log of every worker of island (west, east) holds needle. */
static int workers_log(const char *island, const char *needle)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "worker-%s-", island);
    int seen = 0;
    for (int w = 0; w < itest_cluster.nworkers; w++) {
        const hx_proc_t *p = &itest_cluster.workers[w];
        if (strncmp(p->name, prefix, strlen(prefix)) != 0)
            continue;
        char buf[65536];
        FILE *f = fopen(p->log_path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = '\0';
        if (!strstr(buf, needle))
            return 0;
        seen++;
    }
    return seen > 0;
}

/* Workers started with --spin-us 0 say so, and an all_reduce over both of
 * them (the whole [2,4] island) is exact: no taker polls, every message
 * comes through the progress thread. West's workers poll (the default). */
static void test_waiters_that_sleep(void **state)
{
    (void)state;
    T_CHECK(workers_log("east", "a waiting runner polls 0 us"), "east's workers poll");
    T_CHECK(workers_log("west", "a waiting runner polls ") &&
                !workers_log("west", "a waiting runner polls 0 us"),
            "west's workers do not say how long they poll, or do not poll");
    static const char *const keys[] = {"c.ws", "c.wm"};
    run_and_check(ALL_REDUCES_DOC("sleepers", "[2,4]", "east"), keys, NKEYS(keys), 8,
                  expect_all_reduce8);
}

/* ---- all_gather ---- */

/* [2]: j + 10k */
static void ag_operand(int k, rt_t *out)
{
    rt_t t, s;
    rt_iota(&t, 1, D2);
    rt_scalar(&s, 10.0 * k);
    rt_binary(out, &t, &s, RT_ADD);
}

static void expect_all_gather(const char *key, int k, rt_t *out)
{
    (void)k;
    static const int64_t d12[] = {1, 2};
    rt_t parts[4];
    for (int s = 0; s < 4; s++) {
        rt_t a;
        ag_operand(s, &a);
        if (strcmp(key, "c.g0") == 0)
            parts[s] = a;
        else
            rt_reshape(&parts[s], &a, 2, d12);
    }
    rt_concat(out, parts, 4, strcmp(key, "c.g1") == 0 ? 1 : 0);
}

static void test_all_gather(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'allgather','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c',"
        "'slice':'s','ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2]},"
        "{'op':'scale','out':'s','args':['i'],'factor':10},{'op':'add','out':'a','args':['t','s']},"
        "{'op':'all_gather','out':'g0','args':['a'],'axis':0},"
        "{'op':'reshape','out':'b','args':['a'],'shape':[1,2]},"
        "{'op':'all_gather','out':'g1','args':['b'],'axis':1},"
        "{'op':'all_gather','out':'g2','args':['b'],'axis':0}],"
        "'outputs':['g0','g1','g2']}]}";
    static const char *const keys[] = {"c.g0", "c.g1", "c.g2"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_all_gather);
}

/* ---- reduce_scatter ---- */

static void rs_operands(int k, rt_t *a, rt_t *b)
{
    static const int64_t d42[] = {4, 2}, d24[] = {2, 4};
    rt_t t, ip1, t2, d;
    rt_iota(&t, 2, d42);
    rt_scalar(&ip1, k + 1.0);
    rt_binary(a, &t, &ip1, RT_MUL);            /* (k+1) * iota[4,2] */
    rt_iota(&t2, 2, d24);
    rt_fill(&d, 2, d24, k - 1.5);
    rt_binary(b, &t2, &d, RT_MUL);             /* iota[2,4] * (k-1.5) */
}

static void expect_reduce_scatter(const char *key, int k, rt_t *out)
{
    int sum = strcmp(key, "c.rs") == 0;
    rt_t a, b, acc;
    rs_operands(0, &a, &b);
    acc = sum ? a : b;
    for (int s = 1; s < 4; s++) {
        rt_t prev = acc;
        rs_operands(s, &a, &b);
        rt_binary(&acc, &prev, sum ? &a : &b, sum ? RT_ADD : RT_MAX_OP);
    }
    rt_chunk(out, &acc, sum ? 0 : 1, k, 4);
}

static void test_reduce_scatter(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'rscatter','slices':{'s':{'shape':[4]}},'computations':[{'name':'c',"
        "'slice':'s','ops':[{'op':'shard_index','out':'i'},"
        "{'op':'fill','out':'h','shape':[2],'value':0.5},{'op':'reduce_sum','out':'one','args':['h']},"
        "{'op':'add','out':'ip1','args':['i','one']},{'op':'iota','out':'t','shape':[4,2]},"
        "{'op':'mul','out':'a','args':['t','ip1']},"
        "{'op':'reduce_scatter','out':'rs','args':['a'],'axis':0,'reduce':'sum'},"
        "{'op':'iota','out':'t2','shape':[2,4]},{'op':'fill','out':'f','shape':[2,4],'value':1.5},"
        "{'op':'sub','out':'d','args':['i','f']},{'op':'mul','out':'b','args':['t2','d']},"
        "{'op':'reduce_scatter','out':'rm','args':['b'],'axis':1,'reduce':'max'}],"
        "'outputs':['rs','rm']}]}";
    static const char *const keys[] = {"c.rs", "c.rm"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_reduce_scatter);
}

/* ---- ppermute: shard k receives shard (k - shift) mod n, or its
 * source in "pairs" (none: zeros) ---- */

static void expect_ppermute(const char *key, int k, rt_t *out)
{
    if (strcmp(key, "c.pp") == 0) {     /* pairs [[7,0],[0,7],[3,4],[5,2]] */
        static const int from[8] = {7, -1, 5, -1, 3, -1, -1, 0};
        if (from[k] < 0)
            rt_fill(out, 1, D2, 0.0);
        else
            ag_operand(from[k], out);
        return;
    }
    int shift = strcmp(key, "c.p1") == 0 ? 1 : strcmp(key, "c.pm1") == 0 ? -1 : 3;
    int src = ((k - shift) % 8 + 8) % 8;
    ag_operand(src, out);
}

static void test_ppermute(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'ppermute','slices':{'s':{'shape':[2,4]}},'computations':[{'name':'c',"
        "'slice':'s','ops':[{'op':'shard_index','out':'i'},{'op':'iota','out':'t','shape':[2]},"
        "{'op':'scale','out':'s','args':['i'],'factor':10},{'op':'add','out':'a','args':['t','s']},"
        "{'op':'ppermute','out':'p1','args':['a'],'shift':1},"
        "{'op':'ppermute','out':'pm1','args':['a'],'shift':-1},"
        "{'op':'ppermute','out':'p3','args':['a'],'shift':3},"
        "{'op':'ppermute','out':'pp','args':['a'],'pairs':[[7,0],[0,7],[3,4],[5,2]]}],"
        "'outputs':['p1','pm1','p3','pp']}]}";
    static const char *const keys[] = {"c.p1", "c.pm1", "c.p3", "c.pp"};
    run_and_check(doc, keys, NKEYS(keys), 8, expect_ppermute);
}

/* ---- all_to_all: chunk j of shard k goes to shard j, in k order ---- */

static void expect_all_to_all(const char *key, int k, rt_t *out)
{
    static const int64_t d43[] = {4, 3}, d24[] = {2, 4};
    int rows = strcmp(key, "c.x") == 0;   /* x: split 0, concat 1; y: split 1, concat 0 */
    rt_t parts[4];
    for (int s = 0; s < 4; s++) {
        rt_t t, off, a;
        rt_iota(&t, 2, rows ? d43 : d24);
        rt_scalar(&off, 100.0 * s);
        rt_binary(&a, &t, &off, RT_ADD);
        rt_chunk(&parts[s], &a, rows ? 0 : 1, k, 4);
    }
    rt_concat(out, parts, 4, rows ? 1 : 0);
}

static void test_all_to_all(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'alltoall','slices':{'s':{'shape':[4]}},'computations':[{'name':'c',"
        "'slice':'s','ops':[{'op':'shard_index','out':'i'},"
        "{'op':'scale','out':'s','args':['i'],'factor':100},"
        "{'op':'iota','out':'t','shape':[4,3]},{'op':'add','out':'a','args':['t','s']},"
        "{'op':'all_to_all','out':'x','args':['a'],'split_axis':0,'concat_axis':1},"
        "{'op':'iota','out':'u','shape':[2,4]},{'op':'add','out':'b','args':['u','s']},"
        "{'op':'all_to_all','out':'y','args':['b'],'split_axis':1,'concat_axis':0}],"
        "'outputs':['x','y']}]}";
    static const char *const keys[] = {"c.x", "c.y"};
    run_and_check(doc, keys, NKEYS(keys), 4, expect_all_to_all);
}

/* ---- compute (synthetic busy kernel) ---- */

static void expect_compute(const char *key, int k, rt_t *out)
{
    (void)key;
    rt_scalar(out, k);
}

static void test_compute(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'compute','slices':{'s':{'shape':[2,2]}},'computations':[{'name':'c',"
        "'slice':'s','ops':[{'op':'compute','out':'busy','us':20000},"
        "{'op':'shard_index','out':'i'}],'outputs':['i']}]}";
    static const char *const keys[] = {"c.i"};
    int64_t id;
    json_t *job = itest_run_ok(doc, &id);
    /* 20 ms of busy kernel must show in the job's own timestamps. */
    int64_t started = hx_job_time_us(job, "started"), finished = hx_job_time_us(job, "finished");
    if (started > 0 && finished > 0)
        T_CHECK(finished - started >= 20000, "compute 20000 us ran in %" PRId64 " us",
                finished - started);
    json_decref(job);
    check_outputs(id, keys, NKEYS(keys), 4, expect_compute);
}

/* ---- mesh_axes on a [2,4] slice: shard k = (r, c) with r = k/4, c = k%4 ---- */

static void expect_mesh_axes(const char *key, int k, rt_t *out)
{
    int r = k / 4, c = k % 4;
    if (strcmp(key, "c.r1") == 0)
        rt_scalar(out, 4.0 * r * 4 + 6);            /* sum over c' of 4r + c' */
    else if (strcmp(key, "c.r0") == 0)
        rt_scalar(out, 2.0 * c + 4);                /* c + (4 + c) */
    else if (strcmp(key, "c.m0") == 0)
        rt_scalar(out, 4.0 + c);
    else if (strcmp(key, "c.rall") == 0)
        rt_scalar(out, 28.0);                       /* 0 + ... + 7 */
    else if (strcmp(key, "c.g1") == 0) {
        static const int64_t d4[] = {4};
        rt_shape(out, 1, d4);
        for (int j = 0; j < 4; j++)
            out->v[j] = 4.0 * r + j;
    } else {
        rt_shape(out, 1, D2);
        out->v[0] = c;
        out->v[1] = 4.0 + c;
    }
}

static void test_mesh_axes(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'meshaxes','slices':{'s':{'shape':[2,4]}},'computations':[{'name':'c',"
        "'slice':'s','ops':[{'op':'shard_index','out':'i'},"
        "{'op':'all_reduce','out':'r1','args':['i'],'reduce':'sum','mesh_axes':[1]},"
        "{'op':'all_reduce','out':'r0','args':['i'],'reduce':'sum','mesh_axes':[0]},"
        "{'op':'all_reduce','out':'m0','args':['i'],'reduce':'max','mesh_axes':[0]},"
        "{'op':'all_reduce','out':'rall','args':['i'],'reduce':'sum','mesh_axes':[0,1]},"
        "{'op':'reshape','out':'v','args':['i'],'shape':[1]},"
        "{'op':'all_gather','out':'g1','args':['v'],'axis':0,'mesh_axes':[1]},"
        "{'op':'all_gather','out':'g0','args':['v'],'axis':0,'mesh_axes':[0]}],"
        "'outputs':['r1','r0','m0','rall','g1','g0']}]}";
    static const char *const keys[] = {"c.r1", "c.r0", "c.m0", "c.rall", "c.g1", "c.g0"};
    run_and_check(doc, keys, NKEYS(keys), 8, expect_mesh_axes);
}

/* ---- the DESIGN.md example, a two-island pipeline ---- */

static void expect_design(const char *key, int k, rt_t *out)
{
    (void)k;
    static const int64_t d4[] = {4};
    rt_fill(out, 1, d4, strcmp(key, "produce.z") == 0 ? 6.0 : 3.0);
}

/* The job's granted slice `name`: on `island` (if not NULL), with nshards
 * distinct devices, each with its coordinates on the island (both islands
 * here have 4 columns: index = 4 * row + column). */
static void check_slice(const json_t *job, const char *name, const char *island, int nshards)
{
    json_t *sl = json_object_get(json_object_get(job, "slices"), name);
    T_CHECK(json_is_object(sl), "job has no granted slice '%s'", name);
    const char *got = json_string_value(json_object_get(sl, "island"));
    if (island)
        T_CHECK(got && strcmp(got, island) == 0, "slice %s on island %s, expected %s", name,
                got ? got : "(none)", island);
    json_t *devs = json_object_get(sl, "devices");
    T_CHECK((int)json_array_size(devs) == nshards, "slice %s has %d devices, expected %d", name,
            (int)json_array_size(devs), nshards);
    for (int i = 0; i < nshards; i++) {
        json_t *d = json_array_get(devs, (size_t)i);
        json_t *c = json_object_get(d, "coords");
        json_int_t idx = json_integer_value(json_object_get(d, "index"));
        T_CHECK(json_array_size(c) == 2, "slice %s device %d lacks coords", name, i);
        T_CHECK(json_integer_value(json_array_get(c, 0)) == idx / 4 &&
                    json_integer_value(json_array_get(c, 1)) == idx % 4,
                "slice %s device %d (index %d) has the wrong coords", name, i, (int)idx);
        for (int j = 0; j < i; j++)
            T_CHECK(json_integer_value(json_object_get(d, "index")) !=
                        json_integer_value(json_object_get(json_array_get(devs, (size_t)j),
                                                           "index")),
                    "slice %s devices %d and %d are the same device", name, i, j);
    }
}

#define DESIGN_DOC(A_ISLAND)                                                                  \
    "{'name':'demo','priority':0,'slices':{'a':{'shape':[2,2]" A_ISLAND "},"                  \
    "'b':{'shape':[2,2],'island':'east'}},'computations':["                                   \
    "{'name':'produce','slice':'a','ops':[{'op':'shard_index','out':'i'},"                    \
    "{'op':'fill','out':'x','shape':[4],'value':1.0},{'op':'mul','out':'y','args':['x','i']}," \
    "{'op':'all_reduce','out':'z','args':['y'],'reduce':'sum'}],'outputs':['z']},"            \
    "{'name':'consume','slice':'b','ops':[{'op':'input','out':'z','from':'produce.z'},"       \
    "{'op':'scale','out':'w','args':['z'],'factor':0.5}],'outputs':['w']}]}"

static void test_design_example(void **state)
{
    (void)state;
    /* Verbatim DESIGN.md, then with slice a pinned to west (two islands for sure). */
    static const char *const docs[] = {DESIGN_DOC(""), DESIGN_DOC(",'island':'west'")};
    static const char *const keys[] = {"produce.z", "consume.w"};
    for (int d = 0; d < 2; d++) {
        int64_t id;
        json_t *job = itest_run_ok(docs[d], &id);
        check_slice(job, "a", d == 1 ? "west" : NULL, 4);
        check_slice(job, "b", "east", 4);
        json_decref(job);
        check_outputs(id, keys, NKEYS(keys), 4, expect_design);
    }
}

/* ---- a 3-stage chain west -> east -> west, last stage with two inputs ---- */

static void expect_chain(const char *key, int k, rt_t *out)
{
    rt_t t, s, x, y, z, r;
    rt_iota(&t, 1, D3);
    rt_scalar(&s, 10.0 * k);
    rt_binary(&x, &t, &s, RT_ADD);             /* c1.x = j + 10k */
    rt_scale(&y, &x, 2.0);                      /* c2.y */
    rt_shape(&z, 1, D3);                        /* c2.z = sum_k 2(j + 10k) = 8j + 120 */
    for (int j = 0; j < 3; j++)
        z.v[j] = 8.0 * j + 120.0;
    rt_binary(&r, &y, &x, RT_SUB);             /* c3.r = y - x = x */
    if (strcmp(key, "c1.x") == 0) *out = x;
    else if (strcmp(key, "c2.y") == 0) *out = y;
    else if (strcmp(key, "c2.z") == 0) *out = z;
    else if (strcmp(key, "c3.r") == 0) *out = r;
    else rt_binary(out, &r, &z, RT_ADD);
}

static void test_chain_three_stages(void **state)
{
    (void)state;
    static const char doc[] =
        "{'name':'chain3','slices':{'s1':{'shape':[2,2],'island':'west'},"
        "'s2':{'shape':[2,2],'island':'east'},'s3':{'shape':[2,2],'island':'west'}},"
        "'computations':["
        "{'name':'c1','slice':'s1','ops':[{'op':'shard_index','out':'i'},"
        "{'op':'iota','out':'t','shape':[3]},{'op':'scale','out':'s','args':['i'],'factor':10},"
        "{'op':'add','out':'x','args':['t','s']}],'outputs':['x']},"
        "{'name':'c2','slice':'s2','ops':[{'op':'input','out':'u','from':'c1.x'},"
        "{'op':'scale','out':'y','args':['u'],'factor':2},"
        "{'op':'all_reduce','out':'z','args':['y'],'reduce':'sum'}],'outputs':['y','z']},"
        "{'name':'c3','slice':'s3','ops':[{'op':'input','out':'p','from':'c2.y'},"
        "{'op':'input','out':'q','from':'c1.x'},{'op':'input','out':'zz','from':'c2.z'},"
        "{'op':'sub','out':'r','args':['p','q']},{'op':'add','out':'o','args':['r','zz']}],"
        "'outputs':['r','o']}]}";
    static const char *const keys[] = {"c1.x", "c2.y", "c2.z", "c3.r", "c3.o"};
    int64_t id;
    json_t *job = itest_run_ok(doc, &id);
    check_slice(job, "s1", "west", 4);
    check_slice(job, "s2", "east", 4);
    check_slice(job, "s3", "west", 4);
    json_decref(job);
    check_outputs(id, keys, NKEYS(keys), 4, expect_chain);
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const no_spin[] = {"--spin-us", "0", NULL};
    static const itest_island_t isl[] = {{"west=4x4", "west", 4, 4, NULL},
                                         {"east=2x4", "east", 2, 4, no_spin}};
    return itest_start(isl, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_fill_iota_shard_index, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_input, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_binary, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_broadcast, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_unary_scale, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_matmul, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_transpose_reshape, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_reduce_sum, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_new_ops, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_all_reduce, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_all_reduce_16_shards, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_waiters_that_sleep, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_all_gather, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_reduce_scatter, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_ppermute, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_all_to_all, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_compute, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_mesh_axes, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_design_example, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_chain_three_stages, itest_cancel_leftovers),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
