/* test_cli.c - the `atoll` client against a real cluster: atolld with auth
 * on (admin and worker tokens), island west=2x4 covered by two workers with
 * a 32 MiB object store cap (so a job can fail), users' programs allowed. Each check runs the built
 * binary (hx_bin_dir()/atoll) as a child with ATOLL_URL set, and looks at
 * its stdout, stderr and exit code: 0 succeeded, 1 failed, 2 cancelled,
 * 3 usage/file/transport, 4 refused by the server. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"

#define ADMIN_TOKEN "cli-admin-token-0123456789"
#define WORKER_TOKEN "cli-worker-token-0123456789"
#define CLI_TIMEOUT_MS 60000

/* A finished child: exit code (-1 when it did not exit), stdout, stderr. */
typedef struct cli_out {
    int code;
    char *out;                  /* owned, NUL-terminated */
    char *err;
} cli_out_t;

static void cli_out_clear(cli_out_t *o)
{
    free(o->out);
    free(o->err);
    memset(o, 0, sizeof *o);
}

/* Reads fd to EOF (or the deadline) into a malloc'd string; NULL on OOM. */
static char *read_to_eof(int fd, int64_t deadline)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    while (buf && hx_now_ms() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        if (len + 1025 > cap) {
            char *grown = realloc(buf, cap *= 2);
            if (!grown)
                break;
            buf = grown;
        }
        ssize_t n = read(fd, buf + len, 1024);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    if (buf)
        buf[len] = '\0';
    return buf;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *text = calloc(1, 65536);
    if (f && text)
        text[fread(text, 1, 65535, f)] = '\0';
    if (f)
        fclose(f);
    return text;
}

/* Starts `atoll` with argv (NULL-terminated, without argv[0]); token NULL
 * means no ATOLL_TOKEN. p->out_fd is its stdout. */
static void cli_start(hx_proc_t *p, const char *token, const char *const *args)
{
    char bin[HX_PATH_MAX];
    char *argv[24] = {bin};
    int n = 1;
    snprintf(bin, sizeof bin, "%s/atoll", hx_bin_dir());
    for (; args[n - 1] && n < 23; n++)
        argv[n] = (char *)args[n - 1];
    argv[n] = NULL;
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "atoll");
    snprintf(p->log_path, sizeof p->log_path, "%s/cli.err", itest_cluster.dir);
    setenv("ATOLL_URL", itest_cluster.url, 1);
    if (token)
        setenv("ATOLL_TOKEN", token, 1);
    else
        unsetenv("ATOLL_TOKEN");
    T_CHECK(hx_proc_spawn(p, argv, 0) == 0, "cannot start %s", bin);
}

/* Collects the rest of a started child's output and its exit code. */
static cli_out_t cli_finish(hx_proc_t *p)
{
    cli_out_t o = {.code = -1};
    o.out = read_to_eof(p->out_fd, hx_now_ms() + CLI_TIMEOUT_MS);
    close(p->out_fd);
    p->out_fd = -1;
    int st = hx_proc_stop(p, 0, 5000);
    if (st >= 0 && WIFEXITED(st))
        o.code = WEXITSTATUS(st);
    o.err = slurp(p->log_path);
    T_CHECK(o.out && o.err, "out of memory");
    fprintf(stderr, "atoll exit %d\n--stdout--\n%s--stderr--\n%s", o.code, o.out, o.err);
    return o;
}

/* Runs atoll with the admin token (or `token`) to completion. */
#define CLI_RUN_T(token, ...)                                                            \
    cli_run((token), (const char *const[]){__VA_ARGS__, NULL})
#define CLI_RUN(...) CLI_RUN_T(ADMIN_TOKEN, __VA_ARGS__)

static cli_out_t cli_run(const char *token, const char *const *args)
{
    hx_proc_t p;
    cli_start(&p, token, args);
    return cli_finish(&p);
}

/* Writes a single-quoted JSON document to DIR/name; returns the path
 * (static buffer, valid until the next call). */
