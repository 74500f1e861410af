/* plancache.h - compiled plans shared by a worker's computations whose
 * programs differ only in their names and where their inputs come from.
 *
 * A chain's steps or a training loop's iterations are one program with
 * another name and another producer each ("c7" reads "c6.x", "c8" reads
 * "c7.x"). Parsing such a computation's text into a tree and compiling it
 * cost a worker ~33K instructions a computation, most of what taking a
 * job in costs; with the cache the second and later ones cost a scan of
 * their text (plancache.c). Pathways and JAX cache compiled functions the
 * same way, by what the program is rather than by where it sits.
 *
 * The key of a computation is its text as the controller wrote it with
 * each elided string replaced: the computation's "name" by nothing, each
 * op's "from" by the shape that input resolves to; then the slice shape.
 * Two computations with one key compile to plans that differ only in
 * those strings, which a runner never reads (exec_run.c reads ops, value
 * names and reshard edges; a user program's `run`, which passes its
 * computation's name to its processes, is never cached). A computation
 * is looked up only when every elided string is plain (no escapes) and
 * valid as the compiler checks it, and every input resolves: a
 * computation that would not compile, or compile differently, is never
 * answered from the cache; it is compiled on its own as before.
 *
 * Thread safety: one process-wide cache under a mutex; a plan_ref_t is
 * counted atomically, so tasks holding one are freed on any thread.
 * Ownership: plancache_compile gives the caller one reference, dropped by
 * plancache_unref; the cache holds its own while the plan is listed. */
#ifndef ATOLL_PLANCACHE_H
#define ATOLL_PLANCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "err.h"

/* A counted reference to a compiled plan (opaque). */
typedef struct plan_ref plan_ref_t;

/* Plans listed at most (direct-mapped by key hash: a newcomer replaces
 * the one in its slot) and the longest key kept (a longer computation is
 * compiled on its own, every time). A key is at most its text, so what
 * the cache keeps is bounded: 256 texts of 8 KiB and their plans (an
 * op's plan is a few hundred bytes), a few MiB at worst. */
#define PLANCACHE_SLOTS 256
#define PLANCACHE_KEY_MAX ((size_t)8192)

/* Compiles the computation object whose text is [text, text + len) (a
 * part of a task's text: a JSON object, read already by the caller's
 * scan) against slice_shape, resolving each input's "from" through
 * input(ctx, ...), or finds its plan in the cache. 0 with *ref (a new
 * reference) and *plan (its plan, valid while the reference is held);
 * else the compiler's status with e filled and *ref NULL (500: out of
 * memory). */
int plancache_compile(const char *text, size_t len, const shape_t *slice_shape,
                      compiler_input_fn input, void *ctx, plan_ref_t **ref,
                      const comp_t **plan, err_t *e);
/* Drops a reference; the last one frees the plan. NULL is ignored. */
void plancache_unref(plan_ref_t *ref);

/* ---- for tests ---- */
typedef struct plancache_stats {
    int64_t hits;               /* answered from the cache */
    int64_t misses;             /* looked up, compiled, listed when it compiled */
    int64_t bypassed;           /* not looked up: run, escapes, invalid or long */
} plancache_stats_t;
void plancache_get_stats(plancache_stats_t *out);
/* Drops the cache's own references (plans held by tasks stay). */
void plancache_clear(void);

#endif
