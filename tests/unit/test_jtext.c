/* test_jtext.c - common/jtext.c writes exactly the bytes of
 * json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY): on fixed trees that
 * reach every escape and every real fix-up, and on many random trees; and
 * its integers' text (util_i64_text) is printf's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jtext.h"
#include "util.h"

static void same_as_jansson(const json_t *v)
{
    char *want = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    size_t len = 0;
    char *got = jtext_dump(v, &len);
    assert_non_null(want);
    assert_non_null(got);
    if (strcmp(want, got) != 0)
        fail_msg("jansson wrote %s, jtext %s", want, got);
    assert_int_equal(len, strlen(want));
    free(want);
    free(got);
}

static void test_scalars(void **state)
{
    (void)state;
    static const double reals[] = {0.0, -0.0, 1.0, -1.5, 0.1, 1e20, 1e-5, 1e21, 1.5e300,
                                   -2.5e-300, 5e-324, 1.7976931348623157e308,
                                   123456789012345678.0, 1e16, 1e17, 3.14159265358979,
                                   100.0, 2.0 / 3.0, 16.0, -16.0, 9007199254740991.0,
                                   -9007199254740991.0, 9007199254740992.0,
                                   -9007199254740992.0, 9007199254740994.0, 4503599627370495.5,
                                   1e15, -1e15 - 1.0, 0.5, -3.0};
    for (size_t i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        json_t *r = json_real(reals[i]);
        same_as_jansson(r);
        json_decref(r);
    }
    static const json_int_t ints[] = {0, 1, -1, 42, INT64_MAX, INT64_MIN, 1000000007};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        json_t *n = json_integer(ints[i]);
        same_as_jansson(n);
        json_decref(n);
    }
    json_t *t = json_pack("[b,b,n,s,s,s]", 1, 0, "", "a\"b\\c/d\b\f\n\r\t\x01\x1f\x7f",
                          "\xc3\xa9\xf0\x9f\x98\x80");
    json_array_append_new(t, json_stringn("nul\0inside", 10));
    same_as_jansson(t);
    json_decref(t);
    json_t *e = json_pack("{s:{}, s:[], s:{s:[[]]}}", "a", "b", "c", "d");
    same_as_jansson(e);
    json_decref(e);
}

/* A random tree of depth at most d. */
static json_t *rand_tree(unsigned *seed, int d)
{
    int kind = rand_r(seed) % (d > 0 ? 9 : 6);
    switch (kind) {
    case 0: return json_integer((json_int_t)rand_r(seed) - RAND_MAX / 2);
    case 1: {
        double x = ldexp((double)rand_r(seed) / RAND_MAX - 0.5, rand_r(seed) % 400 - 200);
        return json_real(x);
    }
    case 2: {
        char s[16];
        int n = rand_r(seed) % 15;
        for (int i = 0; i < n; i++) {
            int c = rand_r(seed) % 96;
            s[i] = (char)(c < 8 ? "\"\\\n\t\x01\x1f/\x7f"[c] : ' ' + (c - 8));
        }
        return json_stringn(s, (size_t)n);
    }
    case 3: return json_true();
    case 4: return json_false();
    case 5: return json_null();
    case 6: case 7: {
        json_t *o = json_object();
        int n = rand_r(seed) % 5;
        for (int i = 0; i < n; i++) {
            char k[8];
            snprintf(k, sizeof k, "k%d\"%d", rand_r(seed) % 50, i);
            json_object_set_new(o, k, rand_tree(seed, d - 1));
        }
        return o;
    }
    default: {
        json_t *a = json_array();
        int n = rand_r(seed) % 5;
        for (int i = 0; i < n; i++)
            json_array_append_new(a, rand_tree(seed, d - 1));
        return a;
    }
    }
}

static void test_random_trees(void **state)
{
    (void)state;
    unsigned seed = 12345;
    for (int i = 0; i < 3000; i++) {
        json_t *t = rand_tree(&seed, 5);
        assert_non_null(t);
        same_as_jansson(t);
        json_decref(t);
    }
    assert_null(jtext_dump(NULL, NULL));
}

/* The writer (jtext_raw/str/int/real/take) writes what jansson writes for
 * the same members, a non-finite real as null; a failed writer answers
 * NULL and is empty again. */
static void test_writer(void **state)
{
    (void)state;
    static const char *strs[] = {"plain", "q\"b\\s", "ctl\x01\x1f\n\t", "utf8 \xc3\xa9", ""};
    static const double reals[] = {0.0, -1.5, 1e20, 1e-5, 2.0 / 3.0, 16.0};
    static const long long ints[] = {0, -1, 42, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        jtext_w_t w = {0};
        JTEXT_LIT(&w, "{\"s\":");
        jtext_str(&w, strs[i]);
        JTEXT_LIT(&w, ",\"r\":");
        jtext_real(&w, reals[i]);
        JTEXT_LIT(&w, ",\"i\":");
        jtext_int(&w, ints[i]);
        JTEXT_LIT(&w, ",\"n\":");
        jtext_real(&w, i % 2 ? NAN : INFINITY);
        JTEXT_LIT(&w, "}");
        size_t len = 0;
        char *got = jtext_take(&w, &len);
        assert_null(w.p);
        json_t *tree = json_pack("{s:s, s:f, s:I, s:n}", "s", strs[i], "r", reals[i], "i",
                                 (json_int_t)ints[i], "n");
        char *want = json_dumps(tree, JSON_COMPACT);
        assert_non_null(got);
        assert_string_equal(got, want);
        assert_int_equal(len, strlen(want));
        free(got);
        free(want);
        json_decref(tree);
    }
    jtext_w_t w = {0};
    JTEXT_LIT(&w, "lost");
    w.failed = 1;
    jtext_int(&w, 7);
    assert_null(jtext_take(&w, NULL));
    assert_null(w.p);
    assert_int_equal(w.failed, 0);
}

/* util_i64_text (jtext's integers and the store's job views) writes what
 * printf's %lld does, at the extremes and on random values of every
 * length. */
static void test_i64_text(void **state)
{
    (void)state;
    static const int64_t edges[] = {0, 1, -1, 9, 10, -10, 99, 100, INT64_MAX, INT64_MIN,
                                    INT64_MAX - 1, INT64_MIN + 1};
    char got[UTIL_I64_TEXT_MAX + 1], want[32];
    srand(7);
    for (int i = 0; i < 2000; i++) {
        int64_t v = i < (int)(sizeof edges / sizeof edges[0])
                        ? edges[i]
                        : (int64_t)(((uint64_t)rand() << 33) ^ ((uint64_t)rand() << 2)) >>
                              (rand() % 63);
        size_t n = util_i64_text(v, got);
        got[n] = '\0';
        snprintf(want, sizeof want, "%lld", (long long)v);
        if (strcmp(got, want) != 0)
            fail_msg("%s written as %s", want, got);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalars),
        cmocka_unit_test(test_random_trees),
        cmocka_unit_test(test_writer),
        cmocka_unit_test(test_i64_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
