-- atoll: foreign keys off
-- Version 34: fewer index pages written per job. A tiny job's three
-- commits (submitted; allocated; ended) wrote ~51 pages of WAL, 11 of
-- them the jobs table's indexes (docs/performance.md, "Stop 79"):
--   - idem_key's UNIQUE constraint indexed every job, most with a NULL
--     key; a partial unique index (jobs_by_idem) holds only the jobs
--     submitted with an Idempotency-Key;
--   - jobs_by_tenant (tenant_id, state) moved each job's entry at every
--     state change and kept the ended ones forever; its readers ask for a
--     tenant's queued jobs (jobs_queue_by_tenant) or its allocated and
--     running ones: jobs_live_by_tenant holds those alone.
-- A constraint changes only with its table, so jobs is rebuilt as version
-- 33 rebuilt it: the same columns in the same order, the same rows and
-- ids, the same other indexes, foreign keys off and checked before the
-- commit.
-- Not done: computations and slices as WITHOUT ROWID tables (their
-- composite keys' automatic indexes, ~2.5 pages a job). The planner then
-- reads a job's computations through the primary key rather than the
-- partial indexes computations_blocked and computations_in_flight, and a
-- chain's first success scanned its unfed computations again
-- (test_store_reports: test_success_cost_flat_in_unfed).
CREATE TABLE jobs_v34 (
  id              INTEGER PRIMARY KEY,
  name            TEXT NOT NULL,
  state           TEXT NOT NULL CHECK (state = 'queued' OR state = 'allocated'
                    OR state = 'running' OR state = 'succeeded' OR state = 'failed'
                    OR state = 'cancelled'),
  priority        INTEGER NOT NULL,
  max_retries     INTEGER NOT NULL,
  attempt         INTEGER NOT NULL DEFAULT 0,
  idem_key        TEXT,
  comps_total     INTEGER NOT NULL,
  comps_done      INTEGER NOT NULL DEFAULT 0,
  pending_reason  TEXT,
  error           TEXT,
  created_at      INTEGER NOT NULL,
  allocated_at    INTEGER,
  started_at      INTEGER,
  finished_at     INTEGER,
  retries         INTEGER NOT NULL DEFAULT 0,
  restarts        INTEGER NOT NULL DEFAULT 0,
  tenant_id       INTEGER REFERENCES tenants(id),
  doc_hash        TEXT,
  placement       TEXT,
  preemptible     INTEGER NOT NULL DEFAULT 0,
  preemptions     INTEGER NOT NULL DEFAULT 0,
  shared          INTEGER NOT NULL DEFAULT 0,
  dispatch_next   INTEGER
);
INSERT INTO jobs_v34 (id, name, state, priority, max_retries, attempt, idem_key, comps_total,
                      comps_done, pending_reason, error, created_at, allocated_at, started_at,
                      finished_at, retries, restarts, tenant_id, doc_hash, placement,
                      preemptible, preemptions, shared, dispatch_next)
  SELECT id, name, state, priority, max_retries, attempt, idem_key, comps_total, comps_done,
         pending_reason, error, created_at, allocated_at, started_at, finished_at, retries,
         restarts, tenant_id, doc_hash, placement, preemptible, preemptions, shared,
         dispatch_next
  FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v34 RENAME TO jobs;
CREATE INDEX jobs_by_state ON jobs(state, priority DESC, id);
CREATE UNIQUE INDEX jobs_by_idem ON jobs(idem_key) WHERE idem_key IS NOT NULL;
CREATE INDEX jobs_live_by_tenant ON jobs(tenant_id) WHERE state IN ('allocated', 'running');
CREATE INDEX jobs_queue_by_tenant ON jobs(tenant_id, priority DESC, id) WHERE state = 'queued';
CREATE INDEX jobs_preemptible ON jobs(priority)
  WHERE preemptible = 1 AND state IN ('allocated', 'running');
CREATE INDEX jobs_shared_live ON jobs(id) WHERE shared = 1 AND state IN ('allocated', 'running');
CREATE INDEX jobs_dispatching ON jobs(id) WHERE dispatch_next IS NOT NULL;
