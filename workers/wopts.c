/* wopts.c - see wopts.h.
 *
 * Table-driven: each option names its flag, environment variable and a
 * setter that validates the text. Environment values are applied first,
 * then argv, so the command line wins. Invariant: every value in a
 * wopts_t has passed its option's setter (defaults are valid as they
 * stand); the first bad value ends the parse with a message naming the
 * flag or variable. Ownership: nothing is allocated; strings point into
 * argv or the environment (wopts.h). */
#include "wopts.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dplane.h"

typedef int (*wopt_set_fn)(wopts_t *o, const char *v);

typedef struct wopt {
    const char *flag;           /* without leading "--" */
    const char *envname;
    wopt_set_fn set;            /* returns 0 or -1 (bad value) */
    const char *want;           /* what a good value looks like, for errors */
} wopt_t;

static int parse_int(const char *v, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end != '\0' || n < lo || n > hi)
        return -1;
    *out = (int)n;
    return 0;
}

static int set_controller(wopts_t *o, const char *v)
{
    size_t prefix = strncmp(v, "http://", 7) == 0 ? 7 : strncmp(v, "https://", 8) == 0 ? 8 : 0;
    /* A host must follow the scheme; the URL is pasted into request paths. */
    if (prefix == 0 || strlen(v) <= prefix || strlen(v) > 512)
        return -1;
    o->controller = v;
    return 0;
}

static int set_island(wopts_t *o, const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n >= 64)
        return -1;
    o->island = v;
    return 0;
}

static int set_devices(wopts_t *o, const char *v)
{
    return parse_int(v, 1, WOPTS_MAX_DEVICES, &o->devices);
}

static int set_backend(wopts_t *o, const char *v)
{
    if (strcmp(v, "cpu") != 0 && strcmp(v, "sim") != 0)
        return -1;
    o->backend = v;
    return 0;
}

static int set_data_listen(wopts_t *o, const char *v)
{
    char host[DPLANE_ADDR_MAX];
    int port;
    if (dplane_parse_addr(v, host, sizeof host, &port) != 0)
        return -1;
    o->data_listen = v;
    return 0;
}

static int set_data_advertise(wopts_t *o, const char *v)
{
    if (!*v || strlen(v) >= 48 || strchr(v, ':'))
        return -1;
    o->data_advertise = v;
    return 0;
}

static int set_poll_ms(wopts_t *o, const char *v)
{
    return parse_int(v, 0, 30000, &o->poll_ms);
}

static int set_peer_timeout_ms(wopts_t *o, const char *v)
{
    return parse_int(v, 1, 24 * 3600 * 1000, &o->peer_timeout_ms);
}

static int set_drain_ms(wopts_t *o, const char *v)
{
    return parse_int(v, 0, 3600 * 1000, &o->drain_ms);
}

static int set_store_cap_mb(wopts_t *o, const char *v)
{
    return parse_int(v, 1, 1024 * 1024, &o->store_cap_mb);
}

static int set_data_transport(wopts_t *o, const char *v)
{
    if (strcmp(v, "auto") == 0)
        o->data_transport = DPLANE_AUTO;
    else if (strcmp(v, "tcp") == 0)
        o->data_transport = DPLANE_TCP;
    else
        return -1;
    return 0;
}

static int set_ring_min_kb(wopts_t *o, const char *v)
{
    return parse_int(v, 0, 1024 * 1024, &o->ring_min_kb);
}

static int set_report_hold_ms(wopts_t *o, const char *v)
{
    return parse_int(v, 0, 3600 * 1000, &o->report_hold_ms);
}

static int set_spin_us(wopts_t *o, const char *v)
{
    return parse_int(v, 0, 1000 * 1000, &o->spin_us);
}

static int set_token(wopts_t *o, const char *v)
{
    if (strlen(v) < 16 || strlen(v) > 200 || strpbrk(v, " \r\n"))
        return -1;
    o->token = v;
    return 0;
}

static int set_ca_file(wopts_t *o, const char *v)
{
    if (!*v || strlen(v) > 4096)
        return -1;
    o->ca_file = v;
    return 0;
}

static int set_run_as(wopts_t *o, const char *v)
{
    if (!*v || strlen(v) > 64)
        return -1;
    o->run_as = v;
    return 0;
}

static int set_run_dir(wopts_t *o, const char *v)
{
    if (v[0] != '/' || strlen(v) > 200)
        return -1;
    o->run_dir = v;
    return 0;
}

/* A runtime name (crun, runc) or an absolute path to one: it becomes one
 * argv element of podman run, but a name with a space or a shell character
 * is a mistake, said now rather than when a job runs. */
static int set_container_runtime(wopts_t *o, const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > 200)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)v[i]) && !strchr("._-/", v[i]))
            return -1;
    o->container_runtime = v;
    return 0;
}

static int set_log_level(wopts_t *o, const char *v)
{
    return log_level_parse(v, &o->log_level);
}

