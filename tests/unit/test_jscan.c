/* test_jscan.c - the JSON pull reader (common/jscan.c): it accepts
 * exactly the texts jansson accepts (each grammar rule below fails when
 * the reader's check for it is deleted), decodes strings and numbers as
 * jansson does, and skips any nesting without recursion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jscan.h"

/* Whether the reader takes text as one whole JSON document: a top-level
 * object or array (jansson's default), read by jscan_skip, then nothing
 * but whitespace. */
static int reader_ok(const char *text, size_t len)
{
    jscan_t s;
    jscan_init(&s, text, len);
    int t = jscan_peek(&s);
    if (t != JSCAN_OBJECT && t != JSCAN_ARRAY)
        return 0;
    return jscan_skip(&s) == 0 && jscan_finish(&s) == 0;
}

static int jansson_ok(const char *text, size_t len)
{
    json_t *j = json_loadb(text, len, 0, NULL);
    json_decref(j);
    return j != NULL;
}

static void test_grammar_as_jansson(void **state)
{
    (void)state;
    static const struct { const char *text; int ok; } cases[] = {
        {"{}", 1}, {"[]", 1}, {" { \"a\" : 1 }\r\n\t", 1}, {"[1,2,3]", 1},
        {"{\"a\":[true,false,null]}", 1}, {"[-0]", 1}, {"[0.5e-3]", 1}, {"[1E+2]", 1},
        {"[\"\\u00e9\\ud83d\\ude00\"]", 1}, {"[\"\xc3\xa9\xf0\x9f\x98\x80\"]", 1},
        {"[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"]", 1}, {"[9223372036854775807]", 1},
        {"[-9223372036854775808]", 1}, {"[1e-400]", 1}, {"[\"\"]", 1}, {"{\"\":0}", 1},
        /* numbers */
        {"[01]", 0}, {"[1.]", 0}, {"[.5]", 0}, {"[-]", 0}, {"[1e]", 0}, {"[1e+]", 0},
        {"[+1]", 0}, {"[-a]", 0}, {"[9223372036854775808]", 0},
        {"[-9223372036854775809]", 0}, {"[1e400]", 0}, {"[-1e400]", 0},
        /* structure */
        {"{\"a\":1,}", 0}, {"[1,]", 0}, {"[,1]", 0}, {"{\"a\"}", 0}, {"{a:1}", 0},
        {"{\"a\" 1}", 0}, {"[1 2]", 0}, {"{} x", 0}, {"{}{}", 0}, {"", 0}, {" ", 0},
        {"1", 0}, {"\"a\"", 0}, {"[", 0}, {"{", 0}, {"]", 0}, {"[}", 0}, {"{]", 0},
        /* literals */
        {"[truex]", 0}, {"[nul]", 0}, {"[True]", 0}, {"[true1]", 0}, {"[nulll]", 0},
        /* strings: escapes */
        {"[\"\\u0000\"]", 0}, {"[\"\\ud800\"]", 0}, {"[\"\\udc00\"]", 0},
        {"[\"\\ud800\\u0041\"]", 0}, {"[\"\\ud800\\ud800\"]", 0}, {"[\"\\x\"]", 0},
        {"[\"\\u12\"]", 0}, {"[\"\\u12g4\"]", 0}, {"[\"a]", 0}, {"[\"\\\"]", 0},
        /* strings: bytes */
        {"[\"\x01\"]", 0}, {"[\"\x1f\"]", 0}, {"[\"\xc0\x80\"]", 0}, {"[\"\xc1\xbf\"]", 0},
        {"[\"\xe0\x80\x80\"]", 0}, {"[\"\xed\xa0\x80\"]", 0}, {"[\"\xf0\x80\x80\x80\"]", 0},
        {"[\"\xf4\x90\x80\x80\"]", 0}, {"[\"\xf5\x80\x80\x80\"]", 0}, {"[\"\xff\"]", 0},
        {"[\"\x80\"]", 0}, {"[\"\xc3\"]", 0}, {"[\"\xe2\x82\"]", 0}, {"[\"\xc3\x28\"]", 0},
        {"[\"\x7f\"]", 1}, {"[\"\xef\xbf\xbf\"]", 1}, {"[\"\xf4\x8f\xbf\xbf\"]", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = strlen(cases[i].text);
        int r = reader_ok(cases[i].text, len), j = jansson_ok(cases[i].text, len);
        if (r != cases[i].ok || j != cases[i].ok)
            fail_msg("'%s': reader %d, jansson %d, expected %d", cases[i].text, r, j,
                     cases[i].ok);
    }
}

static void test_numbers(void **state)
{
    (void)state;
    static const struct { const char *text; int is_int; int64_t i; double d; } cases[] = {
        {"-9223372036854775808", 1, INT64_MIN, -9223372036854775808.0},
        {"9223372036854775807", 1, INT64_MAX, 9223372036854775807.0},
        {"0", 1, 0, 0}, {"-0", 1, 0, 0}, {"42", 1, 42, 42},
        {"0.1", 0, 0, 0.1}, {"1e2", 0, 0, 100}, {"-2.5E-1", 0, 0, -0.25},
        {"1.7976931348623157e308", 0, 0, 1.7976931348623157e308},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        jscan_t s;
        jscan_num_t n;
        jscan_init(&s, cases[i].text, strlen(cases[i].text));
        assert_int_equal(jscan_peek(&s), JSCAN_NUMBER);
        assert_int_equal(jscan_number(&s, &n), 0);
        assert_int_equal(n.is_int, cases[i].is_int);
        if (n.is_int)
            assert_true(n.i == cases[i].i);
        assert_true(n.d == cases[i].d);
        /* the same double as jansson reads */
        char arr[64];
        snprintf(arr, sizeof arr, "[%s]", cases[i].text);
        json_t *j = json_loads(arr, 0, NULL);
        assert_non_null(j);
        assert_true(json_number_value(json_array_get(j, 0)) == n.d);
        json_decref(j);
    }
    /* Reals read without strtod (at most 15 significant digits, a power
     * of ten up to 22) and with it: every one the very double strtod
     * gives, -0.0 included. */
    static const char *const reals[] = {
        "16.0", "-0.0", "0.0", "0.001", "123456789012345.6", "12345678901234.56e8",
        "1234567890123456.0", "9007199254740993.0", "0.1e-22", "1e22", "1e23", "5e-324",
        "2.2250738585072014e-308", "0.30000000000000004", "1.5E+3", "7e-05", "100.25",
        "-3.14159265358979", "4.35e-1", "0.000000000000000000000000123"};
    unsigned seed = 74;
    for (int i = 0; i < 20000 + (int)(sizeof reals / sizeof reals[0]); i++) {
        char t[64];
        if (i < (int)(sizeof reals / sizeof reals[0]))
            snprintf(t, sizeof t, "%s", reals[i]);
        else        /* up to 17 digits, a point somewhere, an exponent often */
            snprintf(t, sizeof t, "%s%d.%0*de%d", rand_r(&seed) % 2 ? "-" : "",
                     rand_r(&seed) % 100000, rand_r(&seed) % 12 + 1, rand_r(&seed) % 1000000,
                     rand_r(&seed) % 60 - 30);
        jscan_t s;
        jscan_num_t n;
        jscan_init(&s, t, strlen(t));
        assert_int_equal(jscan_number(&s, &n), 0);
        double want = strtod(t, NULL);
        if (memcmp(&n.d, &want, sizeof want) != 0)
            fail_msg("'%s': read %.17g, strtod %.17g", t, n.d, want);
    }
    /* Integers up to 18 digits and past: as strtoll reads them. */
    static const char *const ints[] = {"999999999999999999", "-999999999999999999",
                                       "1000000000000000000", "1764460000123456",
                                       "-9223372036854775807"};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        jscan_t s;
        jscan_num_t n;
        jscan_init(&s, ints[i], strlen(ints[i]));
        assert_int_equal(jscan_number(&s, &n), 0);
        assert_true(n.is_int && n.i == strtoll(ints[i], NULL, 10));
    }
    /* A long real (over the reader's 63-byte buffer) still reads. */
    char big[200] = "0.";
    memset(big + 2, '1', 150);
    big[152] = '\0';
    jscan_t s;
    jscan_num_t n;
    jscan_init(&s, big, strlen(big));
    assert_int_equal(jscan_number(&s, &n), 0);
    assert_true(fabs(n.d - 0.1111111111111111) < 1e-15);
}

