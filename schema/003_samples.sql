-- Version 3: utilization samples for the dashboard (server/sampler.c).
-- Once a second the sampler thread writes one row per series, all with the
-- same `at`: ('busy', island) devices held by a job, ('down', island)
-- devices no live worker covers, ('jobs', state) jobs in that state.
-- Rows older than the retention window (1 hour) are pruned every round, so
-- the table stays around 3600 x (2 x islands + 6) rows.
CREATE TABLE samples (
  at     INTEGER NOT NULL,            -- unix microseconds of the sampling round
  kind   TEXT NOT NULL CHECK (kind IN ('busy', 'down', 'jobs')),
  key    TEXT NOT NULL,               -- island name (busy, down) or job state (jobs)
  value  INTEGER NOT NULL,
  PRIMARY KEY (at, kind, key)
) WITHOUT ROWID;
