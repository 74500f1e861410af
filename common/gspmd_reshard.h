/* gspmd_reshard.h - moving a value from one sharding to another with the
 * fewest elements moved: one collective permute, or all_to_all moves,
 * all_gathers and local shard_slices; finishing partial sums; and the
 * operands of an op in the layout it needs.
 *
 * Work on the lowering state (gspmd_state.h): emit lowered ops into L
 * (or, dry, only count their cost) and record layouts in L's cache.
 * rs_t lives on the caller's stack; its name is a lowered value's name. */
#ifndef ATOLL_GSPMD_RESHARD_H
#define ATOLL_GSPMD_RESHARD_H

#include <stdint.h>

#include "compiler_types.h"
#include "gspmd_state.h"

/* Reshard planner and emitter in one: moves `name` (global shape gs,
 * laid out as *cur, not partial) to layout *to, updating cur and name.
 * With `dry`, counts the elements moved instead of emitting. */
typedef struct rs {
    lw_t *L;
    const shape_t *gs;
    shd_t cur;
    char name[NAME_MAX_LEN];
    int dry;
    int64_t cost;
} rs_t;

/* Moves r's value from r->cur to `to` (not partial). 0 or -1 (OOM). */
int rs_run(rs_t *r, const shd_t *to);
/* Elements moved resharding a value of global shape gs from `from` to `to`. */
int64_t rs_cost(lw_t *L, const shape_t *gs, const shd_t *from, const shd_t *to);
/* Finishes a partial value: reduce_scatter when `want` splits a dim that
 * is unsplit now over exactly the partial axes (sum only), else
 * all_reduce. Updates r. 0 or -1. */
int rs_finish_partial(rs_t *r, const shd_t *want, reduce_kind_t kind);
/* Writes to buf the name of value v laid out as `want` (emitting the
 * reshard the first time it is asked for). Returns buf, or NULL. */
const char *rs_operand(lw_t *L, int v, const shd_t *want, char *buf);

#endif
