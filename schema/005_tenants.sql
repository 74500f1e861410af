-- Version with tenants: API tokens are stored only as SHA-256 hashes.
-- Invariant: a job with tenant_id NULL was submitted without tenant
-- identity (auth disabled, or by the admin); tenants see only their own.
CREATE TABLE tenants (
  id             INTEGER PRIMARY KEY,
  name           TEXT NOT NULL UNIQUE,
  token_hash     TEXT UNIQUE,            -- NULL once revoked
  quota_devices  INTEGER NOT NULL DEFAULT 0,  -- 0 = no cap
  share          INTEGER NOT NULL DEFAULT 1,  -- fair-share weight (>= 1)
  created_at     INTEGER NOT NULL,
  revoked_at     INTEGER
);
ALTER TABLE jobs ADD COLUMN tenant_id INTEGER REFERENCES tenants(id);
CREATE INDEX jobs_by_tenant ON jobs(tenant_id, state);
