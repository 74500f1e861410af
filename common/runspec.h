/* runspec.h - the `run` object of a user-program computation (DESIGN.md
 * Part F): what to start on a slice, checked and copied out of untrusted
 * JSON.
 *
 * The controller parses it when a job is submitted (400s name the field
 * under "computations[i].run") and every worker parses it again from its
 * task, so both sides apply one set of limits.
 *
 * Ownership: runspec_parse() returns a runspec_t that owns every string
 * and array in it; free with runspec_free(). The JSON is borrowed. */
#ifndef ATOLL_RUNSPEC_H
#define ATOLL_RUNSPEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define RUNSPEC_MAX_ARGS 256           /* command entries */
#define RUNSPEC_MAX_ARG_LEN 4096       /* bytes per entry */
#define RUNSPEC_MAX_ENV 128            /* env entries */
#define RUNSPEC_MAX_ENV_VALUE 4096     /* bytes per value */
#define RUNSPEC_MAX_FILES 64
#define RUNSPEC_MAX_FILES_BYTES (256 * 1024)   /* all files together (Part F) */
#define RUNSPEC_MAX_NAME 128           /* file names, env keys, image names */
#define RUNSPEC_TIMEOUT_DEFAULT 3600
#define RUNSPEC_TIMEOUT_MAX (7 * 24 * 3600)
#define RUNSPEC_MAX_VALUES 64          /* inputs, outputs of a run computation */

typedef struct runspec {
    int per_host;                      /* "per": "host" (else one process per shard) */
    int64_t timeout_s;
    int argc;
    char **argv;                       /* argc entries + NULL */
    int nenv;
    char **env;                        /* "KEY=VALUE" */
    int nfiles;
    char **fname;                      /* plain names: no '/', not "." or ".." */
    char **fdata;
    size_t *flen;
    char image[RUNSPEC_MAX_NAME];      /* "" = on the host */
} runspec_t;

/* Parses and checks a run object. field_prefix is the JSON path of the
 * object ("computations[2].run"); errors are 400 at PREFIX.KEY. `shapes`
 * (declared output shapes) is accepted but left to the compiler. Returns 0
 * and *out, or the status with e filled. */
int runspec_parse(const json_t *j, const char *field_prefix, runspec_t **out, err_t *e);
void runspec_free(runspec_t *r);

/* Non-zero when `key` is one of the variables Atoll sets for every process
 * (RANK, MASTER_PORT, ATOLL_*, ...): a job's env may not set them. */
int runspec_reserved_env(const char *key);

#endif
