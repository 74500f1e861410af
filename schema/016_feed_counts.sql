-- Version 16: the feed pass (interleaving shared jobs) counts each live
-- shared job's computations dispatched and not finished after every
-- computation that finishes; this index keeps that count to the few in
-- flight instead of a scan of all the job's computations. What is left to
-- feed follows from it: comps_total - comps_done - in flight.
CREATE INDEX computations_in_flight ON computations(job_id)
  WHERE seq IS NOT NULL AND state IN ('waiting', 'dispatched');
