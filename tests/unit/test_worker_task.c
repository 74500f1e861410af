/* test_worker_task.c - the worker's host-task decoder (workers/wtask.c) on
 * the task's "full_values": which shards report a global output's piece
 * with all its values, and what is refused; and the placement's and the
 * task's geometry rules (a box inside its mesh, procs that do not overlap,
 * every shard held, shards of this proc on distinct devices, the group
 * key), each refused on its own; and the computation compiled at parse,
 * or the reason it is not. (The rest of the decoder is fuzzed by
 * tests/fuzz/fuzz_task.c and run by every integration test.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../workers/wtask.c"

/* One proc holding the whole 2x4 island; slice a is all of it. */
static const char place_json[] =
    "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":8}],"
    "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[2,4]}}}";

/* Parses a task over shards 0..3 of slice a ([2,4]) computing `comp` with
 * input shapes `shapes` (JSON texts) and `full` as its "full_values" (NULL:
 * none). Returns 0 and *out, or -1 with err set. */
static int parse_task(const char *comp, const char *shapes, const char *full, wtask_t **out,
                      char *err, size_t errlen)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"task\":1,\"job\":5,\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\","
             "\"slice_shape\":[2,4],\"computation\":%s,\"input_shapes\":%s,"
             "\"shards\":[0,1,2,3],\"devices\":[0,1,2,3],\"sends\":[]%s%s}",
             comp, shapes, full ? ",\"full_values\":" : "", full ? full : "");
    json_t *pj = json_loads(place_json, 0, NULL), *tj = json_loads(text, 0, NULL);
    assert_non_null(pj);
    assert_non_null(tj);
    wplace_t *place = NULL;
    int64_t id;
    assert_int_equal(wplace_parse(pj, "127.0.0.1:4000", &place, err, errlen), 0);
    int rc = wtask_parse(tj, place, 4, out, &id, err, errlen);
    wplace_unref(place);
    json_decref(pj);
    json_decref(tj);
    return rc;
}

static int parse_with(const char *full, wtask_t **out, char *err, size_t errlen)
{
    return parse_task("{}", "{}", full, out, err, errlen);
}

/* The computation is compiled once, at parse, against the task's slice
 * shape and input shapes; a task whose computation does not compile still
 * parses (it fails when it runs) and carries the compiler's reason. */
static void test_task_compiled_at_parse(void **state)
{
    (void)state;
    static const char comp[] =
        "{\"name\":\"c1\",\"slice\":\"a\",\"ops\":["
        "{\"op\":\"input\",\"out\":\"p\",\"from\":\"c0.x\"},"
        "{\"op\":\"all_reduce\",\"out\":\"m\",\"args\":[\"p\"],\"reduce\":\"max\"}],"
        "\"outputs\":[\"m\"]}";
    wtask_t *t = NULL;
    char err[256] = "";
    assert_int_equal(parse_task(comp, "{\"c0.x\":[3]}", NULL, &t, err, sizeof err), 0);
    assert_non_null(t->plan);
    assert_null(t->plan_err);
    assert_int_equal(t->plan->nshards, 8);
    assert_int_equal(t->plan->nops, 2);
    assert_int_equal(t->plan->ops[0].shape.rank, 1);
    assert_int_equal(t->plan->ops[0].shape.dim[0], 3);
    wtask_free(t);
    /* The input's shape is not among input_shapes. */
    assert_int_equal(parse_task(comp, "{}", NULL, &t, err, sizeof err), 0);
    assert_null(t->plan);
    assert_non_null(t->plan_err);
    assert_non_null(strstr(t->plan_err, "compile: ops[0].from"));
    wtask_free(t);
    assert_int_equal(parse_task("{\"name\":\"c\",\"slice\":\"a\",\"ops\":[{\"op\":\"nosuch\","
                                "\"out\":\"y\"}],\"outputs\":[\"y\"]}", "{}", NULL, &t, err,
                                sizeof err), 0);
    assert_null(t->plan);
    assert_non_null(strstr(t->plan_err, "compile: ops[0].op"));
    wtask_free(t);
    /* Still refused outright: a computation or input_shapes not an object. */
    assert_int_equal(parse_task("[]", "{}", NULL, &t, err, sizeof err), -1);
    assert_null(t);
    assert_int_equal(parse_task(comp, "[]", NULL, &t, err, sizeof err), -1);
    assert_null(t);
}

/* y replicated over axis 0 (rows of the 2x4 slice): only row 0's shards
 * (0..3) report it whole; z replicated over axis 1: only column 0 (0, 4);
 * w over both: only shard 0; a value not listed: nobody. */
