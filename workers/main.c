/* main.c - atoll-worker: joins an island and runs the shard tasks it gets.
 *
 * Threads: main (registration, then the long-poll loop), heartbeat, the
 * reporter (wreport), one per device (exec), and the data plane's progress
 * thread (plus UCX's own async thread). SIGTERM/SIGINT only set g_stop; the main thread then
 * drains: stop polling, let queued and running tasks finish (bounded by
 * --drain-ms), deliver their reports, leave the controller, exit 0. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#ifdef __GLIBC__
#endif
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dplane.h"
#include "exec.h"
#include "f32b64.h"
#include "jarena.h"
#include "jscan.h"
#include "kernels.h"
#include "mbox.h"
#include "ostore.h"
#include "runlog.h"
#include "shmpool.h"
#include "util.h"
#include "wclient.h"
#include "wopts.h"
#include "wreport.h"

static atomic_int g_stop;

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&g_stop, 1);
}

/* Free shared-memory blocks a worker keeps for reuse (shmpool.h): a
 * block's first read by each peer maps it and pays its page faults. */
#define WORKER_POOL_KEEP ((size_t)256 * 1024 * 1024)

typedef struct worker {
    wopts_t o;
    ostore_t *st;
    mbox_t *mb;
    dplane_t *dp;
    shmpool_t *pool;                   /* NULL: none could be made (plain sends) */
    wclient_t *wc;
    wreport_t *wr;
    exec_t *ex;
    runlog_t *rl;
    exec_run_opts_t run;               /* users' programs (DESIGN Part F) */
    pthread_t hb_thread;
    int hb_started;
    atomic_int hb_stop;
    /* The heartbeat thread sleeps on hb_cv (CLOCK_MONOTONIC) until its
     * next beat or hb_stop, set under hb_mu: one wake-up per beat, not one
     * every few milliseconds (512 sim workers on one host made that tens
     * of thousands of wake-ups a second). */
    pthread_mutex_t hb_mu;
    pthread_cond_t hb_cv;
} worker_t;

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;       /* no SA_RESTART: blocking calls wake */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);        /* a dead peer is an error, not a kill */
}

