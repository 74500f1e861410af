/* exec_gang.c - a run computation's host task (DESIGN.md Part F): the
 * local processes of the user's program, started together with the rest
 * of the gang.
 *
 * Gang start: the worker holding rank 0 (the proc of shard 0) is the
 * gang's root. Every other worker of the slice, once its inputs are in and
 * its devices are first in line (exec.c's ordering, so no gang can hold
 * part of the devices another waits for), sends the root "ready"; the root
 * waits for all of them, reserves the coordinator port on its host and
 * sends each "go" with the port. Nobody starts a process before every
 * worker of the slice is ready: 2 (P - 1) small messages.
 *
 * Files: each process gets a fresh directory under --run-dir with
 * in/NAME.npy (its shard of each input), the job's `files`, and out/
 * where it writes NAME.npy per output (per "host": in/K/ and out/K/ per
 * local shard K). The directory goes when the task ends.
 *
 * Ownership: a gang_ctx_t lives on the runner's stack for one run: it
 * owns the local processes' argv, environment and working directories
 * (removed by gang_free()). The outputs read back go to r->gang_outs,
 * handed over op by op (exec_gang_output) and freed by exec_gang_cleanup()
 * when never taken. */
#include "exec_gang.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gang.h"
#include "npy.h"
#include "runlog.h"
#include "runspec.h"
#include "util.h"

#define GANG_KILL_GRACE_US 10000000     /* SIGTERM -> SIGKILL (Part F) */
#define GANG_BASE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

/* One local process. */
typedef struct lproc {
    int rank;
    int first_l, nl;                    /* its local shards: [first_l, first_l + nl) */
    char dir[512];
    char **env;                         /* NULL-terminated, owned */
    char **argv;                        /* NULL-terminated, owned */
} lproc_t;

typedef struct gang_ctx {
    run_t *r;
    const runspec_t *rs;
    int world, nproc, root;             /* gang size, local processes, root proc id */
    int npeers;
    int *peers;                         /* procs holding the slice, root first */
    lproc_t *lp;
    int port;
    char master[DPLANE_ADDR_MAX];
    gang_proc_t *gp;
} gang_ctx_t;

/* ---------------------------------------------------------------- */
/* Geometry: ranks, peers. */

static int geometry(gang_ctx_t *g)
{
    const wtask_t *t = g->r->t;
    const wplace_slice_t *s = &t->place->slices[t->slice];
    int *rank_of = malloc(sizeof *rank_of * (size_t)t->place->nprocs);
    g->peers = malloc(sizeof *g->peers * (size_t)t->place->nprocs);
    g->lp = calloc((size_t)(t->nlocal ? t->nlocal : 1), sizeof *g->lp);
    if (!rank_of || !g->peers || !g->lp) {
        free(rank_of);
        return -1;
    }
    for (int p = 0; p < t->place->nprocs; p++)
        rank_of[p] = -1;
    for (int k = 0; k < s->nshards; k++)        /* procs in order of their first shard */
        if (rank_of[s->proc_of[k]] < 0) {
            rank_of[s->proc_of[k]] = g->npeers;
            g->peers[g->npeers++] = s->proc_of[k];
        }
    g->root = s->proc_of[0];
    if (g->rs->per_host) {
        g->world = g->npeers;
        g->nproc = t->nlocal > 0;
        g->lp[0] = (lproc_t){.rank = rank_of[t->place->self], .first_l = 0, .nl = t->nlocal};
    } else {
        g->world = s->nshards;
        g->nproc = t->nlocal;
        for (int l = 0; l < t->nlocal; l++)
            g->lp[l] = (lproc_t){.rank = t->shards[l], .first_l = l, .nl = 1};
    }
    const char *addr = t->place->procs[g->root].addr, *colon = strrchr(addr, ':');
    snprintf(g->master, sizeof g->master, "%.*s",
             (int)(colon ? colon - addr : (ptrdiff_t)strlen(addr)), addr);
    free(rank_of);
    return 0;
}

/* ---------------------------------------------------------------- */
/* Gang start: ready -> root, go (with the port) -> everyone. */

