/* exec_coll.h - the collectives of a running host task (exec_coll.c):
 * all_reduce, all_gather, reduce_scatter, all_to_all and ppermute over
 * the task's slice, local shards combined in memory, one packed message
 * per pair of processes (or through the slice's root, for large slices).
 * Called by exec_run.c on the task's runner thread; stands on exec_io.h. */
#ifndef ATOLL_EXEC_COLL_H
#define ATOLL_EXEC_COLL_H

#include "exec_io.h"

/* Runs collective op i for every local shard: args[l] is shard l's
 * argument (borrowed), outs[l] receives its result (caller owns). Sends
 * every pack first, then blocks for the peers' (each take bounded by the
 * peer timeout). ready_us: when the local arguments exist (a `sim`
 * device's clock, tensor_t.ready_us); packs carry it, and the results
 * exist when the last contribution of any process does. Returns 0, or -1
 * with r->err or r->cancelled set (outs all NULL then). */
int exec_coll_run(run_t *r, int i, int64_t ready_us, const tensor_t *const *args,
                  tensor_t **outs);

#endif
