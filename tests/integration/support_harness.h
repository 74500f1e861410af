/* support_harness.h - runs a real Atoll cluster for integration tests and
 * benchmarks: atolld plus workers as child processes, and a small HTTP
 * client for the public API.
 *
 * Shared by tests (cmocka) and bench programs (no cmocka), so nothing here
 * asserts: functions return an error and print why on stderr.
 *
 * Processes: every child is registered in a process-wide table; an atexit
 * handler and fatal-signal handlers kill what is left, and each child also
 * gets PR_SET_PDEATHSIG so it dies with us even on SIGKILL. No fixed ports:
 * atolld binds port 0 and its ready line gives the URL.
 *
 * Threads: start/stop clusters from one thread; each thread that talks HTTP
 * uses its own hx_client_t. */
#ifndef ATOLL_SUPPORT_HARNESS_H
#define ATOLL_SUPPORT_HARNESS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define HX_MAX_WORKERS 32
#define HX_PATH_MAX 512
#define HX_DIR_MAX 256
#define HX_URL_MAX 128

typedef struct hx_proc {
    pid_t pid;                      /* 0 when not running */
    int out_fd;                     /* read end of its stdout pipe, -1 when closed */
    char name[32];                  /* "atolld", "worker-west-0", ... */
    char log_path[HX_PATH_MAX];     /* its stderr */
} hx_proc_t;

typedef struct hx_cluster {
    char dir[HX_DIR_MAX];           /* mkdtemp'd; holds db and logs */
    char url[HX_URL_MAX];           /* "http://127.0.0.1:PORT" */
    hx_proc_t atolld;
    hx_proc_t workers[HX_MAX_WORKERS];
    int nworkers;
    int keep_dir;                   /* set when something failed: logs stay */
} hx_cluster_t;

/* Once per process, before any thread starts: curl global init, cleanup
 * handlers. Returns 0 or -1. */
int hx_init(void);

/* Starts atolld with `islands` ("west=4x4", ...) on a fresh temp dir, waits
 * for its ready line (timeout 15 s). c is zeroed first. 0 or -1 (then
 * everything started is stopped again and the log is printed). */
int hx_cluster_start(hx_cluster_t *c, const char *const *islands, int nislands);
/* Starts one atoll-worker for `island` with `devices` devices and waits for
 * its ready line. 0 or -1. */
int hx_worker_start(hx_cluster_t *c, const char *island, int devices);
/* Like hx_cluster_start, with `extra` (NULL-terminated, may be NULL; at
 * most 16 entries) appended to atolld's arguments, e.g. {"--admin-token",
 * T, NULL}. The ready line may name an http:// or https:// URL. */
int hx_cluster_start_args(hx_cluster_t *c, const char *const *islands, int nislands,
                          const char *const *extra);
/* Like hx_worker_start, with `extra` (as above) appended, waiting at most
 * ready_timeout_ms for the ready line. With `expect_fail` nothing is
 * printed when it does not get ready (a test that wants it refused). On -1
 * the process stays listed; hx_worker_stop_last() takes it away. */
int hx_worker_start_args(hx_cluster_t *c, const char *island, int devices,
                         const char *const *extra, int ready_timeout_ms, int expect_fail);
/* Stops the most recently started worker (SIGTERM if still running, SIGKILL
 * after grace_ms) and forgets it. Returns its wait status (see waitpid),
 * -2 when it had to be killed, -1 when there was none. */
int hx_worker_stop_last(hx_cluster_t *c, int grace_ms);
/* SIGTERM to workers, then atolld; SIGKILL after a 5 s grace each. Returns
 * the number of processes that did not exit with status 0 (contract: exit 0
 * on SIGTERM). Removes the temp dir unless keep_dir. Idempotent. */
int hx_cluster_stop(hx_cluster_t *c);
/* Prints the last `tail_bytes` of each process log to stderr and marks
 * the dir to be kept. */
void hx_cluster_dump_logs(hx_cluster_t *c, size_t tail_bytes);

/* Lower-level process helpers (for harnesses that manage their own
 * processes, e.g. support_faults.c). Spawned children are tracked in the
 * same table, so hx_init()'s exit and fatal-signal handlers kill them;
 * call hx_proc_forget() right after reaping one yourself. */
