/* jscan.c - see jscan.h. The grammar follows jansson 2.14's lexer and
 * parser (load.c) token for token, so that "this reader accepts" implies
 * "jansson accepts"; tests/unit/test_jscan.c and tests/fuzz/fuzz_report.c
 * hold it to that. */
#include "jscan.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int fail(jscan_t *s)
{
    s->bad = 1;
    return -1;
}

static void skip_ws(jscan_t *s)
{
    const unsigned char *p = s->p;
    while (p < s->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    s->p = p;
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

void jscan_init(jscan_t *s, const void *text, size_t len)
{
    s->p = text;
    s->end = s->p + len;
    s->bad = 0;
}

int jscan_peek(jscan_t *s)
{
    if (s->bad)
        return JSCAN_BAD;
    skip_ws(s);
    if (s->p >= s->end)
        return JSCAN_BAD;
    switch (*s->p) {
    case '{': return JSCAN_OBJECT;
    case '[': return JSCAN_ARRAY;
    case '"': return JSCAN_STRING;
    case 't': return JSCAN_TRUE;
    case 'f': return JSCAN_FALSE;
    case 'n': return JSCAN_NULL;
    default:
        return *s->p == '-' || is_digit(*s->p) ? JSCAN_NUMBER : JSCAN_BAD;
    }
}

/* Consumes byte c after whitespace: 0, or -1 (failed) when it is not next. */
static int expect(jscan_t *s, unsigned char c)
{
    if (s->bad)
        return -1;
    skip_ws(s);
    if (s->p >= s->end || *s->p != c)
        return fail(s);
    s->p++;
    return 0;
}

int jscan_object(jscan_t *s)
{
    return expect(s, '{');
}

int jscan_array(jscan_t *s)
{
    return expect(s, '[');
}

/* ---- strings ---- */

/* The length of the UTF-8 sequence at p (at most end), 0 when it is not
 * one jansson accepts: no overlong forms, no surrogates, at most
 * U+10FFFF. */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned v;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        v = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        v = c & 0x07;
    } else {
        return 0;               /* a continuation byte, 0xC0/0xC1, or above 0xF4 */
    }
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (p[i] & 0x3F);
    }
    if ((n == 3 && v < 0x800) || (n == 4 && v < 0x10000) || v > 0x10FFFF ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    return n;
}

/* Four hex digits at p (the caller checked they are there): their value,
 * or -1. */
static long hex4(const unsigned char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i];
        int d = is_digit((unsigned char)c) ? (int)(c - '0')
              : c >= 'a' && c <= 'f' ? (int)(c - 'a' + 10)
              : c >= 'A' && c <= 'F' ? (int)(c - 'A' + 10) : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Checks the escape after a backslash at p (< end): its length in bytes
 * after the backslash, or 0 when jansson refuses it (an unknown escape, a
 * \u0000, a surrogate not in a high-low pair). */
static size_t escape_len(const unsigned char *p, const unsigned char *end)
{
    if (*p && strchr("\"\\/bfnrt", *p))
        return 1;
    if (*p != 'u' || end - p < 5)
        return 0;
    long v = hex4(p + 1);
    if (v <= 0 || (v >= 0xDC00 && v <= 0xDFFF))
        return 0;
    if (v < 0xD800 || v > 0xDBFF)
        return 5;
    /* A high surrogate: a low one must follow as \uDC00..\uDFFF. */
    if (end - p < 11 || p[5] != '\\' || p[6] != 'u')
        return 0;
    long lo = hex4(p + 7);
    return lo >= 0xDC00 && lo <= 0xDFFF ? 11 : 0;
}

int jscan_string(jscan_t *s, jscan_str_t *out)
{
    if (expect(s, '"') != 0)
        return -1;
    const unsigned char *p = s->p, *end = s->end, *start = p;
    int escaped = 0;
    for (;;) {
        if (p >= end)
            return fail(s);
        unsigned char c = *p;
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(s);
        size_t n = 1;
        if (c == '\\') {
            escaped = 1;
            n = p + 1 < end ? escape_len(p + 1, end) : 0;
            if (n == 0)
                return fail(s);
            n++;
        } else if (c >= 0x80 && (n = utf8_seq(p, end)) == 0) {
            return fail(s);
        }
        p += n;
    }
    *out = (jscan_str_t){(const char *)start, (size_t)(p - start), escaped};
    s->p = p + 1;
    return 0;
}

