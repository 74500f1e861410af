/* sched_internal.h - what the scheduler's files share (scheduler.h is the
 * public API; store_sched.c holds the SQL).
 *
 * Files, each one idea, all on the scheduler thread unless said:
 *   scheduler.c       the thread: lease expiry every tick, an admission round
 *                     when something changed; start/stop/notify, pass counters
 *                     (any thread reads them), sched_ever_fits (any thread)
 *   sched_admit.c     one admission round: the tenants' queues merged, quotas,
 *                     no backfill, pending reasons; attempt counters
 *   sched_place.c     the round (the cluster as the allocator sees it) and
 *                     placement on it: exclusive, shared, why not
 *   sched_preempt.c   victims: the fewest lower-priority jobs that make room
 *   sched_dispatch.c  a placed job's allocation, placement and host tasks,
 *                     in chunks (sched_dispatch_more continues them)
 *   sched_feed.c      shared jobs' computations, one by one, by stride
 *   sched_plans.c     compiled plans of queued jobs, cached across rounds
 *   sched_metrics.c   the /metrics families (any thread)
 *
 * Invariants.
 *
 * Who may change what. One thread (sched_main) owns admission, the feed
 * and lease expiry. sched_cfg is written once by sched_start() before that
 * thread exists and is read-only afterwards (sched_ever_fits reads its
 * islands from any thread). sched_wake and sched_running are guarded by
 * sched_mu; other threads only set them (sched_notify, sched_stop). The
 * counters are atomics written by the scheduler thread alone and read by
 * any thread. The plan cache (sched_plans.c), the virtual times
 * (sched_feed.c) and a round's round_t belong to the scheduler thread
 * alone and take no lock. In the store, only this thread takes devices
 * (allocations, device_holds: store_sched_mark_allocated), hands out
 * island sequence numbers and inserts host tasks; other threads never take
 * devices: they free them (a job ending or requeued), bring them up (a
 * worker registering) or take them down (a worker leaving), and move jobs
 * and tasks on (store.h lists who makes each transition).
 *
 * What one round reads (sched_admit). At its start, outside a transaction:
 * every device of every island (its live worker, its exclusive holder, how
 * many shared jobs hold it: sched_round_load) and the tenants that have
 * queued jobs, with their devices in use and shares. Then, in admission
 * order, pages of each tenant's queue, at most SCHED_LOOKAHEAD waiting
 * jobs per tenant (jobs whose previous attempt still holds a leased task
 * are skipped), each job's document once (the plan cache), the preemption
 * candidates and their holds when a job does not fit, and last the live
 * shared jobs for the feed. Admission order is one global queue: priority
 * (desc), then the tenant furthest below its fair share (devices in use at
 * the round's start over its share), then age (job id).
 *
 * What one round writes. Per job placed, one transaction: its slices, its
 * devices (held exclusively, or as shared holds), queued -> allocated with
 * its PLACEMENT, and for an exclusive job its first chunk of computations
 * (islands, sequence numbers, host tasks: pending) or, in sequential
 * dispatch, all of them (blocked until their producers succeed). At the
 * start of each round, one transaction for every exclusive job in
 * mid-dispatch: its next chunk (sched_dispatch_more). Per feed pass (the
 * shared jobs), one transaction: the computations fed, with their
 * sequence numbers and host tasks. Per evicted
 * victim, one transaction (store_sched_preempt: requeued). A waiting job's
 * pending_reason only when it changed; a queued job whose document no
 * longer compiles is failed (store_sched_fail). Placements and evictions
 * made in the round update the round_t too (sched_round_take,
 * round_evict), so later jobs of the same round see them; an island a
 * waiting job could use is closed to the jobs after it in that round (no
 * backfill, so a big job is never starved); a job over its tenant's quota
 * waits without closing anything.
 *
 * The round is a view, the store is the truth. The view may go stale
 * while the round runs (a cancel, a report, a worker joining or leaving
 * through the API). The allocation re-checks in SQL, inside its
 * transaction, what would break the store's rules
 * (store_sched_mark_allocated: each device still held by no exclusive job,
 * and for an exclusive job by no shared one; the job still queued) and
 * rolls back otherwise; the job is tried again next round. Whether each
 * device's worker is still live is not checked again there: a worker that
 * leaves through the API during the round may still be given host tasks.
 *
 * Island sequence numbers: one collective order. islands.next_seq only
 * grows (store_sched_take_seq, inside the dispatch transaction). A
 * computation gets one number on the island of its slice at the moment it
 * is dispatched (its first host task written), and all its host tasks
 * carry it; an exclusive job's computations are numbered in its
 * topological order chunk by chunk (each chunk's numbers reserved at
 * once; a computation whose host tasks span chunks keeps the number its
 * first chunk took), a shared job's one by one, in the same order, by the
 * feed. Every worker
 * runs the host tasks of each device in increasing seq and starts one only
 * when every lower-seq task on all its devices has ended
 * (docs/worker-protocol.md, workers/exec.h). Since numbers are taken on
 * this one thread, all islands' numbers follow one global dispatch order,
 * and that order also puts every producer before its consumers. So every
 * device meets any two computations in the same order, no wait (for a
 * device or for a producer's data) points from an earlier computation to a
 * later one, no cycle of waits can form, and a collective cannot deadlock,
 * however shared jobs are interleaved. A requeued job's new attempt gets
 * new numbers (its old ones are cleared with its computations). The
 * argument needs every task to reach its workers before a later-numbered
 * one on the same devices starts: true in parallel dispatch (an exclusive
 * job's tasks are pending from the moment their chunk commits; its chunks
 * commit in number order and write every host task of a computation
 * before any of the next; the rest of a computation split across chunks
 * may commit after another job's later-numbered tasks, but those are on
 * other devices, since the job holds its own alone; and a poll hands out
 * all of a worker's pending tasks in number order) and for shared jobs
 * (never blocked). Sequential dispatch hands a blocked computation's tasks out
 * only when its producers succeeded, and every later-numbered computation
 * of the job on that island waits with it (sequential_waits,
 * sched_dispatch.c; released in seq order by store_progress.c), so a
 * worker that polls late never gets an earlier computation after it
 * started a later one. */
