-- Version 38: the admission histogram counts each admission once, for good.
-- /metrics exports admission_buckets as the Prometheus histogram
-- atoll_admission_latency_seconds, whose buckets, sum and count a scraper
-- takes to only grow (a drop reads as a counter reset). Version 35's
-- admission_update took a requeued job's admission out when its
-- allocated_at went back to NULL and put the next one in when it was
-- allocated again, so every requeue (a lost worker, a retry, a preemption,
-- a controller restart) lowered the histogram until the job's next
-- allocation; a change of created_at moved an admission between buckets.
-- Now an allocation adds one admission (its latency from the job's
-- submission, as before) and nothing takes one out: a job allocated twice
-- counts twice, as atoll_allocation_attempts_total counts attempts.
-- Invariant: per bucket, n and sum_us = the count and sum over every
-- allocation the store made (allocated_at set, from NULL or from another
-- value), whatever happened to the job since.
DROP TRIGGER admission_update;
CREATE TRIGGER admission_update AFTER UPDATE OF allocated_at ON jobs
  WHEN NEW.allocated_at IS NOT NULL AND NEW.allocated_at IS NOT OLD.allocated_at
BEGIN
  UPDATE admission_buckets SET n = n + 1, sum_us = sum_us + (NEW.allocated_at - NEW.created_at)
    WHERE bucket = (SELECT bucket FROM admission_buckets
                    WHERE le_us >= NEW.allocated_at - NEW.created_at ORDER BY le_us LIMIT 1);
END;
