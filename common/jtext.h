/* jtext.h - a jansson tree as compact JSON text, the same bytes as
 * json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) (tests/unit/test_jtext.c
 * compares them on random trees), at a fraction of the cost: jansson's
 * dumper checks every container against a table of its parents (a pointer
 * printed with snprintf and hashed, to refuse cycles) and formats every
 * integer with printf; a 400-byte task payload cost ~71K instructions
 * (the scheduler's largest single cost per computation dispatched) and
 * printing reports ~8 % of a worker's CPU.
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

#endif
