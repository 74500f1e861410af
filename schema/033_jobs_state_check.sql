-- atoll: foreign keys off
-- Version 33: jobs.state's CHECK as comparisons, not an IN list, as
-- version 25 did for host_tasks: SQLite evaluates `state IN (six
-- constants)` by building an ephemeral table of the six values on every
-- statement that writes the column, ~15K instructions each, three times a
-- tiny job (submitted, allocated and running, ended; callgrind). The
-- constraint can only change with the table, so the table is rebuilt: the
-- same columns in the same order (those later versions added, at the
-- end), the same rows and ids, the same indexes. Ten tables reference
-- jobs(id), so this runs with foreign keys off (the first line above:
-- store/store.c) and commits only when PRAGMA foreign_key_check finds no
-- row without its job. Migrations run before the poll watch's TEMP
-- triggers on jobs are installed.
CREATE TABLE jobs_v33 (
  id              INTEGER PRIMARY KEY,
  name            TEXT NOT NULL,
  state           TEXT NOT NULL CHECK (state = 'queued' OR state = 'allocated'
                    OR state = 'running' OR state = 'succeeded' OR state = 'failed'
                    OR state = 'cancelled'),
  priority        INTEGER NOT NULL,
  max_retries     INTEGER NOT NULL,
  attempt         INTEGER NOT NULL DEFAULT 0,
  idem_key        TEXT UNIQUE,
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
INSERT INTO jobs_v33 (id, name, state, priority, max_retries, attempt, idem_key, comps_total,
                      comps_done, pending_reason, error, created_at, allocated_at, started_at,
                      finished_at, retries, restarts, tenant_id, doc_hash, placement,
                      preemptible, preemptions, shared, dispatch_next)
  SELECT id, name, state, priority, max_retries, attempt, idem_key, comps_total, comps_done,
         pending_reason, error, created_at, allocated_at, started_at, finished_at, retries,
         restarts, tenant_id, doc_hash, placement, preemptible, preemptions, shared,
         dispatch_next
  FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v33 RENAME TO jobs;
CREATE INDEX jobs_by_state ON jobs(state, priority DESC, id);
CREATE INDEX jobs_by_tenant ON jobs(tenant_id, state);
CREATE INDEX jobs_queue_by_tenant ON jobs(tenant_id, priority DESC, id) WHERE state = 'queued';
CREATE INDEX jobs_preemptible ON jobs(priority)
  WHERE preemptible = 1 AND state IN ('allocated', 'running');
CREATE INDEX jobs_shared_live ON jobs(id) WHERE shared = 1 AND state IN ('allocated', 'running');
CREATE INDEX jobs_dispatching ON jobs(id) WHERE dispatch_next IS NOT NULL;
