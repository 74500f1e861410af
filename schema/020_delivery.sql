-- Version 20: delivery is a read (docs/worker-protocol.md, "Life of a
-- worker"). The dispatch leases a host task at once, under a lease id of its
-- transaction (leased_at); a worker's poll reads its tasks leased after the
-- id it acknowledges, so polls no longer write. 'pending' (dispatched, not
-- yet handed out) is never written again; rows left in it are of jobs that
-- the recovery at start requeues, so they end here as their requeue would
-- have ended them.
UPDATE host_tasks SET state = 'cancelled', error = 'never delivered' WHERE state = 'pending';
-- A poll's range: its worker's leased rows after the acknowledged id.
DROP INDEX host_tasks_by_worker;
CREATE INDEX host_tasks_by_worker ON host_tasks(worker_id, state, leased_at);
