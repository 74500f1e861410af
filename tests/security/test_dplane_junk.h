/* test_dplane_junk.h - a hostile client at every worker's data address,
 * for test_dplane_junk.c and bench/bench_dplane_junk.c (static functions:
 * one copy per program). Needs support_harness.h.
 *
 * The frame format is docs/worker-protocol.md's (workers/dplane.h): a
 * 76-byte big-endian header, then the payload. Attacks, per worker:
 * `nidle` TCP connections that never send a byte plus nidle/8 idle ones on
 * the same-host abstract Unix socket; connections that send random bytes;
 * valid headers claiming 64 MiB payloads that never come; fully sent
 * 4 MiB frames for jobs nobody runs; frames with plausible tags for a
 * running job (bad source shards, and short packs for its two-level
 * all_reduce). The connections stay open until junk_close(). */
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
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support_harness.h"

#define JUNK_MAX_FDS 8192
#define JUNK_HDR 76
#define JUNK_MAX_OPS 4096              /* JOB_MAX_OPS (common/compiler.h) */

typedef struct junk {
    int fds[JUNK_MAX_FDS];
    int nfds;
    int connect_failed;
    int64_t frames_sent;
} junk_t;

static void junk_u32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static void junk_u64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

/* A frame header of a rank-1 tensor of n floats. */
static void junk_hdr(uint8_t *b, int64_t job, int32_t attempt, int32_t comp, int32_t op,
                     int32_t src, int32_t dst, int64_t n)
{
    memset(b, 0, JUNK_HDR);
    junk_u32(b, 0x41544450u);
    junk_u32(b + 4, 1);
    junk_u64(b + 8, (uint64_t)job);
    junk_u32(b + 16, (uint32_t)attempt);
    junk_u32(b + 20, (uint32_t)comp);
    junk_u32(b + 24, (uint32_t)op);
    junk_u32(b + 28, (uint32_t)src);
    junk_u32(b + 32, (uint32_t)dst);
    junk_u64(b + 36, (uint64_t)n);
    junk_u64(b + 68, (uint64_t)n * 4);
}

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

static int junk_tcp(junk_t *j, const char *addr)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    if (!colon || (size_t)(colon - addr) >= sizeof host)
        return -1;
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        fd = -1;
    }
    return junk_keep(j, fd);
}

/* The worker's same-host socket: abstract "@atoll-dp:<data_addr>". */
static int junk_unix(junk_t *j, const char *addr)
{
    struct sockaddr_un su = {.sun_family = AF_UNIX};
    int n = snprintf(su.sun_path + 1, sizeof su.sun_path - 1, "atoll-dp:%s", addr);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&su, len) != 0) {
        close(fd);
        fd = -1;
    }
    return junk_keep(j, fd);
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

/* Every attack on one worker's data address. job: a job running now
 * (two-level all_reduce at op index ar_op over 4 shards, 2 per worker). */
static void junk_attack(junk_t *j, const char *addr, int nidle, int64_t job, int ar_op,
                        unsigned *seed)
{
    for (int i = 0; i < nidle; i++)
        junk_tcp(j, addr);
    for (int i = 0; i < nidle / 8; i++)
        junk_unix(j, addr);
    uint8_t rnd[4096];
    for (int c = 0; c < 20; c++) {                 /* random bytes */
        for (size_t k = 0; k < sizeof rnd; k++)
            rnd[k] = (uint8_t)rand_r(seed);
        int fd = c % 4 == 3 ? junk_unix(j, addr) : junk_tcp(j, addr);
        if (fd >= 0)
            junk_send(j, fd, rnd, sizeof rnd);
    }
    uint8_t h[JUNK_HDR];
    for (int c = 0; c < 10; c++) {                 /* 64 MiB claims, no payload */
        int fd = junk_tcp(j, addr);
        junk_hdr(h, 1 + c, 1, 0, c, 0, c % 4, (int64_t)1 << 24);
        if (fd >= 0)
            junk_send(j, fd, h, sizeof h);
    }
    float *big = calloc((size_t)1 << 20, sizeof *big);   /* 4 MiB payloads */
    for (int c = 0; big && c < 4; c++) {           /* whole frames nobody claims */
        int fd = junk_tcp(j, addr);
        for (int k = 0; fd >= 0 && k < 4; k++) {
            junk_hdr(h, 5000 + c, 1, 0, k, 0, 0, (int64_t)1 << 20);
            junk_send(j, fd, h, sizeof h);
            junk_send(j, fd, big, (size_t)4 << 20);
        }
    }
    free(big);
    int fd = junk_tcp(j, addr);                    /* plausible tags, running job */
    float four[4] = {100, 100, 100, 100}, one[1] = {666};
    for (int att = 0; fd >= 0 && att < 2; att++) {
        for (int dst = 0; dst < 4; dst++) {
            junk_hdr(h, job, att, 0, ar_op, 99, dst, 4);       /* no such source shard */
            junk_send(j, fd, h, sizeof h);
            junk_send(j, fd, four, sizeof four);
            junk_hdr(h, job, att, 0, -(1 + ar_op + JUNK_MAX_OPS), dst ^ 2, dst & 2, 1);
            junk_send(j, fd, h, sizeof h);                     /* short leader pack */
            junk_send(j, fd, one, sizeof one);
        }
    }
}

static void junk_close(junk_t *j)
{
    for (int i = 0; i < j->nfds; i++)
        close(j->fds[i]);
    j->nfds = 0;
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
