/* test_dplane_junk.h - a hostile client at every worker's data-plane
 * ports, for test_dplane_junk.c and bench/bench_dplane_junk.c (static
 * functions: one copy per program). Needs support_harness.h and the
 * worker's modules (atoll_workerlib: dplane*.c, mbox.c).
 *
 * A worker listens on its data_addr (a TCP port that answers every
 * connection with the worker's UCX address) and on the ports UCX's own
 * transports open (found from /proc). Attacks, per worker: `nidle` idle
 * TCP connections at data_addr; random bytes at every listening port of
 * the worker; and a rogue data plane of our own (dplane_start in this
 * process) that fetches the worker's UCX address like a peer does and
 * sends well-formed frames: frames with every plausible tag of a running
 * job (its all_reduce's sources and destinations, packed leader frames, a
 * bad source shard) carrying the value 666 under a key that is not the
 * attempt's, and 2 MiB frames for jobs nobody runs. The connections stay
 * open until junk_close(). */
#ifndef ATOLL_TEST_DPLANE_JUNK_H
#define ATOLL_TEST_DPLANE_JUNK_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dplane.h"
#include "mbox.h"
#include "support_harness.h"

#define JUNK_MAX_FDS 8192
#define JUNK_MAX_OPS 4096              /* JOB_MAX_OPS (common/compiler.h) */
#define JUNK_MAX_PORTS 64

typedef struct junk {
    int fds[JUNK_MAX_FDS];
    int nfds;
    int connect_failed;
    int ports_attacked;                /* listening ports other than data_addr */
    int64_t frames_sent;               /* raw sends and rogue frames */
    int64_t rogue_failed;              /* rogue frames dplane_send could not deliver */
    mbox_t *rogue_mb;                  /* the rogue data plane (junk_close frees) */
    dplane_t *rogue;
} junk_t;

static int junk_keep(junk_t *j, int fd)
{
    if (fd < 0) {
        j->connect_failed++;
        return -1;
    }
    if (j->nfds == JUNK_MAX_FDS) {
        close(fd);
        return -1;
    }
    struct timeval tv = {2, 0};         /* never stall on a full socket */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    j->fds[j->nfds++] = fd;
    return fd;
}

static int junk_tcp_port(junk_t *j, const char *addr, int port)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)(port ? port : atoi(colon + 1)))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        fd = -1;
    }
    return junk_keep(j, fd);
}

/* data_addr itself. */
static int junk_tcp(junk_t *j, const char *addr)
{
    return junk_tcp_port(j, addr, 0);
}

/* Whether "/proc/PID/fd" holds socket inode ino. */
static int junk_pid_has_socket(pid_t pid, unsigned long ino)
{
    char dir[64], path[320], want[64], link[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    snprintf(want, sizeof want, "socket:[%lu]", ino);
    DIR *d = opendir(dir);
    int found = 0;
    for (struct dirent *e; d && !found && (e = readdir(d));) {
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n > 0) {
            link[n] = '\0';
            found = strcmp(link, want) == 0;
        }
    }
    if (d)
        closedir(d);
    return found;
}

/* The TCP ports pid listens on (IPv4 and IPv6), from /proc/PID/net/tcp*:
 * data_addr's and whatever UCX's transports opened. Returns how many. */
static int junk_listen_ports(pid_t pid, int *ports, int max)
{
    int n = 0;
    for (int v6 = 0; v6 < 2; v6++) {
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%d/net/tcp%s", (int)pid, v6 ? "6" : "");
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        while (n < max && fgets(line, sizeof line, f)) {
            char local[80];
            unsigned st;
            unsigned long ino;
            /* sl local rem st tx:rx tr:when retr uid timeout inode */
            if (sscanf(line, " %*s %79s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &ino) != 3 ||
                st != 0x0A)
                continue;
            const char *colon = strrchr(local, ':');
            int port = colon ? (int)strtol(colon + 1, NULL, 16) : 0;
            if (port > 0 && junk_pid_has_socket(pid, ino))
                ports[n++] = port;
        }
        fclose(f);
    }
    return n;
}

static void junk_send(junk_t *j, int fd, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;                    /* closed by the worker: fine */
        p += w;
        n -= (size_t)w;
    }
    j->frames_sent++;
}

