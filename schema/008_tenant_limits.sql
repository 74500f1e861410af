-- Tenant limits and a queue that costs the same however long it grows
-- (docs/api.md, "Authentication and tenants").
-- max_queued: a tenant's jobs in state queued at most (429 beyond it).
-- max_priority: the highest priority a tenant may submit at (403 above).
-- quota_devices keeps 0 = no cap inside the store; the API refuses 0 and
-- stores an absent quota as 0.
ALTER TABLE tenants ADD COLUMN max_queued INTEGER NOT NULL DEFAULT 1000;
ALTER TABLE tenants ADD COLUMN max_priority INTEGER NOT NULL DEFAULT 0;
-- The hash of the canonical document submitted with an Idempotency-Key:
-- the key reused with another document is refused (422).
ALTER TABLE jobs ADD COLUMN doc_hash TEXT;
-- Per-tenant queues: the scheduler reads each tenant's head (priority, then
-- age) with an index probe, never the whole queue.
CREATE INDEX jobs_queue_by_tenant ON jobs(tenant_id, priority DESC, id) WHERE state = 'queued';