static void test_strings_decode(void **state)
{
    (void)state;
    const char *text = "[\"a\\u00e9\\ud83d\\ude00\\n\\/\\\"x\", \"plain\"]";
    jscan_t s;
    jscan_str_t str;
    char buf[64];
    int n = 0;
    jscan_init(&s, text, strlen(text));
    assert_int_equal(jscan_array(&s), 0);
    assert_int_equal(jscan_element(&s, &n), 1);
    assert_int_equal(jscan_string(&s, &str), 0);
    assert_true(str.escaped);
    size_t len = jscan_str_decode(&str, buf);
    assert_int_equal(len, strlen("a\xc3\xa9\xf0\x9f\x98\x80\n/\"x"));
    assert_memory_equal(buf, "a\xc3\xa9\xf0\x9f\x98\x80\n/\"x", len);
    /* the same bytes as jansson's */
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_string_length(json_array_get(j, 0)), len);
    assert_memory_equal(json_string_value(json_array_get(j, 0)), buf, len);
    json_decref(j);
    assert_int_equal(jscan_element(&s, &n), 1);
    assert_int_equal(jscan_string(&s, &str), 0);
    assert_false(str.escaped);
    assert_true(jscan_str_eq(&str, "plain"));
    assert_false(jscan_str_eq(&str, "plai"));
    assert_int_equal(jscan_element(&s, &n), 0);
    assert_int_equal(jscan_finish(&s), 0);
    /* An escaped key equals its decoded form. */
    jscan_init(&s, "\"st\\u0061te\"", 12);
    assert_int_equal(jscan_string(&s, &str), 0);
    assert_true(jscan_str_eq(&str, "state"));
}

