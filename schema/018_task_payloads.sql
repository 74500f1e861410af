-- Version 18: host task payloads in their own table.
-- SQLite rewrites a whole row to change one column, so every lease and
-- every report (state, times) copied the task's payload, the TASK JSON
-- with its computation's ops (kilobytes for a partitioned program, past a
-- page for a large one), and journalled its pages: the same cost that
-- moved job documents to job_docs (version 17). The host_tasks row is now
-- small and hot; the payload is written once and read by the poll that
-- leases it. A report's device accounting read the payload's "devices"
-- too: they get their own small column.
-- Invariant (kept by store/store_sched.c): every host_tasks row has one
-- host_task_payloads row, written in the same transaction.
CREATE TABLE host_task_payloads (
  task_id  INTEGER PRIMARY KEY REFERENCES host_tasks(id),
  payload  TEXT NOT NULL          -- TASK JSON without "task" (docs/worker-protocol.md)
);
INSERT INTO host_task_payloads (task_id, payload) SELECT id, payload FROM host_tasks;
-- The worker-local devices of the task's shards, in shard order (JSON array).
ALTER TABLE host_tasks ADD COLUMN devices TEXT NOT NULL DEFAULT '[]';
UPDATE host_tasks SET devices = COALESCE(json_extract(payload, '$.devices'), '[]');
ALTER TABLE host_tasks DROP COLUMN payload;
