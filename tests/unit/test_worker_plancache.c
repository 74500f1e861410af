/* test_worker_plancache.c - the worker's plan cache (workers/plancache.c):
 * computations that differ only in their name and their inputs' sources
 * share one compiled plan; everything else the compiler reads keeps them
 * apart (an input's shape, the slice's shape, an op); a computation that
 * would not compile, or whose name its processes are told (`run`), is
 * never answered from the cache; a plan outlives the cache's reference
 * while a task holds one. Exactness over arbitrary texts is fuzzed
 * (tests/fuzz/fuzz_task.c compiles every decoded task's computation again
 * on its own and compares). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "plancache.h"

/* Every "from" resolves to [n] where n is the int at ctx; "c9.y" never. */
static int input_any(void *ctx, const char *from, shape_t *shape)
{
    if (strcmp(from, "c9.y") == 0)
        return -1;
    *shape = (shape_t){1, {*(const int64_t *)ctx}};
    return 0;
}

/* One chain step: NAME reads FROM and reduces it with REDUCE. */
static void step(char *buf, size_t n, const char *name, const char *from, const char *reduce)
{
    snprintf(buf, n,
             "{\"name\":%s,\"slice\":\"a\",\"ops\":["
             "{\"op\":\"input\",\"out\":\"p\",\"from\":%s},"
             "{\"op\":\"all_reduce\",\"out\":\"m\",\"args\":[\"p\"],\"reduce\":\"%s\"}],"
             "\"outputs\":[\"m\"]}", name, from, reduce);
}

typedef struct got {
    plan_ref_t *ref;
    const comp_t *plan;
    int rc;
    err_t e;
} got_t;

static got_t compile(const char *text, const shape_t *slice, int64_t len)
{
    got_t g = {0};
    g.rc = plancache_compile(text, strlen(text), slice, input_any, &len, &g.ref, &g.plan, &g.e);
    return g;
}

static int64_t hits(void)
{
    plancache_stats_t s;
    plancache_get_stats(&s);
    return s.hits;
}

static int64_t bypassed(void)
{
    plancache_stats_t s;
    plancache_get_stats(&s);
    return s.bypassed;
}

static const shape_t slice24 = {2, {2, 4}};

static int setup(void **state)
{
    (void)state;
    plancache_clear();
    return 0;
}

/* A chain's steps: another name, another producer, one plan. */
static void test_chain_steps_share_a_plan(void **state)
{
    (void)state;
    char a[512], b[512];
    step(a, sizeof a, "\"c1\"", "\"c0.x\"", "max");
    step(b, sizeof b, "\"c2\"", "\"c1.x\"", "max");
    got_t ga = compile(a, &slice24, 3);
    int64_t h = hits();
    got_t gb = compile(b, &slice24, 3);
    assert_int_equal(ga.rc, 0);
    assert_int_equal(gb.rc, 0);
    assert_int_equal(hits(), h + 1);
    assert_ptr_equal(ga.plan, gb.plan);
    assert_int_equal(gb.plan->nshards, 8);
    assert_int_equal(gb.plan->ops[0].shape.dim[0], 3);
    plancache_unref(ga.ref);
    plancache_unref(gb.ref);
}

/* What the compiler reads besides names keeps plans apart: the input's
 * shape, the slice's shape, an op's attribute. */
static void test_what_compiles_differently_misses(void **state)
{
    (void)state;
    char a[512], b[512];
    step(a, sizeof a, "\"c1\"", "\"c0.x\"", "max");
    step(b, sizeof b, "\"c1\"", "\"c0.x\"", "sum");
    const shape_t slice42 = {2, {4, 2}}, slice8 = {1, {8}};
    got_t g0 = compile(a, &slice24, 3);
    got_t g[4] = {compile(a, &slice24, 5), compile(a, &slice42, 3), compile(a, &slice8, 3),
                  compile(b, &slice24, 3)};
    assert_int_equal(g0.rc, 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(g[i].rc, 0);
        assert_ptr_not_equal(g[i].plan, g0.plan);
    }
    assert_int_equal(g[0].plan->ops[0].shape.dim[0], 5);
    assert_int_equal(g[1].plan->slice_shape.dim[0], 4);
    assert_int_equal(g[2].plan->slice_shape.rank, 1);
    assert_int_not_equal(g[3].plan->ops[1].reduce, g0.plan->ops[1].reduce);
    plancache_unref(g0.ref);
    for (int i = 0; i < 4; i++)
        plancache_unref(g[i].ref);
}

/* A step that would not compile is not answered by its cached twin: an
 * invalid name, a "from" that is not "computation.value" or does not
 * resolve, a name that is not a string. */
