/* dplane_progress.c - the data plane's UCX context and worker, the
 * waiters that progress it, its progress thread and wake-ups, and its
 * start and stop (dplane_int.h).
 *
 * Runners waiting for a message or a send progress the UCX worker
 * themselves for a while ("waiters that progress" below). Otherwise the
 * progress thread does: it also answers the address port
 * (dp_addr_answer), retries parked frames, closes the endpoints queued for
 * closing (dp->closing: peers gone, sends given up on) and expires
 * unclaimed frames about once a second. It spins only right after events,
 * then arms the worker and sleeps in epoll on the worker's event fd, the
 * listening socket and its wake-up eventfd (dp_wake: senders after
 * posting, waiters handing progress back, stop).
 *
 * Start: UCX, then the listening socket, then the thread; a failure frees
 * what was made. Stop: the mailbox is shut down, the thread joined, and
 * from then on the stopping thread alone is in UCX: it releases the
 * parked frames, closes every endpoint, waits for the fetches and sends
 * still in flight, and frees everything the dplane owns. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "dplane_int.h"
#include "util.h"

/* ---- wake-ups ---- */

void dp_wake(dplane_t *dp)
{
    uint64_t one = 1;
    /* A full counter (never, in practice) is a pending wake-up anyway. */
    ssize_t n = write(dp->wake_fd, &one, sizeof one);
    (void)n;
}

/* Empties the wake-up counter when a sleep (epoll_wait's answer r, ev)
 * ended on it; another readiness leaves it for the next sleep, which then
 * returns at once and drains it. */
static void wake_drain(dplane_t *dp, int r, const struct epoll_event *ev)
{
    uint64_t v;
    if (r == 1 && ev->data.fd == dp->wake_fd) {
        ssize_t n = read(dp->wake_fd, &v, sizeof v);
        (void)n;
    }
}

/* ---- waiters that progress (dplane_int.h, dp_poll) ----
 *
 * A runner waiting for a message (mbox_set_poller) or for its send
 * progresses the worker itself for dplane_poll_now_us at most (dplane.h): the
 * handler then runs in the waiting thread, with no wake-up between
 * the wire and the waiter. While waiters poll, the progress thread sleeps
 * without arming the worker: an armed worker would wake it for every
 * message the waiters receive anyway, and on a 2-core host those wake-ups
 * cost 40 of the 45 us a message took. Unarmed, it looks every
 * DPLANE_UNARMED_MS and arms at the first look with nobody polling (so a
 * peer's rendezvous or pool send, which needs our progress, waits about
 * that long at worst when no runner here waits), and the last waiter to
 * stop polling wakes it at once when somebody here still needs progress
 * (a waiter going to sleep, a send or fetch in flight). The pairs of
 * atomics (pollers, then unarmed; unarmed, then pollers) are sequentially
 * consistent, so one of the two always sees the other. */
void dp_poll_enter(void *ctx)
{
    dplane_t *dp = ctx;
    atomic_fetch_add(&dp->pollers, 1);
}

int dp_poll(void *ctx, int64_t waited_us)
{
    dplane_t *dp = ctx;
    if (waited_us >= dplane_poll_now_us(dp))
        return 0;
    unsigned n = 0;
    if (pthread_mutex_trylock(&dp->prog_mu) == 0) {
        n = ucp_worker_progress(dp->worker);
        pthread_mutex_unlock(&dp->prog_mu);
    }
    if (n)
        return 1;
    /* With fewer cores than busy threads, give the core to whoever holds
     * it from the peer that must answer: on small hosts at once, on large
     * ones past the first DPLANE_POLL_US (many processes may share it). */
    if (dp->yield_polls || waited_us >= DPLANE_POLL_US)
        sched_yield();
    else
        util_cpu_relax();
    return 1;
}

void dp_poll_leave(void *ctx, int need)
{
    dplane_t *dp = ctx;
    if (atomic_fetch_sub(&dp->pollers, 1) == 1 && atomic_load(&dp->unarmed) &&
        (need || atomic_load(&dp->inflight) > 0))
        dp_wake(dp);
}

/* ---- the progress thread ---- */

