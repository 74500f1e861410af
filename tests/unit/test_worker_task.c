/* test_worker_task.c - the worker's host-task decoder (workers/wtask.c) on
 * the task's "full_values": which shards report a global output's piece
 * with all its values, and what is refused; and the placement's and the
 * task's geometry rules (a box inside its mesh, procs that do not overlap,
 * every shard held, shards of this proc on distinct devices, the group
 * key), each refused on its own; and the computation compiled at parse,
 * or the reason it is not; a TASK's text read in any member order, and a
 * group walked as the worker walks a poll answer. (The rest of the decoder is fuzzed by
 * tests/fuzz/fuzz_task.c and run by every integration test.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../../workers/wtask.c"
#include "../../workers/wtask_read.c"

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
    json_t *pj = json_loads(place_json, 0, NULL);
    assert_non_null(pj);
    wplace_t *place = NULL;
    int64_t id;
    assert_int_equal(wplace_parse(pj, "127.0.0.1:4000", &place, err, errlen), 0);
    int rc = wtask_parse(text, strlen(text), place, 4, out, &id, err, errlen);
    wplace_unref(place);
    json_decref(pj);
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
        assert_int_equal(wplace_set_key(p, bad[i], err, sizeof err), -1);
        assert_non_null(strstr(err, "group key"));
    }
    assert_int_equal(wplace_set_key(p, NULL, err, sizeof err), -1);
    assert_int_equal(wplace_set_key(p, "00112233445566778899AAbbCCddEEff", err, sizeof err), 0);
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
    wplace_t *p = NULL;
    assert_int_equal(place_from(place, &p, err, errlen), 0);
    wtask_t *t = NULL;
    int64_t id;
    int rc = wtask_parse(text, strlen(text), p, 4, &t, &id, err, errlen);
    if (rc != 0)
        assert_null(t);
    wtask_free(t);
    wplace_unref(p);
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

/* A TASK's text is read as it comes: members in any order, unknown ones
 * skipped; a member given twice, or text after the object, refuses it. */
static void test_task_text(void **state)
{
    (void)state;
    static const char *const good[] = {
        /* the controller's order */
        "{\"task\":1,\"job\":5,\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\","
        "\"slice_shape\":[2,4],\"computation\":{},\"input_shapes\":{},"
        "\"shards\":[0,1],\"devices\":[0,1],\"sends\":[]}",
        /* reversed, with a member nobody knows */
        " { \"sends\" : [ ] , \"devices\":[0,1],\"shards\":[0,1],\"future\":{\"x\":[1,{}]},"
        "\"input_shapes\":{},\"computation\":{},\"slice_shape\":[2,4],\"slice\":\"a\","
        "\"seq\":3,\"comp\":0,\"attempt\":0,\"job\":5,\"task\":1 } ",
    };
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"{\"task\":1,\"task\":1,\"job\":5,\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\","
         "\"slice_shape\":[2,4],\"computation\":{},\"shards\":[0],\"devices\":[0]}",
         "'task' given twice"},
        {"{\"task\":1,\"job\":5,\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\","
         "\"slice_shape\":[2,4],\"computation\":{},\"computation\":{},\"shards\":[0],"
         "\"devices\":[0]}", "'computation' given twice"},
        {"{\"task\":1,\"job\":5,\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\","
         "\"slice_shape\":[2,4],\"computation\":{},\"shards\":[0],\"devices\":[0]} x",
         "one JSON object"},
        {"{\"task\":1,\"job\":5,\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\","
         "\"slice_shape\":[2,4],\"computation\":{},\"shards\":[0],\"devices\":[0]",
         "not JSON"},
    };
    wplace_t *p = NULL;
    char err[256] = "";
    wtask_t *t = NULL;
    int64_t id;
    assert_int_equal(place_from(place_json, &p, err, sizeof err), 0);
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        assert_int_equal(wtask_parse(good[i], strlen(good[i]), p, 4, &t, &id, err, sizeof err),
                         0);
        assert_int_equal(id, 1);
        assert_int_equal(t->job, 5);
        assert_int_equal(t->seq, 3);
        assert_int_equal(t->nlocal, 2);
        wtask_free(t);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        assert_int_equal(wtask_parse(bad[i].text, strlen(bad[i].text), p, 4, &t, &id, err,
                                     sizeof err), -1);
        assert_null(t);
        if (!strstr(err, bad[i].why))
            fail_msg("case %zu: '%s' does not say '%s'", i, err, bad[i].why);
    }
    wplace_unref(p);
}

