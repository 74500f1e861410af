/* mbox.h - the worker's mailbox: tagged tensors waiting for their taker.
 *
 * Every data-plane message (a collective piece or a DAG edge) is addressed
 * by a tag. Senders and takers never rendezvous: a message that arrives
 * before its taker asks is kept; a taker that asks first sleeps until the
 * message arrives, its deadline passes, its job is cancelled, or the mailbox
 * shuts down.
 *
 * Thread safety: every function may be called from any thread.
 * Ownership: mbox_put() takes the tensor (freed by the mailbox if it is
 * dropped); mbox_take() hands the tensor to the caller. */
#ifndef ATOLL_MBOX_H
#define ATOLL_MBOX_H

#include <stdint.h>
#include "tensor.h"

typedef struct mbox_tag {
    int64_t job;
    int32_t attempt;
    int32_t comp;       /* computation index in the job */
    int32_t op;         /* op index in that computation */
    int32_t src;        /* sending shard */
    int32_t dst;        /* receiving shard */
} mbox_tag_t;

/* The data-plane key of a job attempt (issue 12): 128 random-looking bits
 * the controller hands out with the attempt's work. A frame from the
 * network is the task's only when it carries its attempt's key. */
#define MBOX_KEY_SIZE 16
typedef struct mbox_key {
    uint8_t b[MBOX_KEY_SIZE];
} mbox_key_t;

typedef enum mbox_status {
    MBOX_OK = 0,
    MBOX_TIMEOUT,       /* deadline passed */
    MBOX_CANCELLED,     /* the tag's job (this attempt) was cancelled */
    MBOX_STOPPED,       /* mbox_shutdown() was called */
} mbox_status_t;

typedef struct mbox mbox_t;

/* NULL on OOM. */
mbox_t *mbox_new(void);
/* Frees every kept tensor. No thread may be inside the mailbox. */
void mbox_free(mbox_t *mb);

/* Stores t under tag (takes ownership of t in every case). A message for a
 * cancelled job attempt, for an ended task (mbox_task_done) or after
 * shutdown is freed at once. Returns 0 when
 * kept, 1 when dropped. */
int mbox_put(mbox_t *mb, const mbox_tag_t *tag, tensor_t *t);

/* Removes the message with this tag, waiting until deadline_mono_us
 * (util_mono_us() clock) for it. Sets *out (caller frees) on MBOX_OK.
 * With a poller set, a taker whose message is not there polls first (see
 * mbox_set_poller), then sleeps. */
mbox_status_t mbox_take(mbox_t *mb, const mbox_tag_t *tag, int64_t deadline_mono_us,
                        tensor_t **out);

/* Takers that drive the data plane. A message from a peer reaches the
 * mailbox when the data plane is progressed; if only its own thread did
 * that, each message would cost two wake-ups (that thread, then the
 * taker). With a poller, a taker whose message is not there calls
 * enter(ctx), then poll(ctx, waited_us) (progress once; never blocks,
 * never calls back into the mailbox's taking side; waited_us: how long
 * this taker has polled; returns 0 when the taker should stop polling
 * now) until the mailbox changes, for at most spin_us, before it sleeps:
 * the message is received by the thread that wants it. leave(ctx, need)
 * ends the polling; need: a taker sleeps now (this one or another), so
 * somebody else must progress for it. None
 * is called with the mailbox's lock held. p == NULL (or spin_us 0) turns
 * polling off. Set it while no take is in progress. */
typedef struct mbox_poller {
    void *ctx;
    int64_t spin_us;
    void (*enter)(void *ctx);
    int (*poll)(void *ctx, int64_t waited_us);
    void (*leave)(void *ctx, int need);
} mbox_poller_t;
void mbox_set_poller(mbox_t *mb, const mbox_poller_t *p);

/* Marks attempts 0..max_attempt of job cancelled: their kept messages are
 * freed, their waiters wake with MBOX_CANCELLED, and later puts for them are
 * dropped. A later attempt of the same job is unaffected (a retried job
 * reuses its id). The mailbox remembers the most recent MBOX_CANCEL_MEMORY
 * cancelled jobs. */
#define MBOX_CANCEL_MEMORY 4096
void mbox_cancel_job(mbox_t *mb, int64_t job, int32_t max_attempt);
/* Non-zero when that job attempt was cancelled. */
int mbox_is_cancelled(mbox_t *mb, int64_t job, int32_t attempt);

/* Frees kept messages of job whose attempt is <= max_attempt (stale
 * leftovers of an attempt that failed). Returns how many were freed. */
int mbox_drop_job(mbox_t *mb, int64_t job, int32_t max_attempt);

/* Wakes every waiter with MBOX_STOPPED and makes later takes fail at once. */
void mbox_shutdown(mbox_t *mb);

/* Non-zero once mbox_shutdown() was called. */
int mbox_is_stopped(mbox_t *mb);

/* Number of kept messages (for tests and metrics). */
int mbox_count(mbox_t *mb);