/* Sleeps ms in small steps; returns early once *flag is set. */
static void sleep_unless(int ms, const atomic_int *flag)
{
    for (int slept = 0; slept < ms && !atomic_load(flag); slept += 20) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Mailbox messages count in the object store (mbox_acct_fn). */
static void store_acct(void *ctx, int64_t dobjects, int64_t dbytes)
{
    ostore_charge(ctx, dobjects, dbytes);
}

/* {"store": {"objects", "bytes", "cap_bytes"}, "dplane": {"dropped",
 * "dropped_bytes", "refused", "bad_frames", "bad_key"}}; NULL on OOM (then the
 * heartbeat goes without figures). The dplane counts are cumulative. */
static json_t *heartbeat_body(worker_t *w)
{
    ostore_stats_t s;
    dplane_guard_stats_t g;
    ostore_stats(w->st, &s);
    dplane_guard_stats(w->dp, &g);
    return json_pack("{s:{s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:I, s:I}}", "store", "objects",
                     (json_int_t)s.objects, "bytes", (json_int_t)s.bytes, "cap_bytes",
                     (json_int_t)s.cap_bytes, "dplane", "dropped",
                     (json_int_t)(g.mb.dropped + g.mb.over_cap + g.mb.expired + g.mb.bad_key),
                     "dropped_bytes", (json_int_t)g.mb.dropped_bytes, "refused",
                     (json_int_t)g.refused, "bad_frames", (json_int_t)g.bad_frames, "bad_key",
                     (json_int_t)g.mb.bad_key);
}

/* Sleeps ms on hb_cv; returns early once hb_stop is set. */
static void heartbeat_sleep(worker_t *w, int ms)
{
    int64_t end = util_mono_us() + (int64_t)ms * 1000;
    struct timespec ts = {.tv_sec = (time_t)(end / 1000000), .tv_nsec = (long)(end % 1000000) * 1000};
    pthread_mutex_lock(&w->hb_mu);
    while (!atomic_load(&w->hb_stop) && util_mono_us() < end)
        pthread_cond_timedwait(&w->hb_cv, &w->hb_mu, &ts);
    pthread_mutex_unlock(&w->hb_mu);
}

static void *heartbeat_main(void *arg)
{
    worker_t *w = arg;
    pthread_setname_np(pthread_self(), "atoll-heartbeat");
    while (!atomic_load(&w->hb_stop)) {
        heartbeat_sleep(w, wclient_lease_ms(w->wc) / 3);
        if (atomic_load(&w->hb_stop))
            break;
        int64_t id = wclient_id(w->wc);
        json_t *body = heartbeat_body(w);
        int st = wclient_heartbeat(w->wc, id, body);
        json_decref(body);
        /* 401/403: the controller does not take our credential (or id was
         * replaced meanwhile: then reregister does nothing). */
        if (st == 404 || st == 401 || st == 403)
            wclient_reregister(w->wc, id, &w->hb_stop);
        else if (st != 200)
            log_debug("heartbeat: %s %d", st < 0 ? "controller unreachable" : "HTTP", st);
    }
    return NULL;
}

/* Prints the one ready line from the registration answer. */
static void print_ready(const worker_t *w, const json_t *reg)
{
    const json_t *devs = json_object_get(reg, "devices");
    size_t n = json_array_size(devs);
    long long first = -1, last = -1;
    if (n > 0) {
        first = json_integer_value(json_object_get(json_array_get(devs, 0), "index"));
        last = json_integer_value(json_object_get(json_array_get(devs, n - 1), "index"));
    }
    printf("atoll-worker ready: id=%lld island=%s devices=%lld..%lld data=%s\n",
           (long long)wclient_id(w->wc), w->o.island, first, last, dplane_addr(w->dp));
    fflush(stdout);
}

/* First registration. Retries while the controller is unreachable, has no
 * free block yet (409 devices) or another live worker holds our data_addr
 * (409 data_addr: until its lease expired); a refusal that retrying cannot
 * fix is fatal. Returns 0, or -1 (stopped or refused). */
static int register_first(worker_t *w)
{
    int delay = 100;
    int warned = 0;
    for (;;) {
        json_t *ans = NULL;
        int st = wclient_register(w->wc, &ans);
        if (st == 201) {
            print_ready(w, ans);
            json_decref(ans);
            return 0;
        }
        if (st == 400 || st == 401 || st == 403 || st == 404) {
            log_error("controller refused registration (HTTP %d): %s", st,
                      wclient_problem_detail(ans));
            json_decref(ans);
            return -1;
        }
        if (!warned++ || st > 0)
            log_warn("registration: %s (HTTP %d %s); retrying",
                     st < 0 ? "controller unreachable" : "not accepted yet", st,
                     wclient_problem_detail(ans));
        wclient_register_backoff(st, ans, &delay);
        json_decref(ans);
        if (wclient_sleep_backoff(&delay, &g_stop))
            return -1;
    }
}

/* Applies one cancel entry {"job": J, "attempt": A}: attempt A of job J
 * (and its older attempts) is over, a newer one may run here already.
 * Anything else is ignored and logged (the first few times only: the
 * controller repeats a cancel on every poll). Returns the tasks aborted. */
static int apply_cancel(worker_t *w, const json_t *v)
{
    static int malformed;
    const json_t *job = json_object_get(v, "job"), *attempt = json_object_get(v, "attempt");
    if (json_is_integer(job) && json_is_integer(attempt) && json_integer_value(job) >= 1 &&
        json_integer_value(attempt) >= 0 && json_integer_value(attempt) <= INT32_MAX)
        return exec_cancel_attempt(w->ex, json_integer_value(job),
                                   (int32_t)json_integer_value(attempt));
    if (malformed < 8) {
        malformed++;
        log_warn("poll: ignoring a malformed cancel entry (want {\"job\": J, \"attempt\": A})");
    }
    return 0;
}

/* Hands a poll answer's tasks to the executor (exec_take_answer) and
 * then applies its cancels (tasks first: a cancel names only attempts
 * older than any task of the same job in the answer, and leaves those
 * alone). Returns how many tasks and cancels were new (the controller
 * repeats a cancel until the attempt's tasks are reported, and the caller
 * must not spin on such answers), or -1 when the answer is not JSON:
 * nothing of it is taken in, and it is not acknowledged. *lease: the
 * answer's (0: none); *ncancel: its cancels. */
static int handle_poll(worker_t *w, const char *text, size_t len, int64_t *lease, size_t *ncancel)
{
    exec_answer_t a;
    *ncancel = 0;
    *lease = 0;
    if (exec_take_answer(w->ex, text, len, &a) != 0)
        return -1;
    /* Cancels are few (usually none): a tree of them is cheap. */
    json_t *cancel = a.cancel ? jscan_load(a.cancel, a.cancel_len, 0, NULL) : NULL;
    size_t i;
    const json_t *v;
    int news = a.ntasks;
    *ncancel = json_array_size(cancel);
    *lease = a.lease;
    log_debug("poll: %d task(s), %zu cancel(s), lease %lld", news, *ncancel, (long long)*lease);
    json_array_foreach(cancel, i, v)
        news += apply_cancel(w, v);
    json_decref(cancel);
    return news;
}

/* The poll loop. `ack` is the lease id of the last answer taken in: an
 * answer that times out or breaks on the way is not acknowledged, so the
 * controller sends its tasks again (exactly once in the executor: an
 * answer is acknowledged only after all of it was handed over). */
static void poll_loop(worker_t *w)
{
    int delay = 100, down = 0;
    int64_t ack = 0, ack_id = -1;
    /* The trees built from an answer (its placements, computations and
     * cancels) come from this arena (NULL, on OOM: the heap), rewound once
     * the answer is taken in. Owned here. */
    jarena_t *arena = jarena_new();
    while (!atomic_load(&g_stop)) {
        int64_t id = wclient_id(w->wc);
        if (id != ack_id) {         /* registered again: a new id has nothing acknowledged */
            ack = 0;
            ack_id = id;
        }
        jtext_w_t ans = {0};
        int st = wclient_poll(w->wc, id, w->o.poll_ms, ack, &g_stop, &ans);
        int64_t lease = 0;
        size_t ncancel = 0;
        int news = 0;
        if (st == 200) {
            jarena_begin(arena);
            news = handle_poll(w, ans.p, ans.len, &lease, &ncancel);
            jarena_end();
        }
        jtext_drop(&ans);
        if (st == 200 && news >= 0) {
            if (down)
                log_info("controller reachable again");
            down = 0;
            delay = 100;
            if (lease > ack)
                ack = lease;
            /* Nothing new (wait_ms=0, or only repeated cancels): do not spin. */
            if (news == 0 && (w->o.poll_ms < 100 || ncancel > 0))
                sleep_unless(100, &g_stop);
        } else if (st == 404 || st == 401 || st == 403) {
            wclient_reregister(w->wc, id, &g_stop);     /* as in heartbeat_main */
        } else if (!atomic_load(&g_stop)) {
            if (!down++)
                log_warn("poll: %s (HTTP %d); retrying with backoff",
                         st < 0 ? "controller unreachable"
                         : st == 200 ? "an answer that is not JSON" : "unexpected answer", st);
            wclient_sleep_backoff(&delay, &g_stop);
        }
        /* Nothing keeps a part of an answer (the executor copies what it
         * needs), so the arena is rewound every time; were something kept,
         * the arena would go with its last value and a new one serve. */
        if (arena && !jarena_reset(arena)) {
            log_debug("poll: a part of an answer is still referenced; a new arena");
            jarena_retire(arena);
            arena = jarena_new();
        }
    }
    /* Stopping. A poll cut short by the signal may have carried tasks the
     * controller had already leased to us (their job shows "running"):
     * one last poll that does not wait takes them in, so the drain runs
     * them instead of our leaving requeueing their jobs. */
    int64_t id = wclient_id(w->wc), lease;
    size_t ncancel;
    jtext_w_t ans = {0};
    if (wclient_poll(w->wc, id, 0, id == ack_id ? ack : 0, NULL, &ans) == 200)
        handle_poll(w, ans.p, ans.len, &lease, &ncancel);
    jtext_drop(&ans);
    jarena_retire(arena);
}

/* The dplane's resolver: the peer's address from the controller. */
static void *peer_resolve(void *ctx, const char *addr, size_t *len)
{
    return wclient_peer_address(ctx, addr, DPLANE_UCX_ADDR_MAX, len);
}

/* Brings up mailbox, data plane and client. Returns 0 or -1. */
static int worker_open(worker_t *w)
{
    if (!(w->st = ostore_new((int64_t)w->o.store_cap_mb * 1024 * 1024)))
        return -1;
    if (!(w->mb = mbox_new()))
        return -1;
    mbox_set_accounting(w->mb, store_acct, w->st);
    /* Large tensors live in shared memory that same-host peers read in one
     * copy (shmpool.h); without it everything still works, one kernel copy
     * slower. */
    if ((w->pool = dplane_pool_new(w->o.data_transport, WORKER_POOL_KEEP)))
        shmpool_install(w->pool);
    else
        log_warn("no shared-memory pool: large tensors go by UCX's own protocols");
    if (!(w->dp = dplane_start(w->o.data_listen, w->o.data_advertise, w->mb,
                               w->o.data_transport, w->pool)))
        return -1;
    if (w->o.spin_us >= 0)
        dplane_set_poll_us(w->dp, w->o.spin_us);
    log_info("data plane at %s; a waiting runner polls %lld us", dplane_addr(w->dp),
             (long long)dplane_poll_us(w->dp));
    size_t ucx_len;
    const void *ucx = dplane_ucx_address(w->dp, &ucx_len);
    char *ucx_b64 = f32b64_bytes_encode(ucx, ucx_len);
    wclient_reg_req_t req = {.island = w->o.island, .devices = w->o.devices,
                             .backend = w->o.backend, .data_addr = dplane_addr(w->dp),
                             .ucx_address = ucx_b64};
    w->wc = ucx_b64 ? wclient_new(w->o.controller, &req) : NULL;
    free(ucx_b64);
    if (!w->wc || wclient_set_auth(w->wc, w->o.token, w->o.ca_file) != 0)
        return -1;
    /* Peers' UCX addresses come from the controller's directory (every
     * worker registers its own): no peer's port is asked by hundreds at
     * once. */
    dplane_set_resolver(w->dp, peer_resolve, w->wc);
    return 0;
}

/* --run-as and --run-dir into w->run. Returns 0 or -1 (logged). */
static int run_opts(worker_t *w)
{
    static char dir[256];
    const char *tmp = getenv("TMPDIR");
    if (w->o.run_dir)
        snprintf(dir, sizeof dir, "%s", w->o.run_dir);
    else
        snprintf(dir, sizeof dir, "%s/atoll-run", tmp && tmp[0] == '/' ? tmp : "/tmp");
    if (mkdir(dir, 0711) != 0 && errno != EEXIST) {
        log_error("--run-dir %s: %s", dir, strerror(errno));
        return -1;
    }
    w->run.dir = dir;
    w->run.runtime = w->o.container_runtime;
    gethostname(w->run.host, sizeof w->run.host - 1);
    if (w->o.run_as) {
        struct passwd *pw = getpwnam(w->o.run_as);
        if (!pw) {
            log_error("--run-as %s: no such user", w->o.run_as);
            return -1;
        }
        w->run.run_as = pw->pw_uid != geteuid() || pw->pw_gid != getegid();
        w->run.uid = pw->pw_uid;
        w->run.gid = pw->pw_gid;
        if (w->run.run_as && geteuid() != 0) {
            log_error("--run-as %s: switching users needs root", w->o.run_as);
            return -1;
        }
    } else {
        w->run.refuse = geteuid() == 0;
    }
    return 0;
}

/* Starts reporter, executor and heartbeat. Returns 0 or -1. */
static int worker_run_threads(worker_t *w)
{
    if (!(w->wr = wreport_start(w->wc, w->o.report_hold_ms)) || run_opts(w) != 0 ||
        !(w->run.log = w->rl = runlog_start(w->wc)))
        return -1;
    exec_cfg_t cfg = {.ndevices = w->o.devices,
                      .peer_timeout_us = (int64_t)w->o.peer_timeout_ms * 1000,
                      .sim = strcmp(w->o.backend, "sim") == 0, .store = w->st,
                      .ring_min_bytes = w->o.ring_min_kb ? (int64_t)w->o.ring_min_kb * 1024
                                                         : INT64_MAX,
                      .self_addr = dplane_addr(w->dp), .run = &w->run};
    if (!(w->ex = exec_start(&cfg, w->mb, w->dp, wreport_exec_fn, w->wr)))
        return -1;
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    int cv_rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
                pthread_cond_init(&w->hb_cv, &ca) != 0;
    pthread_condattr_destroy(&ca);
    if (cv_rc)
        return -1;
    pthread_mutex_init(&w->hb_mu, NULL);
    if (pthread_create(&w->hb_thread, NULL, heartbeat_main, w) != 0) {
        pthread_cond_destroy(&w->hb_cv);
        pthread_mutex_destroy(&w->hb_mu);
        return -1;
    }
    w->hb_started = 1;
    return 0;
}

/* Drains and tears everything down in dependency order. */
static void worker_close(worker_t *w, int registered)
{
    if (w->ex) {
        log_info("draining %d task(s), at most %d ms", exec_pending(w->ex), w->o.drain_ms);
        if (exec_drain(w->ex, w->o.drain_ms) != 0)
            log_warn("drain timed out: aborting %d task(s)", exec_pending(w->ex));
        mbox_shutdown(w->mb);           /* wakes tasks still waiting for peers */
        exec_stop(w->ex);
    }
    runlog_stop(w->rl);
    wreport_stop(w->wr, 5000);
    if (w->hb_started) {
        pthread_mutex_lock(&w->hb_mu);
        atomic_store(&w->hb_stop, 1);
        pthread_cond_broadcast(&w->hb_cv);
        pthread_mutex_unlock(&w->hb_mu);
        pthread_join(w->hb_thread, NULL);
        pthread_cond_destroy(&w->hb_cv);
        pthread_mutex_destroy(&w->hb_mu);
    }
    if (registered && wclient_leave(w->wc, wclient_id(w->wc)) / 100 != 2)
        log_warn("could not leave the controller cleanly");
    dplane_stop(w->dp);
    mbox_free(w->mb);          /* gives its messages' charges back to st */
    ostore_free(w->st);
    wclient_free(w->wc);
    /* Last: every tensor whose data came from the pool is freed. */
    shmpool_install(NULL);
    shmpool_free(w->pool);
}

/* Tensors of megabytes are allocated and freed by every computation and
 * every received frame. glibc serves such sizes with a fresh mmap until a
 * freed mapping raises its threshold, and trims freed heap tops past twice
 * that, so large tensors kept paying page faults: measured on 2 cores (the
 * same binaries with and without these settings, GLIBC_TUNABLES), a 4 MiB
 * all-reduce over 8 shards took 300-385 ms against 105-110 ms, and a
 * 16 MiB edge's first runs 15 ms against 4 ms. Tensors up to
 * WORKER_MMAP_MIN come from the heap, and freed memory up to
 * WORKER_TRIM_MIN stays there for the next computation (a caching
 * allocator's trade: the worker keeps its high-water mark, which the
 * object store's cap bounds). The figures: wopts.h (bench_dplane uses
 * them too). */

int main(int argc, char **argv)
{
    static worker_t w;                 /* static: threads point into it */
    char err[256];
    jarena_install();                  /* before any jansson value exists */
    if (wopts_parse(argc, argv, NULL, &w.o, err, sizeof err) != 0) {
        fprintf(stderr, "atoll-worker: %s\n", err);
        return 2;
    }
    if (w.o.help) {
        fputs(wopts_usage(), stdout);
        return 0;
    }
    if (w.o.version) {
        printf("atoll-worker %s\n", ATOLL_VERSION);
        return 0;
    }
    log_setup("atoll-worker", w.o.log_level, w.o.log_json);
    /* Before any thread starts: it sets the environment. */
    if (kernel_blas_prepare(err, sizeof err) != 0) {
        log_error("OpenBLAS is missing (matmuls would differ from peers'): %s", err);
        return 1;
    }
    util_malloc_keep(WORKER_MMAP_MIN, WORKER_TRIM_MIN);
    /* Timed waits end when asked, not up to 50 us later (Linux's default
     * timer slack, inherited by every thread started after this): a
     * runner's modelled compute, the progress thread's naps. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    install_signals();
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error("cannot initialise libcurl");
        return 1;
    }
    int rc = 1, registered = 0;
    if (worker_open(&w) != 0) {
        log_error("cannot start (see above)");
        goto cleanup;
    }
    if (register_first(&w) != 0) {
        rc = atomic_load(&g_stop) ? 0 : 1;
        goto cleanup;
    }
    registered = 1;
    /* A peer restarted on its data_addr is replaced no sooner than about a
     * lease after its last call: checking a peer's port every half lease
     * finds the new process before it gets a task (dplane.h). */
    dplane_set_recheck(w.dp, (int64_t)wclient_lease_ms(w.wc) * 1000 / 2);
    if (worker_run_threads(&w) != 0) {
        log_error("cannot start worker threads");
        goto cleanup;
    }
    poll_loop(&w);
    rc = 0;
cleanup:
    worker_close(&w, registered);
    curl_global_cleanup();
    log_info("exiting with status %d", rc);
    return rc;
}
