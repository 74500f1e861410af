-- Version 25: host_tasks.state's CHECK as comparisons, not an IN list.
-- SQLite evaluates `state IN (six constants)` by building an ephemeral
-- table of the six values on every statement that writes the column
-- (a fresh in-memory b-tree each time): each host task's insert and each
-- report's update paid for one, ~20K instructions, about a tenth of the
-- statement (callgrind). A chain of ORs checks the same values without
-- it. The constraint can only change with the table, so the table is
-- rebuilt: same columns in the same order, same rows and ids, same
-- indexes (host_tasks_by_finish as version 24 left it). Nothing
-- references host_tasks, and migrations run before the poll watch's
-- TEMP triggers are installed on it (store/store.c).
CREATE TABLE host_tasks_v25 (
  id              INTEGER PRIMARY KEY,
  job_id          INTEGER NOT NULL REFERENCES jobs(id),
  attempt         INTEGER NOT NULL,
  comp_idx        INTEGER NOT NULL,
  island_id       INTEGER NOT NULL,
  worker_id       INTEGER NOT NULL,
  seq             INTEGER NOT NULL,
  shards          TEXT NOT NULL,      -- JSON array of shard indexes, increasing
  nshards         INTEGER NOT NULL CHECK (nshards >= 1),
  state           TEXT NOT NULL CHECK (state = 'blocked' OR state = 'pending'
                    OR state = 'leased' OR state = 'succeeded' OR state = 'failed'
                    OR state = 'cancelled'),
  dispatched_at   INTEGER,
  leased_at       INTEGER,
  started_us      INTEGER,
  inputs_ready_us INTEGER,
  finished_us     INTEGER,
  error           TEXT,
  abort_sent_at   INTEGER,            -- see schema/004_faults.sql
  devices         TEXT NOT NULL DEFAULT '[]'
);
INSERT INTO host_tasks_v25 (id, job_id, attempt, comp_idx, island_id, worker_id, seq, shards,
                            nshards, state, dispatched_at, leased_at, started_us,
                            inputs_ready_us, finished_us, error, abort_sent_at, devices)
  SELECT id, job_id, attempt, comp_idx, island_id, worker_id, seq, shards, nshards, state,
         dispatched_at, leased_at, started_us, inputs_ready_us, finished_us, error,
         abort_sent_at, devices
  FROM host_tasks;
DROP TABLE host_tasks;
ALTER TABLE host_tasks_v25 RENAME TO host_tasks;
CREATE INDEX host_tasks_by_job ON host_tasks(job_id, attempt, comp_idx);
CREATE INDEX host_tasks_aborting ON host_tasks(abort_sent_at)
  WHERE state = 'leased' AND abort_sent_at IS NOT NULL;
CREATE INDEX host_tasks_by_finish ON host_tasks(finished_us) WHERE finished_us IS NOT NULL;
CREATE INDEX host_tasks_by_worker ON host_tasks(worker_id, state, leased_at);
CREATE INDEX host_tasks_by_lease ON host_tasks(leased_at);
