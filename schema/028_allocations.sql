-- Version 28: an exclusive allocation is one row per run of consecutive
-- device indexes, not a job id on every device row. A gang's slice is a
-- few runs (a row of the mesh each; a whole island is one), so allocating
-- 2,048 devices is one INSERT instead of 2,048 row updates, each with its
-- foreign-key check (2-7 ms under bench_passes), and freeing them one
-- DELETE through allocations_by_job instead of a scan of every device.
-- Invariant: the runs of one island never overlap (the scheduler checks a
-- run is free in the transaction that inserts it), so the holder of
-- device i is the job of the run with the largest lo <= i, if its hi >= i.
-- Shared jobs still hold devices one row each (device_holds).
CREATE TABLE allocations (
  island_id  INTEGER NOT NULL REFERENCES islands(id),
  lo         INTEGER NOT NULL,
  hi         INTEGER NOT NULL CHECK (hi >= lo),
  job_id     INTEGER NOT NULL REFERENCES jobs(id),
  PRIMARY KEY (island_id, lo)
) WITHOUT ROWID;
CREATE INDEX allocations_by_job ON allocations(job_id);
INSERT INTO allocations (island_id, lo, hi, job_id)
  SELECT island_id, idx, idx, job_id FROM devices WHERE job_id IS NOT NULL;
-- devices without job_id: its foreign key rules out DROP COLUMN, so the
-- table is rebuilt (same columns otherwise, same rows). Nothing
-- references devices, and migrations run before the TEMP triggers that
-- watch it are installed (store/store.c).
CREATE TABLE devices_v28 (
  island_id  INTEGER NOT NULL REFERENCES islands(id),
  idx        INTEGER NOT NULL,        -- row-major index in the island mesh
  coords     TEXT NOT NULL,           -- JSON array
  worker_id  INTEGER REFERENCES workers(id),
  local      INTEGER,                 -- worker-local device number
  busy_us    INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (island_id, idx)
);
INSERT INTO devices_v28 (island_id, idx, coords, worker_id, local, busy_us)
  SELECT island_id, idx, coords, worker_id, local, busy_us FROM devices;
DROP TABLE devices;
ALTER TABLE devices_v28 RENAME TO devices;