static mbox_tag_t gang_tag(const run_t *r, int go, int src, int dst)
{
    int i = r->comp->nops;      /* past every op: no collective uses it */
    mbox_tag_t tag = {.job = r->t->job, .attempt = r->t->attempt, .comp = r->t->comp,
                      .op = (int32_t)(-(1 + i + (int64_t)go * JOB_MAX_OPS)), .src = src,
                      .dst = dst};
    return tag;
}

static int gang_take(gang_ctx_t *g, const mbox_tag_t *tag, tensor_t **out)
{
    run_t *r = g->r;
    int64_t deadline = util_mono_us() + g->rs->timeout_s * 1000000;
    mbox_status_t st = mbox_take(r->env->mb, tag, deadline, out);
    if (st == MBOX_OK)
        return 0;
    if (st == MBOX_CANCELLED || st == MBOX_STOPPED)
        r->cancelled = 1;
    else
        snprintf(r->err, sizeof r->err, "gang start: worker process %d not ready within "
                 "timeout_s", (int)tag->src);
    return -1;
}

/* The coordinator port is drawn at random from GANG_PORT_LOW up to the
 * kernel's ephemeral range, not from it: a port that bind(0) hands out
 * now may be taken by any outgoing connection on the host (libcurl, UCX,
 * another test) before the program binds it, and two test suites side by
 * side met that (PyTorch: "Address already in use"). */
#define GANG_PORT_LOW 10000
#define GANG_PORT_TRIES 32

/* The first port of the kernel's ephemeral range (Linux's default when it
 * cannot be read). */
static int ephemeral_low(void)
{
    int lo = 32768, hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2 || lo < 1 || lo > 65535)
            lo = 32768;
        fclose(f);
    }
    return lo;
}

/* Binds a TCP socket to a's address and port (0: the kernel's choice),
 * then closes it: the port bound, or -1. */
static int port_bind_check(struct sockaddr_in a, int port)
{
    socklen_t len = sizeof a;
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), got = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        got = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return got;
}

/* A TCP port free on the master's host now (bound and closed): a random
 * one below the ephemeral range, else (none of GANG_PORT_TRIES bound, or
 * no room below the range) one the kernel picks. -1 when none binds. */
static int reserve_port(const char *host)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
        a.sin_addr.s_addr = htonl(INADDR_ANY);
    int lo = ephemeral_low();
    for (int i = 0; lo > GANG_PORT_LOW + 1 && i < GANG_PORT_TRIES; i++) {
        uint32_t r;
        if (getrandom(&r, sizeof r, 0) != sizeof r)
            break;
        int port = port_bind_check(a, GANG_PORT_LOW + (int)(r % (uint32_t)(lo - GANG_PORT_LOW)));
        if (port > 0)
            return port;
    }
    return port_bind_check(a, 0);
}

