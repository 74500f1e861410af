/* gang.h - starting and supervising the local processes of a user-program
 * computation (DESIGN.md Part F), until every one of them ended.
 *
 * Each process runs under a shepherd: the worker forks the shepherd (its
 * own process group), which forks the user's program in a second group
 * and reaps it. The shepherd turns SIGTERM into SIGTERM for the program's
 * whole group and SIGUSR2 into SIGKILL for it; its parent-death signal is
 * SIGUSR2, so a worker that dies (even by SIGKILL) takes every descendant
 * of the program with it; when the program exits, whatever it left in its
 * group is killed. The shepherd exits with the program's status (or dies
 * of its signal), so the worker sees the program's own end.
 *
 * gang_run() blocks its thread until every process ended: it reads their
 * stdout and stderr (never blocking them: output is handed to the log
 * callback as it comes), and ends the gang together, SIGTERM then SIGKILL
 * after kill_grace_us, when one process fails, the timeout passes, or
 * stop() says the job was cancelled.
 *
 * Thread safety: gang_run() may run on several threads at once; the
 * callbacks run on the calling thread. Only async-signal-safe calls happen
 * between fork and exec. */
#ifndef ATOLL_GANG_H
#define ATOLL_GANG_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define GANG_TAIL_BYTES 2048           /* stderr kept per process for errors */

typedef struct gang_proc {
    /* In (borrowed, must outlive gang_run): */
    char *const *argv;                 /* argv[0] as the program is found (see below) */
    char *const *envp;
    const char *dir;                   /* working directory */
    int rank;                          /* the process's number in the whole gang */
    /* Out: */
    pid_t pid;                         /* the shepherd's pid (= its process group) */
    int started;
    int status;                        /* waitpid() status once ended */
    int ended;
    char tail[GANG_TAIL_BYTES];        /* last stderr bytes, NUL-terminated */
} gang_proc_t;

typedef enum gang_end {
    GANG_OK = 0,                       /* every process exited 0 */
    GANG_FAILED,                       /* one exited non-zero or was killed: `culprit` */
    GANG_TIMEOUT,
    GANG_STOPPED,                      /* stop() said so (cancel, shutdown) */
    GANG_SPAWN_ERROR,                  /* could not start: `culprit`, reason in err */
} gang_end_t;

typedef struct gang_cfg {
    int run_as;                        /* set uid/gid below in the program */
    uid_t uid;
    gid_t gid;
    int64_t timeout_us;
    int64_t kill_grace_us;             /* SIGTERM -> SIGKILL */
    int (*stop)(void *ctx);            /* polled every few ms; may be NULL */
    /* Output chunk of process i (stream 1 stdout, 2 stderr); may be NULL. */
    void (*output)(void *ctx, int i, int stream, const char *data, size_t len);
    /* Process i started (pid) or ended (its waitpid status); may be NULL. */
    void (*started)(void *ctx, int i, pid_t pid);
    void (*ended)(void *ctx, int i, int status);
    void *ctx;
} gang_cfg_t;

/* Runs n processes to their end. argv[0] is executed as given when it
 * holds a '/' (relative to the process's dir), else found on PATH as the
 * caller resolved it (gang_find_program). Returns how the gang ended;
 * *culprit is the index of the process that failed (GANG_FAILED,
 * GANG_SPAWN_ERROR), err holds a reason for GANG_SPAWN_ERROR. */
gang_end_t gang_run(const gang_cfg_t *cfg, gang_proc_t *procs, int n, int *culprit, char *err,
                    size_t errlen);

/* Finds `name` on the colon-separated `path` (executable regular files);
 * writes the full path into out. 0, or -1 when not found. */
int gang_find_program(const char *name, const char *path, char *out, size_t outlen);

/* "exited with status 3" / "killed by signal 9 (SIGKILL)" into buf. */
void gang_describe_status(int status, char *buf, size_t len);

#endif
