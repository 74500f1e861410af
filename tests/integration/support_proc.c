/* support_proc.c - child processes of the harness: atolld and workers.
 *
 * Invariant: every pid > 0 stored in proc_table is a live or unreaped child
 * of ours; hx_proc_reap() clears its entry. The atexit and fatal-signal
 * handlers SIGKILL whatever is still listed, so a crashing or aborted test
 * never leaves a cluster behind. */
#include "support_harness.h"

#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROC_TABLE_MAX 128
#define READY_TIMEOUT_MS 15000
#define STOP_GRACE_MS 5000

/* Written from the main thread, read by signal handlers: sig_atomic_t-sized
 * pid slots are enough because a handler only calls kill() on them. */
static volatile pid_t proc_table[PROC_TABLE_MAX];

static void proc_table_add(pid_t pid)
{
    for (int i = 0; i < PROC_TABLE_MAX; i++) {
        if (proc_table[i] == 0) {
            proc_table[i] = pid;
            return;
        }
    }
    /* Table full: the child still dies with us through PDEATHSIG. */
}

static void proc_table_remove(pid_t pid)
{
    for (int i = 0; i < PROC_TABLE_MAX; i++)
        if (proc_table[i] == pid)
            proc_table[i] = 0;
}

static void proc_kill_all(void)
{
    for (int i = 0; i < PROC_TABLE_MAX; i++)
        if (proc_table[i] > 0)
            kill(proc_table[i], SIGKILL);
}

/* The users' programs' run directory of this test process's workers
 * (ATOLL_RUN_DIR, inherited), so that hx_job_processes() counts only
 * programs of its own clusters: two test programs running at once both
 * have a job 2. */
static char proc_run_dir[64];

static void proc_atexit(void)
{
    for (int i = 0; i < PROC_TABLE_MAX; i++) {
        pid_t pid = proc_table[i];
        if (pid > 0) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            proc_table[i] = 0;
        }
    }
    if (proc_run_dir[0])
        rmdir(proc_run_dir);        /* the workers made it; empty when they cleaned up */
}

/* Async-signal-safe: kill() only, then die by the same signal. */
static void proc_on_fatal(int sig)
{
    proc_kill_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

int hx_init(void)
{
    static int done;
    if (done)
        return 0;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "harness: curl_global_init failed\n");
        return -1;
    }
    atexit(proc_atexit);
    if (!getenv("ATOLL_RUN_DIR")) {
        snprintf(proc_run_dir, sizeof proc_run_dir, "/tmp/atoll-run-h%d", (int)getpid());
        setenv("ATOLL_RUN_DIR", proc_run_dir, 1);
    }
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGSEGV, SIGABRT, SIGBUS, SIGFPE};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], proc_on_fatal);
    /* A child closing its stdout pipe must not kill us. */
    signal(SIGPIPE, SIG_IGN);
    done = 1;
    return 0;
}

static const char *proc_bin_dir(void)
{
    const char *d = getenv("ATOLL_BIN_DIR");
    return d && *d ? d : "build/bin";
}

/* Child side of hx_proc_spawn: never returns. */
static void proc_child(pid_t parent, int out_w, int log_fd, char *const argv[])
{
    /* Die with the test even if it is SIGKILLed (the backstop). */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    signal(SIGPIPE, SIG_DFL);
    if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(log_fd, STDERR_FILENO) < 0)
        _exit(127);
    execv(argv[0], argv);
    dprintf(STDERR_FILENO, "harness: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Forks argv with stdout on a pipe (read end kept in p->out_fd) and stderr
 * on p->log_path (appended to when `append`, else truncated). Returns 0 or
 * -1. */
static int proc_spawn_log(hx_proc_t *p, char *const argv[], int append)
{
    int fds[2] = {-1, -1};
    int log_fd = -1;
    int rc = -1;
    if (pipe2(fds, O_CLOEXEC) != 0) {
        perror("harness: pipe2");
        goto cleanup;
    }
    log_fd = open(p->log_path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC) | O_CLOEXEC,
                  0644);
    if (log_fd < 0) {
        fprintf(stderr, "harness: open %s: %s\n", p->log_path, strerror(errno));
        goto cleanup;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror("harness: fork");
        goto cleanup;
    }
    if (pid == 0)
        proc_child(parent, fds[1], log_fd, argv);
    proc_table_add(pid);
    p->pid = pid;
    p->out_fd = fds[0];
    fds[0] = -1;
    rc = 0;
cleanup:
    if (fds[0] >= 0)
        close(fds[0]);
    if (fds[1] >= 0)
        close(fds[1]);
    if (log_fd >= 0)
        close(log_fd);
    return rc;
}

