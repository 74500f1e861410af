/* cpupsi.h - whether this host's CPUs are contended, from Linux's pressure
 * stall information (/proc/pressure/cpu, kernel 4.20 and later).
 *
 * Its "some" line's total is the microseconds in which at least one task
 * was runnable but waited for a CPU. Sampled about once a second, the
 * share of the wall time that grew by says whether threads that spin
 * while they wait (the data plane's waiters, dplane.h) would take a core
 * somebody else needs: many worker processes on one host, or other work
 * beside them. A host without the file (an older kernel, PSI turned off)
 * is never called contended.
 *
 * Not thread-safe: one cpupsi_t per sampling thread. */
#ifndef ATOLL_CPUPSI_H
#define ATOLL_CPUPSI_H

#include <stdint.h>

/* Contended from this share of wall time with a task waiting, uncontended
 * again below CPUPSI_LOW (so a share near the line does not flip the
 * state every sample). */
#define CPUPSI_HIGH 0.10
#define CPUPSI_LOW 0.05

typedef struct cpupsi {
    const char *path;           /* borrowed; "/proc/pressure/cpu" by default */
    int64_t last_total_us;      /* the "some" total at last_at_us; -1: none yet */
    int64_t last_at_us;         /* monotonic */
    int contended;              /* the state after the last sample */
} cpupsi_t;

/* Starts a sampler of path (NULL: /proc/pressure/cpu), uncontended. */
void cpupsi_init(cpupsi_t *p, const char *path);
/* The "some" line's total= from the file's text, or -1 when there is none
 * (or it is not a non-negative integer). */
int64_t cpupsi_parse_total(const char *text);
/* The state after a sample with `share` (0..1) of the time stalled, given
 * the state before: hysteresis between CPUPSI_LOW and CPUPSI_HIGH. */
int cpupsi_next(int was_contended, double share);
/* Reads the file at now_us (monotonic) and returns the state: 1
 * contended, 0 not. The first read, an unreadable file and a sample less
 * than 100 ms after the last leave the state as it was. */
int cpupsi_sample(cpupsi_t *p, int64_t now_us);

#endif