/* One rogue frame: n values of v, tagged, under key. */
static void junk_rogue_send(junk_t *j, const char *addr, const mbox_tag_t *tag,
                            const mbox_key_t *key, int64_t n, float v)
{
    shape_t sh = {.rank = 1, .dim = {n}};
    tensor_t *t = tensor_new(&sh);
    if (!t)
        return;
    for (int64_t i = 0; i < n; i++)
        t->data[i] = v;
    if (dplane_send(j->rogue, addr, tag, key, t) == 0)
        j->frames_sent++;
    else
        j->rogue_failed++;
    tensor_free(t);
}

/* Every attack on one worker (pid, data address addr). job: a job running
 * now (two-level all_reduce at op index ar_op over 4 shards, 2 per worker);
 * its attempts 0 and 1 are both tried, under a random key. */
static void junk_attack(junk_t *j, pid_t pid, const char *addr, int nidle, int64_t job,
                        int ar_op, unsigned *seed)
{
    for (int i = 0; i < nidle; i++)
        junk_tcp(j, addr);
    uint8_t rnd[4096];
    int ports[JUNK_MAX_PORTS];
    int np = junk_listen_ports(pid, ports, JUNK_MAX_PORTS);
    const char *colon = strrchr(addr, ':');
    int data_port = colon ? atoi(colon + 1) : 0;
    for (int c = 0; c < 20 + 4 * np; c++) {        /* random bytes, every port */
        for (size_t k = 0; k < sizeof rnd; k++)
            rnd[k] = (uint8_t)rand_r(seed);
        int port = c < 20 ? data_port : ports[(c - 20) / 4];
        j->ports_attacked += c >= 20 && (c - 20) % 4 == 0 && port != data_port;
        int fd = junk_tcp_port(j, addr, port);
        if (fd >= 0)
            junk_send(j, fd, rnd, sizeof rnd);
    }
    if (!j->rogue) {
        j->rogue_mb = mbox_new();
        j->rogue = j->rogue_mb ? dplane_start("127.0.0.1:0", NULL, j->rogue_mb, DPLANE_AUTO, NULL)
                               : NULL;
        if (!j->rogue)
            return;
    }
    mbox_key_t wrong;
    for (size_t k = 0; k < sizeof wrong.b; k++)
        wrong.b[k] = (uint8_t)rand_r(seed);
    for (int att = 0; att < 2; att++) {            /* plausible tags, running job */
        for (int dst = 0; dst < 4; dst++) {
            for (int src = 0; src < 4; src++) {
                mbox_tag_t tag = {.job = job, .attempt = att, .op = ar_op, .src = src,
                                  .dst = dst};
                junk_rogue_send(j, addr, &tag, &wrong, 4, 666.0f);
            }
            mbox_tag_t bad_src = {.job = job, .attempt = att, .op = ar_op, .src = 99,
                                  .dst = dst};
            junk_rogue_send(j, addr, &bad_src, &wrong, 4, 666.0f);
            mbox_tag_t pack = {.job = job, .attempt = att, .op = -(1 + ar_op + JUNK_MAX_OPS),
                               .src = dst ^ 2, .dst = dst & 2};
            junk_rogue_send(j, addr, &pack, &wrong, 4, 666.0f);
        }
    }
    /* Last, as a send blocks until the receiver took or declined it: 2 MiB
     * frames nobody claims, within one origin's unclaimed cap (kept until
     * they expire; over the cap they would wait for room, see mbox.h). */
    for (int c = 0; c < 3; c++) {
        mbox_tag_t tag = {.job = 5000 + c, .attempt = 1, .op = c};
        junk_rogue_send(j, addr, &tag, &wrong, (int64_t)1 << 19, 1.0f);
    }
}

