/* comp_carry.h - a computation's progress carried in memory from one
 * report transaction to the next, until the report of its last shards.
 *
 * Why: a computation on W workers is reported W times, nearly always in W
 * transactions (each worker's batch its own), and each wrote the
 * computation's row: up to W + 1 writes of it (a chain on 4 workers: 4.6
 * UPDATEs of ~14K instructions on average, ~40 % of the report
 * applier's work a computation). Carried, the row is written once, by the transaction that
 * takes its last shards, so the controller's writes a computation do not
 * grow with its workers. A part carried longer than COMP_CARRY_SHOW_US is
 * written as it stands by the applier (store_progress.c), so the job view
 * and the dashboard show a long computation's progress by shards.
 *
 * Consistency: only write transactions (store_begin .. store_commit, which
 * store_write_mu serializes across the process) read or change the carry,
 * so the carry and the rows it adds to agree as of every commit. A
 * transaction stages its changes on its connection (comp_carry_txn_t);
 * store_commit applies them after SQLite's COMMIT, before the write lock
 * goes; store_rollback discards them. Applying never allocates: room in
 * the table is reserved when a new key is staged.
 *
 * Nothing carried is needed after a controller restart: the restart
 * requeues every running job (a new attempt, its computations zeroed), and
 * parts are keyed by attempt. A part whose attempt ended or moved on is
 * dropped (store_job_finish writes a failed or cancelled job's parts
 * first, so its rows show every shard reported; the applier drops the
 * rest, COMP_CARRY_GC_US after they were last looked at).
 *
 * Thread safety: the table has a mutex of its own, so that the applier can
 * read when a part falls due without the write lock; every function takes
 * it. One table per process, like the store (store_global_init empties
 * it). A comp_carry_txn_t belongs to one connection. */
#ifndef ATOLL_COMP_CARRY_H
#define ATOLL_COMP_CARRY_H

#include <stddef.h>
#include <stdint.h>

/* A part carried longer than this is written to its row as it stands
 * (by default: comp_carry_set_show_us). */
#define COMP_CARRY_SHOW_US 100000
/* A part with nothing left to write is looked at again after this long
 * (its attempt may have ended). */
#define COMP_CARRY_GC_US 1000000

/* A computation's progress in one job attempt that is not in its row yet. */
typedef struct comp_carry {
    int64_t job, attempt, comp;     /* the key; job 0: none */
    int64_t total;                  /* the computation's shards_total */
    int64_t written;                /* shards of this attempt already in the row */
    int64_t shards;                 /* shards done and not in the row yet */
    int64_t t0, t1, t2, busy_us;    /* of those: earliest start, latest inputs-ready and
                                     * finish, device time (meaningless while shards is 0) */
    int unblocks;                   /* report_acc_comp_t's, anded over its reports */
    int gone;                       /* staged only: the part is dropped */
    int64_t due_us;                 /* util_mono_us when the applier looks at it */
} comp_carry_t;

/* One write transaction's staged changes. Zero-initialize; owns its array
 * (comp_carry_txn_free). */
typedef struct comp_carry_txn {
    comp_carry_t *e;                /* in order staged; a key at most once */
    size_t n, cap;
    size_t reserved;                /* new keys reserved in the table */
} comp_carry_txn_t;

/* The part of (job, attempt, comp) as this transaction sees it (staged
 * first, then the table) into *out: 1, or 0 when none. */
int comp_carry_get(const comp_carry_txn_t *t, int64_t job, int64_t attempt, int64_t comp,
                   comp_carry_t *out);
/* Stages *c (its key's new value; c->gone drops it). 0, or -1 (OOM:
 * nothing staged). */
int comp_carry_put(comp_carry_txn_t *t, const comp_carry_t *c);
/* Copies of the job's parts (any attempt) as this transaction sees them
 * into *out (malloc'd; the caller frees): their count, or -1 (OOM). */
long comp_carry_of_job(const comp_carry_txn_t *t, int64_t job, comp_carry_t **out);
/* Copies of up to max parts due at now (due_us <= now) into out: their
 * count. Reads the table only: call with nothing staged for them yet. */
size_t comp_carry_due(int64_t now, comp_carry_t *out, size_t max);
/* When the next part falls due (util_mono_us), or 0 when none is
 * carried. It may be early (a part dropped since), never late. */
int64_t comp_carry_next_due(void);
/* Applies the staged changes to the table and empties t. After the
 * transaction's COMMIT, under the write lock; never fails. */
void comp_carry_commit(comp_carry_txn_t *t);
/* Drops the staged changes (the transaction rolled back). */
void comp_carry_discard(comp_carry_txn_t *t);
/* Discards what is staged and frees t's array. */
void comp_carry_txn_free(comp_carry_txn_t *t);
/* Parts in the table. */
size_t comp_carry_count(void);
/* How long a part waits before it is written as it stands, and a new
 * wait (us > 0; tests that look at carried rows make it long). */
int64_t comp_carry_show_us(void);
void comp_carry_set_show_us(int64_t us);
/* Empties the table (a process opening another database). */
void comp_carry_reset(void);

#endif