/* What a walk handed over: parsed tasks' ids, refused ones' reasons. */
typedef struct walked {
    int ntasks, nrefused;
    int64_t ids[8];
    char why[8][256];
} walked_t;

static void walk_fn(void *ctx, wtask_item_t *it)
{
    walked_t *w = ctx;
    if (it->t) {
        assert_true(w->ntasks < 8);
        w->ids[w->ntasks++] = it->id;
        wtask_free(it->t);
    } else {
        assert_true(w->nrefused < 8);
        snprintf(w->why[w->nrefused++], sizeof w->why[0], "%s", it->err);
    }
}

/* Walks `text` (one group, or an array of groups when !one). */
static int walk(const char *text, int one, walked_t *w)
{
    jscan_t s;
    memset(w, 0, sizeof *w);
    jscan_init(&s, text, strlen(text));
    return wtask_walk(&s, one, "127.0.0.1:4000", 4, walk_fn, w) == 0 && jscan_finish(&s) == 0
               ? 0 : -1;
}

#define WALK_KEY "\"key\":\"00112233445566778899aabbccddeeff\""
#define WALK_TASK(id, job) \
    "{\"task\":" #id ",\"job\":" #job ",\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\"," \
    "\"slice_shape\":[2,4],\"computation\":{},\"input_shapes\":{},\"shards\":[0],"         \
    "\"devices\":[0]}"

/* A group's tasks belong to it (job and attempt), need its placement and
 * key, and may come before them in the text; a group with a bad key has
 * every task refused naming it; text broken half-way stops the walk. */
static void test_group_walk(void **state)
{
    (void)state;
    char group[2048];
    walked_t w;
    /* tasks first: read once the group's other members are */
    snprintf(group, sizeof group, "{\"tasks\":[" WALK_TASK(7, 5) "," WALK_TASK(8, 5) "],"
             "\"job\":5,\"attempt\":0," WALK_KEY ",\"placement\":%s}", place_json);
    assert_int_equal(walk(group, 1, &w), 0);
    assert_int_equal(w.ntasks, 2);
    assert_int_equal(w.nrefused, 0);
    assert_int_equal(w.ids[0], 7);
    assert_int_equal(w.ids[1], 8);
    /* the controller's order, in an answer's array; task 8 is another job's */
    snprintf(group, sizeof group, "[{\"job\":5,\"attempt\":0," WALK_KEY ",\"placement\":%s,"
             "\"tasks\":[" WALK_TASK(7, 5) "," WALK_TASK(8, 6) "]}]", place_json);
    assert_int_equal(walk(group, 0, &w), 0);
    assert_int_equal(w.ntasks, 1);
    assert_int_equal(w.nrefused, 1);
    assert_non_null(strstr(w.why[0], "differs from its group's"));
    /* no key: each task refused, naming the key */
    snprintf(group, sizeof group, "{\"job\":5,\"attempt\":0,\"placement\":%s,"
             "\"tasks\":[" WALK_TASK(7, 5) "," WALK_TASK(8, 5) "]}", place_json);
    assert_int_equal(walk(group, 1, &w), 0);
    assert_int_equal(w.ntasks, 0);
    assert_int_equal(w.nrefused, 2);
    assert_non_null(strstr(w.why[1], "group key"));
    /* cut short inside its second task */
    snprintf(group, sizeof group, "{\"job\":5,\"attempt\":0," WALK_KEY ",\"placement\":%s,"
             "\"tasks\":[" WALK_TASK(7, 5) ",{\"task\":8,\"job\":", place_json);
    assert_int_equal(walk(group, 1, &w), -1);
    assert_int_equal(w.ntasks, 1);
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
        cmocka_unit_test(test_task_text),
        cmocka_unit_test(test_group_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