/* Which of pids listens on addr's port; -1 when none. */
static pid_t junk_pid_of(const pid_t *pids, int n, const char *addr)
{
    const char *colon = strrchr(addr, ':');
    int want = colon ? atoi(colon + 1) : -1;
    for (int i = 0; i < n; i++) {
        int ports[JUNK_MAX_PORTS];
        int np = junk_listen_ports(pids[i], ports, JUNK_MAX_PORTS);
        for (int k = 0; k < np; k++)
            if (ports[k] == want)
                return pids[i];
    }
    return -1;
}

static void junk_close(junk_t *j)
{
    for (int i = 0; i < j->nfds; i++)
        close(j->fds[i]);
    j->nfds = 0;
    dplane_stop(j->rogue);
    mbox_free(j->rogue_mb);
    j->rogue = NULL;
    j->rogue_mb = NULL;
}


/* Non-zero while pid runs (not exited, not a zombie we have not reaped). */
static int junk_alive(pid_t pid)
{
    int status;
    return pid > 0 && kill(pid, 0) == 0 && waitpid(pid, &status, WNOHANG) == 0;
}

/* The job every check runs: fill 1.0, an optional compute of us
 * microseconds (a window to attack it in), then all_reduce sum over a
 * [2,2] slice: 4.0 everywhere. Its all_reduce is op 2. */
#define JUNK_AR_OP 2
static int junk_submit(hx_client_t *cl, int64_t us, int64_t *id)
{
    char doc[512];
    snprintf(doc, sizeof doc,
             "{\"name\":\"junk\",\"slices\":{\"s\":{\"shape\":[2,2]}},\"computations\":[{"
             "\"name\":\"c\",\"slice\":\"s\",\"ops\":["
             "{\"op\":\"fill\",\"out\":\"x\",\"shape\":[4],\"value\":1.0},"
             "{\"op\":\"compute\",\"out\":\"w\",\"us\":%lld},"
             "{\"op\":\"all_reduce\",\"out\":\"z\",\"args\":[\"x\"],\"reduce\":\"sum\"}],"
             "\"outputs\":[\"z\"]}]}", (long long)us);
    return hx_job_submit(cl, doc, id, NULL) == 201 ? 0 : -1;
}

/* 1: the job succeeded with exactly 4.0 in every element of every shard;
 * 0: it failed (state in *state); -1: it succeeded with wrong values (or
 * could not be read). */
static int junk_check(hx_client_t *cl, int64_t id, char *state, size_t len)
{
    json_t *job = NULL;
    int rc = -1;
    snprintf(state, len, "?");
    if (hx_job_wait(cl, id, 120000, 50, &job) != 0)
        goto out;
    snprintf(state, len, "%s", hx_job_state(job));
    if (strcmp(state, "succeeded") != 0) {
        rc = 0;
        goto out;
    }
    json_t *res = hx_job_result(cl, id);
    rc = res ? 1 : -1;
    for (int s = 0; res && s < 4; s++) {
        json_t *vals = json_object_get(hx_result_shard(res, "c.z", s), "values");
        if (json_array_size(vals) != 4)
            rc = -1;
        for (size_t k = 0; k < json_array_size(vals); k++)
            if (json_number_value(json_array_get(vals, k)) != 4.0)
                rc = -1;
    }
    json_decref(res);
out:
    json_decref(job);
    return rc;
}

/* Fills addrs[n][64] from GET /v1/workers; returns how many. */
static int junk_data_addrs(hx_client_t *cl, char (*addrs)[64], int max)
{
    hx_resp_t r;
    int n = 0;
    if (hx_request(cl, "GET", "/v1/workers", NULL, 0, &r) != 0)
        return 0;
    json_t *ws = json_object_get(r.json, "workers");
    for (size_t i = 0; i < json_array_size(ws) && n < max; i++) {
        const char *a = json_string_value(json_object_get(json_array_get(ws, i), "data_addr"));
        if (a)
            snprintf(addrs[n++], 64, "%s", a);
    }
    hx_resp_clear(&r);
    return n;
}

#endif