static int proc_spawn(hx_proc_t *p, char *const argv[])
{
    return proc_spawn_log(p, argv, 0);
}

int hx_proc_spawn(hx_proc_t *p, char *const argv[], int append_log)
{
    return proc_spawn_log(p, argv, append_log);
}

void hx_proc_forget(pid_t pid)
{
    proc_table_remove(pid);
}

const char *hx_bin_dir(void)
{
    return proc_bin_dir();
}

/* Reads the child's stdout until one full line or timeout. Returns 0 with
 * the line (no newline) in buf, or -1 (EOF = the child died, or timeout). */
static int proc_read_line(hx_proc_t *p, char *buf, size_t cap, int timeout_ms)
{
    size_t len = 0;
    int64_t deadline = hx_now_ms() + timeout_ms;
    buf[0] = '\0';
    for (;;) {
        int64_t left = deadline - hx_now_ms();
        if (left <= 0) {
            fprintf(stderr, "harness: %s: no ready line within %d ms\n", p->name, timeout_ms);
            return -1;
        }
        struct pollfd pfd = {.fd = p->out_fd, .events = POLLIN};
        int n = poll(&pfd, 1, (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            continue;   /* timeout is checked at the top */
        /* One byte at a time: the line is short and bytes after it stay in
         * the pipe for nobody (the contract says one line). */
        char ch;
        ssize_t got = read(p->out_fd, &ch, 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            fprintf(stderr, "harness: %s exited before its ready line\n", p->name);
            return -1;
        }
        if (ch == '\n')
            return 0;
        if (len + 1 < cap) {
            buf[len++] = ch;
            buf[len] = '\0';
        }
    }
}

int hx_proc_read_line(hx_proc_t *p, char *buf, size_t cap, int timeout_ms)
{
    return proc_read_line(p, buf, cap, timeout_ms);
}

/* Reaps p, waiting up to grace_ms after `sig` (0 = just wait), then
 * SIGKILL. Returns the wait status, or -1 when p was not running. */
static int proc_stop(hx_proc_t *p, int sig, int grace_ms)
{
    if (p->pid <= 0)
        return -1;
    if (sig)
        kill(p->pid, sig);
    int status = 0;
    int64_t deadline = hx_now_ms() + grace_ms;
    for (;;) {
        pid_t r = waitpid(p->pid, &status, WNOHANG);
        if (r == p->pid || (r < 0 && errno != EINTR))
            break;
        if (hx_now_ms() >= deadline) {
            fprintf(stderr, "harness: %s (pid %d) ignored signal %d for %d ms: SIGKILL\n",
                    p->name, (int)p->pid, sig, grace_ms);
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &status, 0);
            status = -2;    /* counts as unclean */
            break;
        }
        hx_sleep_ms(10);
    }
    proc_table_remove(p->pid);
    p->pid = 0;
    if (p->out_fd >= 0) {
        close(p->out_fd);
        p->out_fd = -1;
    }
    return status;
}

int hx_proc_stop(hx_proc_t *p, int sig, int grace_ms)
{
    return proc_stop(p, sig, grace_ms);
}

static int proc_clean_exit(const hx_proc_t *p, int status)
{
    if (status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 1;
    if (status >= 0 && WIFEXITED(status))
        fprintf(stderr, "harness: %s exited with status %d\n", p->name, WEXITSTATUS(status));
    else if (status >= 0 && WIFSIGNALED(status))
        fprintf(stderr, "harness: %s died of signal %d\n", p->name, WTERMSIG(status));
    return 0;
}

static void proc_init(hx_proc_t *p, const hx_cluster_t *c, const char *name)
{
    memset(p, 0, sizeof *p);
    p->out_fd = -1;
    snprintf(p->name, sizeof p->name, "%s", name);
    /* Built in a local first: p lives inside c, and the dir is at most
     * HX_DIR_MAX so the path always fits. */
    char path[HX_DIR_MAX + 48];
    snprintf(path, sizeof path, "%s/%.31s.log", c->dir, name);
    memcpy(p->log_path, path, sizeof path);
}

/* "... http://127.0.0.1:PORT ..." (or https://) -> url. 0 or -1. */
static int proc_parse_url(const char *line, char *url, size_t cap)
{
    const char *s = strstr(line, "http://");
    if (!s)
        s = strstr(line, "https://");
    if (!s)
        return -1;
    size_t n = strcspn(s, " \t\r\n\"',;");
    while (n > 0 && s[n - 1] == '/')
        n--;   /* we append "/v1/..." ourselves */
    if (n >= cap || n <= strlen("https://"))
        return -1;
    memcpy(url, s, n);
    url[n] = '\0';
    return 0;
}

#define PROC_EXTRA_MAX 16

int hx_cluster_start(hx_cluster_t *c, const char *const *islands, int nislands)
{
    return hx_cluster_start_args(c, islands, nislands, NULL);
}

int hx_cluster_start_args(hx_cluster_t *c, const char *const *islands, int nislands,
                          const char *const *extra)
{
    memset(c, 0, sizeof *c);
    c->atolld.out_fd = -1;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > HX_DIR_MAX - 32)
        tmp = "/tmp";   /* the name must fit c->dir with its XXXXXX intact */
    snprintf(c->dir, sizeof c->dir, "%s/atoll-itest-XXXXXX", tmp);
    if (!mkdtemp(c->dir)) {
        perror("harness: mkdtemp");
        c->dir[0] = '\0';
        return -1;
    }
    char bin[HX_PATH_MAX], db[HX_PATH_MAX + 16];
    snprintf(bin, sizeof bin, "%s/atolld", proc_bin_dir());
    snprintf(db, sizeof db, "%s/atoll.db", c->dir);
    char *argv[8 + 2 * 8 + PROC_EXTRA_MAX];
    int argc = 0;
    argv[argc++] = bin;
    argv[argc++] = "--listen";
    argv[argc++] = "127.0.0.1:0";
    argv[argc++] = "--db";
    argv[argc++] = db;
    for (int i = 0; i < nislands && i < 8; i++) {
        argv[argc++] = "--island";
        argv[argc++] = (char *)islands[i];
    }
    for (int i = 0; extra && extra[i] && i < PROC_EXTRA_MAX; i++)
        argv[argc++] = (char *)extra[i];
    argv[argc] = NULL;
    proc_init(&c->atolld, c, "atolld");
    char line[512];
    if (proc_spawn(&c->atolld, argv) != 0)
        goto fail;
    if (proc_read_line(&c->atolld, line, sizeof line, READY_TIMEOUT_MS) != 0)
        goto fail;
    if (proc_parse_url(line, c->url, sizeof c->url) != 0) {
        fprintf(stderr, "harness: no http:// URL in atolld's ready line '%s'\n", line);
        goto fail;
    }
    return 0;
fail:
    hx_cluster_dump_logs(c, 4096);
    hx_cluster_stop(c);
    return -1;
}

int hx_worker_start(hx_cluster_t *c, const char *island, int devices)
{
    return hx_worker_start_args(c, island, devices, NULL, READY_TIMEOUT_MS, 0);
}

int hx_worker_start_args(hx_cluster_t *c, const char *island, int devices,
                         const char *const *extra, int ready_timeout_ms, int expect_fail)
{
    if (c->nworkers >= HX_MAX_WORKERS || !c->url[0])
        return -1;
    hx_proc_t *p = &c->workers[c->nworkers];
    char name[32], bin[HX_PATH_MAX], ndev[16];
    snprintf(name, sizeof name, "worker-%s-%d", island, c->nworkers);
    proc_init(p, c, name);
    snprintf(bin, sizeof bin, "%s/atoll-worker", proc_bin_dir());
    snprintf(ndev, sizeof ndev, "%d", devices);
    char *argv[8 + PROC_EXTRA_MAX] = {bin, "--controller", c->url, "--island", (char *)island,
                                      "--devices", ndev, NULL};
    int argc = 7;
    for (int i = 0; extra && extra[i] && i < PROC_EXTRA_MAX; i++)
        argv[argc++] = (char *)extra[i];
    argv[argc] = NULL;
    char line[512];
    if (proc_spawn(p, argv) != 0)
        return -1;
    c->nworkers++;   /* counted now so stop reaps it even if it never gets ready */
    if (expect_fail) {
        /* Quietly: proc_read_line's messages would read like a failure. */
        int saved = dup(STDERR_FILENO), devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (saved >= 0 && devnull >= 0)
            dup2(devnull, STDERR_FILENO);
        int rc = proc_read_line(p, line, sizeof line, ready_timeout_ms);
        if (saved >= 0 && devnull >= 0)
            dup2(saved, STDERR_FILENO);
        if (saved >= 0)
            close(saved);
        if (devnull >= 0)
            close(devnull);
        return rc;
    }
    if (proc_read_line(p, line, sizeof line, ready_timeout_ms) != 0) {
        hx_cluster_dump_logs(c, 4096);
        return -1;
    }
    return 0;
}

int hx_worker_stop_last(hx_cluster_t *c, int grace_ms)
{
    if (c->nworkers <= 0)
        return -1;
    hx_proc_t *p = &c->workers[c->nworkers - 1];
    int st = p->pid > 0 ? proc_stop(p, SIGTERM, grace_ms) : -1;
    c->nworkers--;
    return st;
}

/* Removes the files directly inside dir, then dir (atolld writes no
 * subdirectories). */
void hx_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[HX_PATH_MAX + 300];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

int hx_cluster_stop(hx_cluster_t *c)
{
    int unclean = 0;
    /* Signal all workers first so they drain in parallel, then reap. */
    for (int i = 0; i < c->nworkers; i++)
        if (c->workers[i].pid > 0)
            kill(c->workers[i].pid, SIGTERM);
    for (int i = 0; i < c->nworkers; i++) {
        if (c->workers[i].pid <= 0)
            continue;
        int st = proc_stop(&c->workers[i], 0, STOP_GRACE_MS);
        unclean += !proc_clean_exit(&c->workers[i], st);
    }
    c->nworkers = 0;
    if (c->atolld.pid > 0) {
        int st = proc_stop(&c->atolld, SIGTERM, STOP_GRACE_MS);
        unclean += !proc_clean_exit(&c->atolld, st);
    }
    /* ATOLL_KEEP_RUN=1 keeps every run's directory (its store, logs) for
     * a look afterwards, e.g. at a benchmark's host tasks. */
    if (unclean || getenv("ATOLL_KEEP_RUN"))
        c->keep_dir = 1;
    if (c->dir[0]) {
        if (c->keep_dir)
            fprintf(stderr, "harness: logs kept in %s\n", c->dir);
        else
            hx_remove_dir(c->dir);
        c->dir[0] = '\0';
    }
    return unclean;
}

static void proc_print_tail(const char *name, const char *path, size_t tail)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > (long)tail ? size - (long)tail : 0;
    fseek(f, from, SEEK_SET);
    fprintf(stderr, "----- %s stderr (%s, last %ld bytes) -----\n", name, path, size - from);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, stderr);
    fprintf(stderr, "----- end %s -----\n", name);
    fclose(f);
}