#ifndef ATOLL_SCHED_INTERNAL_H
#define ATOLL_SCHED_INTERNAL_H

#include <jansson.h>
#include <stdint.h>

#include "alloc.h"
#include "scheduler.h"
#include "store.h"

/* The real-time scheduler thread's meter (scheduler.c): a token bucket of
 * its passes' wall time. It earns half of the time that goes by, holds at
 * most SCHED_RT_BURST_US, and spends each pass's time; when it is in debt
 * after a pass that another follows at once (at_once), the thread sleeps
 * twice the debt, at most SCHED_RT_REST_MAX_US, which earns it back. So
 * over any stretch longer than a burst it holds at most about half a core,
 * and passes that come apart never wait. Returns the sleep in µs (0: none).
 * Pure; b starts as {0}; the scheduler thread's, or a test's. */
#define SCHED_RT_BURST_US 5000
#define SCHED_RT_REST_MAX_US 10000
typedef struct sched_rt_bucket {
    int64_t balance_us;         /* may go negative: the debt */
    int64_t last_us;            /* util_mono_us of the last pass's end; 0: none yet */
} sched_rt_bucket_t;
int64_t sched_rt_rest_us(sched_rt_bucket_t *b, int64_t now_us, int64_t pass_us, int at_once);

/* The configuration sched_start() was given (sched_place.c). */
extern sched_config_t sched_cfg;

/* ---- the round (sched_place.c) ---- */

/* The cluster as the allocator sees it for one admission round. isl[i]
 * marks every held device BUSY (and devices without a live worker DOWN);
 * devs[i] says by whom: job (an exclusive holder) or shared (how many
 * shared jobs). Placements and evictions made in the round update both. */
typedef struct round {
    int n;
    int64_t island_id[SCHED_MAX_ISLANDS];
    alloc_island_t *isl[SCHED_MAX_ISLANDS];
    sched_dev_t *devs[SCHED_MAX_ISLANDS];
    uint64_t own_commits;       /* store_devices_commits() when it was loaded */
    uint64_t gen[SCHED_MAX_ISLANDS];    /* each island's mirror's generation then */
    int evicted;                /* a job was preempted in this round (sched_try_preempt) */
} round_t;