/* Closes the endpoints queued for closing (progress thread). */
static void close_pending(dplane_t *dp)
{
    ucp_ep_h eps[64];
    int n = 0;
    pthread_mutex_lock(&dp->mu);
    while (n < 64 && dp->nclosing > 0)
        eps[n++] = dp->closing[--dp->nclosing];
    pthread_mutex_unlock(&dp->mu);
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    for (int i = 0; i < n; i++) {
        void *r = ucp_ep_close_nbx(eps[i], &p);
        if (UCS_PTR_IS_PTR(r)) {
            while (ucp_request_check_status(r) == UCS_INPROGRESS)
                ucp_worker_progress(dp->worker);
            ucp_request_free(r);
        }
    }
}

/* Waiters poll dp->poll_max_us on a host whose CPUs are free, and no
 * longer than DPLANE_POLL_US while they are contended (cpupsi.h): measured
 * with 512 worker processes on 16 CPUs (bench_scale), polling 2 ms cost
 * the whole-island chain a third of its speed. About once a second
 * (progress thread). */
static void dp_pressure_check(dplane_t *dp, int64_t now)
{
    if (atomic_load(&dp->poll_max_us) <= DPLANE_POLL_US)
        return;                    /* nothing to fall back to: no read */
    pthread_mutex_lock(&dp->prog_mu);       /* psi: dplane_set_pressure_file */
    int contended = cpupsi_sample(&dp->psi, now);
    pthread_mutex_unlock(&dp->prog_mu);
    if (atomic_exchange(&dp->contended, contended) == contended)
        return;
    log_info("data plane: this host's CPUs are %s: a waiting runner polls %lld us",
             contended ? "contended" : "free again", (long long)dplane_poll_now_us(dp));
}

/* One pass of the progress thread's work on UCX, under prog_mu: progress,
 * parked frames, endpoints to close, expiry. How many events; *parked:
 * whether frames are still parked. */
static unsigned progress_pass(dplane_t *dp, int64_t now, int64_t *last_expire, int *parked)
{
    pthread_mutex_lock(&dp->prog_mu);
    unsigned n = ucp_worker_progress(dp->worker);
    if (dp->nparked)
        n += (unsigned)dp_parked_retry(dp);
    *parked = dp->nparked > 0;
    if (dp->nclosing) {            /* racy read; close_pending locks */
        close_pending(dp);
        n++;
    }
    pthread_mutex_unlock(&dp->prog_mu);
    if (now - *last_expire > 1000000) {
        mbox_expire(dp->mb);
        dp_pressure_check(dp, now);
        *last_expire = now;
    }
    return n;
}

/* Sleeps until an event or timeout_ms: unarmed while waiters poll (they
 * progress; only dp_wake and the address port wake us), else with the
 * worker armed (UCX's events too). Returns 0 when it slept to the
 * timeout, else SLEEP_WOKEN, with SLEEP_PORT when it ended on the address
 * port (connections waiting). *busy_since: when UCX first refused to arm
 * in a row of such sleeps, 0 when it did not (the caller zeroes it after a
 * pass that did something). */
enum { SLEEP_WOKEN = 1, SLEEP_PORT = 2 };

/* What ended a sleep (epoll_wait's answer r, ev), the wake-up counter
 * drained when it was that. */
static int sleep_ended(dplane_t *dp, int r, const struct epoll_event *ev)
{
    wake_drain(dp, r, ev);
    return r <= 0 ? 0 : ev->data.fd == dp->listen_fd ? SLEEP_WOKEN | SLEEP_PORT : SLEEP_WOKEN;
}