/* ---- the gate: frames from the network ----
 *
 * Frames that come over a data connection (not local sends) are admitted
 * only for tasks this worker runs. The executor declares each task when it
 * is queued (mbox_expect) and when it ended (mbox_task_done). A frame for
 * (job, attempt, comp, dst) of a declared task, with a source shard inside
 * that task's slice, is the task's. A frame for a cancelled attempt or an
 * ended task is dropped. Any other frame may be an early one (a peer got
 * its task before we got ours): it is kept "unclaimed" within
 * MBOX_UNCLAIMED_ORIGIN_BYTES per connection and MBOX_UNCLAIMED_TOTAL_BYTES
 * in all, until a task claims it, its connection closes, or
 * MBOX_UNCLAIMED_TTL_MS pass. Every drop is counted (mbox_guard_stats).
 * Keys: a task is declared with its attempt's key; a frame whose key is not
 * that key is dropped (counted as bad_key) when it arrives for a declared
 * task, or when the task that would claim it is declared. Two unclaimed
 * frames with one tag are duplicates only when their keys match too, so a
 * forged early frame cannot shadow the real one. */
#define MBOX_MAX_ORIGINS 1024                 /* connection ids 1..MBOX_MAX_ORIGINS-1 */
#define MBOX_UNCLAIMED_ORIGIN_BYTES ((int64_t)8 << 20)
#define MBOX_UNCLAIMED_TOTAL_BYTES ((int64_t)32 << 20)
#define MBOX_UNCLAIMED_TTL_MS 15000
#define MBOX_ENDED_MEMORY 1024                /* ended tasks remembered */

/* Declares a task queued on this worker (calls nest: one done per expect;
 * key, copied, is its attempt's). Unclaimed frames it owns with that key
 * become its own; those with another key are dropped. Returns 0, or -1 on
 * OOM. */
int mbox_expect(mbox_t *mb, int64_t job, int32_t attempt, int32_t comp, int32_t shard,
                int32_t npeers, const mbox_key_t *key);
/* The task ended (reported or cancelled): frames still kept for it are
 * freed, later ones dropped. */
void mbox_task_done(mbox_t *mb, int64_t job, int32_t attempt, int32_t comp, int32_t shard);

typedef enum mbox_admit {
    MBOX_ADMIT_TASK = 0,        /* for a declared task: read it, mbox_put_from() */
    MBOX_ADMIT_UNCLAIMED,       /* kept unclaimed: its bytes are reserved for origin;
                                   mbox_put_from() or mbox_unreserve() */
    MBOX_ADMIT_DROP,            /* refused (counted): skip its payload */
    MBOX_ADMIT_WAIT,            /* unclaimed, no room yet: ask again later */
} mbox_admit_t;

/* Decides about a frame header before its payload is allocated; never
 * blocks (the data plane calls it from its progress thread). origin: the
 * connection's id (1..MBOX_MAX_ORIGINS-1). An unclaimed frame that does not
 * fit the caps is MBOX_ADMIT_WAIT until deadline_mono_us has passed, then
 * dropped (counted over_cap); the caller asks again when it likes (a task
 * declared or a take may have made room). */
mbox_admit_t mbox_admit(mbox_t *mb, const mbox_tag_t *tag, const mbox_key_t *key, int origin,
                        int64_t nbytes, int64_t deadline_mono_us);
/* Stores a frame admitted by mbox_admit (takes t in every case; admit is
 * that call's answer, whose reservation this consumes). 0 kept, 1 dropped. */
int mbox_put_from(mbox_t *mb, const mbox_tag_t *tag, const mbox_key_t *key, tensor_t *t,
                  int origin, mbox_admit_t admit);
/* Gives back an UNCLAIMED reservation whose payload never came. */
void mbox_unreserve(mbox_t *mb, int origin, int64_t nbytes);
/* The connection closed: its unclaimed frames are freed. */
void mbox_drop_origin(mbox_t *mb, int origin);
/* Frees unclaimed frames older than MBOX_UNCLAIMED_TTL_MS; returns how
 * many. Also done on every admit; call it now and then when idle. */
int mbox_expire(mbox_t *mb);

typedef struct mbox_guard_stats {
    int64_t dropped;            /* frames refused: not for a task of ours */
    int64_t bad_key;            /* frames refused: not the key of their attempt */
    int64_t over_cap;           /* unclaimed frames refused for lack of room */
    int64_t expired;            /* unclaimed frames freed (timeout, conn closed) */
    int64_t dropped_bytes;      /* payload bytes of all of those */
    int64_t unclaimed;          /* unclaimed frames kept now */
    int64_t unclaimed_bytes;    /* and their bytes (plus reservations) */
} mbox_guard_stats_t;
void mbox_guard_stats(mbox_t *mb, mbox_guard_stats_t *out);

/* Accounting hook: called under the mailbox lock with (+1, +bytes) when a
 * message is kept and (-1, -bytes) when it leaves (taken, dropped, freed),
 * so the worker's object store counts messages waiting for their taker.
 * fn must not call back into the mailbox. Set it before any traffic. */
typedef void (*mbox_acct_fn)(void *ctx, int64_t dobjects, int64_t dbytes);
void mbox_set_accounting(mbox_t *mb, mbox_acct_fn fn, void *ctx);

#endif
