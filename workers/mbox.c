/* mbox.c - see mbox.h.
 *
 * A fixed-size chained hash table under one mutex, and one condition
 * variable broadcast on every change that could satisfy a waiter (put,
 * cancel, shutdown) while any waiter sleeps. Waiters re-check their own
 * tag after each wakeup, so a spurious or foreign wakeup costs one lookup.
 * The number of concurrent waiters is at most the device count, so a
 * broadcast is cheap. Each such change also moves a generation counter,
 * which polling takers (mbox_set_poller) watch without the lock. */
#include "mbox.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "util.h"

#define MBOX_BUCKETS 1024u  /* power of two */
/* Declared tasks and remembered ended ones are found by hash, not by
 * scanning: a worker holds every task of a job at once (a 1,000-computation
 * chain declares 5,000 here), and every frame, declaration and end looks
 * one up. Powers of two. */
#define MBOX_TASK_BUCKETS 4096u
#define MBOX_ENDED_BUCKETS 1024u

typedef struct mbox_msg {
    mbox_tag_t tag;
    tensor_t *t;            /* owned */
    struct mbox_msg *next;
    /* Unclaimed frames only (origin > 0): the connection they came from,
     * when, and their place in the arrival-ordered unclaimed list. */
    int origin;
    int64_t arrived_us;
    struct mbox_msg *uprev, *unext;
    int from_net;           /* came through mbox_put_from (a peer process) */
    mbox_key_t key;         /* from_net only: the key the frame carried */
} mbox_msg_t;

typedef struct mbox_task {  /* a declared task (see mbox_expect) */
    int64_t job;
    int32_t attempt, comp, shard, npeers;
    int refs;
    mbox_key_t key;         /* the attempt's data-plane key */
    struct mbox_task *hnext;  /* next in its hash chain */
} mbox_task_t;

typedef struct mbox_cancel {
    int64_t job;
    int32_t max_attempt;
} mbox_cancel_t;

struct mbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* CLOCK_MONOTONIC, matching util_mono_us() */
    mbox_msg_t *bucket[MBOX_BUCKETS];
    int count;
    /* Messages held per task key (job, attempt, comp, dst) hashed modulo
     * MBOX_BUCKETS: a task's end scans the buckets for leftovers of its
     * key only when its counter says there may be some (keys that share
     * a counter only cost a scan). Every link and unlink of a message
     * moves count and this together (msg_linked). */
    uint32_t key_msgs[MBOX_BUCKETS];
    int stopped;
    /* Ring of recently cancelled jobs: ncancel used entries, next write at
     * cancel_next once full. */
    mbox_cancel_t cancel[MBOX_CANCEL_MEMORY];
    int ncancel;
    int cancel_next;
    mbox_acct_fn acct;      /* may be NULL */
    void *acct_ctx;
    /* The gate. tasks: declared tasks, hash chains of owned nodes. ended:
     * ring of recently ended ones (nended used, next write at ended_next
     * once full), indexed by ended_bucket through their hnext. ufirst/ulast:
     * unclaimed frames, oldest first; their bytes (plus reservations) per
     * origin and in all. */
    mbox_task_t *tasks[MBOX_TASK_BUCKETS];
    mbox_task_t ended[MBOX_ENDED_MEMORY];
    mbox_task_t *ended_bucket[MBOX_ENDED_BUCKETS];
    int nended, ended_next;
    mbox_msg_t *ufirst, *ulast;
    int64_t origin_bytes[MBOX_MAX_ORIGINS];
    int64_t unclaimed_bytes;
    mbox_guard_stats_t gs;
    /* Takers that drive the data plane (mbox_set_poller). gen counts the
     * changes a waiter could be waiting for (every wake_locked), so a
     * polling taker looks at the table again only when it moved. sleepers:
     * takers in pthread_cond_timedwait now. */
    mbox_poller_t poller;
    atomic_uint gen;
    int sleepers;
};

/* Something a waiter may wait for changed: polling takers see gen move,
 * sleeping ones are woken. Holds mu. */
static void wake_locked(mbox_t *mb)
{
    atomic_fetch_add_explicit(&mb->gen, 1, memory_order_release);
    if (mb->sleepers)
        pthread_cond_broadcast(&mb->cv);
}

void mbox_set_poller(mbox_t *mb, const mbox_poller_t *p)
{
    pthread_mutex_lock(&mb->mu);
    mb->poller = p ? *p : (mbox_poller_t){0};
    pthread_mutex_unlock(&mb->mu);
}

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

