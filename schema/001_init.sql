-- Atoll controller store, version 1.
-- Invariants (kept by server/store*.c inside transactions):
--  * a device row exists for every device of every island (created at start
--    from --island); its state is derived, never stored:
--      worker_id IS NULL          -> down   (no live worker covers it)
--      job_id IS NOT NULL         -> allocated (held by that job's slice)
--      otherwise                  -> free
--  * a job holds devices only in states allocated/running; a terminal job
--    (succeeded/failed/cancelled) holds none;
--  * every task of a job attempt belongs to exactly one device of one of the
--    job's slices; a task is reported at most once (state leaves 'leased'
--    exactly once), which fences duplicate reports.
--  * islands.next_seq only grows: computations on an island are ordered by
--    the seq they got at allocation, on every device.
CREATE TABLE islands (
  id        INTEGER PRIMARY KEY,
  name      TEXT NOT NULL UNIQUE,
  shape     TEXT NOT NULL,            -- JSON array, e.g. [4,4]
  next_seq  INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE workers (
  id            INTEGER PRIMARY KEY,
  island_id     INTEGER NOT NULL REFERENCES islands(id),
  first_device  INTEGER NOT NULL,     -- island device index of local device 0
  ndevices      INTEGER NOT NULL,
  data_addr     TEXT NOT NULL,
  host          TEXT NOT NULL,
  pid           INTEGER NOT NULL,
  backend       TEXT NOT NULL,
  state         TEXT NOT NULL CHECK (state IN ('live', 'gone')),
  epoch         INTEGER NOT NULL,
  registered_at INTEGER NOT NULL,     -- unix microseconds
  heartbeat_at  INTEGER NOT NULL
);

CREATE TABLE devices (
  island_id  INTEGER NOT NULL REFERENCES islands(id),
  idx        INTEGER NOT NULL,        -- row-major index in the island mesh
  coords     TEXT NOT NULL,           -- JSON array
  worker_id  INTEGER REFERENCES workers(id),
  local      INTEGER,                 -- worker-local device number
  job_id     INTEGER REFERENCES jobs(id),
  busy_us    INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (island_id, idx)
);

CREATE TABLE jobs (
  id              INTEGER PRIMARY KEY,
  name            TEXT NOT NULL,
  state           TEXT NOT NULL CHECK (state IN
                    ('queued','allocated','running','succeeded','failed','cancelled')),
  priority        INTEGER NOT NULL,
  max_retries     INTEGER NOT NULL,
  attempt         INTEGER NOT NULL DEFAULT 0,
  doc             TEXT NOT NULL,      -- the job document as accepted
  idem_key        TEXT UNIQUE,
  comps_total     INTEGER NOT NULL,
  comps_done      INTEGER NOT NULL DEFAULT 0,
  pending_reason  TEXT,
  error           TEXT,
  created_at      INTEGER NOT NULL,
  allocated_at    INTEGER,
  started_at      INTEGER,
  finished_at     INTEGER
);
CREATE INDEX jobs_by_state ON jobs(state, priority DESC, id);

CREATE TABLE slices (
  job_id     INTEGER NOT NULL REFERENCES jobs(id),
  name       TEXT NOT NULL,
  island_id  INTEGER NOT NULL REFERENCES islands(id),
  shape      TEXT NOT NULL,           -- JSON array, slice mesh shape
  devices    TEXT NOT NULL,           -- JSON array of island device indexes, shard order
  PRIMARY KEY (job_id, name)
);

CREATE TABLE computations (
  job_id        INTEGER NOT NULL REFERENCES jobs(id),
  idx           INTEGER NOT NULL,     -- index in the job document
  name          TEXT NOT NULL,
  slice         TEXT NOT NULL,
  island_id     INTEGER,
  seq           INTEGER,              -- island sequence number (per attempt)
  state         TEXT NOT NULL,        -- waiting, dispatched, succeeded, failed, cancelled
  producers     TEXT NOT NULL DEFAULT '[]', -- JSON array of producer computation idx
  deps_left     INTEGER NOT NULL DEFAULT 0, -- producers not yet succeeded (this attempt)
  shards_total  INTEGER NOT NULL,
  shards_done   INTEGER NOT NULL DEFAULT 0,
  dispatched_at INTEGER,
  started_at    INTEGER,              -- first shard started (worker clock)
  inputs_ready_at INTEGER,            -- last shard's inputs ready
  finished_at   INTEGER,              -- last shard finished
  PRIMARY KEY (job_id, idx)
);

CREATE TABLE tasks (
  id              INTEGER PRIMARY KEY,
  job_id          INTEGER NOT NULL REFERENCES jobs(id),
  attempt         INTEGER NOT NULL,
  comp_idx        INTEGER NOT NULL,
  shard           INTEGER NOT NULL,
  island_id       INTEGER NOT NULL,
  device_idx      INTEGER NOT NULL,
  worker_id       INTEGER NOT NULL,
  seq             INTEGER NOT NULL,
  state           TEXT NOT NULL CHECK (state IN
                    ('blocked','pending','leased','succeeded','failed','cancelled')),
  payload         TEXT NOT NULL,      -- TASK JSON (docs/worker-protocol.md)
  dispatched_at   INTEGER,
  leased_at       INTEGER,
  started_us      INTEGER,
  inputs_ready_us INTEGER,
  finished_us     INTEGER,
  error           TEXT
);
CREATE INDEX tasks_by_worker ON tasks(worker_id, state, seq);
CREATE INDEX tasks_by_job ON tasks(job_id, attempt, comp_idx);

CREATE TABLE outputs (
  job_id    INTEGER NOT NULL REFERENCES jobs(id),
  comp_idx  INTEGER NOT NULL,
  value     TEXT NOT NULL,
  shard     INTEGER NOT NULL,
  shape     TEXT NOT NULL,
  sum       REAL,                     -- NULL when not finite
  vals      BLOB,                     -- f32 little-endian, when <= 4096 elements
  PRIMARY KEY (job_id, comp_idx, value, shard)
);

CREATE TABLE events (
  id      INTEGER PRIMARY KEY,
  job_id  INTEGER,
  at      INTEGER NOT NULL,
  kind    TEXT NOT NULL,
  detail  TEXT NOT NULL
);
CREATE INDEX events_by_job ON events(job_id, id);
