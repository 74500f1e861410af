-- Version 14: users' own programs on a slice (DESIGN Part F).
-- run_procs: one row per process of a run computation's attempt, written
-- from the workers' process-state events (docs/worker-protocol.md).
-- run_logs: what those processes wrote, in chunks as workers ship them;
-- per (job, attempt, comp, process, stream) only the newest 8 MiB are kept
-- (older chunks are deleted as new ones arrive). `offset` is the stream
-- offset of the chunk's first byte: a gap means the worker dropped output
-- the controller could not take in time.
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
  offset    INTEGER NOT NULL,
  bytes     BLOB NOT NULL
);
CREATE INDEX run_logs_by_proc ON run_logs(job_id, comp_idx, process, attempt, id);