static int progress_sleep(dplane_t *dp, int timeout_ms, int64_t *busy_since)
{
    struct epoll_event ev;
    int64_t end = util_mono_us() + (int64_t)timeout_ms * 1000;
    /* While waiters poll: ticks of DPLANE_UNARMED_MS that do nothing (the
     * waiters progress), until a wake-up, the address port, the pass's own
     * timeout, or a tick with no waiter polling: then arm. */
    atomic_store(&dp->unarmed, 1);
    while (atomic_load(&dp->pollers) > 0) {
        int64_t left_ms = (end - util_mono_us() + 999) / 1000;
        int r = left_ms <= 0 ? 0
                             : epoll_wait(dp->epfd_unarmed, &ev, 1,
                                          left_ms < DPLANE_UNARMED_MS ? (int)left_ms
                                                                      : DPLANE_UNARMED_MS);
        if (left_ms <= 0 || r != 0) {
            atomic_store(&dp->unarmed, 0);
            return sleep_ended(dp, r, &ev);
        }
    }
    atomic_store(&dp->unarmed, 0);
    int64_t left_ms = (end - util_mono_us() + 999) / 1000;
    int r = 0;
    if (left_ms <= 0)
        return 0;
    int64_t now = util_mono_us();
    if (ucp_worker_arm(dp->worker) == UCS_OK) {
        *busy_since = 0;
        r = epoll_wait(dp->epfd, &ev, 1, (int)left_ms);
    } else if (!*busy_since || now - *busy_since < DPLANE_BUSY_SPIN_US) {
        if (!*busy_since)
            *busy_since = now;
        return SLEEP_WOKEN;        /* events, or work about to complete: progress at once */
    } else {
        /* UCX has stayed busy for DPLANE_BUSY_SPIN_US although progressing
         * found nothing to do: work that waits on a peer (sends into its
         * full shared-memory FIFO keep UCX from arming). Progressing on
         * would spin: 511 senders to one slow root spinning so took the
         * cores the root needed (bench_scale 512: 800 runnable threads).
         * Sleep unarmed instead, 1 ms and doubling with the time already
         * waited, up to DPLANE_INFLIGHT_TICK_MAX_MS (a wake-up or the port
         * still end it). */
        int64_t waited_ms = (now - *busy_since) / 1000;
        int nap = waited_ms < 1 ? 1 : waited_ms > DPLANE_INFLIGHT_TICK_MAX_MS
                                          ? DPLANE_INFLIGHT_TICK_MAX_MS
                                          : (int)waited_ms;
        r = epoll_wait(dp->epfd_unarmed, &ev, 1, left_ms < nap ? (int)left_ms : nap);
    }
    return sleep_ended(dp, r, &ev);
}

static void *progress_main(void *arg)
{
    dplane_t *dp = arg;
    pthread_setname_np(pthread_self(), "atoll-dplane");
    int64_t last_event = util_mono_us(), last_expire = last_event, last_accept = last_event;
    int64_t busy_since = 0;
    int accept_due = 0, quiet = 0;
    while (!atomic_load(&dp->stopping)) {
        int64_t now = util_mono_us();      /* one clock read per pass */
        int parked;
        unsigned n = progress_pass(dp, now, &last_expire, &parked);
        /* The port is answered when a sleep ended on it, while the last
         * answer took a full batch, and every DPLANE_PORT_ANSWER_US
         * whatever epoll said (not on every wake-up: an accept4() that
         * found nothing, in each of 512 workers' progress threads, was
         * ~6 % of a 2-core machine's samples plus its kernel side in
         * bench_scale 512, while they spun). */
        if (accept_due || now - last_accept > DPLANE_PORT_ANSWER_US) {
            accept_due = dp_addr_answer(dp) == DPLANE_ACCEPTS_PER_PASS;
            last_accept = now;
        }
        /* Spin only right after events, never for operations in flight: on
         * a host with fewer cores than busy threads a spinning progress
         * thread takes the core the peer (or our own runner) needs to
         * answer; UCX wakes us when their replies come. */
        if (n) {
            last_event = now;
            quiet = 0;
            busy_since = 0;
            continue;
        }
        if (now - last_event < dp->spin_us)
            continue;
        /* Parked frames are retried every few ms. Operations in flight get
         * a safety tick (their completions wake us anyway) of 10 ms,
         * doubling up to DPLANE_INFLIGHT_TICK_MAX_MS while sleeps end on
         * nothing: 511 senders waiting seconds on one busy root (512
         * workers on 2 cores, bench_scale 512) would otherwise wake 51,000
         * times a second between them, at tens of microseconds a wake-up
         * on a virtual machine. Else a 1 s tick for expiring unclaimed
         * frames. */
        int tick = parked ? 2 : atomic_load(&dp->inflight) > 0 ? 10 << quiet : 1000;
        int slept = progress_sleep(dp, tick > DPLANE_INFLIGHT_TICK_MAX_MS && !parked
                                           ? DPLANE_INFLIGHT_TICK_MAX_MS : tick, &busy_since);
        accept_due = (slept & SLEEP_PORT) != 0;
        quiet = slept ? 0 : quiet < 5 ? quiet + 1 : quiet;
        last_event = util_mono_us();
    }
    return NULL;
}

/* ---- start and stop ---- */

