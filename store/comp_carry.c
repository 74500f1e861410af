/* comp_carry.c - the carried parts of computations' progress
 * (comp_carry.h): one table per process, open addressing with linear
 * probing, keyed by (job, attempt, comp).
 *
 * Invariants (under carry_mu): carry_cap is 0 or a power of two at least
 * twice carry_n + carry_reserved, so every reserved key has a free slot
 * and every probe ends at an empty one; carry_next_due is at most every
 * part's due_us (or 0 with no part). */
#include "comp_carry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static pthread_mutex_t carry_mu = PTHREAD_MUTEX_INITIALIZER;
static comp_carry_t *carry_tab;     /* owned: carry_cap slots; job 0 marks an empty one */
static size_t carry_cap, carry_n, carry_reserved;
static int64_t carry_next_due;
static _Atomic int64_t carry_show_us = COMP_CARRY_SHOW_US;

int64_t comp_carry_show_us(void) { return atomic_load(&carry_show_us); }
void comp_carry_set_show_us(int64_t us) { atomic_store(&carry_show_us, us); }

static int key_is(const comp_carry_t *c, int64_t job, int64_t attempt, int64_t comp)
{
    return c->job == job && c->comp == comp && c->attempt == attempt;
}

static size_t key_slot(int64_t job, int64_t attempt, int64_t comp, size_t cap)
{
    uint64_t h = (uint64_t)job * 0x9E3779B97F4A7C15u;
    h ^= (uint64_t)comp * 0xC2B2AE3D27D4EB4Fu + (uint64_t)attempt;
    h ^= h >> 29;
    return (size_t)h & (cap - 1);
}

/* The key's slot, or NULL. Holds carry_mu. */
static comp_carry_t *tab_find(int64_t job, int64_t attempt, int64_t comp)
{
    if (carry_cap == 0)
        return NULL;
    for (size_t i = key_slot(job, attempt, comp, carry_cap);; i = (i + 1) & (carry_cap - 1)) {
        comp_carry_t *c = &carry_tab[i];
        if (c->job == 0)
            return NULL;
        if (key_is(c, job, attempt, comp))
            return c;
    }
}

/* Puts c in an empty slot (there is one: the invariant). Holds carry_mu. */
static void tab_insert(const comp_carry_t *c)
{
    size_t i = key_slot(c->job, c->attempt, c->comp, carry_cap);
    while (carry_tab[i].job != 0)
        i = (i + 1) & (carry_cap - 1);
    carry_tab[i] = *c;
    carry_tab[i].gone = 0;
    carry_n++;
}

/* Removes the part in slot c, shifting back the ones after it that
 * probed past it, so no probe meets a hole before its key. */
static void tab_remove(comp_carry_t *c)
{
    size_t hole = (size_t)(c - carry_tab), mask = carry_cap - 1;
    for (size_t i = (hole + 1) & mask; carry_tab[i].job != 0; i = (i + 1) & mask) {
        size_t home = key_slot(carry_tab[i].job, carry_tab[i].attempt, carry_tab[i].comp,
                               carry_cap);
        /* i may move to the hole when its home is not in (hole, i]. */
        if (((i - home) & mask) >= ((i - hole) & mask)) {
            carry_tab[hole] = carry_tab[i];
            hole = i;
        }
    }
    memset(&carry_tab[hole], 0, sizeof carry_tab[hole]);
    carry_n--;
}

/* Grows the table to hold `need` parts at half load. 0, or -1 (OOM: the
 * table as it was). Holds carry_mu. */
static int tab_room(size_t need)
{
    if (need * 2 <= carry_cap)
        return 0;
    size_t cap = carry_cap ? carry_cap : 64;
    while (cap < need * 2)
        cap *= 2;
    comp_carry_t *old = carry_tab, *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return -1;
    size_t old_cap = carry_cap;
    carry_tab = tab;
    carry_cap = cap;
    carry_n = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].job != 0)
            tab_insert(&old[i]);
    free(old);
    return 0;
}

/* The staged entry of the key, or NULL. */
static comp_carry_t *staged(const comp_carry_txn_t *t, int64_t job, int64_t attempt,
                            int64_t comp)
{
    for (size_t i = t->n; i-- > 0;)
        if (key_is(&t->e[i], job, attempt, comp))
            return &t->e[i];
    return NULL;
}

int comp_carry_get(const comp_carry_txn_t *t, int64_t job, int64_t attempt, int64_t comp,
                   comp_carry_t *out)
{
    const comp_carry_t *s = staged(t, job, attempt, comp);
    if (s) {
        *out = *s;
        return !s->gone;
    }
    pthread_mutex_lock(&carry_mu);
    const comp_carry_t *c = tab_find(job, attempt, comp);
    if (c)
        *out = *c;
    pthread_mutex_unlock(&carry_mu);
    return c != NULL;
}