int hx_proc_spawn(hx_proc_t *p, char *const argv[], int append_log);
/* One line of the child's stdout (no newline) within timeout_ms; 0 or -1. */
int hx_proc_read_line(hx_proc_t *p, char *buf, size_t cap, int timeout_ms);
void hx_proc_forget(pid_t pid);
/* Processes on this machine whose environment holds ATOLL_JOB_ID=id (a
 * users' program's, DESIGN Part F: what must not outlive its job). */
int hx_job_processes(int64_t id);
/* Removes a flat directory (its files, then itself), like a cluster's. */
void hx_remove_dir(const char *dir);
/* Sends sig (0: none), waits up to grace_ms, then SIGKILLs; reaps and
 * forgets p. Returns the wait status, -2 when it had to be killed, -1 when
 * p was not running. */
int hx_proc_stop(hx_proc_t *p, int sig, int grace_ms);
/* VmRSS of pid in KiB (from /proc), or -1. */
long hx_rss_kb(pid_t pid);
/* User + system CPU time of pid so far in microseconds (/proc/PID/stat,
 * clock-tick resolution), or -1. */
int64_t hx_cpu_us(pid_t pid);
/* pid's CPU time in µs to the nanosecond: the sum of its live threads'
 * /proc/PID/task/TID/schedstat (threads that ended are not counted; -1
 * when none can be read). For windows of milliseconds, where
 * hx_cpu_us's clock ticks (10 ms) are too coarse. */
int64_t hx_sched_cpu_us(pid_t pid);
/* The same for pid's threads named comm (/proc/PID/task/TID/comm), summed;
 * -1 when none is found. */
int64_t hx_thread_cpu_us(pid_t pid, const char *comm);
/* $ATOLL_BIN_DIR, or build/bin. */
const char *hx_bin_dir(void);

/* ---- HTTP ---- */

typedef struct hx_resp {
    long status;                    /* 0 when the transport failed */
    char *body;                     /* NUL-terminated, owned; may be "" */
    size_t len;
    json_t *json;                   /* parsed body or NULL; owned (one ref) */
    char ctype[96];                 /* Content-Type, "" when none */
    char location[256];             /* Location header, "" when none */
} hx_resp_t;

typedef struct hx_client {
    void *curl;                     /* CURL *, reused so connections stay alive */
    char base[HX_URL_MAX];
    /* Optional, "" when unused: sent with every request / trusted for
     * https:// (set with hx_client_set_auth; zeroed by hx_client_init). */
    char auth_header[256];          /* "Authorization: Bearer ..." */
    char ca_file[HX_PATH_MAX];
    /* The last exchange, for failure reports. */
    char last_req[512];             /* "POST /v1/jobs {...}" (truncated) */
    char last_resp[1024];           /* "201 {...}" (truncated) */
} hx_client_t;

int hx_client_init(hx_client_t *cl, const char *base_url);
void hx_client_cleanup(hx_client_t *cl);
/* Performs one request; body may be NULL. Fills r (release with
 * hx_resp_clear). Returns 0 when an HTTP answer came back (any status), -1
 * on transport failure or OOM. */
int hx_request(hx_client_t *cl, const char *method, const char *path,
               const char *body, size_t body_len, hx_resp_t *r);
/* Same, with `headers` ("Name: value" strings, NULL-terminated, may be
 * NULL) added to the request. */
int hx_request_h(hx_client_t *cl, const char *method, const char *path, const char *body,
                 size_t body_len, const char *const *headers, hx_resp_t *r);
/* One call as a worker: secret (NULL: none) in X-Atoll-Worker-Secret,
 * body (may be NULL) of len bytes. The status, 0 on a transport failure;
 * *out (when not NULL) the JSON answer, a new reference or NULL. */
long hx_worker_call(hx_client_t *cl, const char *secret, const char *method, const char *path,
                    const char *body, size_t len, json_t **out);
/* Sets (token non-NULL) or clears the bearer token and the CA file (NULL:
 * libcurl's default trust) of a client. 0, or -1 when one is too long. */