/* Appends code point v as UTF-8 at b: the bytes written. */
static size_t put_utf8(char *b, unsigned long v)
{
    if (v < 0x80) {
        b[0] = (char)v;
        return 1;
    }
    if (v < 0x800) {
        b[0] = (char)(0xC0 | (v >> 6));
        b[1] = (char)(0x80 | (v & 0x3F));
        return 2;
    }
    if (v < 0x10000) {
        b[0] = (char)(0xE0 | (v >> 12));
        b[1] = (char)(0x80 | ((v >> 6) & 0x3F));
        b[2] = (char)(0x80 | (v & 0x3F));
        return 3;
    }
    b[0] = (char)(0xF0 | (v >> 18));
    b[1] = (char)(0x80 | ((v >> 12) & 0x3F));
    b[2] = (char)(0x80 | ((v >> 6) & 0x3F));
    b[3] = (char)(0x80 | (v & 0x3F));
    return 4;
}

size_t jscan_str_decode(const jscan_str_t *str, char *buf)
{
    const unsigned char *p = (const unsigned char *)str->p, *end = p + str->len;
    size_t n = 0;
    if (!str->escaped) {
        memcpy(buf, str->p, str->len);
        buf[str->len] = '\0';
        return str->len;
    }
    while (p < end) {
        if (*p != '\\') {
            buf[n++] = (char)*p++;
            continue;
        }
        unsigned char c = p[1];
        p += 2;
        switch (c) {
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u': {
            unsigned long v = (unsigned long)hex4(p);
            p += 4;
            if (v >= 0xD800 && v <= 0xDBFF) {   /* paired: checked when read */
                v = 0x10000 + ((v - 0xD800) << 10) + ((unsigned long)hex4(p + 2) - 0xDC00);
                p += 6;
            }
            n += put_utf8(buf + n, v);
            break;
        }
        default: buf[n++] = (char)c; break;     /* " \ / */
        }
    }
    buf[n] = '\0';
    return n;
}

int jscan_str_eq(const jscan_str_t *str, const char *lit)
{
    /* Most compares are a key against a list of names: the first byte
     * settles nearly all of them without measuring lit (a report item made
     * ~60 compares, 2.9K instructions, stop 75). */
    if (!str->escaped && (str->len == 0 ? lit[0] != '\0' : str->p[0] != lit[0]))
        return 0;
    size_t n = strlen(lit);
    if (!str->escaped)
        return str->len == n && memcmp(str->p, lit, n) == 0;
    if (str->len < n)
        return 0;
    char small[64], *buf = str->len < sizeof small ? small : malloc(str->len + 1);
    if (!buf)
        return 0;
    int eq = jscan_str_decode(str, buf) == n && memcmp(buf, lit, n) == 0;
    if (buf != small)
        free(buf);
    return eq;
}

/* ---- members and elements ---- */

int jscan_member(jscan_t *s, int *n, jscan_str_t *key)
{
    if (s->bad)
        return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    if (*n > 0 && expect(s, ',') != 0)
        return -1;
    if (jscan_string(s, key) != 0 || expect(s, ':') != 0)
        return -1;
    (*n)++;
    return 1;
}

int jscan_element(jscan_t *s, int *n)
{
    if (s->bad)
        return -1;
    skip_ws(s);
    if (s->p < s->end && *s->p == ']') {
        s->p++;
        return 0;
    }
    if (*n > 0 && expect(s, ',') != 0)
        return -1;
    (*n)++;
    return 1;
}

/* ---- numbers and literals ---- */

/* The integer literal [p, end) (optional '-', digits, no leading zero:
 * checked by the caller) into *v: 0, or -1 outside int64_t (jansson:
 * "too big integer"). */
static int int_value(const unsigned char *p, const unsigned char *end, int64_t *v)
{
    int neg = *p == '-';
    uint64_t u = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    p += neg;
    /* Up to 18 digits cannot overflow: no check (a division) a digit. A
     * report's stamps are 16-digit microseconds. */
    if (end - p <= 18) {
        for (; p < end; p++)
            u = u * 10 + (unsigned)(*p - '0');
        *v = neg ? -(int64_t)u : (int64_t)u;
        return 0;
    }
    for (; p < end; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (u > (lim - d) / 10)
            return -1;
        u = u * 10 + d;
    }
    *v = neg ? (u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u) : (int64_t)u;
    return 0;
}

/* Clinger's fast path: a literal of at most 15 significant digits (so
 * its digits, read as an integer m, are exact in a double) scaled by
 * 10^e with |e| <= 22 (exact too) is one correctly rounded multiplication
 * or division away: the double strtod gives, without its ~400
 * instructions (a report's sums, "16.0"). 0 with *d set, or -1 when the
 * literal [p, end), well-formed, is not such a one. */
