/* exec_env.h - what a running host task borrows from its worker: the
 * mailbox, the data plane, the object store, the limits and counters of the
 * executor, and how users' programs run. Types only (no functions), so the
 * executor's modules (exec_run, exec_io, exec_coll, exec_gang) all stand
 * on it without standing on each other; exec_run.h includes it for
 * exec.c, main.c and the tests.
 *
 * Ownership: exec.c owns one exec_env_t per executor, filled once at
 * exec_start() and read-only after (runner threads read it without a
 * lock); every pointer in it is borrowed from main.c's composition and
 * outlives the executor. The counters are atomics, bumped by any runner. */
#ifndef ATOLL_EXEC_ENV_H
#define ATOLL_EXEC_ENV_H

#include <stdatomic.h>
#include <stdint.h>

#include "dplane.h"
#include "mbox.h"
#include "ostore.h"

/* An all_reduce of at least this many bytes per shard, in a group of 3 or
 * more, sums in the ring's order (coll_fold_ring: chunk c from position c
 * on), smaller ones in position order (coll_combine): the orders the
 * per-shard runtime's ring and direct algorithms used, so results keep
 * their bits whatever moves them. */
#define EXEC_RING_MIN_BYTES_DEFAULT (64 * 1024)

/* A whole-argument collective over a slice on at least this many worker
 * processes goes through the slice's root process (exec_coll.c, "Relay"):
 * 2 (P - 1) messages and connections instead of P (P - 1). Below it every
 * pair exchanges directly, one step fewer. From 4 processes the fewer
 * messages (and wake-ups) win (bench_pathways grid, 2-core VM: fused
 * all_reduce steps 1.2-1.9x at 4 processes, 2-3x at 8; README). Every
 * process of a slice must decide alike, so this is a build constant, not a
 * per-worker option: a slice's workers run one build. */
#define EXEC_RELAY_MIN_PROCS_DEFAULT 4

/* How far (us) a `sim` worker's host may run ahead of its devices' clock
 * by default: enough to hide a host's delays behind device time, little
 * enough that a cancel leaves at most this much queued device time
 * behind. On the 2-core VM a host's delays reach 2-5 ms (a wake-up that
 * waits for a core behind the other processes, a poll answer parsed
 * while the chunk after it is written): 1 ms hid the short ones only
 * (0.5 ms chains in steady state: 94.4 % busy, 96.7 % with 4 ms;
 * docs/performance.md, "Stop 65"). Real devices' queues run deeper. */
#define EXEC_SIM_AHEAD_US 4000

/* How collectives ran (for tests and logs). */
typedef struct exec_counters {
    atomic_llong ring;          /* all_reduces summed in ring order (per host task) */
    atomic_llong direct;        /* other collectives (per host task) */
    atomic_llong packs;         /* collective messages sent to other processes */
    atomic_llong relayed;       /* collectives (per host task) that went through the root */
    atomic_llong bad_size;      /* received messages whose size disagreed with the
                                   plan (each failed its host task) */
} exec_counters_t;

/* How this worker runs users' programs (DESIGN Part F; atoll-worker
 * --run-as, --run-dir). */
struct runlog;
typedef struct exec_run_opts {
    const char *dir;            /* parent of the processes' working directories */
    int run_as;                 /* switch the programs to uid/gid */
    unsigned uid, gid;
    int refuse;                 /* root without --run-as: run computations fail */
    const char *runtime;        /* --container-runtime (borrowed from argv or the
                                   environment); NULL: podman's default */
    char host[64];              /* this worker's host, for process states */
    struct runlog *log;         /* output and state shipping; may be NULL */
} exec_run_opts_t;

typedef struct exec_env {
    mbox_t *mb;                 /* borrowed */
    dplane_t *dp;               /* borrowed */
    ostore_t *st;               /* borrowed: every buffer a task holds lives here */
    int64_t ring_min_bytes;     /* see EXEC_RING_MIN_BYTES_DEFAULT; INT64_MAX: never ring */
    exec_counters_t *counters;  /* borrowed; may be NULL */
    int64_t peer_timeout_us;    /* how long one wait for a peer may take */
    int relay_min_procs;        /* see EXEC_RELAY_MIN_PROCS_DEFAULT */
    int sim;                    /* `sim` backend: real arithmetic, but devices
                                   are modelled streams: `compute` is device
                                   time the host does not wait out
                                   (exec_run.c: run_compute) */
    int64_t sim_ahead_us;       /* how far the host may run ahead of them */
    const exec_run_opts_t *run; /* borrowed; NULL: run computations fail */
} exec_env_t;

#endif
