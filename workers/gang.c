/* gang.c - see gang.h.
 *
 * Between fork() and execve() only async-signal-safe calls run (the worker
 * is multithreaded): argv, envp and every path are prepared before the
 * fork; messages are written with write(2).
 *
 * Invariant: gang_run() returns only once every shepherd it started was
 * reaped and every pipe it read was closed, so no child, zombie or file
 * descriptor outlives the call; the first reason to end the gang wins
 * (its end and culprit are what the caller sees). Ownership: the pipes'
 * read ends and the read buffer are gang_run()'s own (grs_t, on its
 * stack); argv, envp and the directories stay the caller's. */
#include "gang.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

#define GANG_POLL_MS 10
#define GANG_READ_CHUNK 65536
#define GANG_PIPE_BYTES (1 << 20)      /* room for bursts between two polls */
#define GANG_LAST_RESORT_US 2000000    /* SIGKILL to a shepherd that outlived SIGUSR2 */

/* ---------------------------------------------------------------- */
/* In the forked children (single-threaded, async-signal-safe only). */

static volatile pid_t shep_prog;       /* the shepherd's program (= its group) */

static void shep_on_term(int sig)
{
    (void)sig;
    if (shep_prog > 0)
        kill(-shep_prog, SIGTERM);
}

static void shep_on_kill(int sig)
{
    (void)sig;
    if (shep_prog > 0)
        kill(-shep_prog, SIGKILL);
}

static void child_say(const char *a, const char *b)
{
    ssize_t rc = write(2, a, strlen(a));
    rc = write(2, b, strlen(b));
    rc = write(2, "\n", 1);
    (void)rc;
}

static const char *errno_text(int e)
{
    switch (e) {
    case ENOENT: return "no such file or directory";
    case EACCES: return "permission denied";
    case ENOEXEC: return "not an executable format";
    case EPERM: return "operation not permitted";
    case ENOTDIR: return "a path component is not a directory";
    default: return "error";
    }
}

static void program_exec(const gang_cfg_t *cfg, const gang_proc_t *p, int out_fd, int err_fd,
                         pid_t shepherd)
{
    static const int dfl[] = {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD,
                              SIGQUIT};
    struct sigaction sa;
    sigset_t none;
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != shepherd)
        _exit(127);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (size_t i = 0; i < sizeof dfl / sizeof dfl[0]; i++)
        sigaction(dfl[i], &sa, NULL);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        _exit(126);
    close_range(3, ~0U, 0);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (chdir(p->dir) != 0) {
        child_say("atoll: cannot enter the working directory: ", errno_text(errno));
        _exit(126);
    }
    if (cfg->run_as) {
        if (setgroups(0, NULL) != 0 && errno != EPERM)
            _exit(126);
        if (setgid(cfg->gid) != 0 || setuid(cfg->uid) != 0) {
            child_say("atoll: cannot switch to the --run-as user: ", errno_text(errno));
            _exit(126);
        }
    }
    execve(p->argv[0], p->argv, p->envp);
    int e = errno;
    child_say("atoll: cannot execute the command: ", errno_text(e));
    _exit(127);
}

/* SIGKILLs every child the shepherd has (descendants that left the
 * program's group, e.g. by setsid or a daemon's double fork, are
 * reparented to it as the subreaper: podman's conmon, and through it a
 * container's init) and reaps them, until none is left or ~2 s passed.
 * Async-signal-safe calls only (it runs in a fork of the worker). */
