/* ostore.h - the worker's object store: refcounted tensors under a memory cap.
 *
 * Every buffer a shard task holds lives here as an object keyed by
 * (job, attempt, comp, value, shard): the values its ops produce, the
 * `input` edges and collective pieces it received. An object's refcount is
 * the number of its remaining consumers: the ops of the computation that
 * read it, the `sends` that forward it, and one hold for each output until
 * the task's report is built. The last release frees the buffer at once, so
 * an intermediate value dies as soon as its last reader ran.
 *
 * Outputs: the controller keeps every result value in SQLite (the report
 * carries shape, sum and values) and the sends have already delivered the
 * edges, so a worker drops its outputs once the report is built. A task
 * that fails or is cancelled drops every object it holds on its way out
 * (ostore_drop_task), so a job that ended leaves nothing behind.
 *
 * Memory cap: new buffers are reserved first (ostore_reserve): when the
 * reservation would exceed the cap the caller waits (back-pressure) until
 * memory is freed, its deadline passes or its stop predicate says the task
 * was cancelled; it then fails with a message, never crashes. Buffers that
 * already exist (messages received from peers, adopted by a task) are
 * charged without waiting (ostore_charge): refusing them would deadlock the
 * peers that wait for us, so the store may briefly exceed its cap, and new
 * reservations wait until it is back below.
 *
 * Thread safety: every function may be called from any thread; one mutex
 * guards the object list and the counters. An object handle is used only by
 * the task that created it (the store never frees an object behind its
 * owner's back). */
#ifndef ATOLL_OSTORE_H
#define ATOLL_OSTORE_H

#include <stdint.h>

#include "tensor.h"

typedef struct ostore_key {
    int64_t job;
    int32_t attempt;
    int32_t comp;
    int32_t value;      /* value slot; OSTORE_PIECE_BASE - op for received pieces */
    int32_t shard;
} ostore_key_t;

/* Received collective pieces use value = OSTORE_PIECE_BASE - op_index. */
#define OSTORE_PIECE_BASE (-1)

typedef enum ostore_status {
    OSTORE_OK = 0,
    OSTORE_TOO_BIG,     /* larger than the whole cap: can never fit */
    OSTORE_TIMEOUT,     /* waited until the deadline for memory */
    OSTORE_STOPPED,     /* the stop predicate fired (task cancelled) */
} ostore_status_t;

typedef struct ostore_stats {
    int64_t objects;    /* live objects, plus messages waiting in the mailbox */
    int64_t bytes;      /* their bytes, plus reservations not yet filled */
    int64_t cap_bytes;
    int64_t peak_bytes;
    int64_t waits;      /* reservations that had to wait (back-pressure events) */
} ostore_stats_t;

typedef struct ostore ostore_t;
typedef struct ostore_obj ostore_obj_t;

/* cap_bytes > 0. NULL on OOM. */
ostore_t *ostore_new(int64_t cap_bytes);
/* Frees the store and any object still in it (a leak is logged). */
void ostore_free(ostore_t *s);

/* Bytes a tensor of this shape occupies (data only). */
int64_t ostore_tensor_bytes(const shape_t *shape);

/* Reserves bytes for a buffer about to be allocated. Waits while the store
 * is over its cap, until deadline_mono_us (util_mono_us() clock), or until
 * stop(ctx) returns non-zero (polled every millisecond; stop may be NULL).
 * On OSTORE_OK the caller owns the reservation: it passes it on to
 * ostore_put() or gives it back with ostore_unreserve(). */
ostore_status_t ostore_reserve(ostore_t *s, int64_t bytes, int64_t deadline_mono_us,
                               int (*stop)(void *ctx), void *ctx);
void ostore_unreserve(ostore_t *s, int64_t bytes);

/* Charges (dobjects, dbytes) without waiting; negative values give them
 * back. Used for buffers that exist already (mailbox messages). */
void ostore_charge(ostore_t *s, int64_t dobjects, int64_t dbytes);

/* Makes t (taken in every case) an object under key with `refs` (>= 1)
 * references. reserved: bytes the caller reserved for it with
 * ostore_reserve() (0 when t was allocated elsewhere: it is then charged
 * without waiting). Returns the handle, or NULL on OOM (t freed, the
 * reservation given back). */
ostore_obj_t *ostore_put(ostore_t *s, const ostore_key_t *key, tensor_t *t, int refs,
                         int64_t reserved);
/* The object's tensor (borrowed; valid until its last release). */
const tensor_t *ostore_tensor(const ostore_obj_t *o);
/* Raises the object's tensor's ready_us to at least ready_us (tensor.h).
 * Only the task that made the object calls it, before anyone else reads
 * the object (its sends clone it). */
void ostore_ready_after(ostore_obj_t *o, int64_t ready_us);
/* Drops n references; frees the object at zero. Returns the references
 * left (0 = freed: the handle is gone). */
int ostore_release(ostore_t *s, ostore_obj_t *o, int n);
/* Frees every object of one task (job, attempt, comp, shard), whatever
 * its refcount. Returns how many were freed. Only the task's own thread
 * may call this (it invalidates the task's handles). */
int ostore_drop_task(ostore_t *s, int64_t job, int32_t attempt, int32_t comp, int32_t shard);
/* Live objects of a job (all attempts); for tests and leak checks. */
int ostore_job_objects(ostore_t *s, int64_t job);

void ostore_stats(ostore_t *s, ostore_stats_t *out);

#endif