static void test_members(void **state)
{
    (void)state;
    const char *text = "{\"a\": 1, \"b\": [2, {\"c\": null}], \"d\": \"e\"}";
    jscan_t s;
    jscan_str_t key;
    jscan_num_t num;
    int n = 0, t;
    jscan_init(&s, text, strlen(text));
    assert_int_equal(jscan_object(&s), 0);
    assert_int_equal(jscan_member(&s, &n, &key), 1);
    assert_true(jscan_str_eq(&key, "a"));
    assert_int_equal(jscan_number(&s, &num), 0);
    assert_int_equal(jscan_member(&s, &n, &key), 1);
    assert_true(jscan_str_eq(&key, "b"));
    assert_int_equal(jscan_skip(&s), 0);
    assert_int_equal(jscan_member(&s, &n, &key), 1);
    assert_true(jscan_str_eq(&key, "d"));
    assert_int_equal(jscan_peek(&s), JSCAN_STRING);
    assert_int_equal(jscan_skip(&s), 0);
    assert_int_equal(jscan_member(&s, &n, &key), 0);
    assert_int_equal(n, 3);
    assert_int_equal(jscan_finish(&s), 0);
    /* A failed read leaves the reader failed. */
    jscan_init(&s, "[nope, 1]", 9);
    n = 0;
    assert_int_equal(jscan_array(&s), 0);
    assert_int_equal(jscan_element(&s, &n), 1);
    assert_int_equal(jscan_literal(&s, &t), -1);
    assert_true(s.bad);
    assert_int_equal(jscan_element(&s, &n), -1);
    assert_int_equal(jscan_finish(&s), -1);
}

