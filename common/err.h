/* err.h - the error record used by validation code (compiler, codecs).
 *
 * A validator fills one err_t and returns non-zero; the HTTP layer turns it
 * into an application/problem+json body. `field` is a JSON-path-like name of
 * the culprit, e.g. "computations[1].ops[2].args[0]" or "slices.a.shape". */
#ifndef ATOLL_ERR_H
#define ATOLL_ERR_H

#define ERR_FIELD_MAX 160
#define ERR_DETAIL_MAX 320

typedef struct err {
    int status;                     /* HTTP status: 400, 413, 422, ... */
    char field[ERR_FIELD_MAX];      /* "" when the fault is not one field */
    char detail[ERR_DETAIL_MAX];    /* one sentence for a human */
} err_t;

/* Fills e (if not NULL) and returns status, so callers can write
 * `return err_set(e, 400, "slices.a.shape", "must have 1 to 3 dims");` */
int err_set(err_t *e, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
