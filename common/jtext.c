/* jtext.c - see jtext.h. */
#include "jtext.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

/* The text being written (jtext.h's writer); failed once an allocation
 * failed (then every later write is dropped and jtext_dump answers
 * NULL). */
typedef jtext_w_t jbuf_t;

/* Room for n more bytes (and a NUL): 0, or -1 (failed). */
static int room(jbuf_t *b, size_t n)
{
    if (b->failed)
        return -1;
    if (b->len + n + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static void put(jbuf_t *b, const char *s, size_t n)
{
    if (room(b, n) == 0) {
        memcpy(b->p + b->len, s, n);
        b->len += n;
    }
}

static void put_c(jbuf_t *b, char c)
{
    if (room(b, 1) == 0)
        b->p[b->len++] = c;
}

static void put_int(jbuf_t *b, json_int_t v)
{
    char tmp[UTIL_I64_TEXT_MAX];
    put(b, tmp, util_i64_text((int64_t)v, tmp));
}

/* A real as jansson writes it (jsonp_dtostr, precision 17). */
static void put_real(jbuf_t *b, double v)
{
    /* A whole number below 2^53 in magnitude is what "%.17g" writes as
     * plain digits (every such number has at most 16), so it is written
     * here without vfprintf's ~2K instructions: a worker's report carries
     * a sum per output per shard, and sums are often whole. -0.0 takes
     * the slow path ("-0.0"). */
    if (v > -9007199254740992.0 && v < 9007199254740992.0 && v == (double)(int64_t)v &&
        (v != 0.0 || !signbit(v))) {
        char d[UTIL_I64_TEXT_MAX + 2];
        size_t n = util_i64_text((int64_t)v, d);
        memcpy(d + n, ".0", 2);
        put(b, d, n + 2);
        return;
    }
    char t[40];
    int n = snprintf(t, sizeof t - 2, "%.17g", v);
    if (n < 0 || n >= (int)sizeof t - 2) {
        b->failed = 1;
        return;
    }
    if (!strchr(t, '.') && !strchr(t, 'e')) {
        memcpy(t + n, ".0", 3);
        n += 2;
    }
    char *e = strchr(t, 'e');
    if (e) {
        /* No '+' and no leading zeros in the exponent: "1e+20" -> "1e20",
         * "1e-05" -> "1e-5". */
        char *start = e + 1, *end = start + 1;
        if (*start == '-')
            start++;
        while (*end == '0')
            end++;
        if (end != start) {
            memmove(start, end, (size_t)(t + n - end) + 1);
            n -= (int)(end - start);
        }
    }
    put(b, t, (size_t)n);
}

/* s (n bytes, UTF-8) as a JSON string with jansson's escapes: the runs
 * that need none are copied whole. */
static void put_str(jbuf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";   /* jansson writes \u001F */
    size_t i = 0, run = 0;
    put_c(b, '"');
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            i++;
            continue;
        }
        put(b, s + run, i - run);
        char esc[7] = {'\\', 0};
        size_t k = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            memcpy(esc + 1, "u00", 3);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            k = 6;
        }
        put(b, esc, k);
        run = ++i;
    }
    put(b, s + run, n - run);
    put_c(b, '"');
}

static void put_value(jbuf_t *b, const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *m;
        int first = 1;
        put_c(b, '{');
        json_object_foreach((json_t *)v, key, m) {
            if (!first)
                put_c(b, ',');
            first = 0;
            put_str(b, key, strlen(key));
            put_c(b, ':');
            put_value(b, m);
        }
        put_c(b, '}');
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *e;
        put_c(b, '[');
        json_array_foreach(v, i, e) {
            if (i)
                put_c(b, ',');
            put_value(b, e);
        }
        put_c(b, ']');
        break;
    }
    case JSON_STRING:
        put_str(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER: put_int(b, json_integer_value(v)); break;
    case JSON_REAL: put_real(b, json_real_value(v)); break;
    case JSON_TRUE: put(b, "true", 4); break;
    case JSON_FALSE: put(b, "false", 5); break;
    default: put(b, "null", 4); break;
    }
}

char *jtext_take(jtext_w_t *w, size_t *len)
{
    char *p = NULL;
    if (!w->failed && room(w, 0) == 0) {
        w->p[w->len] = '\0';
        p = w->p;
        if (len)
            *len = w->len;
    } else {
        free(w->p);
    }
    *w = (jtext_w_t){0};
    return p;
}

void jtext_drop(jtext_w_t *w)
{
    free(w->p);
    *w = (jtext_w_t){0};
}

void jtext_raw(jtext_w_t *w, const char *s, size_t n) { put(w, s, n); }

void jtext_str(jtext_w_t *w, const char *s) { put_str(w, s, strlen(s)); }

void jtext_int(jtext_w_t *w, long long v) { put_int(w, (json_int_t)v); }

void jtext_value(jtext_w_t *w, const json_t *v) { put_value(w, v); }

void jtext_real(jtext_w_t *w, double v)
{
    if (isfinite(v))
        put_real(w, v);
    else
        put(w, "null", 4);
}

char *jtext_dump(const json_t *v, size_t *len)
{
    jbuf_t b = {0};
    if (!v)
        return NULL;
    put_value(&b, v);
    return jtext_take(&b, len);
}