/* FNV-1a over the text of path (a file's first line, or a link's target). */
static uint64_t host_mix(uint64_t h, const char *path, int link)
{
    char buf[256] = "";
    if (link) {
        ssize_t n = readlink(path, buf, sizeof buf - 1);
        buf[n > 0 ? n : 0] = '\0';
    } else {
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(buf, sizeof buf, f))
                buf[0] = '\0';
            fclose(f);
        }
    }
    for (const char *c = buf; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ULL;
    return (h ^ 0xff) * 1099511628211ULL;     /* separator */
}

uint64_t dp_host_id(void)
{
    uint64_t h = 14695981039346656037ULL;
    h = host_mix(h, "/proc/sys/kernel/random/boot_id", 0);
    h = host_mix(h, "/proc/self/ns/ipc", 1);
    h = host_mix(h, "/proc/self/ns/pid", 1);
    return host_mix(h, "/proc/self/ns/mnt", 1);
}

/* Same-host shared memory, where the operator's UCX_* variables leave it
 * to us: one of UCX's two FIFO transports (posix; sysv does the same job
 * by another kind of segment, and UCX would open both, then use one), and
 * its receive descriptors made 64 at a time rather than the larger batch
 * it fills (so page-faults in) by default when each worker starts. Measured in one worker's
 * ucp_worker_create: 23 ms -> 16 (no sysv) -> 7 (64 at a time); 512 sim
 * workers start at once on 2 cores in bench_scale. The pool still grows
 * on demand. 0 or -1. */
static int shm_settings(dplane_transport_t tr, ucp_config_t *cfg)
{
    if (tr == DPLANE_TCP)
        return 0;
    if (!getenv("UCX_TLS") && ucp_config_modify(cfg, "TLS", "^sysv") != UCS_OK)
        return -1;
    if (!getenv("UCX_MM_RX_BUFS_GROW") && !getenv("UCX_POSIX_RX_BUFS_GROW") &&
        ucp_config_modify(cfg, "MM_RX_BUFS_GROW", "64") != UCS_OK)
        return -1;
    return 0;
}

/* The UCX settings of the data plane's context (the pool's, or its own):
 * *cfg is the caller's to release. 0 or -1. */
static int ucx_settings(dplane_transport_t tr, ucp_params_t *pp, ucp_config_t **cfg)
{
    *cfg = NULL;
    if (ucp_config_read(NULL, NULL, cfg) != UCS_OK)
        return -1;
    /* tcp: UCX's TCP transport for data ("self" only ever serves sends to
     * ourselves, which never reach UCX). */
    /* A mutex, not a spinlock, guards the UCX worker between the progress
     * thread and senders: with more busy threads than cores a spinning
     * sender burns the slice the lock holder needs. */
    if (ucp_config_modify(*cfg, "USE_MT_MUTEX", "y") != UCS_OK ||
        (tr == DPLANE_TCP && ucp_config_modify(*cfg, "TLS", "tcp") != UCS_OK) ||
        shm_settings(tr, *cfg) != 0) {
        ucp_config_release(*cfg);
        *cfg = NULL;
        return -1;
    }
    /* RMA: receivers read pool sends from the sender's block (dplane.c). */
    *pp = (ucp_params_t){.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME |
                                       UCP_PARAM_FIELD_MT_WORKERS_SHARED,
                         .features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP | UCP_FEATURE_RMA,
                         .name = "atoll-dplane", .mt_workers_shared = 0};
    return 0;
}

shmpool_t *dplane_pool_new(dplane_transport_t tr, size_t keep_bytes)
{
    ucp_params_t pp;
    ucp_config_t *cfg;
    if (ucx_settings(tr, &pp, &cfg) != 0)
        return NULL;
    shmpool_t *p = shmpool_new(&pp, cfg, keep_bytes);
    ucp_config_release(cfg);
    return p;
}

