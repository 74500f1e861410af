-- Version 2: what each worker's object store holds, reported with every
-- heartbeat, so tests and operators can see buffers freed after jobs end.
ALTER TABLE workers ADD COLUMN store_objects INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN store_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN store_cap_bytes INTEGER NOT NULL DEFAULT 0;