int comp_carry_put(comp_carry_txn_t *t, const comp_carry_t *c)
{
    comp_carry_t *s = staged(t, c->job, c->attempt, c->comp);
    if (s) {
        *s = *c;
        return 0;
    }
    if (util_grow((void **)&t->e, &t->cap, t->n, sizeof *t->e, 16) != 0)
        return -1;
    pthread_mutex_lock(&carry_mu);
    int in_tab = tab_find(c->job, c->attempt, c->comp) != NULL, rc = 0;
    if (!in_tab && c->gone) {       /* nothing to drop */
        pthread_mutex_unlock(&carry_mu);
        return 0;
    }
    if (!in_tab) {                  /* a new key: its slot, reserved now */
        rc = tab_room(carry_n + carry_reserved + 1);
        if (rc == 0) {
            carry_reserved++;
            t->reserved++;
        }
    }
    pthread_mutex_unlock(&carry_mu);
    if (rc == 0)
        t->e[t->n++] = *c;
    return rc;
}

long comp_carry_of_job(const comp_carry_txn_t *t, int64_t job, comp_carry_t **out)
{
    *out = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    pthread_mutex_lock(&carry_mu);
    for (size_t i = 0; rc == 0 && i < carry_cap; i++) {
        const comp_carry_t *c = &carry_tab[i];
        if (c->job != job || staged(t, c->job, c->attempt, c->comp))
            continue;
        rc = util_grow((void **)out, &cap, n, sizeof **out, 8);
        if (rc == 0)
            (*out)[n++] = *c;
    }
    pthread_mutex_unlock(&carry_mu);
    for (size_t i = 0; rc == 0 && i < t->n; i++) {
        if (t->e[i].job != job || t->e[i].gone)
            continue;
        rc = util_grow((void **)out, &cap, n, sizeof **out, 8);
        if (rc == 0)
            (*out)[n++] = t->e[i];
    }
    if (rc != 0) {
        free(*out);
        *out = NULL;
        return -1;
    }
    return (long)n;
}

size_t comp_carry_due(int64_t now, comp_carry_t *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&carry_mu);
    int64_t next = 0;
    for (size_t i = 0; i < carry_cap; i++) {
        const comp_carry_t *c = &carry_tab[i];
        if (c->job == 0)
            continue;
        if (c->due_us <= now && n < max)
            out[n++] = *c;
        if (next == 0 || c->due_us < next)
            next = c->due_us;
    }
    carry_next_due = next;
    pthread_mutex_unlock(&carry_mu);
    return n;
}

int64_t comp_carry_next_due(void)
{
    pthread_mutex_lock(&carry_mu);
    int64_t next = carry_next_due;
    pthread_mutex_unlock(&carry_mu);
    return next;
}

void comp_carry_commit(comp_carry_txn_t *t)
{
    if (t->n == 0 && t->reserved == 0)
        return;                 /* most transactions: nothing staged */
    pthread_mutex_lock(&carry_mu);
    for (size_t i = 0; i < t->n; i++) {
        const comp_carry_t *e = &t->e[i];
        comp_carry_t *c = tab_find(e->job, e->attempt, e->comp);
        if (e->gone) {
            if (c)
                tab_remove(c);
            continue;
        }
        if (c)
            *c = *e;
        else
            tab_insert(e);      /* into the slot reserved when it was staged */
        if (carry_next_due == 0 || e->due_us < carry_next_due)
            carry_next_due = e->due_us;
    }
    carry_reserved -= t->reserved;
    if (carry_n == 0)
        carry_next_due = 0;
    pthread_mutex_unlock(&carry_mu);
    t->n = t->reserved = 0;
}

void comp_carry_discard(comp_carry_txn_t *t)
{
    if (t->reserved == 0) {
        t->n = 0;
        return;
    }
    pthread_mutex_lock(&carry_mu);
    carry_reserved -= t->reserved;
    pthread_mutex_unlock(&carry_mu);
    t->n = t->reserved = 0;
}

void comp_carry_txn_free(comp_carry_txn_t *t)
{
    comp_carry_discard(t);
    free(t->e);
    memset(t, 0, sizeof *t);
}

size_t comp_carry_count(void)
{
    pthread_mutex_lock(&carry_mu);
    size_t n = carry_n;
    pthread_mutex_unlock(&carry_mu);
    return n;
}

void comp_carry_reset(void)
{
    pthread_mutex_lock(&carry_mu);
    free(carry_tab);
    carry_tab = NULL;
    carry_cap = carry_n = carry_reserved = 0;
    carry_next_due = 0;
    pthread_mutex_unlock(&carry_mu);
}