void hx_cluster_dump_logs(hx_cluster_t *c, size_t tail_bytes)
{
    c->keep_dir = 1;
    if (c->atolld.log_path[0])
        proc_print_tail(c->atolld.name, c->atolld.log_path, tail_bytes);
    for (int i = 0; i < c->nworkers; i++)
        proc_print_tail(c->workers[i].name, c->workers[i].log_path, tail_bytes);
}

long hx_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kb = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kb;
}

/* utime + stime of a /proc/.../stat file in microseconds, or -1. */
static int64_t stat_cpu_us(const char *path)
{
    char buf[1024];
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* After ") ": state, then fields 4..13; utime and stime are 14 and 15. */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (int64_t)(ut + st) * 1000000 / sysconf(_SC_CLK_TCK);
}

int64_t hx_cpu_us(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    return stat_cpu_us(path);
}

/* The run time in /proc/PID/task/TID/schedstat (its first field, ns), in
 * µs, or -1. */
static int64_t schedstat_us(const char *path)
{
    FILE *f = fopen(path, "r");
    long long ns = -1;
    if (!f)
        return -1;
    if (fscanf(f, "%lld", &ns) != 1 || ns < 0)
        ns = -1;
    fclose(f);
    return ns < 0 ? -1 : ns / 1000;
}

