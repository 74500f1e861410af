/* main.c - atolld's composition root: flags, start-up order, wiring,
 * signal handling. The only file that sees all three layers: the store
 * (store/), the scheduler thread (scheduler/) and the HTTP server
 * (server/); nothing else reaches for another layer's globals.
 *
 * Start-up: parse flags (each also from an ATOLL_* environment variable)
 * -> open + migrate the store, create islands, recover -> scheduler thread
 * -> sampler -> HTTP -> print the ready line. SIGTERM/SIGINT: stop
 * admission, drain, stop serving, close the database, exit 0. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "auth.h"
#include "http.h"
#include "sampler.h"
#include "scheduler.h"
#include "store.h"
#include "util.h"

/* Poll answers, job documents and report batches are built and freed as
 * blocks of hundreds of KiB, on several threads' arenas: with glibc's
 * defaults each came from a fresh mmap or a regrown heap (sysmalloc and
 * page faults were 6-8 % of atolld's CPU under a 1,000-computation
 * chain). Kept, they cost 10 % less CPU per job (9 alternated runs, the
 * same binary with and without GLIBC_TUNABLES); atolld keeps its
 * high-water mark, at most ATOLLD_TRIM_MIN more per arena. */
#define ATOLLD_MMAP_MIN (8 * 1024 * 1024)
#define ATOLLD_TRIM_MIN (64 * 1024 * 1024)

typedef struct options {
    char host[64];
    int port;
    const char *db;
    island_desc_t islands[SCHED_MAX_ISLANDS];
    char island_names[SCHED_MAX_ISLANDS][NAME_MAX_LEN];
    int nislands;
    const char *dispatch;
    const char *durability;             /* group (default), commit or none */
    int64_t lease_ms;
    int64_t max_body;
    int64_t threads;
    const char *web_dir;
    log_level_t log_level;
    int log_json;
    const char *admin_token, *worker_token, *read_token;
    const char *tls_cert, *tls_key;     /* PEM file paths; both or neither */
    int64_t drain_ms;                   /* SIGTERM: wait for running shards to report */
    int64_t max_conns;                  /* 0: derived from RLIMIT_NOFILE (http.h) */
    int64_t header_timeout_ms;          /* a request's header block, from accept */
    int allow_run;                      /* --allow-run: users' programs (DESIGN Part F) */
    int64_t sched_priority;             /* 0, or the scheduler thread's SCHED_FIFO priority */
    int64_t keep_jobs_s;                /* ended jobs deleted this long after their end; 0: kept */
} options_t;

static void usage(FILE *out)
{
    fprintf(out,
        "usage: atolld [options]\n"
        "  --listen HOST:PORT   address to serve the API and dashboard (ATOLL_LISTEN,\n"
        "                       default 127.0.0.1:8080; port 0 = any free port)\n"
        "  --db FILE            SQLite database file (ATOLL_DB, default atoll.db)\n"
        "  --island NAME=SHAPE  an island mesh, e.g. west=4x4; repeatable (ATOLL_ISLANDS,\n"
        "                       comma-separated, e.g. west=4x4,east=2x4)\n"
        "  --dispatch MODE      parallel (default) or sequential (ATOLL_DISPATCH)\n"
        "  --durability MODE    group (default: an accepted job is fsync'd before its\n"
        "                       201, concurrent submits share one fsync), commit (fsync\n"
        "                       in every commit) or none (ATOLL_DURABILITY)\n"
        "  --lease-ms N         worker heartbeat lease (ATOLL_LEASE_MS, default 5000)\n"
        "  --max-body BYTES     request body cap (ATOLL_MAX_BODY, default 1048576)\n"
        "  --threads N          HTTP thread pool size (ATOLL_HTTP_THREADS, default 8)\n"
        "  --web-dir DIR        dashboard files (ATOLL_WEB_DIR, default %s/web)\n"
        "  --log-level LEVEL    debug|info|warn|error (ATOLL_LOG_LEVEL, default info)\n"
        "  --log-json           JSON-lines logs (ATOLL_LOG_JSON=1)\n"
        "  --allow-run          accept computations that run users' own programs (\"run\",\n"
        "                       DESIGN Part F); off: they are 403 (ATOLL_ALLOW_RUN=1)\n"
        "  --admin-token TOKEN  require bearer tokens; this one may do anything, incl.\n"
        "                       POST /v1/tenants (ATOLL_ADMIN_TOKEN; >= 16 chars)\n"
        "  --worker-token TOKEN the workers' join token (ATOLL_WORKER_TOKEN)\n"
        "  --read-token TOKEN   read-only token, e.g. for the dashboard (ATOLL_READ_TOKEN)\n"
        "  --tls-cert FILE      serve HTTPS with this PEM certificate (ATOLL_TLS_CERT)\n"
        "  --tls-key FILE       and this PEM private key (ATOLL_TLS_KEY)\n"
        "  --drain-ms N         on SIGTERM, time running shards get to report\n"
        "                       (ATOLL_DRAIN_MS, default 5000)\n"
        "  --max-connections N  open HTTP connections at most (ATOLL_MAX_CONNECTIONS,\n"
        "                       default: the file-descriptor limit, raised to its hard\n"
        "                       limit, less 256)\n"
        "  --header-timeout-ms N  a request's headers must be complete within N ms of\n"
        "                       the connection (ATOLL_HEADER_TIMEOUT_MS, default 10000)\n"
        "  --sched-priority N   run the scheduler thread under SCHED_FIFO at priority N\n"
        "                       (1..99; needs CAP_SYS_NICE, else a warning), so that no\n"
        "                       other thread preempts a pass; 0 (default): the default\n"
        "                       policy (ATOLL_SCHED_PRIORITY)\n"
        "  --keep-jobs-s N      delete an ended job, with its results and events, N\n"
        "                       seconds after it ended (ATOLL_KEEP_JOBS_S; default 0:\n"
        "                       keep every job; e.g. 604800 keeps a week)\n"
        "  --help, --version\n", ATOLL_SOURCE_DIR);
}

