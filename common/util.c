#include "util.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *log_program = "atoll";
static log_level_t log_min = LOG_INFO;
static int log_json;

int64_t util_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t util_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The wall clock's offset from the monotonic one, ns: a wall read between
 * two monotonic reads, the tightest of up to 8 tries. A thread preempted
 * between a wall read and a monotonic read would see an offset off by as
 * long as it waited for a core (milliseconds on a loaded 2-core host); the
 * bracketing monotonic reads show that wait, and the tightest pair is
 * kept. */
static int64_t clock_offset_sample_ns(void)
{
    int64_t best = 0, best_gap = INT64_MAX;
    for (int i = 0; i < 8 && best_gap > 1000; i++) {
        struct timespec a, w, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        clock_gettime(CLOCK_REALTIME, &w);
        clock_gettime(CLOCK_MONOTONIC, &b);
        int64_t m0 = (int64_t)a.tv_sec * 1000000000 + a.tv_nsec;
        int64_t m1 = (int64_t)b.tv_sec * 1000000000 + b.tv_nsec;
        int64_t wn = (int64_t)w.tv_sec * 1000000000 + w.tv_nsec;
        if (m1 - m0 < best_gap) {
            best_gap = m1 - m0;
            best = wn - m0 - (m1 - m0) / 2;
        }
    }
    return best;
}

/* The offset (us) all conversions use, sampled again at most every
 * UTIL_CLOCK_OFFSET_US so that a slewed or stepped wall clock is followed:
 * two conversions in between use the same offset, so their difference is
 * exactly that of their monotonic times. clock_offset is stored before
 * clock_offset_at: a reader that sees the new time sees the new offset. */
#define UTIL_CLOCK_OFFSET_US 1000000
static _Atomic int64_t clock_offset, clock_offset_at;

static int64_t clock_offset_us(void)
{
    int64_t now = util_mono_us(), at = atomic_load(&clock_offset_at);
    if (at != 0 && now - at >= 0 && now - at < UTIL_CLOCK_OFFSET_US)
        return atomic_load(&clock_offset);
    int64_t ns = clock_offset_sample_ns();
    int64_t us = ns >= 0 ? (ns + 500) / 1000 : -((-ns + 500) / 1000);
    atomic_store(&clock_offset, us);
    atomic_store(&clock_offset_at, now);
    return us;
}

int64_t util_mono_to_wall_us(int64_t mono_us)
{
    return mono_us + clock_offset_us();
}

int64_t util_wall_to_mono_us(int64_t wall_us)
{
    return wall_us - clock_offset_us();
}

int util_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int util_grow(void **arr, size_t *cap, size_t n, size_t sz, size_t first)
{
    if (n < *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : first ? first : 1;
    if (want < *cap || (sz && want > SIZE_MAX / sz))
        return -1;
    void *p = realloc(*arr, want * sz);
    if (!p)
        return -1;
    *arr = p;
    *cap = want;
    return 0;
}

/* Below glibc's mmap threshold (128 KiB), calloc memsets too. */
#define UTIL_ZALLOC_MAX ((size_t)64 << 10)

void *util_zalloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    if (bytes > UTIL_ZALLOC_MAX)
        return calloc(n, size);
    void *p = malloc(bytes ? bytes : 1);
    if (p)
        memset(p, 0, bytes);
    return p;
}

size_t util_i64_text(int64_t v, char out[UTIL_I64_TEXT_MAX])
{
    char tmp[UTIL_I64_TEXT_MAX];
    size_t n = sizeof tmp;
    uint64_t u = v < 0 ? 0ULL - (uint64_t)v : (uint64_t)v;
    do
        tmp[--n] = (char)('0' + u % 10);
    while ((u /= 10) != 0);
    if (v < 0)
        tmp[--n] = '-';
    memcpy(out, tmp + n, sizeof tmp - n);
    return sizeof tmp - n;
}