/* n nested arrays, "[[[...]]]". */
static char *nested(size_t n)
{
    char *t = malloc(2 * n + 1);
    assert_non_null(t);
    memset(t, '[', n);
    memset(t + n, ']', n);
    t[2 * n] = '\0';
    return t;
}

static void test_skip_depth(void **state)
{
    (void)state;
    char *ok = nested(JSCAN_MAX_DEPTH), *deep = nested(JSCAN_MAX_DEPTH + 1);
    char *huge = nested(1000000);      /* recursion would exhaust the stack */
    assert_true(reader_ok(ok, strlen(ok)));
    assert_true(jansson_ok(ok, strlen(ok)));
    assert_false(reader_ok(deep, strlen(deep)));
    assert_false(jansson_ok(deep, strlen(deep)));
    assert_false(reader_ok(huge, strlen(huge)));
    free(ok);
    free(deep);
    free(huge);
    const char *mixed = "{\"a\":[{\"b\":[[],{}]},[{\"c\":{\"d\":[1,\"x\",null]}}]],\"e\":{}}";
    assert_true(reader_ok(mixed, strlen(mixed)));
}

/* jscan_load against json_loadb on the same bytes and flags: the same
 * verdict, and an accepted text the same values in the same order (their
 * compact dumps are equal). */
static void load_same(const char *text, size_t len, size_t flags)
{
    json_error_t je1, je2;
    json_t *a = jscan_load(text, len, flags, &je1), *b = json_loadb(text, len, flags, &je2);
    if ((a == NULL) != (b == NULL))
        fail_msg("'%.*s' flags %zu: jscan_load %s, jansson %s", (int)len, text, flags,
                 a ? "read it" : "refused it", b ? "read it" : "refused it");
    if (a) {
        char *x = json_dumps(a, JSON_COMPACT | JSON_ENCODE_ANY);
        char *y = json_dumps(b, JSON_COMPACT | JSON_ENCODE_ANY);
        assert_non_null(x);
        assert_non_null(y);
        if (strcmp(x, y) != 0)
            fail_msg("'%.*s': jscan_load read %s, jansson %s", (int)len, text, x, y);
        free(x);
        free(y);
    } else {
        assert_string_equal(je1.text, je2.text);    /* jansson's own message */
    }
    json_decref(a);
    json_decref(b);
}

static void test_load_as_jansson(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "{}", "[]", "{\"a\":1,\"b\":[1.5,-0,\"x\\u00e9\",null,true,false],\"c\":{}}",
        "{\"a\":1,\"a\":2}", "{\"a\":{\"b\":1,\"b\":2}}", "[1e400]", "[01]", "1", "\"s\"",
        "null", "", "  [ 1 , 2 ]  ", "{\"k\":\"\\ud83d\\ude00\"}", "[\"\\u0000\"]",
        "{\"z\":1,\"y\":2,\"x\":3}", "[9223372036854775807,-9223372036854775808]",
        "[1,\\u0041]", "[tru]",
    };
    static const size_t flags[] = {0, JSON_REJECT_DUPLICATES, JSON_DECODE_ANY,
                                   JSON_REJECT_DUPLICATES | JSON_DECODE_ANY};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        for (size_t f = 0; f < 4; f++)
            load_same(texts[i], strlen(texts[i]), flags[f]);
    /* the NUL jansson skips after a number: its verdict, whatever it is */
    load_same("[1\0,2]", 6, 0);
    char *deep = nested(JSCAN_MAX_DEPTH + 1), *ok = nested(JSCAN_MAX_DEPTH);
    load_same(deep, strlen(deep), 0);
    load_same(ok, strlen(ok), 0);
    free(deep);
    free(ok);
    /* flags it does not implement are refused, not misread */
    assert_null(jscan_load("{}", 2, JSON_DISABLE_EOF_CHECK, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grammar_as_jansson),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_strings_decode),
        cmocka_unit_test(test_members),
        cmocka_unit_test(test_skip_depth),
        cmocka_unit_test(test_load_as_jansson),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