static int fail_flag(const char *flag, const char *value, const char *why)
{
    fprintf(stderr, "atolld: bad %s '%s': %s (see --help)\n", flag, value, why);
    return -1;
}

static int parse_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        char why[96];
        snprintf(why, sizeof why, "must be an integer %lld..%lld", (long long)lo, (long long)hi);
        return fail_flag(flag, text, why);
    }
    *out = v;
    return 0;
}

static int parse_listen(options_t *o, const char *text)
{
    const char *colon = strrchr(text, ':');
    int64_t port;
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof o->host)
        return fail_flag("--listen", text, "expected HOST:PORT");
    if (parse_int("--listen port", colon + 1, 0, 65535, &port) != 0)
        return -1;
    memcpy(o->host, text, (size_t)(colon - text));
    o->host[colon - text] = '\0';
    if (strcmp(o->host, "localhost") == 0)
        snprintf(o->host, sizeof o->host, "127.0.0.1");
    o->port = (int)port;
    return 0;
}

static int parse_island(options_t *o, const char *text)
{
    const char *eq = strchr(text, '=');
    size_t nlen = eq ? (size_t)(eq - text) : 0;
    if (!eq || nlen == 0 || nlen >= NAME_MAX_LEN)
        return fail_flag("--island", text, "expected NAME=SHAPE, e.g. west=4x4");
    for (size_t i = 0; i < nlen; i++) {
        char c = text[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-'))
            return fail_flag("--island", text, "names use letters, digits, '_' and '-'");
    }
    if (o->nislands == SCHED_MAX_ISLANDS)
        return fail_flag("--island", text, "too many islands (at most 16)");
    island_desc_t *d = &o->islands[o->nislands];
    if (mesh_shape_parse(eq + 1, &d->shape) != 0 || shape_numel(&d->shape) > 4096)
        return fail_flag("--island", text, "SHAPE is 1 to 3 positive dims like 4x4, at most"
                                           " 4096 devices");
    memcpy(o->island_names[o->nislands], text, nlen);
    o->island_names[o->nislands][nlen] = '\0';
    for (int i = 0; i < o->nislands; i++)
        if (strcmp(o->island_names[i], o->island_names[o->nislands]) == 0)
            return fail_flag("--island", text, "island named twice");
    d->name = o->island_names[o->nislands];
    o->nislands++;
    return 0;
}

static int parse_islands_env(options_t *o, const char *list)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (parse_island(o, tok) != 0)
            return -1;
    return 0;
}

