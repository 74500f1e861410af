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
-- Rows written before this version are runs of one: a succeeded one
-- counted its computation (the job view counts a run's first `done`
-- computations as reported), and its computation's device time came from
-- its stamps.
UPDATE host_tasks SET done = 1 WHERE state = 'succeeded';
UPDATE computations SET busy_us = COALESCE((SELECT SUM(MAX(0, t.finished_us - t.inputs_ready_us)
    * t.nshards) FROM host_tasks t JOIN jobs j ON j.id = t.job_id
  WHERE t.job_id = computations.job_id AND t.attempt = j.attempt
    AND t.comp_idx = computations.idx AND t.state = 'succeeded'), 0)
  WHERE shards_done > 0;