static const char *job_file(const char *name, const char *doc_q)
{
    static char path[HX_PATH_MAX + 64];
    char *doc = hx_text_q(doc_q);
    snprintf(path, sizeof path, "%s/%s", itest_cluster.dir, name);
    FILE *f = fopen(path, "w");
    T_CHECK(doc && f, "cannot write %s", path);
    fputs(doc, f);
    fclose(f);
    free(doc);
    return path;
}

#define OK_JOB                                                                           \
    "{'name': 'cli-ok', 'slices': {'a': {'shape': [2, 2]}}, 'computations': [{"          \
    " 'name': 'p', 'slice': 'a', 'ops': ["                                               \
    "  {'op': 'shard_index', 'out': 'i'}, {'op': 'fill', 'out': 'x', 'shape': [4], 'value': 1.0}," \
    "  {'op': 'mul', 'out': 'y', 'args': ['x', 'i']},"                                   \
    "  {'op': 'all_reduce', 'out': 'z', 'args': ['y'], 'reduce': 'sum'}],"               \
    " 'outputs': ['z']}]}"
/* 16 Mi floats = 64 MiB, past the workers' 32 MiB store cap. */
#define FAIL_JOB                                                                         \
    "{'name': 'cli-fail', 'slices': {'a': {'shape': [2]}}, 'computations': [{"           \
    " 'name': 'p', 'slice': 'a', 'ops': ["                                               \
    "  {'op': 'fill', 'out': 'x', 'shape': [16777216], 'value': 1.0}], 'outputs': ['x']}]}"
/* A global computation (DESIGN Part C): iota split over 2 shards, doubled. */
#define GLOBAL_JOB                                                                       \
    "{'name': 'cli-global', 'slices': {'a': {'shape': [2]}}, 'computations': [{"         \
    " 'name': 'g', 'slice': 'a', 'global': true, 'ops': ["                               \
    "  {'op': 'iota', 'out': 'x', 'shape': [8], 'sharding': ['x']},"                      \
    "  {'op': 'scale', 'out': 'y', 'args': ['x'], 'factor': 1.0}], 'outputs': ['y']}]}"
/* Holds a [2,2] slice for up to 60 s (until cancelled). */
#define LONG_JOB                                                                         \
    "{'name': 'cli-long', 'slices': {'a': {'shape': [2, 2]}}, 'computations': [{"        \
    " 'name': 'p', 'slice': 'a', 'ops': [{'op': 'compute', 'out': 'b', 'us': 10000000},"  \
    "  {'op': 'compute', 'out': 'c', 'us': 10000000}, {'op': 'compute', 'out': 'd', 'us': 10000000},"\
    "  {'op': 'compute', 'out': 'e', 'us': 10000000}, {'op': 'compute', 'out': 'f', 'us': 10000000},"\
    "  {'op': 'compute', 'out': 'g', 'us': 10000000}]}]}"

static long long first_line_id(const char *out)
{
    return out ? strtoll(out, NULL, 10) : 0;
}

static int group_setup(void **state)
{
    (void)state;
    static const char *const islands[] = {"west=2x4"};
    static const char *const extra[] = {"--admin-token", ADMIN_TOKEN, "--worker-token",
                                        WORKER_TOKEN, "--allow-run", NULL};
    static const char *const wextra[] = {"--token", WORKER_TOKEN, NULL};
    static const char *const wroot[] = {"--token", WORKER_TOKEN, "--run-as", "nobody", NULL};
    setenv("ATOLL_STORE_CAP_MB", "32", 1);      /* workers inherit it */
    if (hx_init() != 0 || hx_cluster_start_args(&itest_cluster, islands, 1, extra) != 0)
        return -1;
    for (int i = 0; i < 2; i++)
        if (hx_worker_start_args(&itest_cluster, "west", 4, geteuid() == 0 ? wroot : wextra,
                                 15000, 0) != 0)
            goto fail;
    if (hx_client_init(&itest_client, itest_cluster.url) != 0 ||
        hx_client_set_auth(&itest_client, ADMIN_TOKEN, NULL) != 0)
        goto fail;
    return 0;
fail:
    hx_cluster_stop(&itest_cluster);
    return -1;
}

