/* ostore.c - see ostore.h.
 *
 * Objects sit on one doubly linked list under the store mutex: a worker
 * holds at most (running tasks x values per task) of them, and the hot
 * operations (put, release) touch only their own node. Invariants, under
 * mu: bytes = sum of object bytes + outstanding reservations + charges;
 * objects = list length + outside charges. A waiter in ostore_reserve()
 * sleeps on cv, which is broadcast whenever bytes go down. */
#include "ostore.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

struct ostore_obj {
    ostore_key_t key;
    tensor_t *t;                /* owned */
    int64_t bytes;
    int refs;
    struct ostore_obj *prev, *next;
};

struct ostore {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* CLOCK_MONOTONIC; bytes went down */
    int64_t cap;
    int64_t bytes, objects, peak, waits;
    ostore_obj_t *head;
};

ostore_t *ostore_new(int64_t cap_bytes)
{
    if (cap_bytes <= 0)
        return NULL;
    ostore_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        goto fail;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (rc != 0)
        goto fail;
    if (pthread_mutex_init(&s->mu, NULL) != 0) {
        pthread_cond_destroy(&s->cv);
        goto fail;
    }
    s->cap = cap_bytes;
    return s;
fail:
    free(s);
    return NULL;
}

void ostore_free(ostore_t *s)
{
    if (!s)
        return;
    int leaked = 0;
    while (s->head) {
        ostore_obj_t *o = s->head;
        s->head = o->next;
        tensor_free(o->t);
        free(o);
        leaked++;
    }
    if (leaked)
        log_warn("ostore: %d object(s) still held at shutdown", leaked);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

int64_t ostore_tensor_bytes(const shape_t *shape)
{
    return shape_numel(shape) * (int64_t)sizeof(float);
}

/* Caller holds mu. */
static void account_locked(ostore_t *s, int64_t dobjects, int64_t dbytes)
{
    s->objects += dobjects;
    s->bytes += dbytes;
    if (s->bytes > s->peak)
        s->peak = s->bytes;
    if (dbytes < 0 || dobjects < 0)
        pthread_cond_broadcast(&s->cv);
}

ostore_status_t ostore_reserve(ostore_t *s, int64_t bytes, int64_t deadline_mono_us,
                               int (*stop)(void *ctx), void *ctx)
{
    if (bytes > s->cap)
        return OSTORE_TOO_BIG;
    ostore_status_t st = OSTORE_OK;
    int waited = 0;
    pthread_mutex_lock(&s->mu);
    while (s->bytes + bytes > s->cap) {
        if (!waited++)
            s->waits++;
        int64_t now = util_mono_us();
        if (now >= deadline_mono_us) {
            st = OSTORE_TIMEOUT;
            break;
        }
        /* Wake at least every millisecond to poll the stop predicate: a
         * cancelled task must not sit here until memory frees up. */
        int64_t until = now + 1000 < deadline_mono_us ? now + 1000 : deadline_mono_us;
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000),
                              .tv_nsec = (long)(until % 1000000) * 1000};
        int rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        if (rc != 0 && rc != ETIMEDOUT && rc != EINTR) {
            st = OSTORE_TIMEOUT;
            break;
        }
        if (stop) {
            pthread_mutex_unlock(&s->mu);
            int stopped = stop(ctx);
            pthread_mutex_lock(&s->mu);
            if (stopped) {
                st = OSTORE_STOPPED;
                break;
            }
        }
    }
    if (st == OSTORE_OK)
        account_locked(s, 0, bytes);
    pthread_mutex_unlock(&s->mu);
    return st;
}

void ostore_unreserve(ostore_t *s, int64_t bytes)
{
    if (bytes == 0)
        return;
    pthread_mutex_lock(&s->mu);
    account_locked(s, 0, -bytes);
    pthread_mutex_unlock(&s->mu);
}

void ostore_charge(ostore_t *s, int64_t dobjects, int64_t dbytes)
{
    pthread_mutex_lock(&s->mu);
    account_locked(s, dobjects, dbytes);
    pthread_mutex_unlock(&s->mu);
}

ostore_obj_t *ostore_put(ostore_t *s, const ostore_key_t *key, tensor_t *t, int refs,
                         int64_t reserved)
{
    ostore_obj_t *o = t && refs > 0 ? util_zalloc(1, sizeof *o) : NULL;
    if (!o) {
        tensor_free(t);
        ostore_unreserve(s, reserved);
        return NULL;
    }
    o->key = *key;
    o->t = t;
    o->bytes = ostore_tensor_bytes(&t->shape);
    o->refs = refs;
    pthread_mutex_lock(&s->mu);
    /* The reservation becomes the object's charge; a shape that differs
     * from the reserved one is settled here. */
    account_locked(s, 1, o->bytes - reserved);
    o->next = s->head;
    if (s->head)
        s->head->prev = o;
    s->head = o;
    pthread_mutex_unlock(&s->mu);
    return o;
}

const tensor_t *ostore_tensor(const ostore_obj_t *o)
{
    return o->t;
}

void ostore_ready_after(ostore_obj_t *o, int64_t ready_us)
{
    if (o->t->ready_us < ready_us)
        o->t->ready_us = ready_us;
}

/* Unlinks o and gives back its charge. Caller holds mu and frees o. */
static void unlink_locked(ostore_t *s, ostore_obj_t *o)
{
    if (o->prev)
        o->prev->next = o->next;
    else
        s->head = o->next;
    if (o->next)
        o->next->prev = o->prev;
    account_locked(s, -1, -o->bytes);
}

int ostore_release(ostore_t *s, ostore_obj_t *o, int n)
{
    pthread_mutex_lock(&s->mu);
    o->refs -= n;
    int left = o->refs;
    if (left <= 0)
        unlink_locked(s, o);
    pthread_mutex_unlock(&s->mu);
    if (left > 0)
        return left;
    tensor_free(o->t);      /* outside the lock: large frees may take time */
    free(o);
    return 0;
}

int ostore_drop_task(ostore_t *s, int64_t job, int32_t attempt, int32_t comp, int32_t shard)
{
    ostore_obj_t *dead = NULL;
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (ostore_obj_t *o = s->head, *next; o; o = next) {
        next = o->next;
        if (o->key.job == job && o->key.attempt == attempt && o->key.comp == comp &&
            o->key.shard == shard) {
            unlink_locked(s, o);
            o->next = dead;
            dead = o;
            n++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    while (dead) {
        ostore_obj_t *o = dead;
        dead = o->next;
        tensor_free(o->t);
        free(o);
    }
    return n;
}

int ostore_job_objects(ostore_t *s, int64_t job)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (ostore_obj_t *o = s->head; o; o = o->next)
        n += o->key.job == job;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void ostore_stats(ostore_t *s, ostore_stats_t *out)
{
    pthread_mutex_lock(&s->mu);
    out->objects = s->objects;
    out->bytes = s->bytes;
    out->cap_bytes = s->cap;
    out->peak_bytes = s->peak;
    out->waits = s->waits;
    pthread_mutex_unlock(&s->mu);
}