static int real_fast(const unsigned char *p, const unsigned char *end, double *d)
{
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    int neg = *p == '-', frac = 0, ndig = 0, e = 0;
    uint64_t m = 0;
    for (p += neg; p < end && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.') {
            frac = 1;
            continue;
        }
        e -= frac;              /* each digit after the point scales by 1/10 */
        if (m == 0 && *p == '0')
            continue;           /* a leading zero is no significant digit */
        if (++ndig > 15)
            return -1;
        m = m * 10 + (unsigned)(*p - '0');
    }
    if (p < end) {              /* an exponent: [eE][+-]?digits */
        int eneg = 0, x = 0;
        if (++p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        for (; p < end; p++)
            if ((x = x * 10 + (*p - '0')) > 1000)
                return -1;
        e += eneg ? -x : x;
    }
    if (e < -22 || e > 22)
        return -1;
    double v = (double)m;
    v = e < 0 ? v / pow10[-e] : v * pow10[e];
    *d = neg ? -v : v;
    return 0;
}

/* The real literal [p, end) as a double: 0, or -1 when it overflows
 * (jansson: "real number overflow"). */
static int real_value(const unsigned char *p, const unsigned char *end, double *d)
{
    if (real_fast(p, end, d) == 0)
        return 0;
    size_t n = (size_t)(end - p);
    char small[64], *buf = n < sizeof small ? small : malloc(n + 1);
    if (!buf)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    errno = 0;
    *d = strtod(buf, NULL);
    int over = (*d == HUGE_VAL || *d == -HUGE_VAL) && errno == ERANGE;
    if (buf != small)
        free(buf);
    return over ? -1 : 0;
}

static const unsigned char *digits(const unsigned char *p, const unsigned char *end)
{
    while (p < end && is_digit(*p))
        p++;
    return p;
}

int jscan_number(jscan_t *s, jscan_num_t *out)
{
    if (s->bad)
        return -1;
    skip_ws(s);
    const unsigned char *p = s->p, *end = s->end, *start = p;
    if (p < end && *p == '-')
        p++;
    if (p >= end || !is_digit(*p))
        return fail(s);
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p))
            return fail(s);     /* a leading zero */
    } else {
        p = digits(p, end);
    }
    int is_int = 1;
    if (p < end && *p == '.') {
        if (++p >= end || !is_digit(*p))
            return fail(s);
        p = digits(p, end);
        is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return fail(s);
        p = digits(p, end);
        is_int = 0;
    }
    out->is_int = is_int;
    out->i = 0;
    if (is_int) {
        if (int_value(start, p, &out->i) != 0)
            return fail(s);
        out->d = (double)out->i;
    } else if (real_value(start, p, &out->d) != 0) {
        return fail(s);
    }
    s->p = p;
    return 0;
}

int jscan_literal(jscan_t *s, int *type)
{
    static const struct { const char *word; int type; } lits[] = {
        {"true", JSCAN_TRUE}, {"false", JSCAN_FALSE}, {"null", JSCAN_NULL}};
    if (s->bad)
        return -1;
    skip_ws(s);
    for (size_t i = 0; i < sizeof lits / sizeof lits[0]; i++) {
        size_t n = strlen(lits[i].word);
        /* jansson reads a run of letters as one token. */
        if ((size_t)(s->end - s->p) >= n && memcmp(s->p, lits[i].word, n) == 0 &&
            (s->p + n == s->end || !is_alpha(s->p[n]))) {
            s->p += n;
            *type = lits[i].type;
            return 0;
        }
    }
    return fail(s);
}

/* ---- skipping ---- */

/* Reads one scalar value. 0 or -1. */
static int skip_scalar(jscan_t *s)
{
    jscan_str_t str;
    jscan_num_t num;
    int t = jscan_peek(s);
    if (t == JSCAN_STRING)
        return jscan_string(s, &str);
    if (t == JSCAN_NUMBER)
        return jscan_number(s, &num);
    if (t == JSCAN_TRUE || t == JSCAN_FALSE || t == JSCAN_NULL)
        return jscan_literal(s, &t);
    return fail(s);
}

/* Iterative, so that no nesting can exhaust the stack: one bit per open
 * container says whether it is an object (its members have keys), and
 * count[] is not needed: a container just opened is told apart by
 * `fresh`. */
int jscan_skip(jscan_t *s)
{
    unsigned char is_obj[JSCAN_MAX_DEPTH / 8];
    int depth = 0, fresh = 0, n;
    jscan_str_t key;
    for (;;) {
        /* A value is next. */
        int t = jscan_peek(s);
        if (t == JSCAN_OBJECT || t == JSCAN_ARRAY) {
            if (depth == JSCAN_MAX_DEPTH)
                return fail(s);
            s->p++;
            if (t == JSCAN_OBJECT)
                is_obj[depth / 8] |= (unsigned char)(1u << (depth % 8));
            else
                is_obj[depth / 8] &= (unsigned char)~(1u << (depth % 8));
            depth++;
            fresh = 1;
        } else if (skip_scalar(s) != 0) {
            return -1;
        } else {
            fresh = 0;
        }
        /* Close what ends here; then the next member or element. */
        for (;;) {
            if (depth == 0)
                return 0;
            int obj = is_obj[(depth - 1) / 8] >> ((depth - 1) % 8) & 1;
            n = fresh ? 0 : 1;
            int more = obj ? jscan_member(s, &n, &key) : jscan_element(s, &n);
            if (more < 0)
                return -1;
            if (more == 1)
                break;
            depth--;
            fresh = 0;
        }
    }
}