/* ---- tests ---- */

/* Waits until job id is past queued and allocated (running, unless it
 * ended). */
static void wait_running(long long id)
{
    static const char *const before[] = {"queued", "allocated"};
    for (int i = 0; i < 2; i++) {
        json_t *job = NULL;
        int rc = hx_job_wait_leave(&itest_client, id, before[i], ITEST_JOB_TIMEOUT_MS,
                                   ITEST_POLL_MS, &job);
        json_decref(job);
        T_CHECK(rc == 0, "job %lld still %s", id, before[i]);
    }
}

static void test_submit_wait_succeeds(void **state)
{
    (void)state;
    cli_out_t o = CLI_RUN("submit", job_file("ok.json", OK_JOB), "--wait");
    long long id = first_line_id(o.out);
    int ok = o.code == 0 && id > 0 && strstr(o.out, "succeeded") != NULL;
    cli_out_clear(&o);
    T_CHECK(ok, "submit --wait of a good job: want exit 0, the id, 'succeeded'");

    char ids[32];
    snprintf(ids, sizeof ids, "%lld", id);
    o = CLI_RUN("result", ids, "--json");
    json_t *res = o.code == 0 ? json_loads(o.out, 0, NULL) : NULL;
    cli_out_clear(&o);
    T_CHECK(res != NULL, "result --json: want exit 0 and JSON on stdout");
    int right = 1;
    for (int k = 0; k < 4; k++) {
        const json_t *vals = json_object_get(hx_result_shard(res, "p.z", k), "values");
        right &= json_array_size(vals) == 4;
        for (size_t i = 0; i < json_array_size(vals); i++)
            right &= fabs(json_number_value(json_array_get(vals, i)) - 6.0) < 1e-6;
    }
    json_decref(res);
    T_CHECK(right, "result --json: p.z is not 6 everywhere on 4 shards");

    o = CLI_RUN("result", ids);
    ok = o.code == 0 && strstr(o.out, "p.z  (4 shards)") && strstr(o.out, "sum 24");
    cli_out_clear(&o);
    T_CHECK(ok, "result: want 'p.z  (4 shards)' and 'sum 24'");
    o = CLI_RUN("show", ids);
    ok = o.code == 0 && strstr(o.out, "succeeded") && strstr(o.out, "events:") &&
         strstr(o.out, "west") && strstr(o.out, "4/4");
    cli_out_clear(&o);
    T_CHECK(ok, "show: want state, island, shards 4/4 and events");
}

/* atoll result --global: a global computation's output assembled
 * (?view=global) as one tensor. */
static void test_result_global(void **state)
{
    (void)state;
    cli_out_t o = CLI_RUN("submit", "--wait", job_file("global.json", GLOBAL_JOB));
    long long id = first_line_id(o.out);
    int ok = o.code == 0 && id > 0;
    cli_out_clear(&o);
    T_CHECK(ok, "submit --wait of a global job: want exit 0 and the id");
    char ids[32];
    snprintf(ids, sizeof ids, "%lld", id);
    o = CLI_RUN("result", ids, "--global");
    ok = o.code == 0 && o.out && strstr(o.out, "g.y  global  shape [8]  sum 28") &&
         strstr(o.out, "values 0 1 2 3 4 5 6 7");
    cli_out_clear(&o);
    T_CHECK(ok, "result --global: want 'g.y  global  shape [8]  sum 28' and the 8 values");
}

static void test_submit_wait_fails(void **state)
{
    (void)state;
    cli_out_t o = CLI_RUN("submit", "--wait", job_file("fail.json", FAIL_JOB));
    int ok = o.code == 1 && strstr(o.out, "failed") && strstr(o.out, "store cap");
    cli_out_clear(&o);
    T_CHECK(ok, "submit --wait of a failing job: want exit 1 and the error");
}

