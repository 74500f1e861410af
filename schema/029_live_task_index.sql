-- Version 29: host_tasks_by_worker indexes only the tasks a worker may
-- still be handed or hold (leased, blocked), not every task it ever ran.
-- A dispatch inserts one row per worker of a gang, and in the full index
-- each landed on that worker's own leaf page among all its past tasks:
-- a chunk of 32 rows for 32 workers read and rewrote 32 pages, read
-- again after every other connection's commit (SQLite drops a
-- connection's page cache then), 25-50 us a row under bench_passes. The
-- live rows fit in a few pages that stay hot. Every query that used it
-- names state = 'leased' (which implies the index's OR) or both states.
-- Tasks cancelled because their worker was lost, which a re-registered
-- process's polls look for by worker, get a small index of their own.
DROP INDEX host_tasks_by_worker;
CREATE INDEX host_tasks_by_worker ON host_tasks(worker_id, state, leased_at)
  WHERE state = 'leased' OR state = 'blocked';
CREATE INDEX host_tasks_lost ON host_tasks(worker_id)
  WHERE state = 'cancelled' AND error = 'worker lost';