static int set_log_json(wopts_t *o, const char *v)
{
    if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0)
        o->log_json = 1;
    else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0)
        o->log_json = 0;
    else
        return -1;
    return 0;
}

static const wopt_t wopt_table[] = {
    {"controller", "ATOLL_CONTROLLER", set_controller, "an http:// or https:// URL"},
    {"island", "ATOLL_ISLAND", set_island, "a name of 1 to 63 characters"},
    {"devices", "ATOLL_DEVICES", set_devices, "an integer from 1 to 4096"},
    {"backend", "ATOLL_BACKEND", set_backend, "cpu or sim"},
    {"data-listen", "ATOLL_DATA_LISTEN", set_data_listen, "HOST:PORT"},
    {"data-advertise", "ATOLL_DATA_ADVERTISE", set_data_advertise, "a host name or IPv4 address"},
    {"poll-ms", "ATOLL_POLL_MS", set_poll_ms, "an integer from 0 to 30000"},
    {"peer-timeout-ms", "ATOLL_PEER_TIMEOUT_MS", set_peer_timeout_ms, "a positive integer"},
    {"drain-ms", "ATOLL_DRAIN_MS", set_drain_ms, "an integer from 0 to 3600000"},
    {"store-cap-mb", "ATOLL_STORE_CAP_MB", set_store_cap_mb, "an integer from 1 to 1048576"},
    {"data-transport", "ATOLL_DATA_TRANSPORT", set_data_transport, "auto or tcp"},
    {"ring-min-kb", "ATOLL_RING_MIN_KB", set_ring_min_kb, "an integer from 0 to 1048576"},
    {"report-hold-ms", "ATOLL_REPORT_HOLD_MS", set_report_hold_ms,
     "an integer from 0 to 3600000"},
    {"spin-us", "ATOLL_SPIN_US", set_spin_us, "an integer from 0 to 1000000"},
    {"token", "ATOLL_TOKEN", set_token, "16 to 200 characters without spaces"},
    {"ca-file", "ATOLL_CA_FILE", set_ca_file, "a PEM file path"},
    {"run-as", "ATOLL_RUN_AS", set_run_as, "a user name or uid"},
    {"run-dir", "ATOLL_RUN_DIR", set_run_dir, "an absolute path of at most 200 characters"},
    {"container-runtime", "ATOLL_CONTAINER_RUNTIME", set_container_runtime,
     "a runtime name or path (letters, digits, . _ - /)"},
    {"log-level", "ATOLL_LOG_LEVEL", set_log_level, "debug, info, warn or error"},
    {"log-json", "ATOLL_LOG_JSON", set_log_json, "0 or 1"},
};
#define WOPT_COUNT (sizeof wopt_table / sizeof wopt_table[0])

const char *wopts_usage(void)
{
    return "usage: atoll-worker --controller URL --island NAME --devices N [options]\n"
           "\n"
           "Joins island NAME of the Atoll controller at URL with N devices and runs\n"
           "the shard tasks it is given. Every option may also come from the\n"
           "environment variable shown (the command line wins).\n"
           "\n"
           "  --controller URL        ATOLL_CONTROLLER   controller, e.g. http://127.0.0.1:8080\n"
           "  --island NAME           ATOLL_ISLAND       island to join\n"
           "  --devices N             ATOLL_DEVICES      devices this worker owns (1..4096)\n"
           "  --backend cpu|sim       ATOLL_BACKEND      default cpu; sim moves the same data and\n"
           "                                             (v0) computes every op like cpu, except\n"
           "                                             that `compute` sleeps instead of spinning\n"
           "  --data-listen HOST:PORT ATOLL_DATA_LISTEN  data-plane listener (default 127.0.0.1:0)\n"
           "  --data-advertise HOST   ATOLL_DATA_ADVERTISE host peers dial (default: bound host)\n"
           "  --poll-ms MS            ATOLL_POLL_MS      long-poll wait (default 1000, max 30000)\n"
           "  --peer-timeout-ms MS    ATOLL_PEER_TIMEOUT_MS  wait for a peer before failing (60000)\n"
           "  --drain-ms MS           ATOLL_DRAIN_MS     on SIGTERM, time left to running tasks (10000)\n"
           "  --store-cap-mb MB       ATOLL_STORE_CAP_MB object store cap (default 1024); a full store\n"
           "                                             makes tasks wait, then fail, never crash\n"
           "  --data-transport auto|tcp ATOLL_DATA_TRANSPORT auto (default): UCX picks per peer\n"
           "                                             (shared memory on this host, TCP or RDMA\n"
           "                                             to others; UCX_TLS limits it); tcp: UCX's\n"
           "                                             TCP transport only\n"
           "  --ring-min-kb KB        ATOLL_RING_MIN_KB  an all_reduce of >= KB KiB per shard sums in\n"
           "                                             ring order, chunk c from member c on\n"
           "                                             (default 64; 0: always position order)\n"
           "  --report-hold-ms MS     ATOLL_REPORT_HOLD_MS  longest a succeeded report waits while\n"
           "                                             more of its job runs here, to leave with\n"
           "                                             the next ones in one request (default 10)\n"
           "  --spin-us US            ATOLL_SPIN_US      how long a runner waiting for a peer's\n"
           "                                             message polls before it sleeps (default\n"
           "                                             200 on hosts under 8 CPUs, 2000 on others;\n"
           "                                             0: sleep at once)\n"
           "  --token TOKEN           ATOLL_TOKEN        bearer token when atolld requires tokens\n"
           "  --ca-file FILE          ATOLL_CA_FILE      CA to trust for an https:// controller\n"
           "  --run-as USER           ATOLL_RUN_AS       user that runs users' programs (\"run\"\n"
           "                                             computations); as root, required (give\n"
           "                                             root to allow root)\n"
           "  --run-dir DIR           ATOLL_RUN_DIR      their working directories (default\n"
           "                                             $TMPDIR/atoll-run)\n"
           "  --container-runtime RT  ATOLL_CONTAINER_RUNTIME  podman's OCI runtime for programs\n"
           "                                             run in an image (run.image), e.g. runc\n"
           "                                             (default: podman's own choice)\n"
           "  --log-level LEVEL       ATOLL_LOG_LEVEL    debug|info|warn|error (default info)\n"
           "  --log-json 0|1          ATOLL_LOG_JSON     log JSON lines to stderr\n"
           "  --help, --version\n";
}