/* FNV-1a over n fields (not struct bytes: padding is undefined), with a
 * shift so that the high bits of the job id reach the low bits. */
static unsigned fields_hash(const uint64_t *f, int n)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= f[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return (unsigned)h;
}

static unsigned tag_hash(const mbox_tag_t *t)
{
    uint64_t f[6] = {(uint64_t)t->job, (uint32_t)t->attempt, (uint32_t)t->comp,
                     (uint32_t)t->op, (uint32_t)t->src, (uint32_t)t->dst};
    return fields_hash(f, 6) & (MBOX_BUCKETS - 1);
}

static unsigned task_hash(int64_t job, int32_t attempt, int32_t comp, int32_t shard)
{
    uint64_t f[4] = {(uint64_t)job, (uint32_t)attempt, (uint32_t)comp, (uint32_t)shard};
    return fields_hash(f, 4);
}

/* The key_msgs slot of a task key: a message's (job, attempt, comp, dst)
 * is the task key of its receiver. */
static unsigned key_slot(int64_t job, int32_t attempt, int32_t comp, int32_t dst)
{
    return task_hash(job, attempt, comp, dst) & (MBOX_BUCKETS - 1);
}

/* Counts m as linked into (d = +1) or unlinked from (d = -1) its bucket.
 * Holds mu. */
static void msg_linked(mbox_t *mb, const mbox_msg_t *m, int d)
{
    mb->count += d;
    mb->key_msgs[key_slot(m->tag.job, m->tag.attempt, m->tag.comp, m->tag.dst)] += (uint32_t)d;
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
    for (unsigned b = 0; b < MBOX_TASK_BUCKETS; b++) {
        for (mbox_task_t *k = mb->tasks[b], *next; k; k = next) {
            next = k->hnext;
            free(k);
        }
    }
    pthread_mutex_destroy(&mb->mu);
    pthread_cond_destroy(&mb->cv);
    free(mb);
}

static int ended_locked(mbox_t *mb, const mbox_tag_t *tag);

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
    mbox_msg_t *m = util_zalloc(1, sizeof *m);    /* origin 0: a local, claimed message */
    pthread_mutex_lock(&mb->mu);
    /* A message for an ended task has no taker any more (ended_locked is
     * defined with the gate below). */
    if (!m || mb->stopped || cancelled_locked(mb, tag->job, tag->attempt) ||
        ended_locked(mb, tag)) {
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
    msg_linked(mb, m, +1);
    acct_locked(mb, t, +1);
    wake_locked(mb);
    pthread_mutex_unlock(&mb->mu);
    return 0;
}

/* Takes m (unlinked from its bucket or about to be) off the unclaimed
 * list, giving its bytes back to its origin; no-op for a claimed one. */
static void unclaim_locked(mbox_t *mb, mbox_msg_t *m)
{
    if (m->origin <= 0)
        return;
    int64_t bytes = shape_numel(&m->t->shape) * (int64_t)sizeof(float);
    mb->origin_bytes[m->origin] -= bytes;
    mb->unclaimed_bytes -= bytes;
    mb->gs.unclaimed--;
    if (m->uprev)
        m->uprev->unext = m->unext;
    else
        mb->ufirst = m->unext;
    if (m->unext)
        m->unext->uprev = m->uprev;
    else
        mb->ulast = m->uprev;
    m->origin = 0;
    m->uprev = m->unext = NULL;
    wake_locked(mb);   /* room for a waiting admit */
}

/* Unlinks and returns the first message with this tag, or NULL. Holds mu. */
static tensor_t *remove_locked(mbox_t *mb, const mbox_tag_t *tag)
{
    for (mbox_msg_t **p = &mb->bucket[tag_hash(tag)]; *p; p = &(*p)->next) {
        if (tag_equal(&(*p)->tag, tag)) {
            mbox_msg_t *m = *p;
            tensor_t *t = m->t;
            *p = m->next;
            unclaim_locked(mb, m);
            msg_linked(mb, m, -1);
            free(m);
            acct_locked(mb, t, -1);
            return t;
        }
    }
    return NULL;
}

/* A take's polling (mbox_set_poller). spin_end: 0 before polling began,
 * else when it ends; spin_start: when it began; polling: between the
 * poller's enter and leave. */
typedef struct take_poll {
    mbox_poller_t p;
    int64_t spin_start, spin_end;
    int polling;
} take_poll_t;