/* Applies one option (from the command line or the environment). */
static int apply(options_t *o, int opt, const char *arg)
{
    switch (opt) {
    case 'l': return parse_listen(o, arg);
    case 'd': o->db = arg; return 0;
    case 'i': return parse_island(o, arg);
    case 'D':
        if (strcmp(arg, "parallel") != 0 && strcmp(arg, "sequential") != 0)
            return fail_flag("--dispatch", arg, "must be parallel or sequential");
        o->dispatch = arg;
        return 0;
    case 'u': {
        store_durability_t m;
        if (store_durability_parse(arg, &m) != 0)
            return fail_flag("--durability", arg, "must be group, commit or none");
        o->durability = arg;
        return 0;
    }
    case 'L': return parse_int("--lease-ms", arg, 100, 3600000, &o->lease_ms);
    case 'b': return parse_int("--max-body", arg, 1024, 1 << 30, &o->max_body);
    case 't': return parse_int("--threads", arg, 1, 256, &o->threads);
    case 'w': o->web_dir = arg; return 0;
    case 'v':
        return log_level_parse(arg, &o->log_level) == 0
                   ? 0 : fail_flag("--log-level", arg, "must be debug, info, warn or error");
    case 'j': o->log_json = 1; return 0;
    case 'r': o->allow_run = 1; return 0;
    case 'A': o->admin_token = arg; return 0;
    case 'W': o->worker_token = arg; return 0;
    case 'R': o->read_token = arg; return 0;
    case 'C': o->tls_cert = arg; return 0;
    case 'K': o->tls_key = arg; return 0;
    case 'T': return parse_int("--drain-ms", arg, 0, 3600000, &o->drain_ms);
    case 'M': return parse_int("--max-connections", arg, 16, 1000000, &o->max_conns);
    case 'H': return parse_int("--header-timeout-ms", arg, 100, 600000, &o->header_timeout_ms);
    case 'P': return parse_int("--sched-priority", arg, 0, 99, &o->sched_priority);
    case 'k': return parse_int("--keep-jobs-s", arg, 0, 315360000, &o->keep_jobs_s);
    default: return -1;
    }
}

static int parse_env(options_t *o)
{
    static const struct { const char *env; int opt; } envs[] = {
        {"ATOLL_LISTEN", 'l'}, {"ATOLL_DB", 'd'}, {"ATOLL_DISPATCH", 'D'},
        {"ATOLL_LEASE_MS", 'L'}, {"ATOLL_MAX_BODY", 'b'}, {"ATOLL_HTTP_THREADS", 't'},
        {"ATOLL_WEB_DIR", 'w'}, {"ATOLL_LOG_LEVEL", 'v'}, {"ATOLL_ADMIN_TOKEN", 'A'},
        {"ATOLL_WORKER_TOKEN", 'W'}, {"ATOLL_READ_TOKEN", 'R'}, {"ATOLL_TLS_CERT", 'C'},
        {"ATOLL_TLS_KEY", 'K'}, {"ATOLL_DRAIN_MS", 'T'}, {"ATOLL_MAX_CONNECTIONS", 'M'},
        {"ATOLL_HEADER_TIMEOUT_MS", 'H'}, {"ATOLL_DURABILITY", 'u'},
        {"ATOLL_SCHED_PRIORITY", 'P'}, {"ATOLL_KEEP_JOBS_S", 'k'},
    };
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        const char *v = getenv(envs[i].env);
        if (v && *v && apply(o, envs[i].opt, v) != 0)
            return -1;
    }
    const char *j = getenv("ATOLL_LOG_JSON");
    if (j && strcmp(j, "1") == 0)
        o->log_json = 1;
    const char *ar = getenv("ATOLL_ALLOW_RUN");
    if (ar && strcmp(ar, "1") == 0)
        o->allow_run = 1;
    const char *isl = getenv("ATOLL_ISLANDS");
    return isl && *isl ? parse_islands_env(o, isl) : 0;
}