/* Reads the islands of sched_cfg and their devices from the store into r
 * (r is always left fit for sched_round_free). 0 or -1. */
int sched_round_load(store_t *st, round_t *r);
void sched_round_free(round_t *r);
/* The devices sched_round_load keeps between rounds (re-read only after
 * store_devices_gen() moved): how many reads it made, and freeing them
 * when the scheduler thread ends. */
uint64_t sched_round_device_reads(void);
/* Of the refreshes, those that read only the devices that changed
 * (store_devlog_since), not the whole island. */
uint64_t sched_round_device_patches(void);
void sched_round_cache_free(void);
/* The next round reads every island again: an allocation could not be
 * written (its re-check found a device the round showed free taken, when
 * another writer changed devices since the round read them; or a store
 * error). */
void sched_round_invalidate(void);
/* After a round whose every device change was recorded in r (placements,
 * evictions) and committed: r's devices become the mirror, without a
 * read, if nobody else changed devices since it was loaded. */
void sched_round_keep(store_t *st, const round_t *r);
/* Inside the caller's write transaction: whether island i of r is what
 * the store holds now, i.e. nobody but this round changed devices since
 * its mirror was read (store_devices_gen moved by this round's own
 * commits only; every other writer's change is published before its
 * write lock is released: store_commit). Not after an eviction. An
 * allocation then skips reading its devices' workers again
 * (store_sched_mark_allocated). */
int sched_round_current(store_t *st, const round_t *r, int i);
/* Frees and resets what sched_admit keeps between rounds (the tenants' usage,
 * the count of rounds cut short in a row, sched_dispatch_forget). */
void sched_admit_free(void);
/* The round's index of the island with store id island_id, or -1. */
int sched_round_island(const round_t *r, int64_t island_id);
/* What a job asks of a round: its slices (reqs[0..nreq), borrowed),
 * whether it shares devices, and for a shared one the memory its hold
 * takes on each device (plan_entry_t.dev_bytes). */
typedef struct sched_gang {
    const alloc_request_t *reqs;
    int nreq;
    int shared;
    int64_t bytes;
} sched_gang_t;
/* Records a placement of job's gang made in this round in r. */
void sched_round_take(round_t *r, const alloc_placement_t *pl, const sched_gang_t *g,
                      int64_t job);
/* May a shared job taking `need` bytes per device join the shared jobs on
 * dv? Their holds and need within the device's memory (none reported yet:
 * no bound). Devices no one holds take any job: alone on them, a shared
 * job is bounded as an exclusive one is, by the worker's store. */
static inline int sched_dev_fits(const sched_dev_t *dv, int64_t held, int64_t need)
{
    return dv->cap_bytes == 0 || held + need <= dv->cap_bytes;
}
/* Places the gang on copies of the round's islands: an exclusive one on
 * free devices; a shared one on devices no exclusive job holds, least
 * loaded first, beside other shared jobs only where its memory fits.
 * ALLOC_OK with pl filled, ALLOC_ENOSPACE or ALLOC_ENOMEM; on
 * ALLOC_ENOSPACE, *by_memory says whether memory alone kept a shared gang
 * out (it would fit otherwise). */
int sched_place(const round_t *r, const sched_gang_t *g, alloc_placement_t *pl, int *by_memory);
/* A shared gang kept out by memory alone: why, into buf (len bytes). */
void sched_memory_reason(const round_t *r, const sched_gang_t *g, char *buf, size_t len);
/* Why the job's slices cannot be placed now, into buf (len bytes). */
void sched_pending_reason(round_t *r, const job_plan_t *plan, const alloc_request_t *reqs,
                          char *buf, size_t len);
/* 1 when a request may use an island marked in blocked[] (no backfill). */
int sched_touches_blocked(const alloc_request_t *reqs, int n, round_t *r, const int *blocked);

/* ---- the plan cache (sched_plans.c) ---- */

/* Compiled plans of queued jobs, of live shared jobs still being fed and
 * of exclusive jobs in mid-dispatch, kept across admission rounds so
 * that a long queue is not re-read and re-compiled every round, nor a
 * job's document for every computation fed or chunk written. A plan
 * depends only on the job document (never changed once accepted) and the
 * islands (fixed for the life of atolld), so an entry stays valid until
 * its job leaves the queue or has nothing left to feed or dispatch;
 * entries not seen in a round are dropped after it. Sorted by job
 * id; owned by the scheduler thread alone. */