static const wopt_t *wopt_find(const char *name, size_t len)
{
    for (size_t i = 0; i < WOPT_COUNT; i++)
        if (strlen(wopt_table[i].flag) == len && strncmp(wopt_table[i].flag, name, len) == 0)
            return &wopt_table[i];
    return NULL;
}

static void wopts_defaults(wopts_t *o)
{
    memset(o, 0, sizeof *o);
    o->backend = "cpu";
    o->data_listen = "127.0.0.1:0";
    o->poll_ms = 1000;
    o->peer_timeout_ms = 60000;
    o->drain_ms = 10000;
    o->store_cap_mb = 1024;
    o->data_transport = DPLANE_AUTO;
    o->ring_min_kb = 64;
    o->report_hold_ms = 10;
    o->spin_us = -1;
    o->log_level = LOG_INFO;
}

static int apply_env(const char *(*env)(const char *), wopts_t *o, char *err, size_t errlen)
{
    for (size_t i = 0; i < WOPT_COUNT; i++) {
        const char *v = env(wopt_table[i].envname);
        if (v && wopt_table[i].set(o, v) != 0) {
            snprintf(err, errlen, "bad %s '%s': want %s", wopt_table[i].envname, v,
                     wopt_table[i].want);
            return -1;
        }
    }
    return 0;
}

/* Handles argv[*i] (and its value); advances *i. Returns 0 or -1. */
static int apply_arg(int argc, char **argv, int *i, wopts_t *o, char *err, size_t errlen)
{
    const char *a = argv[*i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)
        return o->help = 1, 0;
    if (strcmp(a, "--version") == 0)
        return o->version = 1, 0;
    if (strncmp(a, "--", 2) != 0) {
        snprintf(err, errlen, "unexpected argument '%s' (see --help)", a);
        return -1;
    }
    const char *name = a + 2, *eq = strchr(name, '=');
    const wopt_t *w = wopt_find(name, eq ? (size_t)(eq - name) : strlen(name));
    if (!w) {
        snprintf(err, errlen, "unknown option '%s' (see --help)", a);
        return -1;
    }
    const char *v = eq ? eq + 1 : NULL;
    if (!v) {
        if (*i + 1 >= argc) {
            snprintf(err, errlen, "option --%s needs a value: %s", w->flag, w->want);
            return -1;
        }
        v = argv[++*i];
    }
    if (w->set(o, v) != 0) {
        snprintf(err, errlen, "bad value '%s' for --%s: want %s", v, w->flag, w->want);
        return -1;
    }
    return 0;
}

static const char *real_getenv(const char *name)
{
    return getenv(name);
}

int wopts_parse(int argc, char **argv, const char *(*env)(const char *name), wopts_t *o,
                char *err, size_t errlen)
{
    wopts_defaults(o);
    if (apply_env(env ? env : real_getenv, o, err, errlen) != 0)
        return -1;
    for (int i = 1; i < argc; i++)
        if (apply_arg(argc, argv, &i, o, err, errlen) != 0)
            return -1;
    if (o->help || o->version)
        return 0;
    const char *missing = !o->controller ? "--controller" : !o->island ? "--island"
                        : !o->devices    ? "--devices"    : NULL;
    if (missing) {
        snprintf(err, errlen, "missing required option %s (see --help)", missing);
        return -1;
    }
    return 0;
}
