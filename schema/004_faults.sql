-- Version 4: fault tolerance (docs/architecture.md, "Faults").
--  * jobs.attempt still numbers every attempt (it tags data-plane messages
--    and tells stale tasks apart), but only attempts caused by a lost worker
--    spend the max_retries budget: jobs.retries counts those, and
--    jobs.restarts counts attempts started because the controller restarted
--    (a controller crash is never the job's fault).
--  * tasks.abort_sent_at: when a poll answer first told the task's worker to
--    abort this stale task (its job ended or moved to a newer attempt). A
--    stale task still 'leased' that long after its abort was sent was never
--    received by the worker (the poll answer was lost); it is abandoned.
--    Invariant: a queued job is admitted only once none of its tasks is
--    'leased', so a worker never holds two attempts of one job at once.
ALTER TABLE jobs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN restarts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN abort_sent_at INTEGER;
UPDATE jobs SET retries = attempt;
-- The scheduler looks for abandoned tasks every tick: keep that cheap.
CREATE INDEX tasks_aborting ON tasks(abort_sent_at) WHERE state = 'leased' AND abort_sent_at IS NOT NULL;