typedef struct plan_entry {
    int64_t id;
    json_t *doc;                /* owned reference */
    job_plan_t *plan;           /* owned */
    int seen;                   /* looked up in the current round */
    char *reason;               /* owned; the pending_reason last written, or NULL */
    int64_t dev_bytes;          /* the memory it takes on each device (sched_plan_bytes) */
    /* store_devices_gen() when a round whose view was current (every
     * island: sched_round_current) could not place it, or 0: until the
     * generation moves, the devices are the same and so is the answer
     * (sched_admit.c skips the allocator, the eviction search and the
     * reason). */
    uint64_t unplaced_gen;
} plan_entry_t;

/* The memory a job is expected to take on each of its devices at once:
 * of its computations, the largest sum of the per-shard values one
 * defines (float32). A device runs one computation of a job at a time (in
 * seq order), and a computation's values all live at most until it ends.
 * Values of a user's program whose shapes are not declared count nothing. */
int64_t sched_plan_bytes(const job_plan_t *plan);

/* The job's entry, compiling it on first sight (borrowed until the next
 * sched_plans_sweep, or the next sched_plan_get that compiles: see
 * sched_plan_find); NULL when the job cannot be planned now (a document
 * that no longer compiles fails its job). */
plan_entry_t *sched_plan_get(store_t *st, int64_t id);
/* The job's entry if it has one (never compiles). Entries live in one
 * array that a sched_plan_get which compiles may move (it grows): a
 * pointer taken before such a call must be looked up again. */
plan_entry_t *sched_plan_find(int64_t id);
/* Marks the job's cached plan, if any, as seen in this round without
 * compiling anything (a shared job with computations left to feed keeps
 * its plan through rounds that do not feed it). */
void sched_plan_keep(int64_t id);
/* After a complete round: drops the plans of jobs not looked up in it. */
void sched_plans_sweep(void);
/* When the thread ends. */
void sched_plans_free_all(void);

/* ---- dispatch (sched_dispatch.c), inside the caller's transaction or its own ---- */

/* An exclusive job's dispatch in chunks (parallel dispatch): its first
 * chunk is written with its allocation, SCHED_CHUNK_FIRST_TASKS host tasks
 * (fewer if the job has fewer), so its first computations reach the
 * workers without waiting for the rest; each later chunk, one per job in
 * mid-dispatch per pass, has as many host tasks as all the job's earlier
 * ones (they double, so they stay ahead of execution whenever writing a
 * computation costs less than running it), at most SCHED_CHUNK_MAX_TASKS.
 * A pass writes host tasks for SCHED_CHUNK_US from its start, its chunks
 * sharing that time: each is sized by the cost model of what chunks
 * measured (a fixed part per chunk, a part per host task), at least
 * SCHED_CHUNK_FIRST_TASKS; jobs left when the time is up go first in the
 * next pass, which follows at once. A job allocated after the time is up
 * gets its first chunk in that next pass too, unless that chunk has at most
 * SCHED_CHUNK_INLINE_TASKS host tasks: writing those (~10 us each on the
 * 2-core VM, in the allocation's open transaction) costs less than the
 * transaction and pass of their own that deferring them takes, and a tiny
 * job's admission alone often outlasts the pass's time there (its tasks
 * then waited for a second pass: ~20 % of the scheduler's CPU under
 * bench_loop). A chunk may end inside a
 * computation: a whole-island gang of 512 workers is written over several
 * passes, none of them long (the scheduler's pass p99 of issue 9). Up to
 * SCHED_MORE_MAX jobs in mid-dispatch are looked at per pass. */
#define SCHED_CHUNK_FIRST_TASKS 32
#define SCHED_CHUNK_INLINE_TASKS 8
#define SCHED_CHUNK_MAX_TASKS 4096
#define SCHED_CHUNK_US 500
#define SCHED_MORE_MAX 64