/* Polls the data plane until the mailbox changes, tp's spin_end passes or
 * the poller says stop (then it ends tp's polling: spin_end moves to its
 * start). Without mu. */
static void poll_until_change(mbox_t *mb, take_poll_t *tp, unsigned gen)
{
    int64_t now = util_mono_us();
    while (atomic_load_explicit(&mb->gen, memory_order_acquire) == gen) {
        if (!tp->p.poll(tp->p.ctx, now - tp->spin_start)) {
            tp->spin_end = tp->spin_start;
            return;
        }
        if ((now = util_mono_us()) >= tp->spin_end)
            return;
    }
}

/* The next step of a take's polling, for a taker whose message is not
 * there: begin (once per take), poll until the table moves, or give up
 * (leave, saying this taker sleeps: the data plane's own thread must
 * progress for it). Holds mu on entry and return, but drops it around the
 * poller's calls, whose progress may put. Returns 1 after a step (the
 * caller looks at the table again), 0 when the taker should sleep. */
static int take_poll_step(mbox_t *mb, take_poll_t *tp, int64_t now, int64_t deadline)
{
    if (!tp->polling && tp->spin_end == 0 && mb->poller.poll && mb->poller.spin_us > 0) {
        tp->p = mb->poller;
        tp->spin_start = now;
        tp->spin_end = now + tp->p.spin_us < deadline ? now + tp->p.spin_us : deadline;
        tp->polling = 1;
        pthread_mutex_unlock(&mb->mu);
        tp->p.enter(tp->p.ctx);
        pthread_mutex_lock(&mb->mu);
        return 1;
    }
    if (!tp->polling)
        return 0;
    if (now < tp->spin_end) {
        unsigned gen = atomic_load_explicit(&mb->gen, memory_order_relaxed);
        pthread_mutex_unlock(&mb->mu);
        poll_until_change(mb, tp, gen);
    } else {
        tp->polling = 0;
        pthread_mutex_unlock(&mb->mu);
        tp->p.leave(tp->p.ctx, 1);
    }
    pthread_mutex_lock(&mb->mu);
    return 1;
}

mbox_status_t mbox_take(mbox_t *mb, const mbox_tag_t *tag, int64_t deadline_mono_us,
                        tensor_t **out)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline_mono_us / 1000000),
                          .tv_nsec = (long)(deadline_mono_us % 1000000) * 1000};
    mbox_status_t st = MBOX_TIMEOUT;
    take_poll_t tp = {0};
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
        int64_t now = util_mono_us();
        if (now >= deadline_mono_us)
            break;
        if (take_poll_step(mb, &tp, now, deadline_mono_us))
            continue;
        mb->sleepers++;
        int rc = pthread_cond_timedwait(&mb->cv, &mb->mu, &ts);
        mb->sleepers--;
        if (rc != 0 && rc != ETIMEDOUT && rc != EINTR)
            break;
    }
    int others_sleep = mb->sleepers > 0;
    pthread_mutex_unlock(&mb->mu);
    if (tp.polling)
        tp.p.leave(tp.p.ctx, others_sleep);
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
                unclaim_locked(mb, m);
                msg_linked(mb, m, -1);
                acct_locked(mb, m->t, -1);
                tensor_free(m->t);
                free(m);
                n++;
            } else {
                p = &m->next;
            }
        }
    }
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
    wake_locked(mb);
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
    wake_locked(mb);
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

/* ---- the gate ---- */

static int64_t msg_bytes(const mbox_msg_t *m)
{
    return shape_numel(&m->t->shape) * (int64_t)sizeof(float);
}

/* Unlinks m from its bucket, frees it and counts it in *counter. Holds mu. */
static void discard_locked(mbox_t *mb, mbox_msg_t *m, int64_t *counter)
{
    for (mbox_msg_t **p = &mb->bucket[tag_hash(&m->tag)]; *p; p = &(*p)->next) {
        if (*p == m) {
            *p = m->next;
            break;
        }
    }
    unclaim_locked(mb, m);
    (*counter)++;
    mb->gs.dropped_bytes += msg_bytes(m);
    msg_linked(mb, m, -1);
    acct_locked(mb, m->t, -1);
    tensor_free(m->t);
    free(m);
}

static int task_is(const mbox_task_t *k, int64_t job, int32_t attempt, int32_t comp,
                   int32_t shard)
{
    return k->job == job && k->attempt == attempt && k->comp == comp && k->shard == shard;
}

