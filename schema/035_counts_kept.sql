-- Version 35: what the sampler and /metrics count is kept as jobs change,
-- not counted again from every job ever submitted (docs/performance.md,
-- "Stop 80": a loop of tiny jobs reaches a million jobs in minutes).
--
-- Jobs by state. The sampler (every second) and /metrics scanned
-- jobs_by_state, `SELECT state, COUNT(*) FROM jobs GROUP BY state`: ~100
-- ms of CPU at a million jobs.
--   - Ended jobs never change state again and are never deleted, so their
--     counts are kept in job_counts by triggers, in the transaction that
--     ends the job: one row per ended state, its page written once a job.
--   - Live jobs (queued, allocated, running) are counted through
--     jobs_live, a partial index of them alone, which replaces
--     jobs_by_state: that index's other readers asked for live jobs too
--     (the dashboard's hash, the tenants' usage without auth, the
--     restart's recovery). Its WHERE is spelled as comparisons, as
--     STORE_JOB_LIVE writes it in queries (the planner uses a partial
--     index when a term of the query is its WHERE; SQLite evaluates a
--     constant IN list of more than two values through an ephemeral
--     table built on every run).
-- Invariant: job_counts.n = the number of jobs in that state, under any
-- insert, update or delete of jobs (the triggers cover each).
--
-- Admission latency. /metrics' histogram of created -> allocated read
-- every job with an allocation (~200 ms at a million jobs, in one read
-- transaction that held back checkpoints). admission_buckets holds it:
-- row `bucket` counts the jobs allocated now whose latency in
-- microseconds is at most le_us and above the row before's le_us (the
-- last row's le_us is the largest integer: +Inf), with their latencies'
-- sum. A requeued job leaves its bucket (allocated_at back to NULL) and
-- counts its next admission, as the scan did.
-- Invariant: per bucket, n and sum_us = the count and sum over jobs with
-- allocated_at set, under any insert, update or delete of jobs.
--
-- A later version that rebuilds jobs (as 033 and 034 did: a new table,
-- DROP, RENAME) drops these triggers with the old table and must make
-- them again on the new one.
CREATE TABLE job_counts (
  state TEXT PRIMARY KEY CHECK (state = 'succeeded' OR state = 'failed'
                                OR state = 'cancelled'),
  n     INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO job_counts (state, n)
  SELECT 'succeeded', COUNT(*) FROM jobs WHERE state = 'succeeded'
  UNION ALL SELECT 'failed', COUNT(*) FROM jobs WHERE state = 'failed'
  UNION ALL SELECT 'cancelled', COUNT(*) FROM jobs WHERE state = 'cancelled';
-- Each trigger runs its body only when an ended state is involved (its
-- WHEN), so a job's submission, allocation and start run no UPDATE here;
-- only its end does, and writes job_counts' one page. (Comparisons, not a
-- constant IN list: see jobs_live below.)
CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs
  WHEN NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'cancelled'
BEGIN
  UPDATE job_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER job_counts_update AFTER UPDATE OF state ON jobs
  WHEN NEW.state IS NOT OLD.state
    AND (NEW.state = 'succeeded' OR NEW.state = 'failed' OR NEW.state = 'cancelled'
         OR OLD.state = 'succeeded' OR OLD.state = 'failed' OR OLD.state = 'cancelled')
BEGIN
  UPDATE job_counts SET n = n - 1 WHERE state = OLD.state;
  UPDATE job_counts SET n = n + 1 WHERE state = NEW.state;
END;
CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs
  WHEN OLD.state = 'succeeded' OR OLD.state = 'failed' OR OLD.state = 'cancelled'
BEGIN
  UPDATE job_counts SET n = n - 1 WHERE state = OLD.state;
END;
DROP INDEX jobs_by_state;
CREATE INDEX jobs_live ON jobs(state)
  WHERE state = 'queued' OR state = 'allocated' OR state = 'running';

CREATE TABLE admission_buckets (
  bucket INTEGER PRIMARY KEY,
  le_us  INTEGER NOT NULL UNIQUE,
  n      INTEGER NOT NULL DEFAULT 0,
  sum_us INTEGER NOT NULL DEFAULT 0
);
INSERT INTO admission_buckets (bucket, le_us) VALUES (0, 1000), (1, 5000), (2, 10000),
  (3, 50000), (4, 100000), (5, 500000), (6, 1000000), (7, 5000000), (8, 10000000),
  (9, 60000000), (10, 300000000), (11, 9223372036854775807);
UPDATE admission_buckets SET
  n = (SELECT COUNT(*) FROM jobs j WHERE j.allocated_at IS NOT NULL
       AND j.allocated_at - j.created_at <= admission_buckets.le_us
       AND j.allocated_at - j.created_at > COALESCE((SELECT p.le_us FROM admission_buckets p
         WHERE p.bucket = admission_buckets.bucket - 1), -9223372036854775807 - 1)),
  sum_us = (SELECT COALESCE(SUM(j.allocated_at - j.created_at), 0) FROM jobs j
       WHERE j.allocated_at IS NOT NULL
       AND j.allocated_at - j.created_at <= admission_buckets.le_us
       AND j.allocated_at - j.created_at > COALESCE((SELECT p.le_us FROM admission_buckets p
         WHERE p.bucket = admission_buckets.bucket - 1), -9223372036854775807 - 1));
-- The bucket of a latency d: the first whose le_us is at least d.
CREATE TRIGGER admission_insert AFTER INSERT ON jobs WHEN NEW.allocated_at IS NOT NULL
BEGIN
  UPDATE admission_buckets SET n = n + 1, sum_us = sum_us + (NEW.allocated_at - NEW.created_at)
    WHERE bucket = (SELECT bucket FROM admission_buckets
                    WHERE le_us >= NEW.allocated_at - NEW.created_at ORDER BY le_us LIMIT 1);
END;
CREATE TRIGGER admission_update AFTER UPDATE OF allocated_at, created_at ON jobs
  WHEN NEW.allocated_at IS NOT OLD.allocated_at OR NEW.created_at IS NOT OLD.created_at
BEGIN
  UPDATE admission_buckets SET n = n - 1, sum_us = sum_us - (OLD.allocated_at - OLD.created_at)
    WHERE OLD.allocated_at IS NOT NULL
      AND bucket = (SELECT bucket FROM admission_buckets
                    WHERE le_us >= OLD.allocated_at - OLD.created_at ORDER BY le_us LIMIT 1);
  UPDATE admission_buckets SET n = n + 1, sum_us = sum_us + (NEW.allocated_at - NEW.created_at)
    WHERE NEW.allocated_at IS NOT NULL
      AND bucket = (SELECT bucket FROM admission_buckets
                    WHERE le_us >= NEW.allocated_at - NEW.created_at ORDER BY le_us LIMIT 1);
END;
CREATE TRIGGER admission_delete AFTER DELETE ON jobs WHEN OLD.allocated_at IS NOT NULL
BEGIN
  UPDATE admission_buckets SET n = n - 1, sum_us = sum_us - (OLD.allocated_at - OLD.created_at)
    WHERE bucket = (SELECT bucket FROM admission_buckets
                    WHERE le_us >= OLD.allocated_at - OLD.created_at ORDER BY le_us LIMIT 1);
END;
