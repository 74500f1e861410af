-- Version 17: the cost of a report no longer grows with its job.
-- A computation that succeeds looks for consumers still waiting on it
-- (sequential dispatch). Without an index on the waiting ones that search
-- read every computation of the job, so a chain of n computations cost
-- n^2 rows; with parallel dispatch none are waiting and it reads none.
CREATE INDEX computations_waiting ON computations(job_id) WHERE state = 'waiting';

-- The job document moves out of the jobs row into its own table. SQLite
-- rewrites a whole row to change one column, so every report (which
-- counts comps_done) and every state change copied the document, tens of
-- kilobytes for a long job, and journalled its pages. The jobs row is
-- now small and hot; the document is written once and read to compile.
CREATE TABLE job_docs (
  job_id  INTEGER PRIMARY KEY REFERENCES jobs(id),
  doc     TEXT NOT NULL           -- the job document as accepted
);
INSERT INTO job_docs (job_id, doc) SELECT id, doc FROM jobs;
ALTER TABLE jobs DROP COLUMN doc;
