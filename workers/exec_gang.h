/* exec_gang.h - a run computation's user processes inside a host task
 * (exec_gang.c, DESIGN.md Part F): the gang start with the slice's other
 * workers, working directories, environment and command, outputs read
 * back. Called by exec_run.c on the task's runner thread; stands on
 * exec_io.h (messages to the gang's root) and gang.h (the processes). */
#ifndef ATOLL_EXEC_GANG_H
#define ATOLL_EXEC_GANG_H

#include "exec_io.h"

/* A run computation's `run_output` op i (DESIGN Part F): the first call
 * runs the gang of local processes (inputs written as .npy, outputs read
 * back), blocking until every process ended (bounded by the run's
 * timeout_s; the job's cancel ends them); each call hands over op i's
 * tensors, one per local shard (caller owns them; NULL for the
 * placeholder op of a run without outputs). i = -1 only runs the gang.
 * Returns 0, or -1 with r->err or r->cancelled set. */
int exec_gang_output(run_t *r, int i, tensor_t **outs);
/* Frees what the gang left untaken (r->gang_outs). */
void exec_gang_cleanup(run_t *r);

#endif
