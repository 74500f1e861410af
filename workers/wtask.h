/* wtask.h - a shard task as handed out by the controller's poll answer.
 *
 * wtask_parse() checks and copies the TASK object of
 * docs/worker-protocol.md into a wtask_t, so the executor never touches
 * untrusted JSON except `computation` (which compiler_comp() validates).
 * Ownership: a wtask_t owns its arrays and one reference to each JSON
 * member it keeps; free with wtask_free(). */
#ifndef ATOLL_WTASK_H
#define ATOLL_WTASK_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "dplane.h"
#include "tensor.h"

typedef struct wtask_send {
    char value[NAME_MAX_LEN];   /* value name in this computation */
    int32_t comp;               /* consumer computation index */
    int32_t op;                 /* the consumer's `input` op index */
    char to[DPLANE_ADDR_MAX];   /* consumer worker's data_addr */
} wtask_send_t;

typedef struct wtask {
    int64_t id;
    int64_t job;
    int32_t attempt;
    int32_t comp;
    int64_t seq;
    int32_t shard;
    int32_t device;             /* worker-local device */
    shape_t slice_shape;
    json_t *computation;        /* owned reference */
    json_t *input_shapes;       /* owned reference; an object, maybe empty */
    int npeers;                 /* == numel(slice_shape) */
    char (*peers)[DPLANE_ADDR_MAX];
    int nsends;
    wtask_send_t *sends;
} wtask_t;

/* Returns 0 and sets *out, or -1 with a reason in err. *task_id is set to
 * the task's id whenever one could be read (else -1), so that a malformed
 * task can still be reported failed. */
int wtask_parse(const json_t *j, wtask_t **out, int64_t *task_id, char *err, size_t errlen);
void wtask_free(wtask_t *t);

/* compiler_input_fn over a task's input_shapes (ctx: the wtask_t). */
int wtask_input_shape(void *ctx, const char *from, shape_t *shape);

/* Parses a JSON array of 0..max_rank non-negative integers into a shape;
 * min_dim is the smallest dim allowed. Returns 0 or -1. */
int wtask_shape_from_json(const json_t *a, int max_rank, int64_t min_dim, shape_t *out);

#endif
