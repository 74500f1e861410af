/* jarena.h - a bump allocator for the jansson trees of poll answers.
 *
 * A poll answer is parsed into a tree of a few hundred small jansson
 * values (~130 allocations a computation), read once by the intake, and
 * freed whole. Through malloc that was ~40% of the intake thread's
 * instructions (callgrind, stop 73: malloc 24K, free 14K and the
 * malloc_consolidate that the next large allocation ran over the freed
 * chunks, 9K, of 114K a computation). Inside an arena an allocation is a
 * pointer bump and a free a counter decrement.
 *
 * jarena_install (once, before any thread uses jansson) makes every
 * jansson allocation of the process carry a 16-byte header naming its
 * arena, or none: the heap. Between jarena_begin and jarena_end, the
 * calling thread's jansson allocations come from the arena; every other
 * allocation (other threads, or this one outside that window) comes from
 * the heap as before. A free finds its kind in the header, so a tree may
 * be freed on any thread, at any time.
 *
 * jarena_reset makes the arena's memory reusable once every value
 * allocated in it was freed (its live count is 0), and keeps it as it is
 * otherwise: a tree still referenced keeps its memory. The owner gives the
 * arena up with jarena_retire: it is freed then, or, while values from it
 * are live, by the free of the last one (on whatever thread). So an owner
 * whose reset was refused retires that arena and takes a new one, and
 * nothing leaks or grows.
 *
 * Sanitizer builds (ASan) bypass the arena, so that use-after-free and
 * leaks of the trees stay visible to the sanitizer: every allocation goes
 * to the heap (with its header). */
#ifndef ATOLL_JARENA_H
#define ATOLL_JARENA_H

#include <stddef.h>

typedef struct jarena jarena_t;

/* Sets jansson's allocation functions (json_set_alloc_funcs). Process-wide:
 * call once, before any jansson value exists. */
void jarena_install(void);
/* A new, empty arena, or NULL on OOM. */
jarena_t *jarena_new(void);
/* The owner's end of a (NULL: nothing): a and its chunks are freed now,
 * or when the last value allocated in it is freed. a is not used again
 * by the owner. */
void jarena_retire(jarena_t *a);
/* The calling thread's jansson allocations go to a until jarena_end. */
void jarena_begin(jarena_t *a);
void jarena_end(void);
/* Rewinds a when nothing allocated in it is live: 1; 0 when something is
 * (left as it is). Not between jarena_begin and jarena_end. */
int jarena_reset(jarena_t *a);
/* Values allocated in a and not freed yet (tests, diagnostics). */
long jarena_live(const jarena_t *a);
/* Bytes a holds in chunks (tests, diagnostics). */
size_t jarena_bytes(const jarena_t *a);
/* 0 in sanitizer builds, where arenas are bypassed; else 1. */
int jarena_enabled(void);
/* Arenas made and not freed yet, in the process (tests, diagnostics). */
long jarena_alive(void);

#endif
