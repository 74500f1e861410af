/* mbox.c - see mbox.h.
 *
 * A fixed-size chained hash table under one mutex, and one condition
 * variable broadcast on every change that could satisfy a waiter (put,
 * cancel, shutdown). Waiters re-check their own tag after each wakeup, so a
 * spurious or foreign wakeup costs one lookup. The number of concurrent
 * waiters is at most the device count, so a broadcast is cheap. */
#include "mbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

#define MBOX_BUCKETS 1024u  /* power of two */

typedef struct mbox_msg {
    mbox_tag_t tag;
    tensor_t *t;            /* owned */
    struct mbox_msg *next;
} mbox_msg_t;

typedef struct mbox_cancel {
    int64_t job;
    int32_t max_attempt;
} mbox_cancel_t;

struct mbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* CLOCK_MONOTONIC, matching util_mono_us() */
    mbox_msg_t *bucket[MBOX_BUCKETS];
    int count;
    int stopped;
    /* Ring of recently cancelled jobs: ncancel used entries, next write at
     * cancel_next once full. */
    mbox_cancel_t cancel[MBOX_CANCEL_MEMORY];
    int ncancel;
    int cancel_next;
    mbox_acct_fn acct;      /* may be NULL */
    void *acct_ctx;
};

/* Reports a message arriving (sign +1) or leaving (-1). Holds mu. */
static void acct_locked(mbox_t *mb, const tensor_t *t, int sign)
{
    if (mb->acct)
        mb->acct(mb->acct_ctx, sign, sign * shape_numel(&t->shape) * (int64_t)sizeof(float));
}

void mbox_set_accounting(mbox_t *mb, mbox_acct_fn fn, void *ctx)
{
    pthread_mutex_lock(&mb->mu);
    mb->acct = fn;
    mb->acct_ctx = ctx;
    pthread_mutex_unlock(&mb->mu);
}

static int tag_equal(const mbox_tag_t *a, const mbox_tag_t *b)
{
    return a->job == b->job && a->attempt == b->attempt && a->comp == b->comp &&
           a->op == b->op && a->src == b->src && a->dst == b->dst;
}

static unsigned tag_hash(const mbox_tag_t *t)
{
    /* FNV-1a over the fields (not the struct bytes: padding is undefined). */
    uint64_t f[6] = {(uint64_t)t->job, (uint32_t)t->attempt, (uint32_t)t->comp,
                     (uint32_t)t->op, (uint32_t)t->src, (uint32_t)t->dst};
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 6; i++) {
        h ^= f[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return (unsigned)(h & (MBOX_BUCKETS - 1));
}

mbox_t *mbox_new(void)
{
    mbox_t *mb = calloc(1, sizeof *mb);
    if (!mb)
        return NULL;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        goto fail_mem;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&mb->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        goto fail_mem;
    if (pthread_mutex_init(&mb->mu, NULL) != 0)
        goto fail_cv;
    return mb;
fail_cv:
    pthread_cond_destroy(&mb->cv);
fail_mem:
    free(mb);
    return NULL;
}

void mbox_free(mbox_t *mb)
{
    if (!mb)
        return;
    for (unsigned b = 0; b < MBOX_BUCKETS; b++) {
        mbox_msg_t *m = mb->bucket[b];
        while (m) {
            mbox_msg_t *next = m->next;
            acct_locked(mb, m->t, -1);
            tensor_free(m->t);
            free(m);
            m = next;
        }
    }
    pthread_mutex_destroy(&mb->mu);
    pthread_cond_destroy(&mb->cv);
    free(mb);
}

/* Caller holds mu. */
static int cancelled_locked(const mbox_t *mb, int64_t job, int32_t attempt)
{
    for (int i = 0; i < mb->ncancel; i++)
        if (mb->cancel[i].job == job && attempt <= mb->cancel[i].max_attempt)
            return 1;
    return 0;
}

int mbox_put(mbox_t *mb, const mbox_tag_t *tag, tensor_t *t)
{
    mbox_msg_t *m = malloc(sizeof *m);
    pthread_mutex_lock(&mb->mu);
    if (!m || mb->stopped || cancelled_locked(mb, tag->job, tag->attempt)) {
        pthread_mutex_unlock(&mb->mu);
        if (!m)
            log_error("mbox: out of memory, message dropped (job %lld)", (long long)tag->job);
        free(m);
        tensor_free(t);
        return 1;
    }
    m->tag = *tag;
    m->t = t;
    m->next = NULL;
    /* Append so that duplicates of one tag are taken in arrival order. */
    mbox_msg_t **p = &mb->bucket[tag_hash(tag)];
    while (*p)
        p = &(*p)->next;
    *p = m;
    mb->count++;
    acct_locked(mb, t, +1);
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
    return 0;
}

/* Unlinks and returns the first message with this tag, or NULL. Holds mu. */
static tensor_t *remove_locked(mbox_t *mb, const mbox_tag_t *tag)
{
    for (mbox_msg_t **p = &mb->bucket[tag_hash(tag)]; *p; p = &(*p)->next) {
        if (tag_equal(&(*p)->tag, tag)) {
            mbox_msg_t *m = *p;
            tensor_t *t = m->t;
            *p = m->next;
            free(m);
            mb->count--;
            acct_locked(mb, t, -1);
            return t;
        }
    }
    return NULL;
}

mbox_status_t mbox_take(mbox_t *mb, const mbox_tag_t *tag, int64_t deadline_mono_us,
                        tensor_t **out)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_mono_us / 1000000),
                          .tv_nsec = (long)(deadline_mono_us % 1000000) * 1000};
    mbox_status_t st = MBOX_TIMEOUT;
    *out = NULL;
    pthread_mutex_lock(&mb->mu);
    for (;;) {
        if (mb->stopped) {
            st = MBOX_STOPPED;
            break;
        }
        if (cancelled_locked(mb, tag->job, tag->attempt)) {
            st = MBOX_CANCELLED;
            break;
        }
        *out = remove_locked(mb, tag);
        if (*out) {
            st = MBOX_OK;
            break;
        }
        if (util_mono_us() >= deadline_mono_us)
            break;
        int rc = pthread_cond_timedwait(&mb->cv, &mb->mu, &ts);
        if (rc != 0 && rc != ETIMEDOUT && rc != EINTR)
            break;
    }
    pthread_mutex_unlock(&mb->mu);
    return st;
}