static void test_full_values_replicas(void **state)
{
    (void)state;
    wtask_t *t = NULL;
    char err[256] = "";
    assert_int_equal(parse_with("{\"y\":[0],\"z\":[1],\"w\":[0,1],\"v\":[]}", &t, err,
                                sizeof err), 0);
    for (int k = 0; k < 8; k++) {
        assert_int_equal(wtask_full_values(t, "y", k), k < 4);
        assert_int_equal(wtask_full_values(t, "z", k), k % 4 == 0);
        assert_int_equal(wtask_full_values(t, "w", k), k == 0);
        assert_int_equal(wtask_full_values(t, "v", k), 1);   /* no replicas: every piece */
        assert_int_equal(wtask_full_values(t, "other", k), 0);
    }
    wtask_free(t);
    assert_int_equal(parse_with(NULL, &t, err, sizeof err), 0);
    assert_int_equal(wtask_full_values(t, "y", 0), 0);
    wtask_free(t);
}

static void test_full_values_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "[]",                   /* not an object */
        "{\"y\":0}",            /* axes not an array */
        "{\"y\":[2]}",          /* axis outside the 2-D slice */
        "{\"y\":[-1]}",
        "{\"y\":[0,0]}",        /* an axis twice */
        "{\"y\":[\"0\"]}",      /* not an integer */
        "{\"a234567890123456789012345678901234567890123456789012345678901234\":[0]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wtask_t *t = NULL;
        char err[256] = "";
        assert_int_equal(parse_with(bad[i], &t, err, sizeof err), -1);
        assert_null(t);
        assert_non_null(strstr(err, "full_values"));
    }
}

/* A placement (text) parsed as seen by the proc at 127.0.0.1:4000: 0 and
 * *out, or -1 with err set. */
static int place_from(const char *text, wplace_t **out, char *err, size_t errlen)
{
    json_t *pj = json_loads(text, 0, NULL);
    assert_non_null(pj);
    int rc = wplace_parse(pj, "127.0.0.1:4000", out, err, errlen);
    json_decref(pj);
    if (rc != 0)
        assert_null(*out);
    return rc;
}

/* Each placement breaks one rule and is refused, naming it; the same
 * placement with the rule kept is taken (so the refusal is that rule's). */
static void test_placement_refused(void **state)
{
    (void)state;
    static const struct {
        const char *bad, *good, *why;
    } cases[] = {
        {   /* the box leaves the mesh on axis 0 */
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":8}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[1,0],\"box\":[2,4]}}}",
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":8}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[1,0],\"box\":[1,4]}}}",
            "box leaves the mesh",
        },
        {   /* a box of no devices on an axis */
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":8}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[0,4]}}}",
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":8}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[1,4]}}}",
            "mesh, origin and box",
        },
        {   /* a mesh of more devices than an island has */
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":8}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[4097],\"origin\":[0],\"box\":[1]}}}",
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":8}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[4096],\"origin\":[0],\"box\":[1]}}}",
            "mesh, origin and box",
        },
        {   /* two procs of one island both hold devices 4..7 */
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":8},"
            "{\"addr\":\"127.0.0.1:4001\",\"island\":\"west\",\"first\":4,\"count\":4}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[2,4]}}}",
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":4},"
            "{\"addr\":\"127.0.0.1:4001\",\"island\":\"west\",\"first\":4,\"count\":4}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[2,4]}}}",
            "both hold device 4",
        },
        {   /* devices 4..7 of the box held by no proc */
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":4}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[2,4]}}}",
            "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":4}],"
            "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[1,4]}}}",
            "no proc holds shard 4",
        },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wplace_t *p = NULL;
        char err[256] = "";
        assert_int_equal(place_from(cases[i].good, &p, err, sizeof err), 0);
        wplace_unref(p);
        p = NULL;
        assert_int_equal(place_from(cases[i].bad, &p, err, sizeof err), -1);
        if (!strstr(err, cases[i].why))
            fail_msg("case %zu: '%s' does not say '%s'", i, err, cases[i].why);
    }
}

/* The group key: exactly 32 hex digits, either case. */
static void test_group_key(void **state)
{
    (void)state;
    wplace_t *p = NULL;
    char err[256] = "";
    assert_int_equal(place_from(place_json, &p, err, sizeof err), 0);
    static const char *const bad[] = {
        "00112233445566778899aabbccddeeg0",     /* not a hex digit */
        "0011223344556677 899aabbccddeeff",
        "00112233445566778899aabbccddeef",      /* 31 digits */
        "00112233445566778899aabbccddeeff0",    /* 33 */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *k = json_string(bad[i]);
        assert_int_equal(wplace_set_key(p, k, err, sizeof err), -1);
        assert_non_null(strstr(err, "group key"));
        json_decref(k);
    }
    json_t *k = json_string("00112233445566778899AAbbCCddEEff");
    assert_int_equal(wplace_set_key(p, k, err, sizeof err), 0);
    json_decref(k);
    assert_int_equal(p->key.b[0], 0x00);
    assert_int_equal(p->key.b[5], 0x55);
    assert_int_equal(p->key.b[10], 0xaa);
    assert_int_equal(p->key.b[15], 0xff);
    wplace_unref(p);
}

