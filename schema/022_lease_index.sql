-- Version 22: the newest lease id, found without a scan.
-- A worker's poll answers what was leased to it after the lease id it
-- acknowledges (version 20), so lease ids must keep growing across a
-- controller restart even if the wall clock stepped back: atolld starts
-- its ids after MAX(leased_at) (store.c, lease_seed). leased_at is written
-- when a task is leased (dispatch or release) and never by a report, so
-- this index costs the dispatch one insert per host task and reports
-- nothing.
CREATE INDEX host_tasks_by_lease ON host_tasks(leased_at);