void util_malloc_keep(size_t mmap_min, size_t trim_min)
{
#ifdef __GLIBC__
    if (mallopt(M_MMAP_THRESHOLD, (int)mmap_min) != 1 || mallopt(M_TRIM_THRESHOLD, (int)trim_min) != 1)
        log_warn("mallopt refused; large blocks stay on mmap");
#else
    (void)mmap_min;
    (void)trim_min;
#endif
}

void util_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *))
{
    const char *p = base;
    for (size_t i = 1; i < n; i++)
        if (cmp(p + (i - 1) * size, p + i * size) > 0) {
            qsort(base, n, size, cmp);
            return;
        }
}

size_t util_appendf(char *buf, size_t len, size_t cap, const char *fmt, ...)
{
    if (len >= cap)
        return cap - 1;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return len;
    return (size_t)n < cap - len ? len + (size_t)n : cap - 1;
}

void util_hist_add(util_hist_t *h, int64_t us)
{
    if (us < 0)
        us = 0;
    int b = 0;
    while (b < h->nbounds && us > h->bounds_us[b])
        b++;
    atomic_fetch_add(&h->n[b], 1);
    atomic_fetch_add(&h->sum_us, (uint64_t)us);
}

void util_hist_read(const util_hist_t *h, uint64_t *cumulative, uint64_t *count,
                    uint64_t *sum_us)
{
    /* The sum first: an entry added meanwhile shows in the counts, never
     * in a sum without its count. count always equals the +Inf bucket. */
    *sum_us = atomic_load(&h->sum_us);
    uint64_t run = 0;
    for (int b = 0; b < h->nbounds; b++) {
        run += atomic_load(&h->n[b]);
        cumulative[b] = run;
    }
    *count = run + atomic_load(&h->n[h->nbounds]);
}

size_t util_hist_prom(char *buf, size_t len, size_t cap, const util_hist_t *h,
                      const char *name, const char *help)
{
    uint64_t cum[UTIL_HIST_MAX_BOUNDS], count, sum_us;
    util_hist_read(h, cum, &count, &sum_us);
    len = util_appendf(buf, len, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (int b = 0; b < h->nbounds; b++)
        len = util_appendf(buf, len, cap, "%s_bucket{le=\"%g\"} %lu\n", name,
                           (double)h->bounds_us[b] / 1e6, (unsigned long)cum[b]);
    return util_appendf(buf, len, cap,
                        "%s_bucket{le=\"+Inf\"} %lu\n%s_sum %.6f\n%s_count %lu\n", name,
                        (unsigned long)count, name, (double)sum_us / 1e6, name,
                        (unsigned long)count);
}

void log_setup(const char *program, log_level_t min_level, int json_lines)
{
    log_program = program;
    log_min = min_level;
    log_json = json_lines;
}

static const char *const level_names[] = {"debug", "info", "warn", "error"};

int log_level_parse(const char *text, log_level_t *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(text, level_names[i]) == 0) {
            *out = (log_level_t)i;
            return 0;
        }
    }
    return -1;
}

/* Writes the message with JSON string escaping (quotes, backslash, controls). */
static void log_json_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

void log_msg(log_level_t level, const char *fmt, ...)
{
    if (level < log_min)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    int64_t us = util_wall_us();
    time_t secs = (time_t)(us / 1000000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf per line under flockfile so threads never interleave. */
    flockfile(stderr);
    if (log_json) {
        fprintf(stderr, "{\"ts\":\"%s.%06dZ\",\"level\":\"%s\",\"program\":\"%s\",\"msg\":\"",
                stamp, (int)(us % 1000000), level_names[level], log_program);
        log_json_escaped(stderr, msg);
        fputs("\"}\n", stderr);
    } else {
        fprintf(stderr, "%s.%03dZ %-5s %s: %s\n", stamp, (int)(us % 1000000 / 1000),
                level_names[level], log_program, msg);
    }
    funlockfile(stderr);
}

int log_enabled(log_level_t level)
{
    return level >= log_min;
}

long util_cpu_count(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? n : 1;
}