static int ucx_init(dplane_t *dp, dplane_transport_t tr)
{
    ucs_status_t st;
    if (dp->pool) {
        dp->ctx = shmpool_context(dp->pool);
    } else {
        ucp_params_t pp;
        ucp_config_t *cfg;
        if (ucx_settings(tr, &pp, &cfg) != 0)
            return -1;
        st = ucp_init(&pp, cfg, &dp->ctx);
        ucp_config_release(cfg);
        if (st != UCS_OK) {
            dp->ctx = NULL;
            log_error("dplane: ucp_init: %s", ucs_status_string(st));
            return -1;
        }
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_MULTI};
    if ((st = ucp_worker_create(dp->ctx, &wp, &dp->worker)) != UCS_OK) {
        log_error("dplane: ucp_worker_create: %s", ucs_status_string(st));
        return -1;
    }
    ucp_am_handler_param_t hp = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                 .id = DPLANE_AM_ID, .cb = dp_am_recv, .arg = dp};
    ucp_am_handler_param_t hr = hp, ha = hp;
    hr.id = DPLANE_AM_RMA_ID;
    hr.cb = dp_am_rma;
    ha.id = DPLANE_AM_ACK_ID;
    ha.cb = dp_am_ack;
    int efd = -1;
    if (ucp_worker_set_am_recv_handler(dp->worker, &hp) != UCS_OK ||
        ucp_worker_set_am_recv_handler(dp->worker, &hr) != UCS_OK ||
        ucp_worker_set_am_recv_handler(dp->worker, &ha) != UCS_OK ||
        ucp_worker_get_efd(dp->worker, &efd) != UCS_OK)
        return -1;
    /* Two sleeps (progress_sleep): armed, on UCX's events too; unarmed,
     * while takers progress, on wake-ups and the address port only (the
     * port is added to both by dp_listen_on). */
    if ((dp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
    struct epoll_event wev = {.events = EPOLLIN, .data.fd = dp->wake_fd};
    if ((dp->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (dp->epfd_unarmed = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        epoll_ctl(dp->epfd, EPOLL_CTL_ADD, efd, &ev) != 0 ||
        epoll_ctl(dp->epfd, EPOLL_CTL_ADD, dp->wake_fd, &wev) != 0 ||
        epoll_ctl(dp->epfd_unarmed, EPOLL_CTL_ADD, dp->wake_fd, &wev) != 0)
        return -1;
    if ((st = ucp_worker_get_address(dp->worker, &dp->ucx_addr, &dp->ucx_addr_len)) != UCS_OK) {
        log_error("dplane: ucp_worker_get_address: %s", ucs_status_string(st));
        return -1;
    }
    if (dp->ucx_addr_len > DPLANE_UCX_ADDR_MAX) {
        log_error("dplane: UCX worker address of %zu bytes (limit %d)", dp->ucx_addr_len,
                  DPLANE_UCX_ADDR_MAX);
        return -1;
    }
    return 0;
}

static void dplane_free(dplane_t *dp)
{
    if (dp->listen_fd >= 0)
        close(dp->listen_fd);
    if (dp->ucx_addr)
        ucp_worker_release_address(dp->worker, dp->ucx_addr);
    if (dp->worker)
        ucp_worker_destroy(dp->worker);
    dp_send_waits_free_abandoned(dp);
    if (dp->ctx && !dp->pool)
        ucp_cleanup(dp->ctx);
    if (dp->epfd >= 0)
        close(dp->epfd);
    if (dp->epfd_unarmed >= 0)
        close(dp->epfd_unarmed);
    if (dp->wake_fd >= 0)
        close(dp->wake_fd);
    pthread_mutex_destroy(&dp->prog_mu);
    pthread_mutex_destroy(&dp->mu);
    free(dp);
}

dplane_t *dplane_start(const char *listen_addr, const char *advertise_host, mbox_t *mb,
                       dplane_transport_t tr, shmpool_t *pool)
{
    dplane_t *dp = calloc(1, sizeof *dp);
    if (!dp)
        return NULL;
    dp->mb = mb;
    dp->pool = pool;
    dp->host_id = dp_host_id();
    /* Cookies start at a random point: an ACK cannot be forged blindly. */
    if (getrandom(&dp->rma_cookie, sizeof dp->rma_cookie, 0) != sizeof dp->rma_cookie)
        dp->rma_cookie = (uint64_t)util_wall_us() * 2654435761u;
    dp->epfd = dp->epfd_unarmed = dp->wake_fd = -1;
    dp->listen_fd = -1;
    long ncpu = util_cpu_count();
    dp->spin_us = ncpu >= DPLANE_SPIN_MIN_CPUS ? DPLANE_SPIN_US : 0;
    dp->yield_polls = ncpu < DPLANE_SPIN_MIN_CPUS;
    atomic_init(&dp->poll_max_us, 0);
    atomic_init(&dp->contended, 0);
    cpupsi_init(&dp->psi, NULL);
    atomic_init(&dp->recheck_us, DPLANE_RECHECK_US);
    pthread_mutex_init(&dp->mu, NULL);
    pthread_mutex_init(&dp->prog_mu, NULL);
    if (ucx_init(dp, tr) != 0 || dp_listen_on(dp, listen_addr, advertise_host) != 0)
        goto fail;
    if (pthread_create(&dp->progress_thread, NULL, progress_main, dp) != 0) {
        log_error("dplane: cannot start the progress thread");
        goto fail;
    }
    dplane_set_poll_us(dp, dplane_poll_budget_us(ncpu));
    return dp;
fail:
    dplane_free(dp);
    return NULL;
}

int64_t dplane_poll_budget_us(long ncpu)
{
    return ncpu >= DPLANE_SPIN_MIN_CPUS ? DPLANE_POLL_LARGE_US : DPLANE_POLL_US;
}

void dplane_set_poll_us(dplane_t *dp, int64_t us)
{
    if (us < 0)
        us = 0;
    atomic_store(&dp->poll_max_us, us);
    /* A budget with something to fall back to samples the pressure from
     * now on: its first share comes a second later, not two. */
    if (us > DPLANE_POLL_US) {
        pthread_mutex_lock(&dp->prog_mu);
        cpupsi_sample(&dp->psi, util_mono_us());
        pthread_mutex_unlock(&dp->prog_mu);
    }
    mbox_poller_t poller = {.ctx = dp, .spin_us = us, .enter = dp_poll_enter, .poll = dp_poll,
                            .leave = dp_poll_leave};
    mbox_set_poller(dp->mb, &poller);
}

int64_t dplane_poll_us(dplane_t *dp)
{
    return atomic_load(&dp->poll_max_us);
}

int64_t dplane_poll_now_us(dplane_t *dp)
{
    int64_t max = atomic_load_explicit(&dp->poll_max_us, memory_order_relaxed);
    return atomic_load_explicit(&dp->contended, memory_order_relaxed) && max > DPLANE_POLL_US
               ? DPLANE_POLL_US
               : max;
}

void dplane_set_pressure_file(dplane_t *dp, const char *path)
{
    pthread_mutex_lock(&dp->prog_mu);
    cpupsi_init(&dp->psi, path);
    pthread_mutex_unlock(&dp->prog_mu);
}

/* Closes ep and progresses until it is gone (stop only). */
static void close_now(dplane_t *dp, ucp_ep_h ep)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    void *r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS)
            ucp_worker_progress(dp->worker);
        ucp_request_free(r);
    }
}

