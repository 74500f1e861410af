/* runlog.h - shipping users' programs' output and process states to the
 * controller (DESIGN.md Part F), off the processes' path.
 *
 * gang.c hands every chunk a process writes to runlog_output(), which only
 * copies it into that process's buffer (stdout and stderr as segments, in
 * the order read) and returns: a process writing faster than the
 * controller takes its output is never blocked. Each buffer keeps at most
 * RUNLOG_MAX_PENDING unsent bytes; older unsent segments are dropped (the
 * controller keeps only the last 8 MiB anyway) and a line on stderr says
 * how many bytes. One thread POSTs the buffers (at most RUNLOG_POST_BYTES
 * each) and the state events.
 *
 * Thread safety: every function may be called from any thread. */
#ifndef ATOLL_RUNLOG_H
#define ATOLL_RUNLOG_H

#include <stddef.h>
#include <stdint.h>

#include "wclient.h"

#define RUNLOG_MAX_PENDING (8 << 20)
#define RUNLOG_POST_BYTES (512 << 10)

typedef struct runlog runlog_t;

typedef struct runlog_key {
    int64_t job;
    int32_t attempt;
    int32_t comp;
    int32_t process;           /* rank in the gang */
} runlog_key_t;

/* wc is borrowed. NULL on failure. */
runlog_t *runlog_start(wclient_t *wc);
/* stream: 1 stdout, 2 stderr; len at most 64 KiB (gang.c reads that much). */
void runlog_output(runlog_t *rl, const runlog_key_t *k, int stream, const char *data,
                   size_t len);
/* A process started (state "running", pid) or ended ("exited" with
 * exit_code, or "killed" with signal). */
void runlog_event(runlog_t *rl, const runlog_key_t *k, const char *state, int pid,
                  int exit_code, int signal, const char *host);
/* Waits (at most timeout_ms) until everything of (job, attempt, comp)
 * queued so far was sent. 0 when sent, -1 on timeout. */
int runlog_flush(runlog_t *rl, int64_t job, int32_t attempt, int32_t comp, int64_t timeout_ms);
/* Sends what is left (bounded wait), stops the thread, frees. */
void runlog_stop(runlog_t *rl);

#endif