/* --wait on a job cancelled meanwhile exits 2; atoll cancel of a running
 * job cancels it; jobs --state lists by state. */
static void test_cancel(void **state)
{
    (void)state;
    hx_proc_t p;
    char line[64], ids[32];
    cli_start(&p, ADMIN_TOKEN,
              (const char *const[]){"submit", job_file("long.json", LONG_JOB), "--wait", NULL});
    T_CHECK(hx_proc_read_line(&p, line, sizeof line, CLI_TIMEOUT_MS) == 0, "no job id line");
    long long id = first_line_id(line);
    T_CHECK(id > 0, "first line is not a job id: %s", line);
    snprintf(ids, sizeof ids, "%lld", id);
    wait_running(id);
    cli_out_t o = CLI_RUN("jobs", "--state", "running");
    int listed_running = o.code == 0 && strstr(o.out, "cli-long") && strstr(o.out, "a:west[2x2]");
    cli_out_clear(&o);
    o = CLI_RUN("jobs", "--state", "queued");
    int listed_queued = strstr(o.out, "cli-long") != NULL;
    cli_out_clear(&o);
    o = CLI_RUN("cancel", ids);
    int cancelled = o.code == 0 && strstr(o.out, "cancelled");
    cli_out_clear(&o);
    cli_out_t w = cli_finish(&p);
    int wait_code = w.code;
    cli_out_clear(&w);
    T_CHECK(listed_running, "jobs --state running: the running job is missing");
    T_CHECK(!listed_queued, "jobs --state queued lists a job that left the queue");
    T_CHECK(cancelled, "atoll cancel: want exit 0 and 'cancelled'");
    T_CHECK(wait_code == 2, "submit --wait of a cancelled job exited %d, want 2", wait_code);
    o = CLI_RUN("jobs", "--state", "cancelled", "--limit", "5");
    int listed = o.code == 0 && strstr(o.out, ids) && strstr(o.out, "cli-long") &&
                 !strstr(o.out, "cli-ok");
    cli_out_clear(&o);
    T_CHECK(listed, "jobs --state cancelled: want the cancelled job only");
    o = CLI_RUN("cancel", ids);
    int refused = o.code == 4 && strstr(o.err, "409");
    cli_out_clear(&o);
    T_CHECK(refused, "cancelling a cancelled job: want exit 4 and the server's 409");
}

/* Counts the mesh rows of island west (2x4) in `atoll islands` output:
 * lines of 4 cells ("A A . . "), and the cells held by a job (letters). */
static void count_mesh(const char *out, int *rows, int *held)
{
    const char *west = strstr(out, "west [2x4]");
    *rows = *held = 0;
    if (!west)
        return;
    const char *line = strchr(west, '\n');
    while (line && strncmp(line + 1, "  ", 2) == 0) {
        const char *c = line + 3;
        int cells = 0;
        for (; cells < 4 && c[0] && c[0] != '\n' && c[1] == ' '; c += 2, cells++)
            *held += c[0] >= 'A' && c[0] <= 'Z';
        *rows += cells == 4;
        line = strchr(line + 1, '\n');
    }
}

static void test_islands_and_top(void **state)
{
    (void)state;
    char want[48];
    int64_t id = itest_submit(LONG_JOB);
    wait_running(id);
    cli_out_t o = CLI_RUN("islands");
    int rows, held;
    count_mesh(o.out, &rows, &held);
    snprintf(want, sizeof want, "A job %lld", (long long)id);
    int legend = o.code == 0 && strstr(o.out, want) && strstr(o.out, "legend:") &&
                 !strchr(o.out, '\033');
    cli_out_clear(&o);
    T_CHECK(rows == 2, "islands: west [2x4] drawn with %d mesh rows, want 2", rows);
    T_CHECK(held == 4, "islands: %d cells show the job's letter, want 4", held);
    T_CHECK(legend, "islands: want a legend naming '%s' and no colour in a pipe", want);
    /* Not a terminal: one frame, exit 0. */
    o = CLI_RUN("top");
    count_mesh(o.out, &rows, &held);
    int frame = o.code == 0 && strstr(o.out, "atoll top") && strstr(o.out, "1 live job(s)") &&
                strstr(o.out, "cli-long") && rows == 2 && held == 4;
    cli_out_clear(&o);
    T_CHECK(frame, "top: want one frame with the mesh and the live job, exit 0");
    itest_cancel_leftovers(NULL);
}

