/* util.h - clocks and leveled logging to stderr, shared by both programs. */
#ifndef ATOLL_UTIL_H
#define ATOLL_UTIL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Unix time in microseconds (CLOCK_REALTIME): for timestamps stored/reported. */
int64_t util_wall_us(void);
/* Monotonic microseconds (CLOCK_MONOTONIC): for durations and deadlines. */
int64_t util_mono_us(void);
/* A monotonic time as unix time, and back, by the clocks' offset (a
 * deadline or a modelled time that is to be stamped or sent). The offset
 * is sampled so that a preemption cannot skew it, and kept for up to a
 * second: conversions in between differ exactly as their inputs do. */
int64_t util_mono_to_wall_us(int64_t mono_us);
int64_t util_wall_to_mono_us(int64_t wall_us);
/* The value of hex digit c (0-9, a-f, A-F), or -1 when c is not one. */
int util_hex_digit(char c);
/* Writes v in decimal (at most 20 bytes, no NUL) into out and returns how
 * many bytes: the integer text of JSON answers, without printf's ~1,200
 * instructions a call. */
#define UTIL_I64_TEXT_MAX 20
size_t util_i64_text(int64_t v, char out[UTIL_I64_TEXT_MAX]);

/* calloc(n, size) for the small blocks of hot paths: glibc's calloc goes
 * past the thread's cache of free blocks (tcache) to the arena, under its
 * lock (~200 instructions a call, stop 74), where malloc + memset takes a
 * cached block. Large blocks keep calloc, whose fresh pages come zeroed.
 * NULL on overflow or out of memory; free() releases. */
void *util_zalloc(size_t n, size_t size);

/* qsort(base, n, size, cmp) unless base is in order already (one pass
 * of n - 1 comparisons): a whole island's 2,048 placement entries, which a
 * one-slice gang lists in island order, cost their allocation's pass the
 * sort's n log n comparisons every time. */
void util_sort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));

/* The CPUs this process may run on: its affinity mask's count (a
 * container's cpuset, taskset), else the online CPUs; at least 1. */
long util_cpu_count(void);

/* A hint inside a spin-wait loop (x86 pause, arm yield): the spinning
 * core backs off for its sibling hyper-thread and the memory bus. */
static inline void util_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

/* Makes room in *arr (capacity *cap elements of size sz) for one more
 * than n, doubling (first elements at first: 1 for lists that are nearly
 * always one long, where a larger block would leave malloc's per-thread
 * cache): a list of n costs O(n). 0, or -1 (out of memory or past
 * SIZE_MAX: *arr and *cap unchanged). */
int util_grow(void **arr, size_t *cap, size_t n, size_t sz, size_t first);

/* Appends printf-formatted text to buf (capacity cap, cap > 0) at len and
 * returns the new length; text that does not fit is cut, and the result is
 * then cap - 1 (buf stays NUL-terminated), so calls can be chained. */
size_t util_appendf(char *buf, size_t len, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A duration histogram for /metrics: per-bucket counts (not cumulative;
 * the last one counts what is past the largest bound) and their sum,
 * updated and read lock-free by any thread (a reading may show an entry in
 * some figures and not yet in others; the next catches up). bounds_us:
 * increasing upper bounds, nbounds <= UTIL_HIST_MAX_BOUNDS, a static array
 * the histogram borrows. Initialize as {.bounds_us = b, .nbounds = n}. */
#define UTIL_HIST_MAX_BOUNDS 16
typedef struct util_hist {
    const int64_t *bounds_us;
    int nbounds;
    _Atomic uint64_t n[UTIL_HIST_MAX_BOUNDS + 1];
    _Atomic uint64_t sum_us;
} util_hist_t;
void util_hist_add(util_hist_t *h, int64_t us);        /* us < 0 counts as 0 */
/* Entries at or under each bound (cumulative, as Prometheus wants:
 * cumulative has nbounds entries), all entries, and their total in µs. */
void util_hist_read(const util_hist_t *h, uint64_t *cumulative, uint64_t *count,
                    uint64_t *sum_us);
/* Appends h as the Prometheus histogram family `name`, in seconds (HELP,
 * TYPE, a bucket per bound and +Inf, _sum, _count), as util_appendf. */
size_t util_hist_prom(char *buf, size_t len, size_t cap, const util_hist_t *h,
                      const char *name, const char *help);

/* glibc's allocator keeps what a program frees: blocks up to mmap_min
 * come from the heap (not a fresh mmap each), and up to trim_min of free
 * heap stays mapped instead of going back to the kernel, so a program
 * that frees and allocates the same large sizes again and again stops
 * paying page faults (and, for threads' arenas, mprotect calls) for them.
 * Call once at start; logs a warning if refused. No-op without glibc. */
void util_malloc_keep(size_t mmap_min, size_t trim_min);

typedef enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR } log_level_t;

/* Process-wide settings; call once at start before threads exist. */
void log_setup(const char *program, log_level_t min_level, int json_lines);
int log_level_parse(const char *text, log_level_t *out);
void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Non-zero when messages of this level are printed (skip building them
 * otherwise). */
int log_enabled(log_level_t level);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
