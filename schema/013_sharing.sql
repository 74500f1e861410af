-- Version 13: shared devices (DESIGN Part D). An exclusive job holds its
-- devices through devices.job_id, as before; a job with "sharing":
-- "shared" holds them through device_holds, one row per device and job, on
-- devices that no exclusive job holds. A device with a hold row is
-- allocated, like one with job_id; both are released when the job ends or
-- is requeued.
ALTER TABLE jobs ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;
CREATE TABLE device_holds (
  island_id  INTEGER NOT NULL,
  idx        INTEGER NOT NULL,
  job_id     INTEGER NOT NULL REFERENCES jobs(id),
  PRIMARY KEY (island_id, idx, job_id)
) WITHOUT ROWID;
CREATE INDEX device_holds_by_job ON device_holds(job_id);
-- The scheduler's feed pass (interleaving shared jobs) reads the live
-- shared jobs after every computation of one finishes.
CREATE INDEX jobs_shared_live ON jobs(id) WHERE shared = 1 AND state IN ('allocated', 'running');