static void shep_kill_orphans(pid_t me)
{
    char path[64] = "/proc/self/task/", digits[16], buf[512];
    size_t n = strlen(path), d = 0;
    for (unsigned v = (unsigned)me; v > 0 || d == 0; v /= 10)
        digits[d++] = (char)('0' + v % 10);
    while (d > 0)
        path[n++] = digits[--d];
    memcpy(path + n, "/children", sizeof "/children");  /* single-threaded: tid = pid */
    for (int round = 0; round < 2000; round++) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t len = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (len <= 0)
            return;                     /* no child left (or no /proc: nothing more to do) */
        buf[len] = '\0';
        for (char *c = buf; *c;) {
            long pid = 0;
            while (*c >= '0' && *c <= '9')
                pid = pid * 10 + (*c++ - '0');
            if (pid > 1)
                kill((pid_t)pid, SIGKILL);
            while (*c && (*c < '0' || *c > '9'))
                c++;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* The shepherd (see gang.h): never returns. */
static void shepherd_main(const gang_cfg_t *cfg, const gang_proc_t *p, int out_fd, int err_fd,
                          pid_t worker)
{
    struct sigaction sa;
    sigset_t all, none;
    sigfillset(&all);
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &all, NULL);   /* until shep_prog is known */
    setpgid(0, 0);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = shep_on_term;
    sigaction(SIGTERM, &sa, NULL);
    sa.sa_handler = shep_on_kill;
    sigaction(SIGUSR2, &sa, NULL);
    prctl(PR_SET_PDEATHSIG, SIGUSR2);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    if (getppid() != worker)            /* the worker died before we got here */
        _exit(125);
    pid_t me = getpid();
    pid_t prog = fork();
    if (prog == 0)
        program_exec(cfg, p, out_fd, err_fd, me);
    if (prog < 0)
        _exit(126);
    setpgid(prog, prog);
    shep_prog = prog;
    close(out_fd);
    close(err_fd);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int st = 0;
    for (;;) {
        int s;
        pid_t w = waitpid(-1, &s, 0);
        if (w == prog) {
            st = s;
            break;
        }
        if (w < 0 && errno != EINTR)
            break;
    }
    kill(-prog, SIGKILL);               /* whatever the program left in its group */
    shep_kill_orphans(me);
    if (WIFEXITED(st))
        _exit(WEXITSTATUS(st));
    int sig = WTERMSIG(st);
    sa.sa_handler = SIG_DFL;
    sigaction(sig, &sa, NULL);
    prctl(PR_SET_DUMPABLE, 0);          /* die of the same signal, without a core */
    kill(me, sig);
    _exit(128 + sig);
}

/* ---------------------------------------------------------------- */
/* In the worker. */

void gang_describe_status(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(status),
                 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?");
    else
        snprintf(buf, len, "ended with wait status %d", status);
}

int gang_find_program(const char *name, const char *path, char *out, size_t outlen)
{
    const char *p = path;
    while (p && *p) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        struct stat st;
        if (n > 0 && (size_t)snprintf(out, outlen, "%.*s/%s", (int)n, p, name) < outlen &&
            stat(out, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0111))
            return 0;
        p = colon ? colon + 1 : NULL;
    }
    return -1;
}

typedef struct gang_run_state {
    const gang_cfg_t *cfg;
    gang_proc_t *procs;
    int n;
    int *fds;                  /* 2n read ends: 2i stdout, 2i+1 stderr; -1 once closed */
    int alive;
    gang_end_t end;
    int culprit;
    int64_t term_at, kill_at;  /* monotonic us; 0 = not yet */
} grs_t;

static void tail_add(gang_proc_t *p, const char *d, size_t len)
{
    size_t cap = GANG_TAIL_BYTES - 1, have = strlen(p->tail);
    if (len >= cap) {
        memcpy(p->tail, d + len - cap, cap);
        p->tail[cap] = '\0';
        return;
    }
    if (have + len > cap) {
        size_t drop = have + len - cap;
        memmove(p->tail, p->tail + drop, have - drop);
        have -= drop;
    }
    memcpy(p->tail + have, d, len);
    p->tail[have + len] = '\0';
}

static void signal_all(grs_t *g, int sig)
{
    for (int i = 0; i < g->n; i++)
        if (g->procs[i].started && !g->procs[i].ended)
            kill(g->procs[i].pid, sig);
}

/* Begins ending the gang (first reason wins). */
static void gang_end_begin(grs_t *g, gang_end_t why, int culprit)
{
    if (g->term_at)
        return;
    g->end = why;
    g->culprit = culprit;
    g->term_at = util_mono_us();
    signal_all(g, SIGTERM);
}

static int spawn_one(grs_t *g, int i, char *err, size_t errlen)
{
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    gang_proc_t *p = &g->procs[i];
    if (pipe2(po, O_CLOEXEC) != 0 || pipe2(pe, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto fail;
    }
    fcntl(po[0], F_SETPIPE_SZ, GANG_PIPE_BYTES);
    fcntl(pe[0], F_SETPIPE_SZ, GANG_PIPE_BYTES);
    pid_t worker = getpid();
    pid_t pid = fork();
    if (pid == 0)
        shepherd_main(g->cfg, p, po[1], pe[1], worker);
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto fail;
    }
    setpgid(pid, pid);
    close(po[1]);
    close(pe[1]);
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    g->fds[2 * i] = po[0];
    g->fds[2 * i + 1] = pe[0];
    p->pid = pid;
    p->started = 1;
    g->alive++;
    if (g->cfg->started)
        g->cfg->started(g->cfg->ctx, i, pid);
    return 0;
fail:
    for (int k = 0; k < 2; k++) {
        if (po[k] >= 0)
            close(po[k]);
        if (pe[k] >= 0)
            close(pe[k]);
    }
    return -1;
}

/* Reads what fd k has now (bounded, so one chatty process cannot starve
 * the others); closes it on EOF. */
