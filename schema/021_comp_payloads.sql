-- Version 21: one payload per computation, not per host task.
-- Every host task of a computation (one per worker holding its shards)
-- carried its own copy of the TASK JSON, the computation's ops and all, so
-- a dispatch serialised and wrote each computation once per worker. What
-- differs per task is its shards and their local devices, which host_tasks
-- already has as columns; the poll splices those into the shared text
-- (store/store_poll.c).
-- Invariant (kept by scheduler/sched_dispatch.c): every host_tasks row has
-- the comp_payloads row of its (job_id, attempt, comp_idx), written in the
-- same transaction.
CREATE TABLE comp_payloads (
  job_id    INTEGER NOT NULL REFERENCES jobs(id),
  attempt   INTEGER NOT NULL,
  comp_idx  INTEGER NOT NULL,
  payload   TEXT NOT NULL,    -- TASK JSON without "task", "shards", "devices"
  PRIMARY KEY (job_id, attempt, comp_idx)
);
INSERT OR IGNORE INTO comp_payloads (job_id, attempt, comp_idx, payload)
  SELECT t.job_id, t.attempt, t.comp_idx, json_remove(p.payload, '$.shards', '$.devices')
  FROM host_tasks t JOIN host_task_payloads p ON p.task_id = t.id ORDER BY t.id;
DROP TABLE host_task_payloads;
