/* test_worker_task.c - the worker's host-task decoder (workers/wtask.c) on
 * the task's "full_values": which shards report a global output's piece
 * with all its values, and what is refused. (The rest of the decoder is
 * fuzzed by tests/fuzz/fuzz_task.c and run by every integration test.) */
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

/* Parses a task over shards 0..3 of slice a ([2,4]) with `full` as its
 * "full_values" (NULL: none). Returns 0 and *out, or -1 with err set. */
static int parse_with(const char *full, wtask_t **out, char *err, size_t errlen)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"task\":1,\"job\":5,\"attempt\":0,\"comp\":0,\"seq\":3,\"slice\":\"a\","
             "\"slice_shape\":[2,4],\"computation\":{},\"input_shapes\":{},"
             "\"shards\":[0,1,2,3],\"devices\":[0,1,2,3],\"sends\":[]%s%s}",
             full ? ",\"full_values\":" : "", full ? full : "");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_values_replicas),
        cmocka_unit_test(test_full_values_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