int jscan_finish(jscan_t *s)
{
    if (s->bad)
        return -1;
    skip_ws(s);
    return s->p == s->end ? 0 : fail(s);
}

/* ---- building a jansson tree ---- */

/* The string next in s as a new jansson string, or NULL. Apart from
 * build, so that the recursion's frames do not carry its buffer (2,048
 * levels deep stay well inside a thread's stack). */
__attribute__((noinline)) static json_t *build_string(jscan_t *s)
{
    jscan_str_t str;
    json_t *v = NULL;
    if (jscan_string(s, &str) != 0)
        return NULL;
    char small[256], *b = str.len < sizeof small ? small : malloc(str.len + 1);
    if (b)
        v = json_stringn_nocheck(b, jscan_str_decode(&str, b));    /* checked as read */
    if (b != small)
        free(b);
    return v;
}

/* Sets member key (as read) of object o to e (taken, also on failure);
 * refuses a key o already has when dups. 0 or -1. Apart from build for
 * the same reason as build_string. */
__attribute__((noinline)) static int build_member(json_t *o, const jscan_str_t *key, json_t *e,
                                                  int dups)
{
    char small[64], *k = key->len < sizeof small ? small : malloc(key->len + 1);
    size_t kl = k ? jscan_str_decode(key, k) : 0;
    int rc = k && !(dups && json_object_getn(o, k, kl)) ? json_object_setn_new_nocheck(o, k, kl, e)
                                                         : (json_decref(e), -1);
    if (k != small)
        free(k);
    return rc;
}

/* The value next in s as a new jansson value (depth: containers open
 * around it), or NULL: a syntax error, a repeated key (dups), too deep,
 * or OOM; the caller then asks jansson. */
static json_t *build(jscan_t *s, int depth, int dups)
{
    jscan_str_t key;
    jscan_num_t num;
    int t = jscan_peek(s), n = 0, more = -1;
    json_t *v = NULL, *e;
    switch (t) {
    case JSCAN_OBJECT:
        if (depth >= JSCAN_MAX_DEPTH || jscan_object(s) != 0 || !(v = json_object()))
            return NULL;
        while ((more = jscan_member(s, &n, &key)) == 1)
            if (!(e = build(s, depth + 1, dups)) || build_member(v, &key, e, dups) != 0) {
                more = -1;
                break;
            }
        break;
    case JSCAN_ARRAY:
        if (depth >= JSCAN_MAX_DEPTH || jscan_array(s) != 0 || !(v = json_array()))
            return NULL;
        while ((more = jscan_element(s, &n)) == 1)
            if (!(e = build(s, depth + 1, dups)) || json_array_append_new(v, e) != 0) {
                more = -1;
                break;
            }
        break;
    case JSCAN_STRING:
        return build_string(s);
    case JSCAN_NUMBER:
        if (jscan_number(s, &num) != 0)
            return NULL;
        return num.is_int ? json_integer(num.i) : json_real(num.d);
    case JSCAN_TRUE: case JSCAN_FALSE: case JSCAN_NULL:
        if (jscan_literal(s, &t) != 0)
            return NULL;
        return t == JSCAN_TRUE ? json_true() : t == JSCAN_FALSE ? json_false() : json_null();
    default:
        return NULL;
    }
    if (more != 0) {
        json_decref(v);
        return NULL;
    }
    return v;
}

json_t *jscan_tree(jscan_t *s, int dups)
{
    json_t *v = s->bad ? NULL : build(s, 0, dups);
    if (!v)
        fail(s);
    return v;
}

json_t *jscan_load(const char *text, size_t len, size_t flags, json_error_t *err)
{
    if (flags & ~(size_t)(JSON_REJECT_DUPLICATES | JSON_DECODE_ANY))
        return NULL;
    jscan_t s;
    json_t *v = NULL;
    jscan_init(&s, text, len);
    int t = text ? jscan_peek(&s) : JSCAN_BAD;
    if ((flags & JSON_DECODE_ANY) || t == JSCAN_OBJECT || t == JSCAN_ARRAY)
        v = build(&s, 0, (flags & JSON_REJECT_DUPLICATES) != 0);
    if (v && jscan_finish(&s) == 0)
        return v;
    json_decref(v);
    return json_loadb(text, len, flags, err);
}
