-- Version 14: users' own programs on a slice (DESIGN Part F).
-- run_procs: one row per process of a run computation's attempt, written
-- from the workers' process-state events (docs/worker-protocol.md).
-- run_logs: what those processes wrote, one row per run of same-stream
-- output as workers ship it, in the order written (id order interleaves
-- stdout and stderr as read); per (job, attempt, comp, process, stream)
-- only the newest 8 MiB are kept (older rows are deleted as new ones
-- arrive). A worker that had to drop output says so in the stream.
CREATE TABLE run_procs (
  job_id     INTEGER NOT NULL REFERENCES jobs(id),
  attempt    INTEGER NOT NULL,
  comp_idx   INTEGER NOT NULL,
  process    INTEGER NOT NULL,
  worker_id  INTEGER NOT NULL,
  host       TEXT NOT NULL,
  pid        INTEGER NOT NULL,
  state      TEXT NOT NULL CHECK (state IN ('running','exited','killed')),
  exit_code  INTEGER,
  signal     INTEGER,
  started_at INTEGER NOT NULL,
  ended_at   INTEGER,
  PRIMARY KEY (job_id, attempt, comp_idx, process)
);
CREATE TABLE run_logs (
  id        INTEGER PRIMARY KEY,
  job_id    INTEGER NOT NULL REFERENCES jobs(id),
  attempt   INTEGER NOT NULL,
  comp_idx  INTEGER NOT NULL,
  process   INTEGER NOT NULL,
  stream    INTEGER NOT NULL CHECK (stream IN (1, 2)),
  bytes     BLOB NOT NULL
);
CREATE INDEX run_logs_by_proc ON run_logs(job_id, comp_idx, process, attempt, id);