/* The link that points at the declared task, or at the NULL ending its
 * chain when there is none. Holds mu. */
static mbox_task_t **task_link_locked(mbox_t *mb, int64_t job, int32_t attempt, int32_t comp,
                                      int32_t shard)
{
    mbox_task_t **p = &mb->tasks[task_hash(job, attempt, comp, shard) & (MBOX_TASK_BUCKETS - 1)];
    while (*p && !task_is(*p, job, attempt, comp, shard))
        p = &(*p)->hnext;
    return p;
}

static mbox_task_t *task_find_locked(mbox_t *mb, int64_t job, int32_t attempt, int32_t comp,
                                     int32_t shard)
{
    return *task_link_locked(mb, job, attempt, comp, shard);
}

static mbox_task_t **ended_chain(mbox_t *mb, const mbox_task_t *k)
{
    return &mb->ended_bucket[task_hash(k->job, k->attempt, k->comp, k->shard) &
                             (MBOX_ENDED_BUCKETS - 1)];
}

static int ended_locked(mbox_t *mb, const mbox_tag_t *tag)
{
    const mbox_task_t key = {.job = tag->job, .attempt = tag->attempt, .comp = tag->comp,
                             .shard = tag->dst};
    for (const mbox_task_t *k = *ended_chain(mb, &key); k; k = k->hnext)
        if (task_is(k, tag->job, tag->attempt, tag->comp, tag->dst))
            return 1;
    return 0;
}

/* Remembers an ended task in the ring, forgetting the oldest once it is
 * full. Holds mu. */
static void ended_add_locked(mbox_t *mb, const mbox_task_t *gone)
{
    mbox_task_t *slot;
    if (mb->nended < MBOX_ENDED_MEMORY) {
        slot = &mb->ended[mb->nended++];
    } else {
        slot = &mb->ended[mb->ended_next];
        mb->ended_next = (mb->ended_next + 1) % MBOX_ENDED_MEMORY;
        mbox_task_t **p = ended_chain(mb, slot);
        while (*p && *p != slot)
            p = &(*p)->hnext;
        if (*p)
            *p = slot->hnext;
    }
    *slot = *gone;
    mbox_task_t **chain = ended_chain(mb, slot);
    slot->hnext = *chain;
    *chain = slot;
}

/* Frees unclaimed frames past their time. Holds mu. */
static int expire_locked(mbox_t *mb)
{
    int64_t cutoff = util_mono_us() - (int64_t)MBOX_UNCLAIMED_TTL_MS * 1000;
    int n = 0;
    while (mb->ufirst && mb->ufirst->arrived_us < cutoff) {
        discard_locked(mb, mb->ufirst, &mb->gs.expired);
        n++;
    }
    return n;
}

static int key_equal(const mbox_key_t *a, const mbox_key_t *b)
{
    /* Constant time: how much of a guess matched must not show. */
    uint8_t d = 0;
    for (int i = 0; i < MBOX_KEY_SIZE; i++)
        d |= (uint8_t)(a->b[i] ^ b->b[i]);
    return d == 0;
}

/* What a frame with this tag and key is: MBOX_ADMIT_TASK, _UNCLAIMED or
 * _DROP (bad source, wrong key, cancelled, ended, or shut down); *bad_key
 * is set when the key was the reason. Holds mu. */
static mbox_admit_t classify_locked(mbox_t *mb, const mbox_tag_t *tag, const mbox_key_t *key,
                                    int *bad_key)
{
    *bad_key = 0;
    if (mb->stopped || cancelled_locked(mb, tag->job, tag->attempt) || ended_locked(mb, tag))
        return MBOX_ADMIT_DROP;
    const mbox_task_t *k = task_find_locked(mb, tag->job, tag->attempt, tag->comp, tag->dst);
    if (!k)
        return MBOX_ADMIT_UNCLAIMED;
    if (!key_equal(&k->key, key)) {
        *bad_key = 1;
        return MBOX_ADMIT_DROP;
    }
    return tag->src >= 0 && tag->src < k->npeers ? MBOX_ADMIT_TASK : MBOX_ADMIT_DROP;
}

