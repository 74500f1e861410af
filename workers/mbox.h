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
 * cancelled job attempt or after shutdown is freed at once. Returns 0 when
 * kept, 1 when dropped. */
int mbox_put(mbox_t *mb, const mbox_tag_t *tag, tensor_t *t);

/* Removes the message with this tag, waiting until deadline_mono_us
 * (util_mono_us() clock) for it. Sets *out (caller frees) on MBOX_OK. */
mbox_status_t mbox_take(mbox_t *mb, const mbox_tag_t *tag, int64_t deadline_mono_us,
                        tensor_t **out);

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

/* Accounting hook: called under the mailbox lock with (+1, +bytes) when a
 * message is kept and (-1, -bytes) when it leaves (taken, dropped, freed),
 * so the worker's object store counts messages waiting for their taker.
 * fn must not call back into the mailbox. Set it before any traffic. */
typedef void (*mbox_acct_fn)(void *ctx, int64_t dobjects, int64_t dbytes);
void mbox_set_accounting(mbox_t *mb, mbox_acct_fn fn, void *ctx);

#endif