static void test_workers(void **state)
{
    (void)state;
    cli_out_t o = CLI_RUN("workers");
    int rows = 0;
    for (const char *l = o.out; l && (l = strstr(l, " west ")); l++)
        rows += strncmp(l + 12, "0-3 ", 4) == 0 || strncmp(l + 12, "4-7 ", 4) == 0;
    int ok = o.code == 0 && strstr(o.out, "HEARTBEAT") && strstr(o.out, "live");
    cli_out_clear(&o);
    T_CHECK(ok && rows == 2, "workers: want a table with the 2 live workers (got %d)", rows);
}

static void test_bad_input(void **state)
{
    (void)state;
    cli_out_t o = CLI_RUN("submit", "/nonexistent/job.json");
    int ok = o.code == 3 && strstr(o.err, "cannot open /nonexistent/job.json");
    cli_out_clear(&o);
    T_CHECK(ok, "missing file: want exit 3 naming the file");
    o = CLI_RUN("submit", job_file("notjson.json", "{'name': "));
    ok = o.code == 3 && strstr(o.err, "is not JSON: line 1");
    cli_out_clear(&o);
    T_CHECK(ok, "non-JSON file: want exit 3 with line and column");
    o = CLI_RUN("submit", job_file("badop.json",
                                   "{'slices': {'a': {'shape': [2]}}, 'computations': [{'name':"
                                   " 'p', 'slice': 'a', 'ops': [{'op': 'frobnicate', 'out': 'x'}]}]}"));
    ok = o.code == 4 && strstr(o.err, "400") && strstr(o.err, "frobnicate") &&
         strstr(o.err, "(field: computations[0].ops[0]");
    cli_out_clear(&o);
    T_CHECK(ok, "unknown op: want exit 4 with the server's detail and field");
    o = CLI_RUN("show", "abc");
    ok = o.code == 3 && strstr(o.err, "expected one job ID");
    cli_out_clear(&o);
    T_CHECK(ok, "show abc: want a usage error, exit 3");
    o = CLI_RUN("frobnicate");
    ok = o.code == 3 && strstr(o.err, "unknown command");
    cli_out_clear(&o);
    T_CHECK(ok, "unknown command: want exit 3");
    o = CLI_RUN("show", "999999");
    ok = o.code == 4 && strstr(o.err, "404");
    cli_out_clear(&o);
    T_CHECK(ok, "show of an unknown job: want exit 4 and the 404");
}

static void test_auth(void **state)
{
    (void)state;
    cli_out_t o = CLI_RUN_T(NULL, "jobs");
    int ok = o.code == 4 && strstr(o.err, "401") && strstr(o.err, "Authorization");
    cli_out_clear(&o);
    T_CHECK(ok, "no token: want exit 4 with the 401 and its field");
    o = CLI_RUN_T("not-the-token-at-all", "islands");
    ok = o.code == 4 && strstr(o.err, "401");
    cli_out_clear(&o);
    T_CHECK(ok, "wrong token: want exit 4 with the 401");
    o = CLI_RUN_T(NULL, "--token", ADMIN_TOKEN, "jobs", "--limit", "3");
    ok = o.code == 0 && strstr(o.out, "PROGRESS");
    cli_out_clear(&o);
    T_CHECK(ok, "--token: want the jobs table, exit 0");
    o = CLI_RUN_T(NULL, "--version");
    ok = o.code == 0 && strncmp(o.out, "atoll ", 6) == 0;
    cli_out_clear(&o);
    T_CHECK(ok, "--version: want 'atoll VERSION', exit 0");
}