int hx_client_set_auth(hx_client_t *cl, const char *token, const char *ca_file);
void hx_resp_clear(hx_resp_t *r);
/* The value of the unlabelled sample `name` in GET /metrics, or -1 when it
 * is absent or the request failed. */
double hx_metric(hx_client_t *cl, const char *name);
/* The same, in the text of one /metrics answer (figures read together). */
double hx_metric_in(const char *text, const char *name);
/* Prints the client's last request and response to stderr. */
void hx_client_print_last(const hx_client_t *cl);

/* ---- jobs ---- */

/* Parses a JSON text written with single quotes instead of double quotes
 * (tests embed many documents; none contains an apostrophe). New reference
 * or NULL (error printed). */
json_t *hx_json_q(const char *text_with_single_quotes);
/* Text of a JSON written with single quotes: malloc'd, caller frees. */
char *hx_text_q(const char *text_with_single_quotes);

/* POSTs the document; returns the HTTP status (201 expected) or -1, and on
 * 201 stores the job id in *id. r (optional) receives the response. */
int hx_job_submit(hx_client_t *cl, const char *doc, int64_t *id, hx_resp_t *r);
/* GET /v1/jobs/{id}: new reference or NULL. */
json_t *hx_job_get(hx_client_t *cl, int64_t id);
/* The job's state ("queued", ...) borrowed from job, or "" . */
const char *hx_job_state(const json_t *job);
int hx_state_terminal(const char *state);
/* Follows GET /v1/jobs/{id}?wait_ms=... (the server answers when the job
 * is final) until a terminal state or timeout_ms; against a server that
 * answers at once, polls every poll_ms. Returns 0 and stores the last job
 * object (new ref) in *job (may be NULL), or -1 on timeout/transport
 * failure (last object still stored when there was one). */
int hx_job_wait(hx_client_t *cl, int64_t id, int timeout_ms, int poll_ms, json_t **job);
/* Submits doc and waits (hx_job_wait) for it to end: 0 when it succeeded;
 * -1 when it was refused (the exchange printed to stderr), timed out or
 * ended otherwise (its state printed). For loops of jobs in benchmarks. */
int hx_job_run(hx_client_t *cl, const char *doc, int timeout_ms, int poll_ms);
/* Polls until the job's state is not `state` anymore; like hx_job_wait. */
int hx_job_wait_leave(hx_client_t *cl, int64_t id, const char *state, int timeout_ms,
                      int poll_ms, json_t **job);
/* A job document (malloc'd text, NULL when out of memory): a chain of n
 * computations named c0..c{n-1} on one slice `s` of shape [d0] (d1 <= 0) or
 * [d0,d1] on `island` (NULL: the default), each `us` µs of `compute` and an
 * edge from the one before; "sharing": "shared" when shared. */
char *hx_compute_chain_doc(const char *name, int n, int64_t us, int shared, const char *island,
                           int d0, int d1);
/* GET /v1/jobs/{id}/result on 200: new reference, else NULL. */
json_t *hx_job_result(hx_client_t *cl, int64_t id);
/* GET /v1/jobs/{id}/PART (e.g. "program", "result?view=global") on 200
 * with a JSON object: new reference, else NULL. */
json_t *hx_job_part(hx_client_t *cl, int64_t id, const char *part);
/* A job timestamp in Unix µs: times_us.NAME ("created", "allocated",
 * "started", "finished"), or NAME_us at the top level; -1 when absent. */
int64_t hx_job_time_us(const json_t *job, const char *name);
/* computations[comp].times_us.NAME of a job ("dispatched", "started",
 * "inputs_ready", "finished"); -1 when absent. */
int64_t hx_comp_time_us(const json_t *job, int comp, const char *name);
/* outputs[key][shard] of a result object (borrowed) or NULL. */
json_t *hx_result_shard(const json_t *result, const char *key, int shard);

/* Sleeps ms milliseconds (the poll interval). */
void hx_sleep_ms(int ms);
int64_t hx_now_ms(void);
/* qsort comparator: int64_t ascending. */
int hx_cmp_i64(const void *a, const void *b);

#endif
