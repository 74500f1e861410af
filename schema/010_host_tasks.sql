-- Version 10: host tasks (issue 9; docs/worker-protocol.md).
-- The unit of work handed to a worker is no longer one shard but one host
-- task: one computation of one job attempt, for one worker, covering every
-- shard of that computation whose device the worker holds. Rows per job are
-- O(computations x workers), and no row carries a per-shard address list:
-- the job's placement (jobs.placement, written once per attempt at
-- allocation) lets workers resolve shard -> process themselves.
-- Invariants (kept by server/store*.c inside transactions):
--  * one row per (job_id, attempt, comp_idx, worker_id); `shards` lists the
--    computation's shard indexes on that worker, increasing, and nshards is
--    its length (>= 1); the rows of one (job, attempt, comp) partition the
--    computation's shards;
--  * a row leaves 'leased' at most once (fencing: a report counts once), and
--    a succeeded row adds nshards to computations.shards_done;
--  * rows of attempts older than the job's current one are never
--    'blocked' or 'pending' (a requeue cancels them).
-- The old per-shard rows are dropped: a job that was allocated or running
-- gets a new attempt at start (store_sched_recover) and is dispatched again
-- as host tasks, so nothing needs them.
DROP TABLE tasks;
CREATE TABLE host_tasks (
  id              INTEGER PRIMARY KEY,
  job_id          INTEGER NOT NULL REFERENCES jobs(id),
  attempt         INTEGER NOT NULL,
  comp_idx        INTEGER NOT NULL,
  island_id       INTEGER NOT NULL,
  worker_id       INTEGER NOT NULL,
  seq             INTEGER NOT NULL,
  shards          TEXT NOT NULL,      -- JSON array of shard indexes, increasing
  nshards         INTEGER NOT NULL CHECK (nshards >= 1),
  state           TEXT NOT NULL CHECK (state IN
                    ('blocked','pending','leased','succeeded','failed','cancelled')),
  payload         TEXT NOT NULL,      -- TASK JSON without "task" (docs/worker-protocol.md)
  dispatched_at   INTEGER,
  leased_at       INTEGER,
  started_us      INTEGER,
  inputs_ready_us INTEGER,
  finished_us     INTEGER,
  error           TEXT,
  abort_sent_at   INTEGER             -- see schema/004_faults.sql
);
-- Polls: a worker's pending rows in seq order; its leased rows for aborts.
CREATE INDEX host_tasks_by_worker ON host_tasks(worker_id, state, seq);
-- Requeue, cancel, unblocking (sequential dispatch), per-job progress.
CREATE INDEX host_tasks_by_job ON host_tasks(job_id, attempt, comp_idx);
-- The scheduler looks for abandoned rows every tick: keep that cheap.
CREATE INDEX host_tasks_aborting ON host_tasks(abort_sent_at)
  WHERE state = 'leased' AND abort_sent_at IS NOT NULL;
-- Device accounting: island utilization over a recent window reads only
-- rows that finished inside it.
CREATE INDEX host_tasks_by_island_finish ON host_tasks(island_id, finished_us);
-- The placement of the job's current attempt (PLACEMENT JSON of
-- docs/worker-protocol.md): written at allocation, cleared by a requeue.
ALTER TABLE jobs ADD COLUMN placement TEXT;