/* A task over `shards`/`devices` of slice a (2x4) with slice_shape `sshape`
 * and `sends`, parsed against placement `place` by a worker of 4 devices.
 * Returns wtask_parse's result (freeing the task); err set on -1. */
static int task_with(const char *place, const char *sshape, const char *shards,
                     const char *devices, const char *sends, char *err, size_t errlen)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"task\":1,\"job\":5,\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\","
             "\"slice_shape\":%s,\"computation\":{},\"input_shapes\":{},"
             "\"shards\":%s,\"devices\":%s,\"sends\":%s}", sshape, shards, devices, sends);
    json_t *tj = json_loads(text, 0, NULL);
    assert_non_null(tj);
    wplace_t *p = NULL;
    assert_int_equal(place_from(place, &p, err, errlen), 0);
    wtask_t *t = NULL;
    int64_t id;
    int rc = wtask_parse(tj, p, 4, &t, &id, err, errlen);
    if (rc != 0)
        assert_null(t);
    wtask_free(t);
    wplace_unref(p);
    json_decref(tj);
    return rc;
}

/* Two procs of 4 devices each (this worker holds 0..3 of slice a); slice
 * b is two devices of it. */
static const char two_procs[] =
    "{\"procs\":[{\"addr\":\"127.0.0.1:4000\",\"island\":\"west\",\"first\":0,\"count\":4},"
    "{\"addr\":\"127.0.0.1:4001\",\"island\":\"west\",\"first\":4,\"count\":4}],"
    "\"slices\":{\"a\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[2,4]},"
    "\"b\":{\"island\":\"west\",\"mesh\":[2,4],\"origin\":[0,0],\"box\":[1,2]}}}";

static void test_task_shards_refused(void **state)
{
    (void)state;
    char err[256] = "";
    static const char send_a[] = "[{\"value\":\"y\",\"comp\":1,\"op\":0,\"slice\":\"a\"}]";
    assert_int_equal(task_with(two_procs, "[2,4]", "[0,1,2,3]", "[3,2,1,0]", send_a, err,
                               sizeof err), 0);
    assert_int_equal(task_with(two_procs, "[8]", "[0,3]", "[0,1]", "[]", err, sizeof err), 0);
    static const struct {
        const char *sshape, *shards, *devices, *sends, *why;
    } bad[] = {
        {"[2,2]", "[0,1]", "[0,1]", "[]", "slice_shape"},      /* 4 shards, the slice has 8 */
        {"[2,4]", "[0,0]", "[0,1]", "[]", "shards[1]"},        /* a shard twice */
        {"[2,4]", "[1,0]", "[0,1]", "[]", "shards[1]"},        /* decreasing */
        {"[2,4]", "[3,4]", "[0,1]", "[]", "shards[1]"},        /* shard 4 is the other proc's */
        {"[2,4]", "[0,1]", "[2,2]", "[]", "devices[1]"},       /* a device twice */
        {"[2,4]", "[0,1]", "[0,4]", "[]", "devices[1]"},       /* not one of this worker's */
        /* slice b has 2 shards: no edge carries shard 3 there */
        {"[2,4]", "[0,3]", "[0,1]", "[{\"value\":\"y\",\"comp\":1,\"op\":0,\"slice\":\"b\"}]",
         "sends[0].slice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(task_with(two_procs, bad[i].sshape, bad[i].shards, bad[i].devices,
                                   bad[i].sends, err, sizeof err), -1);
        if (!strstr(err, bad[i].why))
            fail_msg("case %zu: '%s' does not say '%s'", i, err, bad[i].why);
    }
    /* The same send to b from shards it has is taken. */
    assert_int_equal(task_with(two_procs, "[2,4]", "[0,1]", "[0,1]",
                               "[{\"value\":\"y\",\"comp\":1,\"op\":0,\"slice\":\"b\"}]", err,
                               sizeof err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_values_replicas),
        cmocka_unit_test(test_full_values_refused),
        cmocka_unit_test(test_placement_refused),
        cmocka_unit_test(test_group_key),
        cmocka_unit_test(test_task_shards_refused),
        cmocka_unit_test(test_task_compiled_at_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