int mbox_expect(mbox_t *mb, int64_t job, int32_t attempt, int32_t comp, int32_t shard,
                int32_t npeers, const mbox_key_t *key)
{
    pthread_mutex_lock(&mb->mu);
    mbox_task_t **link = task_link_locked(mb, job, attempt, comp, shard), *k = *link;
    if (!k) {
        if (!(k = malloc(sizeof *k))) {
            pthread_mutex_unlock(&mb->mu);
            return -1;
        }
        *k = (mbox_task_t){.job = job, .attempt = attempt, .comp = comp, .shard = shard,
                           .npeers = npeers, .key = *key};
        *link = k;              /* appended: link is its chain's ending NULL */
    }
    k->refs++;
    /* Early frames for this task become its own (a bad source or key is
     * dropped). */
    for (mbox_msg_t *m = mb->ufirst, *next; m; m = next) {
        next = m->unext;
        const mbox_tag_t *t = &m->tag;
        if (t->job != job || t->attempt != attempt || t->comp != comp || t->dst != shard)
            continue;
        if (!key_equal(&m->key, &k->key))
            discard_locked(mb, m, &mb->gs.bad_key);
        else if (t->src >= 0 && t->src < npeers)
            unclaim_locked(mb, m);
        else
            discard_locked(mb, m, &mb->gs.dropped);
    }
    wake_locked(mb);
    pthread_mutex_unlock(&mb->mu);
    return 0;
}

void mbox_task_done(mbox_t *mb, int64_t job, int32_t attempt, int32_t comp, int32_t shard)
{
    pthread_mutex_lock(&mb->mu);
    mbox_task_t **link = task_link_locked(mb, job, attempt, comp, shard), *k = *link;
    if (k && --k->refs <= 0) {
        *link = k->hnext;
        ended_add_locked(mb, k);
        free(k);
        /* What is still kept for it is garbage (duplicates, forgeries):
         * looked for only when its key's counter says there may be some
         * (a pipelined chain keeps later computations' messages here, and
         * a scan of every bucket per shard was ~4 % of a worker's CPU). */
        mbox_tag_t probe = {.job = job, .attempt = attempt, .comp = comp, .dst = shard};
        unsigned kh = key_slot(job, attempt, comp, shard);
        for (unsigned b = 0; mb->key_msgs[kh] > 0 && b < MBOX_BUCKETS; b++) {
            for (mbox_msg_t *m = mb->bucket[b], *next; m; m = next) {
                next = m->next;
                probe.src = m->tag.src;
                probe.op = m->tag.op;
                if (tag_equal(&m->tag, &probe))
                    discard_locked(mb, m, &mb->gs.dropped);
            }
        }
    }
    pthread_mutex_unlock(&mb->mu);
}

/* Reserves nbytes of unclaimed room for origin when both caps allow it.
 * Returns 1 when reserved. Holds mu. */
static int reserve_locked(mbox_t *mb, int origin, int64_t nbytes)
{
    if (mb->origin_bytes[origin] + nbytes > MBOX_UNCLAIMED_ORIGIN_BYTES ||
        mb->unclaimed_bytes + nbytes > MBOX_UNCLAIMED_TOTAL_BYTES)
        return 0;
    mb->origin_bytes[origin] += nbytes;
    mb->unclaimed_bytes += nbytes;
    return 1;
}

mbox_admit_t mbox_admit(mbox_t *mb, const mbox_tag_t *tag, const mbox_key_t *key, int origin,
                        int64_t nbytes, int64_t deadline_mono_us)
{
    if (origin <= 0 || origin >= MBOX_MAX_ORIGINS || nbytes < 0)
        return MBOX_ADMIT_DROP;
    pthread_mutex_lock(&mb->mu);
    expire_locked(mb);
    int bad_key;
    mbox_admit_t a = classify_locked(mb, tag, key, &bad_key);
    if (a == MBOX_ADMIT_UNCLAIMED && !reserve_locked(mb, origin, nbytes)) {
        if (util_mono_us() < deadline_mono_us) {
            a = MBOX_ADMIT_WAIT;
        } else {
            a = MBOX_ADMIT_DROP;
            mb->gs.over_cap++;
            mb->gs.dropped_bytes += nbytes;
        }
    } else if (a == MBOX_ADMIT_DROP) {
        if (bad_key)
            mb->gs.bad_key++;
        else
            mb->gs.dropped++;
        mb->gs.dropped_bytes += nbytes;
    }
    pthread_mutex_unlock(&mb->mu);
    return a;
}