/* Frees matching messages; holds mu. */
static int drop_locked(mbox_t *mb, int64_t job, int32_t max_attempt)
{
    int n = 0;
    for (unsigned b = 0; b < MBOX_BUCKETS; b++) {
        mbox_msg_t **p = &mb->bucket[b];
        while (*p) {
            mbox_msg_t *m = *p;
            if (m->tag.job == job && m->tag.attempt <= max_attempt) {
                *p = m->next;
                acct_locked(mb, m->t, -1);
                tensor_free(m->t);
                free(m);
                n++;
            } else {
                p = &m->next;
            }
        }
    }
    mb->count -= n;
    return n;
}

void mbox_cancel_job(mbox_t *mb, int64_t job, int32_t max_attempt)
{
    pthread_mutex_lock(&mb->mu);
    int found = 0;
    for (int i = 0; i < mb->ncancel; i++) {
        if (mb->cancel[i].job == job) {
            if (max_attempt > mb->cancel[i].max_attempt)
                mb->cancel[i].max_attempt = max_attempt;
            found = 1;
        }
    }
    if (!found) {
        mbox_cancel_t c = {.job = job, .max_attempt = max_attempt};
        if (mb->ncancel < MBOX_CANCEL_MEMORY) {
            mb->cancel[mb->ncancel++] = c;
        } else {
            mb->cancel[mb->cancel_next] = c;
            mb->cancel_next = (mb->cancel_next + 1) % MBOX_CANCEL_MEMORY;
        }
    }
    drop_locked(mb, job, max_attempt);
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
}

int mbox_is_cancelled(mbox_t *mb, int64_t job, int32_t attempt)
{
    pthread_mutex_lock(&mb->mu);
    int c = cancelled_locked(mb, job, attempt);
    pthread_mutex_unlock(&mb->mu);
    return c;
}

int mbox_drop_job(mbox_t *mb, int64_t job, int32_t max_attempt)
{
    pthread_mutex_lock(&mb->mu);
    int n = drop_locked(mb, job, max_attempt);
    pthread_mutex_unlock(&mb->mu);
    return n;
}

void mbox_shutdown(mbox_t *mb)
{
    pthread_mutex_lock(&mb->mu);
    mb->stopped = 1;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
}

int mbox_is_stopped(mbox_t *mb)
{
    pthread_mutex_lock(&mb->mu);
    int s = mb->stopped;
    pthread_mutex_unlock(&mb->mu);
    return s;
}

int mbox_count(mbox_t *mb)
{
    pthread_mutex_lock(&mb->mu);
    int n = mb->count;
    pthread_mutex_unlock(&mb->mu);
    return n;
}
