-- Version 24: an exclusive job's computations are dispatched in chunks.
-- Writing every host task of a long chain before any could start kept its
-- devices idle for the whole dispatch transaction (64 computations over 4
-- workers: ~12 ms, as long as 16 of its steps on 2 cores). Allocation now
-- writes the first chunk; the scheduler writes the rest in doubling chunks
-- while the first ones run (scheduler/sched_dispatch.c).
--  * jobs.dispatch_next: the position, in the job's topological order, of
--    the next computation to dispatch; NULL when nothing is left (or the
--    job is shared: the feed dispatches those). Set at allocation, cleared
--    by the scheduler once the last chunk is written or the attempt ended.
--    A job requeued meanwhile is allocated again from position 0.
-- Also: host_tasks_by_finish (version 11) held an entry for every host
-- task not yet finished (finished_us NULL), one more index insert per task
-- dispatched and a move per task finished; every query through it bounds
-- finished_us, so the NULLs never matched.
ALTER TABLE jobs ADD COLUMN dispatch_next INTEGER;
CREATE INDEX jobs_dispatching ON jobs(id) WHERE dispatch_next IS NOT NULL;
DROP INDEX host_tasks_by_finish;
CREATE INDEX host_tasks_by_finish ON host_tasks(finished_us) WHERE finished_us IS NOT NULL;