void mbox_unreserve(mbox_t *mb, int origin, int64_t nbytes)
{
    if (origin <= 0 || origin >= MBOX_MAX_ORIGINS)
        return;
    pthread_mutex_lock(&mb->mu);
    mb->origin_bytes[origin] -= nbytes;
    mb->unclaimed_bytes -= nbytes;
    wake_locked(mb);
    pthread_mutex_unlock(&mb->mu);
}

/* Whether a message from the network with this tag and key is waiting
 * already. */
static int network_dup_locked(const mbox_t *mb, const mbox_tag_t *tag, const mbox_key_t *key)
{
    for (const mbox_msg_t *m = mb->bucket[tag_hash(tag)]; m; m = m->next)
        if (m->from_net && tag_equal(&m->tag, tag) && key_equal(&m->key, key))
            return 1;
    return 0;
}

int mbox_put_from(mbox_t *mb, const mbox_tag_t *tag, const mbox_key_t *key, tensor_t *t,
                  int origin, mbox_admit_t admit)
{
    int64_t bytes = shape_numel(&t->shape) * (int64_t)sizeof(float);
    if ((admit != MBOX_ADMIT_TASK && admit != MBOX_ADMIT_UNCLAIMED) || origin <= 0 ||
        origin >= MBOX_MAX_ORIGINS) {
        tensor_free(t);
        return 1;
    }
    mbox_msg_t *m = util_zalloc(1, sizeof *m);
    pthread_mutex_lock(&mb->mu);
    if (admit == MBOX_ADMIT_UNCLAIMED) {    /* the reservation becomes the frame's */
        mb->origin_bytes[origin] -= bytes;
        mb->unclaimed_bytes -= bytes;
    }
    /* A task may have been declared or ended while the payload came in. */
    int bad_key;
    mbox_admit_t now = classify_locked(mb, tag, key, &bad_key);
    if (!m || now == MBOX_ADMIT_DROP) {
        if (m) {
            *(bad_key ? &mb->gs.bad_key : &mb->gs.dropped) += 1;
            mb->gs.dropped_bytes += bytes;
        }
        wake_locked(mb);
        pthread_mutex_unlock(&mb->mu);
        free(m);
        tensor_free(t);
        return 1;
    }
    /* Every network message has a tag of its own (ring steps, pack rounds
     * and edges are numbered apart), so a second frame with a tag still
     * waiting here is a forgery or garbage: dropped, so a sender cannot
     * pile copies of one accepted tag into the store. */
    if (network_dup_locked(mb, tag, key)) {
        mb->gs.dropped++;
        mb->gs.dropped_bytes += bytes;
        wake_locked(mb);
        pthread_mutex_unlock(&mb->mu);
        free(m);
        tensor_free(t);
        return 1;
    }
    m->tag = *tag;
    m->t = t;
    m->from_net = 1;
    m->key = *key;
    if (now == MBOX_ADMIT_UNCLAIMED) {
        m->origin = origin;
        m->arrived_us = util_mono_us();
        m->uprev = mb->ulast;
        if (mb->ulast)
            mb->ulast->unext = m;
        else
            mb->ufirst = m;
        mb->ulast = m;
        mb->origin_bytes[origin] += bytes;
        mb->unclaimed_bytes += bytes;
        mb->gs.unclaimed++;
    }
    mbox_msg_t **p = &mb->bucket[tag_hash(tag)];
    while (*p)
        p = &(*p)->next;
    *p = m;
    msg_linked(mb, m, +1);
    acct_locked(mb, t, +1);
    wake_locked(mb);
    pthread_mutex_unlock(&mb->mu);
    return 0;
}

void mbox_drop_origin(mbox_t *mb, int origin)
{
    pthread_mutex_lock(&mb->mu);
    for (mbox_msg_t *m = mb->ufirst, *next; m; m = next) {
        next = m->unext;
        if (m->origin == origin)
            discard_locked(mb, m, &mb->gs.expired);
    }
    pthread_mutex_unlock(&mb->mu);
}

int mbox_expire(mbox_t *mb)
{
    pthread_mutex_lock(&mb->mu);
    int n = expire_locked(mb);
    pthread_mutex_unlock(&mb->mu);
    return n;
}

void mbox_guard_stats(mbox_t *mb, mbox_guard_stats_t *out)
{
    pthread_mutex_lock(&mb->mu);
    *out = mb->gs;
    out->unclaimed_bytes = mb->unclaimed_bytes;
    pthread_mutex_unlock(&mb->mu);
}
