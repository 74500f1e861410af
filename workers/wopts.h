/* wopts.h - atoll-worker's command line and environment.
 *
 * Every flag has an environment variable (ATOLL_ + upper-cased flag name
 * with '-' -> '_', e.g. --poll-ms / ATOLL_POLL_MS); a flag given on the
 * command line wins over the environment. */
#ifndef ATOLL_WOPTS_H
#define ATOLL_WOPTS_H

#include <stddef.h>

#include "dplane.h"
#include "util.h"

/* The worker's malloc settings, util_malloc_keep(WORKER_MMAP_MIN,
 * WORKER_TRIM_MIN) (why: workers/main.c). */
#define WORKER_MMAP_MIN (32 * 1024 * 1024)
#define WORKER_TRIM_MIN (256 * 1024 * 1024)

typedef struct wopts {
    const char *controller;     /* required: http://HOST:PORT */
    const char *island;         /* required */
    int devices;                /* required, 1..WOPTS_MAX_DEVICES */
    const char *backend;        /* "cpu" (default) or "sim" */
    const char *data_listen;    /* default "127.0.0.1:0" */
    const char *data_advertise; /* host peers should dial; NULL = bound host */
    int poll_ms;                /* long-poll wait, 0..30000, default 1000 */
    int peer_timeout_ms;        /* one wait for a peer, default 60000 */
    int drain_ms;               /* SIGTERM: time left to running tasks, default 10000 */
    int store_cap_mb;           /* object store cap, default 1024 */
    dplane_transport_t data_transport;  /* --data-transport: DPLANE_AUTO (default),
                                           DPLANE_TCP */
    int ring_min_kb;            /* an all_reduce of at least this many KiB per shard
                                   sums in ring order (exec_env.h); default 64; 0: never */
    int report_hold_ms;         /* longest a held report waits (wreport.h); default 10;
                                   0: every report leaves at once */
    int spin_us;                /* how long a runner waiting for a peer polls the data
                                   plane before it sleeps (dplane_set_poll_us); default
                                   -1: by the host's CPUs (dplane_poll_budget_us) */
    const char *token;          /* bearer token (the controller's worker token); NULL = none */
    const char *ca_file;        /* PEM CA bundle to trust for an https:// controller */
    const char *run_as;         /* user for users' programs (DESIGN Part F); NULL: this
                                   worker's own, refused when that is root */
    const char *run_dir;        /* parent of their working directories; default
                                   $TMPDIR (or /tmp) /atoll-run */
    const char *container_runtime; /* podman's OCI runtime for run.image (podman run
                                   --runtime); NULL: podman's own choice */
    log_level_t log_level;      /* default info */
    int log_json;               /* default 0 */
    int help, version;
} wopts_t;

#define WOPTS_MAX_DEVICES 4096

/* Fills o from argv and the environment (getenv-like lookup, so tests can
 * pass their own; NULL = getenv). Strings point into argv or the
 * environment. Returns 0, or -1 with a one-line message in err (the caller
 * prints it and exits 2). --help / --version set o->help / o->version and
 * skip the required-flag checks. */
int wopts_parse(int argc, char **argv, const char *(*env)(const char *name), wopts_t *o,
                char *err, size_t errlen);

/* The --help text. */
const char *wopts_usage(void);

#endif