static int gang_start_sync(gang_ctx_t *g)
{
    run_t *r = g->r;
    int self = r->t->place->self;
    shape_t one = {.rank = 1, .dim = {1}};
    tensor_t *msg = NULL;
    if (self != g->root) {
        tensor_t *ready = tensor_new(&one);
        mbox_tag_t tag = gang_tag(r, 0, self, g->root);
        int rc = ready ? exec_io_send(r, r->t->place->procs[g->root].addr, &tag, ready) : -1;
        tensor_free(ready);
        mbox_tag_t go = gang_tag(r, 1, g->root, self);
        if (rc != 0 || gang_take(g, &go, &msg) != 0)
            return -1;
        /* From the wire: range-check the float before converting it. */
        float v = msg->shape.rank == 1 && msg->shape.dim[0] == 1 ? msg->data[0] : -1.0f;
        tensor_free(msg);
        if (!(v >= 1.0f && v <= 65535.0f)) {
            snprintf(r->err, sizeof r->err, "gang start: bad coordinator port from the root");
            return -1;
        }
        g->port = (int)v;
        return 0;
    }
    for (int q = 1; q < g->npeers; q++) {
        mbox_tag_t tag = gang_tag(r, 0, g->peers[q], self);
        if (gang_take(g, &tag, &msg) != 0)
            return -1;
        tensor_free(msg);
    }
    if ((g->port = reserve_port(g->master)) < 0) {
        snprintf(r->err, sizeof r->err, "gang start: no free port on %s", g->master);
        return -1;
    }
    for (int q = 1; q < g->npeers; q++) {
        tensor_t *go = tensor_new(&one);
        mbox_tag_t tag = gang_tag(r, 1, self, g->peers[q]);
        if (go)
            go->data[0] = (float)g->port;
        int rc = go ? exec_io_send(r, r->t->place->procs[g->peers[q]].addr, &tag, go) : -1;
        tensor_free(go);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- */
/* Working directories, files, inputs. */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f)
{
    (void)st;
    (void)flag;
    (void)f;
    remove(path);
    return 0;
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int mkdir_owned(const gang_ctx_t *g, const char *path)
{
    const exec_run_opts_t *o = g->r->env->run;
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -1;
    return o->run_as && chown(path, o->uid, o->gid) != 0 ? -1 : 0;
}

static int write_owned(const gang_ctx_t *g, const char *path, const char *data, size_t len)
{
    const exec_run_opts_t *o = g->r->env->run;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    size_t done = 0;
    while (fd >= 0 && done < len) {
        ssize_t w = write(fd, data + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int ok = fd >= 0 && done == len && (!o->run_as || fchown(fd, o->uid, o->gid) == 0);
    if (fd >= 0)
        close(fd);
    return ok ? 0 : -1;
}

/* "DIR/in" or "DIR/in/K" for local shard l of process p. */
static void io_dir(const gang_ctx_t *g, const lproc_t *p, const char *which, int l, char *buf,
                   size_t len)
{
    if (g->rs->per_host)
        snprintf(buf, len, "%s/%s/%d", p->dir, which, (int)g->r->t->shards[l]);
    else
        snprintf(buf, len, "%s/%s", p->dir, which);
}

/* The process's name on this host, for its working directory and its
 * container: unique among this host's live workers (the worker's pid), even
 * when several clusters share a --run-dir or a podman store. */
static void run_name(const gang_ctx_t *g, const lproc_t *p, char *buf, size_t len)
{
    snprintf(buf, len, "atoll-w%d-j%lld-a%d-c%d-r%d", (int)getpid(), (long long)g->r->t->job,
             (int)g->r->t->attempt, (int)g->r->t->comp, p->rank);
}

static int prepare_dir(gang_ctx_t *g, lproc_t *p)
{
    run_t *r = g->r;
    char path[1024], name[128];
    run_name(g, p, name, sizeof name);
    snprintf(p->dir, sizeof p->dir, "%s/%s", r->env->run->dir, name);
    rm_tree(p->dir);
    int bad = mkdir_owned(g, p->dir);
    snprintf(path, sizeof path, "%s/in", p->dir);
    bad |= mkdir_owned(g, path);
    snprintf(path, sizeof path, "%s/out", p->dir);
    bad |= mkdir_owned(g, path);
    for (int l = p->first_l; !bad && g->rs->per_host && l < p->first_l + p->nl; l++) {
        io_dir(g, p, "in", l, path, sizeof path);
        bad |= mkdir_owned(g, path);
        io_dir(g, p, "out", l, path, sizeof path);
        bad |= mkdir_owned(g, path);
    }
    for (int f = 0; !bad && f < g->rs->nfiles; f++) {
        snprintf(path, sizeof path, "%s/%s", p->dir, g->rs->fname[f]);
        bad |= write_owned(g, path, g->rs->fdata[f], g->rs->flen[f]);
    }
    for (int i = 0; !bad && i < r->comp->nops; i++) {
        const op_t *op = &r->comp->ops[i];
        for (int l = p->first_l; op->code == OP_INPUT && !bad && l < p->first_l + p->nl; l++) {
            char d[900];
            io_dir(g, p, "in", l, d, sizeof d);
            snprintf(path, sizeof path, "%s/%s.npy", d, r->comp->vnames[op->out]);
            const tensor_t *v = ostore_tensor(r->objs[l * r->nv + op->out]);
            bad |= npy_write(path, v) != 0 ||
                   (r->env->run->run_as && chown(path, r->env->run->uid, r->env->run->gid));
        }
    }
    if (bad)
        snprintf(r->err, sizeof r->err, "cannot prepare the working directory %.300s: %s",
                 p->dir, strerror(errno));
    return bad ? -1 : 0;
}

/* ---------------------------------------------------------------- */
/* Environment and command. */

/* A growing NULL-terminated string vector (argv or envp); owns its
 * strings. */
typedef struct strv {
    char **v;
    int n, cap;
    int oom;
    int env;                    /* an environment: KEY=VALUE replaces an earlier KEY= */
} strv_t;

static void sv_add(strv_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sv_add(strv_t *s, const char *fmt, ...)
{
    char *str = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&str, fmt, ap);
    va_end(ap);
    if (n < 0 || s->oom) {
        s->oom = 1;
        return;
    }
    /* In an environment, KEY=VALUE replaces an earlier KEY= (the job's env
     * over the defaults); an argv keeps every word. */
    const char *eq = s->env ? strchr(str, '=') : NULL;
    for (int i = 0; eq && i < s->n; i++)
        if (strncmp(s->v[i], str, (size_t)(eq - str + 1)) == 0) {
            free(s->v[i]);
            s->v[i] = str;
            return;
        }
    if (s->n + 2 > s->cap) {
        int cap = s->cap ? 2 * s->cap : 32;
        char **nv = realloc(s->v, sizeof *nv * (size_t)cap);
        if (!nv) {
            free(str);
            s->oom = 1;
            return;
        }
        s->v = nv;
        s->cap = cap;
    }
    s->v[s->n++] = str;
    s->v[s->n] = NULL;
}

static void sv_free(char **v)
{
    for (int i = 0; v && v[i]; i++)
        free(v[i]);
    free(v);
}

/* Island coordinates of local shard l's device: "r,c". */
static void device_coords(const run_t *r, int l, char *buf, size_t len)
{
    const wplace_slice_t *s = &r->t->place->slices[r->t->slice];
    int64_t rest = r->t->shards[l], c[MESH_MAX_RANK];
    for (int d = s->box.rank - 1; d >= 0; d--) {
        c[d] = s->origin[d] + rest % s->box.dim[d];
        rest /= s->box.dim[d];
    }
    size_t off = 0;
    for (int d = 0; d < s->box.rank && off < len; d++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", d ? "," : "", (long long)c[d]);
}

static int build_env(gang_ctx_t *g, lproc_t *p, int local_rank)
{
    run_t *r = g->r;
    strv_t s = {.env = 1};
    char devs[1024] = "", shards[1024] = "", shape[64];
    size_t off = 0, soff = 0;
    for (int l = p->first_l; l < p->first_l + p->nl && off < sizeof devs - 32; l++) {
        char one[64];
        device_coords(r, l, one, sizeof one);
        off += (size_t)snprintf(devs + off, sizeof devs - off, "%s%s", off ? " " : "", one);
        soff += (size_t)snprintf(shards + soff, sizeof shards - soff, "%s%d", soff ? "," : "",
                                 (int)r->t->shards[l]);
    }
    mesh_shape_format(&r->t->slice_shape, shape, sizeof shape);
    sv_add(&s, "PATH=%s", GANG_BASE_PATH);
    sv_add(&s, "HOME=%s", p->dir);
    sv_add(&s, "TMPDIR=%s", p->dir);
    sv_add(&s, "LANG=C.UTF-8");
    sv_add(&s, "PYTHONUNBUFFERED=1");
    for (int i = 0; i < g->rs->nenv; i++)
        sv_add(&s, "%s", g->rs->env[i]);
    sv_add(&s, "RANK=%d", p->rank);
    sv_add(&s, "WORLD_SIZE=%d", g->world);
    sv_add(&s, "LOCAL_RANK=%d", local_rank);
    sv_add(&s, "LOCAL_WORLD_SIZE=%d", g->nproc);
    sv_add(&s, "MASTER_ADDR=%s", g->master);
    sv_add(&s, "MASTER_PORT=%d", g->port);
    sv_add(&s, "JAX_COORDINATOR_ADDRESS=%s:%d", g->master, g->port);
    sv_add(&s, "JAX_NUM_PROCESSES=%d", g->world);
    sv_add(&s, "JAX_PROCESS_ID=%d", p->rank);
    sv_add(&s, "ATOLL_JOB_ID=%lld", (long long)r->t->job);
    sv_add(&s, "ATOLL_ATTEMPT=%d", (int)r->t->attempt);
    sv_add(&s, "ATOLL_COMPUTATION=%s", r->comp->name);
    sv_add(&s, "ATOLL_DEVICES=%s", devs);
    sv_add(&s, "ATOLL_SHARDS=%s", shards);
    sv_add(&s, "ATOLL_SLICE_SHAPE=%s", shape);
    sv_add(&s, "ATOLL_INPUT_DIR=%s/in", p->dir);
    sv_add(&s, "ATOLL_OUTPUT_DIR=%s/out", p->dir);
    p->env = s.v;
    if (s.oom) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    return 0;
}

static const char *env_get(char **env, const char *key)
{
    size_t n = strlen(key);
    for (int i = 0; env && env[i]; i++)
        if (strncmp(env[i], key, n) == 0 && env[i][n] == '=')
            return env[i] + n + 1;
    return NULL;
}

/* This process's soft limit of `res`, at most cap. */
static unsigned long long limit_of(int res, unsigned long long cap)
{
    struct rlimit rl;
    if (getrlimit(res, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > cap)
        return cap;
    return (unsigned long long)rl.rlim_cur;
}

/* argv: the command (argv[0] found on the process's PATH), or podman
 * running it in the job's image. */
static int build_argv(gang_ctx_t *g, lproc_t *p)
{
    run_t *r = g->r;
    const runspec_t *rs = g->rs;
    const exec_run_opts_t *o = r->env->run;
    strv_t s = {0};
    char prog[1024];
    if (rs->image[0]) {
        if (gang_find_program("podman", GANG_BASE_PATH, prog, sizeof prog) != 0) {
            snprintf(r->err, sizeof r->err, "run.image needs podman on this worker");
            return -1;
        }
        sv_add(&s, "%s", prog);
        sv_add(&s, "run");
        if (o->runtime)
            sv_add(&s, "--runtime=%s", o->runtime);
        sv_add(&s, "--rm");
        sv_add(&s, "--network=host");
        char name[128];
        run_name(g, p, name, sizeof name);
        sv_add(&s, "--name=%s", name);
        /* The engine's default limits may exceed what this host allows
         * (runc then refuses to start): the worker's own, capped. */
        sv_add(&s, "--ulimit=nofile=%llu:%llu", limit_of(RLIMIT_NOFILE, 65536),
               limit_of(RLIMIT_NOFILE, 65536));
        sv_add(&s, "--ulimit=nproc=%llu:%llu", limit_of(RLIMIT_NPROC, 4096),
               limit_of(RLIMIT_NPROC, 4096));
        sv_add(&s, "--no-healthcheck");     /* an image's HEALTHCHECK is not the job's */
        sv_add(&s, "--entrypoint=");        /* run's command is the whole argv */
        sv_add(&s, "--volume=%s:%s", p->dir, p->dir);
        sv_add(&s, "--workdir=%s", p->dir);
        if (o->run_as)
            sv_add(&s, "--user=%u:%u", o->uid, o->gid);
        for (int i = 0; p->env[i]; i++)
            if (strncmp(p->env[i], "PATH=", 5) != 0)
                sv_add(&s, "--env=%s", p->env[i]);
        sv_add(&s, "%s", rs->image);
    } else if (strchr(rs->argv[0], '/')) {
        sv_add(&s, "%s", rs->argv[0]);
    } else if (gang_find_program(rs->argv[0], env_get(p->env, "PATH"), prog, sizeof prog) == 0) {
        sv_add(&s, "%s", prog);
    } else {
        snprintf(r->err, sizeof r->err, "command '%.100s' not found on PATH", rs->argv[0]);
        return -1;
    }
    for (int i = rs->image[0] ? 0 : 1; i < rs->argc; i++)
        sv_add(&s, "%s", rs->argv[i]);
    p->argv = s.v;
    if (s.oom) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- */
/* Running, logs, outputs. */

static void on_output(void *ctx, int i, int stream, const char *data, size_t len)
{
    gang_ctx_t *g = ctx;
    runlog_key_t k = {g->r->t->job, g->r->t->attempt, g->r->t->comp, g->lp[i].rank};
    runlog_output(g->r->env->run->log, &k, stream, data, len);
}

static void on_started(void *ctx, int i, pid_t pid)
{
    gang_ctx_t *g = ctx;
    runlog_key_t k = {g->r->t->job, g->r->t->attempt, g->r->t->comp, g->lp[i].rank};
    runlog_event(g->r->env->run->log, &k, "running", (int)pid, 0, 0, g->r->env->run->host);
}

static void on_ended(void *ctx, int i, int status)
{
    gang_ctx_t *g = ctx;
    runlog_key_t k = {g->r->t->job, g->r->t->attempt, g->r->t->comp, g->lp[i].rank};
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    runlog_event(g->r->env->run->log, &k, sig ? "killed" : "exited", (int)g->gp[i].pid,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1, sig, g->r->env->run->host);
}

static int stop_fn(void *ctx)
{
    gang_ctx_t *g = ctx;
    return mbox_is_cancelled(g->r->env->mb, g->r->t->job, g->r->t->attempt) ||
           mbox_is_stopped(g->r->env->mb);
}

/* The last lines of a stderr tail, at most ~300 bytes, on one line. */
static void tail_lines(const char *tail, char *buf, size_t len)
{
    size_t n = strlen(tail);
    while (n > 0 && (tail[n - 1] == '\n' || tail[n - 1] == ' '))
        n--;
    size_t start = n > 300 ? n - 300 : 0;
    const char *nl = start ? memchr(tail + start, '\n', n - start) : NULL;
    if (nl)
        start = (size_t)(nl - tail) + 1;
    size_t o = 0;
    for (size_t i = start; i < n && o + 1 < len; i++)
        buf[o++] = tail[i] == '\n' ? '|' : tail[i];
    buf[o] = '\0';
}

static void gang_error(gang_ctx_t *g, gang_end_t end, int culprit, const char *why)
{
    run_t *r = g->r;
    char st[96], tl[320];
    if (end == GANG_STOPPED) {
        r->cancelled = 1;
        return;
    }
    if (end == GANG_TIMEOUT) {
        snprintf(r->err, sizeof r->err, "run timed out after %lld s (timeout_s): every "
                 "process was ended", (long long)g->rs->timeout_s);
        return;
    }
    if (end == GANG_SPAWN_ERROR) {
        snprintf(r->err, sizeof r->err, "process %d could not start: %s",
                 culprit >= 0 ? g->lp[culprit].rank : -1, why);
        return;
    }
    gang_describe_status(g->gp[culprit].status, st, sizeof st);
    tail_lines(g->gp[culprit].tail, tl, sizeof tl);
    snprintf(r->err, sizeof r->err, "process %d (pid %d on %s) %s; stderr: %s",
             g->lp[culprit].rank, (int)g->gp[culprit].pid, r->env->run->host, st,
             tl[0] ? tl : "(empty)");
}

static int read_outputs(gang_ctx_t *g)
{
    run_t *r = g->r;
    int no = r->comp->noutputs;
    if (!(r->gang_outs = calloc((size_t)(no * r->nl + 1), sizeof *r->gang_outs)))
        return -1;
    for (int pi = 0; pi < g->nproc; pi++) {
        lproc_t *p = &g->lp[pi];
        for (int o = 0; o < no; o++) {
            int v = r->comp->outputs[o];
            const shape_t *want = &r->comp->vshapes[v];
            for (int l = p->first_l; l < p->first_l + p->nl; l++) {
                char d[900], path[1024], why[160];
                io_dir(g, p, "out", l, d, sizeof d);
                snprintf(path, sizeof path, "%s/%s.npy", d, r->comp->vnames[v]);
                tensor_t **slot = &r->gang_outs[o * r->nl + l];
                if (npy_read(path, (size_t)TENSOR_MAX_ELEMS * 8 + NPY_MAX_HEADER + 16, slot,
                             why, sizeof why) != 0) {
                    snprintf(r->err, sizeof r->err, "process %d: output %s.npy (shard %d): %s",
                             p->rank, r->comp->vnames[v], (int)r->t->shards[l], why);
                    return -1;
                }
                if (want->rank >= 0 && !shape_equal(&(*slot)->shape, want)) {
                    char got[64], exp[64];
                    shape_format(&(*slot)->shape, got, sizeof got);
                    shape_format(want, exp, sizeof exp);
                    snprintf(r->err, sizeof r->err, "process %d wrote %s.npy of shape %s; "
                             "run.shapes declares %s", p->rank, r->comp->vnames[v], got, exp);
                    return -1;
                }
            }
        }
    }
    return 0;
}

static int gang_prepare(gang_ctx_t *g)
{
    for (int i = 0; i < g->nproc; i++) {
        if (prepare_dir(g, &g->lp[i]) != 0 || build_env(g, &g->lp[i], i) != 0 ||
            build_argv(g, &g->lp[i]) != 0)
            return -1;
        g->gp[i] = (gang_proc_t){.argv = g->lp[i].argv, .envp = g->lp[i].env,
                                 .dir = g->lp[i].dir, .rank = g->lp[i].rank};
    }
    return 0;
}

static int gang_body(gang_ctx_t *g)
{
    run_t *r = g->r;
    const exec_run_opts_t *o = r->env->run;
    if (!o || o->refuse) {
        snprintf(r->err, sizeof r->err, o ? "atoll-worker runs as root: start it with --run-as "
                 "USER to run users' programs (--run-as root to allow root)"
                 : "this worker does not run users' programs");
        return -1;
    }
    if (geometry(g) != 0 || !(g->gp = calloc((size_t)(g->nproc + 1), sizeof *g->gp))) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    if (gang_start_sync(g) != 0 || gang_prepare(g) != 0)
        return -1;
    gang_cfg_t cfg = {.run_as = o->run_as && !g->rs->image[0], .uid = o->uid, .gid = o->gid,
                      .timeout_us = g->rs->timeout_s * 1000000, .kill_grace_us =
                      GANG_KILL_GRACE_US, .stop = stop_fn, .output = on_output,
                      .started = on_started, .ended = on_ended, .ctx = g};
    char why[256] = "";
    int culprit = -1;
    gang_end_t end = g->nproc > 0 ? gang_run(&cfg, g->gp, g->nproc, &culprit, why, sizeof why)
                                  : GANG_OK;
    runlog_flush(o->log, r->t->job, r->t->attempt, r->t->comp, 3000);
    if (end != GANG_OK) {
        gang_error(g, end, culprit, why);
        return -1;
    }
    if (read_outputs(g) != 0) {
        if (!r->err[0])
            snprintf(r->err, sizeof r->err, "out of memory");
        return -1;
    }
    return 0;
}

static void gang_free(gang_ctx_t *g)
{
    for (int i = 0; g->lp && i < g->nproc; i++) {
        if (g->lp[i].dir[0])
            rm_tree(g->lp[i].dir);
        sv_free(g->lp[i].env);
        sv_free(g->lp[i].argv);
    }
    free(g->lp);
    free(g->peers);
    free(g->gp);
}

int exec_gang_output(run_t *r, int i, tensor_t **outs)
{
    if (!r->gang_ran) {
        gang_ctx_t g = {.r = r, .rs = r->comp->run};
        r->gang_ran = 1;
        int rc = g.rs ? gang_body(&g) : -1;
        gang_free(&g);
        /* The processes read the inputs: drop the reference they held. */
        for (int k = 0; k < r->comp->nops; k++) {
            int v = r->comp->ops[k].out;
            for (int l = 0; r->comp->ops[k].code == OP_INPUT && l < r->nl; l++) {
                ostore_obj_t **obj = &r->objs[l * r->nv + v];
                if (*obj && ostore_release(r->env->st, *obj, 1) == 0)
                    *obj = NULL;
            }
        }
        if (rc != 0)
            return -1;
    }
    if (i < 0)
        return 0;
    int o = -1;
    for (int k = 0; k < r->comp->noutputs; k++)
        if (r->comp->outputs[k] == r->comp->ops[i].out)
            o = k;
    for (int l = 0; l < r->nl; l++) {
        outs[l] = o >= 0 && r->gang_outs ? r->gang_outs[o * r->nl + l] : NULL;
        if (o >= 0 && r->gang_outs)
            r->gang_outs[o * r->nl + l] = NULL;
    }
    return 0;
}

void exec_gang_cleanup(run_t *r)
{
    for (int k = 0; r->gang_outs && k < r->comp->noutputs * r->nl; k++)
        tensor_free(r->gang_outs[k]);
    free(r->gang_outs);
    r->gang_outs = NULL;
}
