-- Version 12: preemption (DESIGN Part D). A job submitted with
-- "preemptible": true may be evicted by a higher-priority job that cannot
-- be placed otherwise; it is requeued (attempt + 1) and counts its
-- evictions in `preemptions`, which do not spend max_retries.
ALTER TABLE jobs ADD COLUMN preemptible INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
-- The scheduler asks for victims only when a job cannot be placed; this
-- partial index keeps that probe independent of the jobs table's size.
CREATE INDEX jobs_preemptible ON jobs(priority)
  WHERE preemptible = 1 AND state IN ('allocated', 'running');