/* Writes computation c's host tasks [lo, hi) (one per worker, in worker
 * id order; hi < 0: all from lo), inside the caller's transaction, blocked
 * (sequential dispatch) or pending; with lo = 0 first its island sequence
 * number seq (reserved by the caller: store_sched_take_seq) and shared
 * payload. With ncomps > 1 (then lo = 0, hi < 0, not blocked) the host
 * tasks cover the run of computations c .. c + ncomps - 1 (schema/032:
 * consecutive in the job's topological order, on c's slice), numbered seq
 * .. seq + ncomps - 1, one row per worker for all of them. 0 or -1. */
int sched_dispatch_comp(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                        const json_t *doc, round_t *r, const alloc_placement_t *pl, int c,
                        int ncomps, int64_t seq, int blocked, int lo, int hi);
/* Writes the job's allocation, placement and (exclusive jobs) its first
 * chunk of host tasks, or all of them under sequential dispatch, in one
 * transaction of its own. 1 when chunks are left (sched_dispatch_more),
 * 0 when not, -1 on error (rolled back, logged). */
int sched_dispatch_job(store_t *st, const sched_job_t *job, const job_plan_t *plan,
                       const json_t *doc, round_t *r, const alloc_placement_t *pl,
                       int64_t bytes);
/* Reads slice s of a live job's allocation back (its slices row) into p:
 * island (the round's index) and devices (malloc'd; the caller frees).
 * 0 when it is what the plan needs and every device index is on the
 * island, 1 when not, -1 on a store error. */
int sched_slice_read(store_t *st, const round_t *r, int64_t job, const job_plan_t *plan, int s,
                     alloc_placement_t *p);
/* Writes the next chunk of every job in mid-dispatch (jobs.dispatch_next),
 * in one transaction of its own; *wrote: how many jobs got one. Returns
 * how many still have computations left (the caller runs another pass
 * soon), or -1 on a store error (rolled back, logged). */
int sched_dispatch_more(store_t *st, round_t *r, int *wrote);
/* Opens a pass begun at start_us (util_mono_us): its chunks, and the first
 * chunks of the jobs it allocates, share SCHED_CHUNK_US (or
 * sched_cfg.chunk_us) from then; 0 closes it. */
void sched_dispatch_pass(int64_t start_us);
/* sched_dispatch_more reads the jobs in mid-dispatch only while one may
 * be (it wrote a position since a read found none): how many reads it
 * made, and the reset for a new store (the next pass reads). */
uint64_t sched_dispatch_looks(void);
void sched_dispatch_forget(void);

/* ---- preemption (sched_preempt.c) ---- */

/* Evicts the fewest lower-priority preemptible jobs that make room for
 * job's gang (requeued in the store, freed in r). 1 when room was made,
 * 0 when none can be, -1 on a store error. */
int sched_try_preempt(store_t *st, round_t *r, const sched_job_t *job, const sched_gang_t *g);

/* ---- the shared jobs' feed (sched_feed.c) ---- */

/* One feed pass over the live shared jobs: computations dispatched, or -1
 * on a store error; *live: how many live shared jobs it looked at. */
int sched_feed_shared(store_t *st, round_t *r, int *live);
/* An island's lookahead budget (µs of expected device time dispatched and
 * not finished) stays within these bounds. */
#define SCHED_FEED_BUDGET_MIN_US 500.0
#define SCHED_FEED_BUDGET_MAX_US 64000.0
/* The next budget when the island's devices were idle this fraction of
 * their time lately (store_sched_island_idle, averaged). Pure. */
double sched_feed_budget_next(double budget_us, double idle);
/* Island i of sched_cfg (any thread): its budget and what was in flight
 * after the last feed pass, in seconds; returns the computations in
 * flight, or -1 for no such island. */
int sched_feed_gauge(int island, double *budget_s, double *inflight_s);
/* The feed's virtual time of key (a tenant id, or -id of a job without
 * one), -1 when it keeps none; and forgetting them all. Scheduler thread
 * (or a test with no scheduler thread). */
double sched_feed_vtime(int64_t key);
void sched_feed_forget(void);

/* ---- the admission round (sched_admit.c) ---- */

/* One admission round and feed pass; calls sched_cfg.on_dispatch when it
 * made host tasks pending. Returns 1 when devices freed after it could
 * matter to the next round (a job waited, the round was cut short or
 * failed, host tasks are left to write, shared jobs are live), else 0:
 * every queued job it saw was placed (sched_notify_freed). */
int sched_admit(store_t *st);

#endif