/* Sums read(/proc/PID/task/TID/FILE) over pid's threads, those named comm
 * only when comm is not NULL; -1 when none could be read (a thread that
 * ended meanwhile is skipped). */
static int64_t task_sum(pid_t pid, const char *comm, const char *file,
                        int64_t (*read)(const char *path))
{
    char dir[64], path[64 + sizeof(((struct dirent *)0)->d_name) + 16], name[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int64_t sum = 0;
    int found = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        if (comm) {
            snprintf(path, sizeof path, "%s/%s/comm", dir, de->d_name);
            FILE *f = fopen(path, "r");
            if (!f)
                continue;
            int ok = fgets(name, sizeof name, f) != NULL;
            fclose(f);
            name[strcspn(name, "\n")] = '\0';
            if (!ok || strcmp(name, comm) != 0)
                continue;
        }
        snprintf(path, sizeof path, "%s/%s/%s", dir, de->d_name, file);
        int64_t us = read(path);
        if (us >= 0) {
            sum += us;
            found = 1;
        }
    }
    closedir(d);
    return found ? sum : -1;
}

int64_t hx_thread_cpu_us(pid_t pid, const char *comm)
{
    return task_sum(pid, comm, "stat", stat_cpu_us);
}

int64_t hx_sched_cpu_us(pid_t pid)
{
    return task_sum(pid, NULL, "schedstat", schedstat_us);
}

