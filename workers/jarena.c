/* jarena.c - a bump allocator for the jansson trees of poll answers (see
 * jarena.h).
 *
 * Every jansson allocation carries a header naming its arena (NULL: the
 * heap), so a free needs no lookup and may run on any thread. An arena is
 * a list of chunks bumped in order; a value's free only counts down the
 * arena's live values, and jarena_reset rewinds the chunks when that count
 * is 0. Only the thread between jarena_begin and jarena_end allocates from
 * an arena, and only it resets it, so the chunks need no lock; `refs` is
 * atomic because a tree may be freed elsewhere.
 *
 * refs counts the live values plus one for the owner (until
 * jarena_retire): whoever takes it to 0, the owner's retire or a value's
 * free, frees the arena. */
#include "jarena.h"

#include <jansson.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

/* The header keeps what follows it 16-byte aligned, as malloc's. */
#define JARENA_HDR 16
#define JARENA_CHUNK ((size_t)64 * 1024)
/* Larger requests (a long string's copy) go to the heap: a chunk holds
 * at least eight of the largest. */
#define JARENA_BIG ((size_t)8 * 1024)
/* A reset keeps this many chunks (256 KiB) and frees the rest: one huge
 * answer (a 2,048-device placement) does not pin its memory for good. */
#define JARENA_KEEP 4

#if defined(__SANITIZE_ADDRESS__)
#define JARENA_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define JARENA_BYPASS 1
#endif
#endif
#ifndef JARENA_BYPASS
#define JARENA_BYPASS 0
#endif

typedef struct jchunk {
    struct jchunk *next;
    size_t used;
    alignas(16) unsigned char data[];
} jchunk_t;

struct jarena {
    jchunk_t *first, *last, *cur;   /* owned: the chunks, in order; cur is bumped */
    int nchunks;
    atomic_long refs;               /* values allocated here, not yet freed, + 1 (owner) */
};

typedef struct jhdr {
    jarena_t *arena;                /* NULL: from the heap (the header's own block) */
    size_t pad;
} jhdr_t;
_Static_assert(sizeof(jhdr_t) == JARENA_HDR, "the header keeps 16-byte alignment");

static _Thread_local jarena_t *tls_arena;
static atomic_long arenas_alive;    /* made and not yet freed (jarena_alive) */

/* need bytes (a multiple of 16) from a's chunks, a new chunk added when
 * none after cur has room; NULL on OOM. */
static void *arena_take(jarena_t *a, size_t need)
{
    jchunk_t *c = a->cur;
    while (c && JARENA_CHUNK - c->used < need)
        c = c->next;
    if (!c) {
        if (!(c = malloc(sizeof *c + JARENA_CHUNK)))
            return NULL;
        c->next = NULL;
        c->used = 0;
        if (a->last)
            a->last->next = c;
        else
            a->first = c;
        a->last = c;
        a->nchunks++;
    }
    a->cur = c;
    void *p = c->data + c->used;
    c->used += need;
    return p;
}

static void *jarena_malloc(size_t size)
{
    jarena_t *a = tls_arena;
    jhdr_t *h = NULL;
    if (size > SIZE_MAX - JARENA_HDR - 15)
        return NULL;
    size_t need = (size + JARENA_HDR + 15) & ~(size_t)15;
    if (a && need <= JARENA_BIG && (h = arena_take(a, need))) {
        h->arena = a;
        atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
    } else {
        if (!(h = malloc(JARENA_HDR + size)))
            return NULL;
        h->arena = NULL;
    }
    return (unsigned char *)h + JARENA_HDR;
}

static void chunks_free(jchunk_t *c)
{
    while (c) {
        jchunk_t *next = c->next;
        free(c);
        c = next;
    }
}

/* Drops one of a's references; the last one frees a. */
static void arena_unref(jarena_t *a)
{
    if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1) {
        chunks_free(a->first);
        free(a);
        atomic_fetch_sub(&arenas_alive, 1);
    }
}

static void jarena_release(void *p)
{
    if (!p)
        return;
    jhdr_t *h = (jhdr_t *)(void *)((unsigned char *)p - JARENA_HDR);
    if (h->arena)
        arena_unref(h->arena);
    else
        free(h);
}

void jarena_install(void) { json_set_alloc_funcs(jarena_malloc, jarena_release); }

jarena_t *jarena_new(void)
{
    jarena_t *a = calloc(1, sizeof *a);
    if (a) {
        atomic_init(&a->refs, 1);
        atomic_fetch_add(&arenas_alive, 1);
    }
    return a;
}

void jarena_retire(jarena_t *a)
{
    if (a)
        arena_unref(a);
}

void jarena_begin(jarena_t *a) { tls_arena = JARENA_BYPASS ? NULL : a; }

void jarena_end(void) { tls_arena = NULL; }

int jarena_reset(jarena_t *a)
{
    if (atomic_load_explicit(&a->refs, memory_order_acquire) != 1)
        return 0;
    jchunk_t *c = a->first;
    for (int i = 1; c && i < JARENA_KEEP; i++)
        c = c->next;
    if (c) {                        /* c: the last chunk kept */
        chunks_free(c->next);
        c->next = NULL;
        a->last = c;
        a->nchunks = JARENA_KEEP;
    }
    for (c = a->first; c; c = c->next)
        c->used = 0;
    a->cur = a->first;
    return 1;
}

long jarena_live(const jarena_t *a) { return atomic_load(&a->refs) - 1; }

size_t jarena_bytes(const jarena_t *a) { return (size_t)a->nchunks * JARENA_CHUNK; }

int jarena_enabled(void) { return !JARENA_BYPASS; }

long jarena_alive(void) { return atomic_load(&arenas_alive); }