static void drain_fd(grs_t *g, int k, char *buf)
{
    for (int round = 0; round < 16 && g->fds[k] >= 0; round++) {
        ssize_t r = read(g->fds[k], buf, GANG_READ_CHUNK);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == EAGAIN)
            return;
        if (r <= 0) {
            close(g->fds[k]);
            g->fds[k] = -1;
            return;
        }
        int i = k / 2, stream = k % 2 + 1;
        if (stream == 2)
            tail_add(&g->procs[i], buf, (size_t)r);
        if (g->cfg->output)
            g->cfg->output(g->cfg->ctx, i, stream, buf, (size_t)r);
    }
}

static void reap(grs_t *g, char *buf)
{
    for (int i = 0; i < g->n; i++) {
        gang_proc_t *p = &g->procs[i];
        int st;
        if (!p->started || p->ended || waitpid(p->pid, &st, WNOHANG) != p->pid)
            continue;
        /* What it wrote before exiting is in its pipes now: read it before
         * its end is announced, so its output (and its stderr tail in an
         * error) is complete when the controller sees the end. */
        drain_fd(g, 2 * i, buf);
        drain_fd(g, 2 * i + 1, buf);
        p->ended = 1;
        p->status = st;
        g->alive--;
        if (g->cfg->ended)
            g->cfg->ended(g->cfg->ctx, i, st);
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            gang_end_begin(g, GANG_FAILED, i);
    }
}

/* Timeout, stop and SIGTERM -> SIGKILL escalation. */
static void check_clock(grs_t *g, int64_t deadline)
{
    int64_t now = util_mono_us();
    if (!g->term_at && g->cfg->stop && g->cfg->stop(g->cfg->ctx))
        gang_end_begin(g, GANG_STOPPED, -1);
    if (!g->term_at && now >= deadline)
        gang_end_begin(g, GANG_TIMEOUT, -1);
    if (g->term_at && !g->kill_at && now >= g->term_at + g->cfg->kill_grace_us) {
        g->kill_at = now;
        signal_all(g, SIGUSR2);
    }
    if (g->kill_at && now >= g->kill_at + GANG_LAST_RESORT_US)
        signal_all(g, SIGKILL);
}

static void poll_once(grs_t *g, char *buf, int64_t ended_at)
{
    struct pollfd pf[2 * 64];
    int map[2 * 64], np = 0;
    for (int k = 0; k < 2 * g->n && np < 2 * 64; k++) {
        if (g->fds[k] < 0)
            continue;
        pf[np] = (struct pollfd){.fd = g->fds[k], .events = POLLIN};
        map[np++] = k;
    }
    if (np == 0 || poll(pf, (nfds_t)np, GANG_POLL_MS) <= 0) {
        if (np == 0) {
            struct timespec ts = {0, GANG_POLL_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
        /* Every process ended but a pipe stays open (a descendant that
         * left the group holds it): stop reading after a second. */
        for (int k = 0; ended_at && util_mono_us() > ended_at + 1000000 && k < 2 * g->n; k++)
            if (g->fds[k] >= 0) {
                close(g->fds[k]);
                g->fds[k] = -1;
            }
        return;
    }
    for (int j = 0; j < np; j++)
        if (pf[j].revents)
            drain_fd(g, map[j], buf);
}

gang_end_t gang_run(const gang_cfg_t *cfg, gang_proc_t *procs, int n, int *culprit, char *err,
                    size_t errlen)
{
    grs_t g = {.cfg = cfg, .procs = procs, .n = n, .culprit = -1};
    char *buf = malloc(GANG_READ_CHUNK);
    g.fds = malloc(sizeof *g.fds * (size_t)(2 * n));
    if (!buf || !g.fds || n > 64) {
        snprintf(err, errlen, n > 64 ? "more than 64 local processes" : "out of memory");
        free(buf);
        free(g.fds);
        *culprit = 0;
        return GANG_SPAWN_ERROR;
    }
    for (int k = 0; k < 2 * n; k++)
        g.fds[k] = -1;
    for (int i = 0; i < n; i++) {
        if (spawn_one(&g, i, err, errlen) != 0) {
            gang_end_begin(&g, GANG_SPAWN_ERROR, i);
            break;
        }
    }
    int64_t deadline = util_mono_us() + cfg->timeout_us, ended_at = 0;
    for (;;) {
        int open = 0;
        for (int k = 0; k < 2 * n; k++)
            open += g.fds[k] >= 0;
        if (g.alive == 0 && !ended_at)
            ended_at = util_mono_us();
        if (g.alive == 0 && open == 0)
            break;
        poll_once(&g, buf, ended_at);
        reap(&g, buf);
        check_clock(&g, deadline);
    }
    free(buf);
    free(g.fds);
    *culprit = g.culprit;
    return g.end;
}