void dplane_stop(dplane_t *dp)
{
    if (!dp)
        return;
    /* The owner stops the mailbox too, but may do so only after this. */
    mbox_shutdown(dp->mb);
    mbox_set_poller(dp->mb, NULL);
    atomic_store(&dp->stopping, 1);
    dp_wake(dp);
    pthread_join(dp->progress_thread, NULL);
    /* From here this thread is the only one in UCX. */
    while (dp->parked) {
        dp_park_t *pk = dp->parked;
        dp->parked = pk->next;
        if (!pk->rma)
            ucp_am_data_release(dp->worker, pk->data);
        free(pk->rma);
        free(pk);
    }
    close_pending(dp);
    while (dp->peers) {
        dp_peer_t *p = dp->peers;
        dp->peers = p->next;
        if (p->ep)
            close_now(dp, p->ep);
        pthread_mutex_destroy(&p->mu);
        free(p->ucx);
        free(p);
    }
    close_pending(dp);             /* endpoints that failed while closing others */
    while (atomic_load(&dp->inflight) > 0)
        ucp_worker_progress(dp->worker);
    dp_rkeys_drop(dp, 0);
    dplane_free(dp);
}

const void *dplane_ucx_address(const dplane_t *dp, size_t *len)
{
    *len = dp->ucx_addr_len;
    return dp->ucx_addr;
}

void dplane_set_resolver(dplane_t *dp, dplane_resolve_fn fn, void *ctx)
{
    dp->resolve = fn;
    dp->resolve_ctx = ctx;
}

const char *dplane_addr(const dplane_t *dp)
{
    return dp->addr;
}

void dplane_guard_stats(dplane_t *dp, dplane_guard_stats_t *out)
{
    out->refused = atomic_load(&dp->refused);
    out->bad_frames = atomic_load(&dp->bad_frames);
    pthread_mutex_lock(&dp->mu);
    out->conns = dp->norigins;
    pthread_mutex_unlock(&dp->mu);
    mbox_guard_stats(dp->mb, &out->mb);
}
