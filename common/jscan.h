/* jscan.h - a strict JSON pull reader over a text buffer, for the hot
 * paths whose documents have one known shape (the workers' report
 * batches: store/report_decode.c). It builds no tree: the caller walks
 * the text value by value and keeps what it needs, so a report costs no
 * allocation per JSON value (jansson spent ~68K instructions parsing and
 * ~10K freeing each report item of a batch, as much as the SQL that
 * applies it).
 *
 * Grammar: RFC 8259 as jansson (2.14) reads it with its default flags, so
 * that a text this reader accepts jansson accepts too: a top-level object
 * or array, strings of valid UTF-8 without control characters, escapes
 * checked (\u surrogates paired, \u0000 refused), numbers without leading
 * zeros, an integer literal outside int64_t or a real that overflows a
 * double refused. Duplicate keys are the caller's to find (it knows which
 * keys it reads). Whatever the reader refuses, jansson may still read
 * differently: callers that need jansson's verdict on a refused text ask
 * jansson (report_decode.c does).
 *
 * Every read returns -1 on a syntax error and leaves the reader failed
 * (s->bad): every later read fails too. The reads allocate nothing but a
 * scratch copy of a real longer than 63 characters (jscan_number) or of a
 * long escaped string compared (jscan_str_eq); jscan_skip counts depth
 * in a bitmap instead of recursing. The text is borrowed; a jscan_str_t
 * points into it. */
#ifndef ATOLL_JSCAN_H
#define ATOLL_JSCAN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Deepest nesting jscan_skip accepts (jansson's JSON_PARSER_MAX_DEPTH). */
#define JSCAN_MAX_DEPTH 2048

typedef struct jscan {
    const unsigned char *p;     /* next byte */
    const unsigned char *end;
    int bad;                    /* a syntax error was read: the reader is done */
} jscan_t;

/* The type of the next value (jscan_peek). */
enum {
    JSCAN_BAD = -1,             /* no value can start here */
    JSCAN_OBJECT = 1,
    JSCAN_ARRAY,
    JSCAN_STRING,
    JSCAN_NUMBER,
    JSCAN_TRUE,
    JSCAN_FALSE,
    JSCAN_NULL
};

/* A string as it stands in the text, between its quotes, validated. */
typedef struct jscan_str {
    const char *p;              /* borrowed from the text */
    size_t len;                 /* raw bytes; the decoded form is at most this long */
    int escaped;                /* it holds a backslash escape */
} jscan_str_t;

/* A number: is_int for an integer literal (no fraction, no exponent), then
 * i is its value; d is its value as a double in every case. */
typedef struct jscan_num {
    int is_int;
    int64_t i;
    double d;
} jscan_num_t;

void jscan_init(jscan_t *s, const void *text, size_t len);
/* The next value's type, after whitespace; consumes nothing else. */
int jscan_peek(jscan_t *s);
/* Opens an object ('{'): 0 or -1. */
int jscan_object(jscan_t *s);
/* The object's next member: 1 with its key read and the ':' after it
 * consumed (the value is next), 0 when the object closed ('}' consumed),
 * -1. *n counts the members read so far (0 before the first; the reader
 * needs it to place commas). */
int jscan_member(jscan_t *s, int *n, jscan_str_t *key);
/* Opens an array ('['): 0 or -1. */
int jscan_array(jscan_t *s);
/* The array's next element: 1 when one follows (the value is next), 0
 * when the array closed, -1. *n as for jscan_member. */
int jscan_element(jscan_t *s, int *n);
/* Reads a string value: 0 with *out set, or -1. */
int jscan_string(jscan_t *s, jscan_str_t *out);
/* Reads a number: 0 with *out set, or -1. */
int jscan_number(jscan_t *s, jscan_num_t *out);
/* Reads true, false or null: 0 with *type set (JSCAN_TRUE...), or -1. */
int jscan_literal(jscan_t *s, int *type);
/* Reads any one value, validating it: 0 or -1 (also beyond
 * JSCAN_MAX_DEPTH). */
int jscan_skip(jscan_t *s);
/* 0 when only whitespace is left, else -1. */
int jscan_finish(jscan_t *s);

/* The text as a jansson tree, exactly as json_loadb(text, len, flags,
 * err) reads it (flags: 0, JSON_REJECT_DUPLICATES and/or JSON_DECODE_ANY;
 * others are refused, NULL), built from this reader's tokens: a tree is
 * the same values in the same order (tests/unit/test_jscan.c,
 * tests/fuzz/fuzz_report.c). jansson's own lexer spends ~260 instructions
 * a byte; whenever this reader refuses the text (a syntax error, a
 * repeated key, nesting past JSCAN_MAX_DEPTH), jansson reads it instead,
 * so the verdict and its message are always jansson's. New reference, or
 * NULL with err filled (err may be NULL). */
json_t *jscan_load(const char *text, size_t len, size_t flags, json_error_t *err);

/* The next value, consumed, as a new jansson tree built as jscan_load
 * builds one (a repeated key refused when dups, else the last one kept, as
 * jansson does), for a reader that walks a text and wants a tree of one
 * part of it only. NULL on a syntax error, a refused key, nesting past
 * JSCAN_MAX_DEPTH below this value, or out of memory: the reader is then
 * failed. New reference. */
json_t *jscan_tree(jscan_t *s, int dups);

/* Writes str's decoded bytes to buf (room for str->len + 1 bytes) and a
 * NUL; returns their count. str came from this reader, so it decodes. */
size_t jscan_str_decode(const jscan_str_t *str, char *buf);
/* Whether str decodes to exactly the NUL-terminated lit. */
int jscan_str_eq(const jscan_str_t *str, const char *lit);

#endif