/* Returns 0 to run, 1 to exit 0 (help/version), -1 for bad flags. */
static int parse_args(options_t *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'}, {"db", required_argument, NULL, 'd'},
        {"island", required_argument, NULL, 'i'}, {"dispatch", required_argument, NULL, 'D'},
        {"lease-ms", required_argument, NULL, 'L'}, {"max-body", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 't'}, {"web-dir", required_argument, NULL, 'w'},
        {"log-level", required_argument, NULL, 'v'}, {"log-json", no_argument, NULL, 'j'},
        {"admin-token", required_argument, NULL, 'A'},
        {"worker-token", required_argument, NULL, 'W'},
        {"read-token", required_argument, NULL, 'R'}, {"tls-cert", required_argument, NULL, 'C'},
        {"tls-key", required_argument, NULL, 'K'}, {"drain-ms", required_argument, NULL, 'T'},
        {"max-connections", required_argument, NULL, 'M'},
        {"header-timeout-ms", required_argument, NULL, 'H'},
        {"durability", required_argument, NULL, 'u'},
        {"sched-priority", required_argument, NULL, 'P'},
        {"keep-jobs-s", required_argument, NULL, 'k'},
        {"allow-run", no_argument, NULL, 'r'},
        {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0}};
    snprintf(o->host, sizeof o->host, "127.0.0.1");
    o->port = 8080;
    o->db = "atoll.db";
    o->dispatch = "parallel";
    o->durability = "group";
    o->lease_ms = 5000;
    o->drain_ms = 5000;
    o->header_timeout_ms = HTTP_HEADER_TIMEOUT_MS_DEFAULT;
    o->max_body = 1 << 20;
    o->threads = 8;
    o->web_dir = ATOLL_SOURCE_DIR "/web";
    o->log_level = LOG_INFO;
    if (parse_env(o) != 0)
        return -1;
    int cli_islands = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        if (opt == 'h') {
            usage(stdout);
            return 1;
        }
        if (opt == 'V') {
            printf("atolld %s\n", ATOLL_VERSION);
            return 1;
        }
        if (opt == '?') {
            usage(stderr);
            return -1;
        }
        if (opt == 'i' && cli_islands++ == 0)
            o->nislands = 0;   /* the command line's islands replace ATOLL_ISLANDS */
        if (apply(o, opt, optarg) != 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "atolld: unexpected argument '%s' (see --help)\n", argv[optind]);
        return -1;
    }
    if (o->nislands == 0) {
        fprintf(stderr, "atolld: no island: give at least one --island NAME=SHAPE\n");
        return -1;
    }
    if (!o->tls_cert != !o->tls_key) {
        fprintf(stderr, "atolld: --tls-cert and --tls-key go together\n");
        return -1;
    }
    if (auth_setup(o->admin_token, o->worker_token, o->read_token) != 0) {
        fprintf(stderr, "atolld: tokens must be %d to %d characters\n", AUTH_MIN_TOKEN,
                AUTH_MAX_TOKEN);
        return -1;
    }
    if (!o->admin_token && (o->worker_token || o->read_token)) {
        fprintf(stderr, "atolld: --worker-token/--read-token need --admin-token (auth is on"
                        " only with an admin token)\n");
        return -1;
    }
    return 0;
}

/* Graceful stop: with admission stopped, keep serving so that host tasks
 * already running on workers can report, until none is left or
 * --drain-ms passed. What is still unreported is resumed by the next
 * atolld (recovery requeues it), so the wait is bounded, not required. */
static void drain(const options_t *o)
{
    store_t *st = store_thread();
    int64_t deadline = util_mono_us() + o->drain_ms * 1000, left = 0;
    while (st && (left = store_tasks_leased(st, o->lease_ms * 1000)) > 0 && util_mono_us() < deadline)
        usleep(50 * 1000);
    if (left > 0)
        log_warn("drain: %ld host task(s) still running after %ld ms; the next atolld resumes them",
                 (long)left, (long)o->drain_ms);
}

/* The store first: open and migrate it, then recovery, before the API and
 * the scheduler: whatever a previous atolld left allocated or running
 * starts a new attempt (see store_sched_recover), so nothing accepted is
 * lost or left hanging. 0 or -1 (said on stderr). */
static int open_store(const options_t *o)
{
    err_t e = {0};
    store_durability_t dur = STORE_DURABLE_GROUP;
    store_durability_parse(o->durability, &dur);    /* checked in apply() */
    store_sync_setup(o->db, dur);
    store_sync_hook(http_wake);     /* answers parked for their sync round go out */
    if (store_global_init(o->db, o->islands, o->nislands, &e) != 0) {
        fprintf(stderr, "atolld: %s\n", e.detail[0] ? e.detail : "cannot open the database");
        return -1;
    }
    store_t *rst = store_thread();
    int requeued = rst ? store_sched_recover(rst) : -1;
    if (requeued < 0) {
        fprintf(stderr, "atolld: cannot recover the jobs in %s\n", o->db);
        return -1;
    }
    if (requeued > 0)
        log_warn("recovery: %d allocated/running job(s) from before the restart requeued",
                 requeued);
    if (store_ckpt_start() != 0) {
        fprintf(stderr, "atolld: cannot start the checkpointer thread\n");
        return -1;
    }
    return 0;
}

