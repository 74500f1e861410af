/* support_faults.h - processes for fault-injection tests: atolld on a
 * chosen port and database (so it can be killed and restarted on the same
 * ones) and workers that can be killed with SIGKILL at any moment.
 *
 * They are spawned and tracked by support_proc.c (hx_proc_spawn), with its
 * safety net: PR_SET_PDEATHSIG, and exit and fatal-signal handlers that kill
 * what is left (call hx_init() first). Start, kill and reap them from the
 * main thread only: PDEATHSIG fires when the thread that forked exits. */
#ifndef ATOLL_SUPPORT_FAULTS_H
#define ATOLL_SUPPORT_FAULTS_H

#include <stddef.h>
#include <stdint.h>

#include "support_harness.h"

/* Starts atolld on `dir`/atoll.db listening on 127.0.0.1:`port` (0 picks
 * one) with --lease-ms `lease_ms` and the islands; its stderr is appended
 * to `dir`/`name`.log. Waits for the ready line (15 s), then stores its URL
 * in url and the port in *port_out. 0 or -1 (error printed). */
int fx_atolld_start(hx_proc_t *p, const char *dir, const char *name, int port, int lease_ms,
                    const char *const *islands, int nislands, char *url, size_t url_cap,
                    int *port_out);
/* Starts atoll-worker for `island` with `devices` devices against url;
 * stderr appended to `dir`/`name`.log. Waits for its ready line up to
 * timeout_ms. 0 or -1; on -1 the process may still run (p->pid > 0). */
int fx_worker_start(hx_proc_t *p, const char *dir, const char *name, const char *url,
                    const char *island, int devices, int timeout_ms);
/* POST /v1/jobs with an Idempotency-Key header (timeout 10 s). Returns
 * the HTTP status (-1: no answer) and, on 200/201, the job id in *id. */
int fx_submit(const char *url, const char *doc, const char *key, int64_t *id);
/* Sets (on = 1) the environment that makes the next atolld started load
 * tests/integration/shim_syncgate.c, with its fdatasync held while the
 * file `gate` exists and refused (EIO) while the file `fail` exists
 * (either may be NULL); on = 0 puts the environment back as it was, so
 * that later processes (workers) start without it. Call around the start,
 * from the main thread. 0 or -1 (out of memory). */
int fx_syncgate_env(int on, const char *gate, const char *fail);
/* kill -9 and reap. No-op when p is not running. */
void fx_kill(hx_proc_t *p);
/* SIGTERM, wait up to grace_ms (then SIGKILL), reap. Returns 1 when it
 * exited with status 0, else 0. */
int fx_term(hx_proc_t *p, int grace_ms);

#endif