/* Two processes: each prints a line, waits for the test's go file, then
 * writes to stderr and exits. */
#define RUN_JOB                                                                          \
    "{'name': 'cli-run', 'slices': {'a': {'shape': [2]}}, 'computations': [{"             \
    " 'name': 'r', 'slice': 'a', 'run': {'command': ['/bin/sh', 'main.sh'], 'files': {"   \
    "  'main.sh': 'echo started $RANK\\nwhile [ ! -e %s ]; do sleep 0.02; done\\n"       \
    "echo finished $RANK >&2\\n'}}}]}"

/* atoll logs: -f shows a process's output live and ends with it; plain
 * logs pick the process; show lists the processes; bad names are refused. */
static void test_logs(void **state)
{
    (void)state;
    char go[HX_PATH_MAX], doc[1024], ids[32], line[128];
    /* in /tmp: the processes run as nobody, who cannot enter the test's dir */
    snprintf(go, sizeof go, "/tmp/atoll-cli-go-%d", (int)getpid());
    unlink(go);
    snprintf(doc, sizeof doc, RUN_JOB, go);
    cli_out_t o = CLI_RUN("submit", job_file("run.json", doc));
    long long id = first_line_id(o.out);
    cli_out_clear(&o);
    T_CHECK(id > 0, "submit of a run job printed no id");
    snprintf(ids, sizeof ids, "%lld", id);
    hx_proc_t p;        /* follows before the process has started: it waits */
    cli_start(&p, ADMIN_TOKEN, (const char *const[]){"logs", ids, "--process", "1", "-f", NULL});
    int live = hx_proc_read_line(&p, line, sizeof line, CLI_TIMEOUT_MS) == 0 &&
               strstr(line, "started 1") != NULL;
    FILE *f = fopen(go, "w");
    T_CHECK(f != NULL, "cannot create %s", go);
    fclose(f);
    cli_out_t w = cli_finish(&p);
    int ended = w.code == 0 && strstr(w.out, "finished 1") && !strstr(w.out, "started 0");
    cli_out_clear(&w);
    T_CHECK(live, "logs -f did not show the running process's first line: '%s'", line);
    T_CHECK(ended, "logs -f: want the rest of process 1's output and exit 0 when it ends");
    /* Removed only when the job ended: process 0 may not have seen it yet
     * when process 1's follow ends (it then waited for ever, under load). */
    json_decref(itest_wait_state(id, "succeeded"));
    unlink(go);
    o = CLI_RUN("logs", ids);
    int plain = o.code == 0 && strstr(o.out, "started 0") && strstr(o.out, "finished 0");
    cli_out_clear(&o);
    T_CHECK(plain, "atoll logs ID: want process 0's stdout and stderr");
    o = CLI_RUN("show", ids);
    int shown = o.code == 0 && strstr(o.out, "processes:") && strstr(o.out, "exited 0");
    cli_out_clear(&o);
    T_CHECK(shown, "atoll show of a run job: want its processes, exited 0");
    o = CLI_RUN("logs", ids, "--computation", "no such");
    int refused = o.code == 4 && strstr(o.err, "404") && strstr(o.err, "computation");
    cli_out_clear(&o);
    T_CHECK(refused, "logs of an unknown computation: want exit 4 with the 404");
    o = CLI_RUN("logs", ids, "--process", "-1");
    refused = o.code == 3;
    cli_out_clear(&o);
    T_CHECK(refused, "logs --process -1: want a usage error (exit 3)");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_submit_wait_succeeds, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_result_global, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_submit_wait_fails, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_cancel, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_islands_and_top, itest_cancel_leftovers),
        cmocka_unit_test_teardown(test_logs, itest_cancel_leftovers),
        cmocka_unit_test(test_workers),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_auth),
    };
    return cmocka_run_group_tests(tests, group_setup, itest_group_teardown);
}