int hx_job_processes(int64_t id)
{
    static char env[1 << 16];       /* main thread only, like the rest of this file */
    char want[64], dir[96];
    int n = snprintf(want, sizeof want, "ATOLL_JOB_ID=%lld", (long long)id), count = 0;
    /* ATOLL_INPUT_DIR=<our run dir>/...: a program of our workers */
    const char *run_dir = getenv("ATOLL_RUN_DIR");
    int dn = snprintf(dir, sizeof dir, "ATOLL_INPUT_DIR=%s/", run_dir ? run_dir : "");
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[300];
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        snprintf(path, sizeof path, "/proc/%s/environ", e->d_name);
        int fd = open(path, O_RDONLY);
        ssize_t len = fd >= 0 ? read(fd, env, sizeof env - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (len > 0)
            env[len] = '\0';
        int job = 0, ours = run_dir == NULL;
        for (ssize_t i = 0; len > 0 && i < len; i += (ssize_t)strlen(env + i) + 1) {
            job |= i + n <= len && memcmp(env + i, want, (size_t)n) == 0 && env[i + n] == '\0';
            ours |= i + dn <= len && memcmp(env + i, dir, (size_t)dn) == 0;
        }
        count += job && ours;
    }
    if (d)
        closedir(d);
    return count;
}