/* The composition root: the scheduler thread on the store, the sampler,
 * then the HTTP server, its handlers wired to the scheduler through
 * api_cfg's hooks (server/ does not include scheduler/). On failure
 * whatever started is stopped again. 0 (listening port in *port) or -1. */
static int start_services(const options_t *o, int *port)
{
    api_cfg = (api_config_t){o->islands, o->nislands, o->lease_ms * 1000, o->web_dir,
                             o->dispatch, o->allow_run, sched_notify, sched_notify_freed,
                             sched_ever_fits, sched_metrics, sched_plan_offer};
    sched_config_t sc = {.islands = o->islands, .nislands = o->nislands,
                         .lease_us = o->lease_ms * 1000,
                         .sequential = strcmp(o->dispatch, "sequential") == 0,
                         .on_dispatch = http_wake, .rt_priority = (int)o->sched_priority};
    if (sched_start(&sc) != 0) {
        fprintf(stderr, "atolld: cannot start the scheduler thread\n");
        return -1;
    }
    /* The dashboard's watcher: utilization samples and live-update pushes. */
    sampler_config_t smp = {.interval_ms = 1000, .retain_s = 3600,
                            .keep_jobs_s = o->keep_jobs_s, .on_change = api_stream_changed,
                            .on_sample = api_stream_sampled};
    if (sampler_start(&smp) != 0) {
        sched_stop();
        fprintf(stderr, "atolld: cannot start the sampler thread\n");
        return -1;
    }
    http_config_t hc = {.host = o->host, .port = o->port, .max_body = (size_t)o->max_body,
                        .threads = (int)o->threads, .handler = api_route,
                        .gate = api_route_gate, .tls_cert = o->tls_cert, .tls_key = o->tls_key,
                        .max_conns = (unsigned)o->max_conns,
                        .header_timeout_ms = (int)o->header_timeout_ms,
                        .tick = api_worker_tick};
    if (http_start(&hc, port) != 0) {
        sampler_stop();
        sched_stop();
        fprintf(stderr, "atolld: cannot listen on %s:%d\n", o->host, o->port);
        return -1;
    }
    return 0;
}

/* The config log line and the ready line on stdout (scripts wait for it). */
static void say_ready(const options_t *o, int port)
{
    char islands[512] = "";
    for (int i = 0, off = 0; i < o->nislands && off < (int)sizeof islands; i++) {
        char sh[32];
        mesh_shape_format(&o->islands[i].shape, sh, sizeof sh);
        off += snprintf(islands + off, sizeof islands - (size_t)off, "%s%s=%s", i ? " " : "",
                        o->islands[i].name, sh);
    }
    const char *scheme = o->tls_cert ? "https" : "http";
    log_info("config: listen=%s:%d db=%s islands=[%s] dispatch=%s durability=%s lease_ms=%ld"
             " max_body=%ld threads=%ld web_dir=%s auth=%s tls=%s max_connections=%u"
             " header_timeout_ms=%ld sched_priority=%ld keep_jobs_s=%ld",
             o->host, port, o->db, islands, o->dispatch, o->durability, (long)o->lease_ms,
             (long)o->max_body, (long)o->threads, o->web_dir, auth_enabled() ? "tokens" : "off",
             o->tls_cert ? "on" : "off", http_max_conns(), (long)o->header_timeout_ms,
             (long)o->sched_priority, (long)o->keep_jobs_s);
    printf("atolld ready: %s://%s:%d (db %s, islands %s)\n", scheme, o->host, port, o->db,
           islands);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    options_t o;
    memset(&o, 0, sizeof o);
    int p = parse_args(&o, argc, argv);
    if (p != 0)
        return p > 0 ? 0 : 2;
    log_setup("atolld", o.log_level, o.log_json);
    util_malloc_keep(ATOLLD_MMAP_MIN, ATOLLD_TRIM_MIN);

    /* Signals are taken by sigwait() below; every thread inherits the mask. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int port = 0;
    if (open_store(&o) != 0 || start_services(&o, &port) != 0)
        return 1;
    say_ready(&o, port);

    int sig = 0;
    sigwait(&sigs, &sig);
    log_info("signal %d: stopping admission, then the HTTP server", sig);
    sched_stop();
    drain(&o);
    sampler_stop();
    api_stream_stop();   /* event streams end, so none is suspended at http_stop() */
    api_runs_stop();     /* and log follows */
    http_stop();
    store_reports_stop();
    store_sync_stop();
    store_ckpt_stop();
    store_thread_close();
    store_sync_close();
    log_info("stopped cleanly");
    return 0;
}
