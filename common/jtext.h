/* jtext.h - a jansson tree as compact JSON text, the same bytes as
 * json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) (tests/unit/test_jtext.c
 * compares them on random trees), at a fraction of the cost: jansson's
 * dumper checks every container against a table of its parents (a pointer
 * printed with snprintf and hashed, to refuse cycles) and formats every
 * integer with printf; a 400-byte task payload cost ~71K instructions
 * (the scheduler's largest single cost per computation dispatched). Where
 * a document's shape is known, the writer below (jtext_w_t) skips the tree
 * too: a worker's reports (workers/exec_run.c), whose tree built, printed
 * and freed cost the worker ~9 % of its instructions in a chain.
 *
 * The tree must be acyclic (every tree Atoll builds or parses is); its
 * depth is the recursion's. Objects are written in jansson's iteration
 * order (insertion), strings with jansson's escapes (", \, control
 * characters; UTF-8 as is), reals as "%.17g" with jansson's fix-ups (a
 * ".0" when it would read back as an integer, no '+' or leading zeros in
 * an exponent). */
#ifndef ATOLL_JTEXT_H
#define ATOLL_JTEXT_H

#include <jansson.h>
#include <stddef.h>

/* v as compact JSON text: malloc'd, NUL-terminated (the caller frees),
 * its length in *len when len is not NULL; NULL on OOM or when v is
 * NULL. */
char *jtext_dump(const json_t *v, size_t *len);

/* A text written piece by piece, for callers that know their document's
 * shape and would otherwise build a tree only to print it (a worker's
 * reports). Start from {0}; every piece after an allocation failure is
 * dropped, and jtext_take() then answers NULL. The writer owns p until
 * jtext_take() or jtext_drop(). The caller writes the punctuation ("{",
 * ",", ":") itself with jtext_raw(). */
typedef struct jtext_w {
    char *p;
    size_t len, cap;
    int failed;
} jtext_w_t;

void jtext_raw(jtext_w_t *w, const char *s, size_t n);
/* A string literal's bytes, as they are (its length counted by the
 * compiler). */
#define JTEXT_LIT(w, lit) jtext_raw((w), "" lit, sizeof(lit) - 1)
/* s (NUL-terminated, UTF-8) as a JSON string, jansson's escapes. */
void jtext_str(jtext_w_t *w, const char *s);
void jtext_int(jtext_w_t *w, long long v);
/* A tree as compact JSON text: jtext_dump()'s bytes, appended. */
void jtext_value(jtext_w_t *w, const json_t *v);
/* v as jansson prints a real; NaN and infinities, which JSON lacks, as
 * null. */
void jtext_real(jtext_w_t *w, double v);
/* The text written (malloc'd, NUL-terminated; the caller frees), its
 * length in *len when len is not NULL; NULL after an allocation failure
 * (the writer freed it). The writer is empty again either way. */
char *jtext_take(jtext_w_t *w, size_t *len);
void jtext_drop(jtext_w_t *w);

#endif
