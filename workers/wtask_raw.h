/* wtask_raw.h - a TASK as its text was read, before it is checked
 * (internal to wtask.c and wtask_read.c).
 *
 * wtask_read.c reads a TASK's members, in whatever order its text lists
 * them, into a wtask_raw_t (and the task's shards and devices arrays);
 * wtask_check() in wtask.c then checks them against each other and the
 * placement and compiles the computation. Ownership: the raw task owns
 * its arrays and trees until wtask_raw_free(); the input keys and the
 * computation's text point into the task's text, which must outlive the
 * check. */
#ifndef ATOLL_WTASK_RAW_H
#define ATOLL_WTASK_RAW_H

#include <jansson.h>
#include <stdint.h>

#include "jscan.h"
#include "wtask.h"

/* The members of a TASK the reader knows (others are skipped), named in
 * wtask_member_names. The first five are integers (wtask_raw_t.ints). */
enum {
    WT_TASK, WT_JOB, WT_ATTEMPT, WT_COMP, WT_SEQ, WT_SLICE, WT_SLICE_SHAPE, WT_COMPUTATION,
    WT_INPUT_SHAPES, WT_SHARDS, WT_DEVICES, WT_SENDS, WT_FULL_VALUES, WT_COUNT
};
extern const char *const wtask_member_names[WT_COUNT];

/* An input's shape as "input_shapes" lists it. */
typedef struct wtask_raw_input {
    jscan_str_t from;                  /* the key, borrowed from the task's text */
    shape_t shape;
    int ok;                            /* shape is 0..TENSOR_MAX_RANK positive dims */
} wtask_raw_input_t;

/* A send as read; wtask_check checks it once the whole task is read. */
typedef struct wtask_raw_send {
    char value[NAME_MAX_LEN];
    int value_ok;
    int64_t comp, op;                  /* -1: missing, or not an integer in range */
    int slice;                         /* index in the placement, -1: none */
    json_t *reshard;                   /* owned; NULL: none */
} wtask_raw_send_t;

/* A task's members as read. Owns inputs, sends (and their reshards), comp
 * and full (wtask_raw_free); shards and devices are read into the task's own
 * arrays (ndevices long). */
typedef struct wtask_raw {
    unsigned seen;                     /* bit per WT_* read */
    int repeated;                      /* a member read twice (WT_*), -1: none */
    int oom;
    int64_t ints[WT_SEQ + 1];
    unsigned int_ok;                   /* bit per WT_TASK..WT_SEQ read as an integer */
    char slice[NAME_MAX_LEN];
    int slice_ok, shape_ok;            /* slice_shape is read into the task */
    const char *comp_text;             /* "computation" when an object: its text,
                                          borrowed from the task's (plancache.h) */
    size_t comp_len;
    int inputs_bad;                    /* "input_shapes" not an object, or too long */
    wtask_raw_input_t *inputs;
    int ninputs;
    size_t cap_inputs;
    int nshards, ndevs;                /* entries read (ndevices + 1: too many), -2: none */
    int sends_bad;                     /* "sends" not an array, or too long */
    wtask_raw_send_t *sends;
    int nsends;
    size_t cap_sends;
    json_t *full;                      /* "full_values", any value */
} wtask_raw_t;


/* Checks r (read into t as well) and fills t: ids, slice, shards, sends,
 * full values, the compiled plan or its reason. 0, or -1 with err. */
int wtask_check(wtask_raw_t *r, wtask_t *t, int ndevices, char *err, size_t errlen);
void wtask_raw_free(wtask_raw_t *r);

#endif
