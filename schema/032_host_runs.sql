-- Version 32: a host task covers a run of computations (issue 9): the
-- computations comp_idx .. comp_idx + ncomps - 1 of its job, consecutive
-- in the job's dispatch order, on one slice (so on the same shards of the
-- same worker) and with consecutive island sequence numbers seq ..
-- seq + ncomps - 1. A chain on one slice so costs one row, one poll entry
-- and one fenced task per (run, worker), not per (computation, worker).
-- done: how many of them the worker reported succeeded, in order; the row
-- stays 'leased' until the last (or a failure or cancel ends it). Its
-- started_us/inputs_ready_us are its first computation's, finished_us its
-- last one's. A run is written only for an exclusive job under parallel
-- dispatch; every other host task has ncomps = 1.
ALTER TABLE host_tasks ADD COLUMN ncomps INTEGER NOT NULL DEFAULT 1;
ALTER TABLE host_tasks ADD COLUMN done INTEGER NOT NULL DEFAULT 0;
-- A computation's device time (sum over its reported shards of finished -
-- inputs ready), kept as reports come: the job view read it from the host
-- tasks' stamps, which a run now has per run, not per computation.
ALTER TABLE computations ADD COLUMN busy_us INTEGER NOT NULL DEFAULT 0;