static void test_what_would_not_compile_is_compiled(void **state)
{
    (void)state;
    char ok[512], bad[512];
    step(ok, sizeof ok, "\"c1\"", "\"c0.x\"", "max");
    got_t g = compile(ok, &slice24, 3);
    assert_int_equal(g.rc, 0);
    static const char *const names[][2] = {
        {"\"c 1\"", "\"c0.x\""}, {"\"\"", "\"c0.x\""}, {"7", "\"c0.x\""},
        {"\"c1\"", "\"c0x\""}, {"\"c1\"", "\"c0.\""}, {"\"c1\"", "\"c9.y\""},
        {"\"c1\"", "[\"c0.x\"]"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        step(bad, sizeof bad, names[i][0], names[i][1], "max");
        got_t b = compile(bad, &slice24, 3);
        assert_int_equal(b.rc, 400);
        assert_null(b.ref);
        assert_null(b.plan);
    }
    plancache_unref(g.ref);
}

/* Escaped text and user programs go past the cache, and compile. */
static void test_bypassed_but_compiled(void **state)
{
    (void)state;
    /* A backslash anywhere: the scan would no longer see the structure. */
    static const char esc[] =
        "{\"name\":\"c1\",\"slice\":\"\\u0061\",\"ops\":[{\"op\":\"input\",\"out\":\"p\","
        "\"from\":\"c0.x\"}],\"outputs\":[\"p\"]}";
    int64_t by = bypassed();
    got_t e1 = compile(esc, &slice24, 3), e2 = compile(esc, &slice24, 3);
    assert_int_equal(e1.rc, 0);
    assert_int_equal(e2.rc, 0);
    assert_ptr_not_equal(e1.plan, e2.plan);
    assert_string_equal(e1.plan->name, "c1");
    char r1[512], r2[512];
    /* The program's text, lowered as the controller sends it. */
    static const char low[] =
        "{\"name\":\"%s\",\"slice\":\"a\",\"run\":{\"command\":[\"/bin/true\"]},"
        "\"ops\":[{\"op\":\"input\",\"out\":\"p\",\"from\":\"c0.x\"},"
        "{\"op\":\"run_output\",\"out\":\"y\"}],\"outputs\":[\"y\"]}";
    snprintf(r1, sizeof r1, low, "r1");
    snprintf(r2, sizeof r2, low, "r2");
    got_t g1 = compile(r1, &slice24, 3), g2 = compile(r2, &slice24, 3);
    assert_int_equal(g1.rc, 0);
    assert_int_equal(g2.rc, 0);
    assert_string_equal(g1.plan->name, "r1");
    assert_string_equal(g2.plan->name, "r2");
    assert_int_equal(bypassed(), by + 4);
    plancache_unref(e1.ref);
    plancache_unref(e2.ref);
    plancache_unref(g1.ref);
    plancache_unref(g2.ref);
}

/* A computation longer than PLANCACHE_KEY_MAX is compiled every time. */
static void test_long_text_bypassed(void **state)
{
    (void)state;
    size_t cap = PLANCACHE_KEY_MAX + 4096, n = 0;
    char *t = malloc(cap);
    assert_non_null(t);
    n += (size_t)snprintf(t + n, cap - n, "{\"name\":\"big\",\"slice\":\"a\",\"ops\":["
                          "{\"op\":\"fill\",\"out\":\"v0\",\"shape\":[],\"value\":1.0}");
    for (int i = 1; n + 128 < PLANCACHE_KEY_MAX + 2048; i++)
        n += (size_t)snprintf(t + n, cap - n,
                              ",{\"op\":\"add\",\"out\":\"v%d\",\"args\":[\"v%d\",\"v0\"]}", i,
                              i - 1);
    snprintf(t + n, cap - n, "],\"outputs\":[\"v0\"]}");
    int64_t by = bypassed();
    got_t g = compile(t, &slice24, 3);
    assert_int_equal(g.rc, 0);
    assert_int_equal(bypassed(), by + 1);
    plancache_unref(g.ref);
    free(t);
}

/* The cache lets go of its plans (cleared, or a slot taken by another);
 * a task's reference keeps its plan whole until the task drops it. */
static void test_plan_outlives_the_cache(void **state)
{
    (void)state;
    char a[512];
    step(a, sizeof a, "\"c1\"", "\"c0.x\"", "max");
    got_t g = compile(a, &slice24, 3);
    assert_int_equal(g.rc, 0);
    plancache_clear();
    assert_int_equal(g.plan->nops, 2);     /* ASan: still allocated */
    assert_int_equal(g.plan->ops[0].shape.dim[0], 3);
    int64_t h = hits();
    got_t g2 = compile(a, &slice24, 3);    /* listed again, a new plan */
    assert_int_equal(hits(), h);
    assert_ptr_not_equal(g2.plan, g.plan);
    plancache_unref(g.ref);
    plancache_unref(g2.ref);
    plancache_unref(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_chain_steps_share_a_plan, setup),
        cmocka_unit_test_setup(test_what_compiles_differently_misses, setup),
        cmocka_unit_test_setup(test_what_would_not_compile_is_compiled, setup),
        cmocka_unit_test_setup(test_bypassed_but_compiled, setup),
        cmocka_unit_test_setup(test_long_text_bypassed, setup),
        cmocka_unit_test_setup(test_plan_outlives_the_cache, setup),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    plancache_clear();
    return rc;
}
