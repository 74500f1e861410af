-- Version 36: jobs listed by state without reading the whole history.
-- GET /v1/jobs?state=X pages newest first through the jobs table,
-- filtering: a state with no recent job read every job ever run (~100 ms
-- at 100,000 jobs), and the dashboard asks for ?state=queued on every
-- refresh (docs/performance.md, "Stop 80").
-- jobs_unsucceeded (state, then rowid) holds every job not succeeded:
-- the live ones, as jobs_live (version 35) did, and the failed and
-- cancelled ones, which are few where the cluster is healthy. A page of
-- any state but succeeded is a seek in it, in id order; succeeded jobs,
-- the common end, are found by paging the jobs table itself. A job's
-- success removes its entry, as it did from jobs_live, so the index a
-- tiny job writes is unchanged. Queries reach it with a term that is its
-- WHERE (STORE_JOB_LIVE, STORE_JOB_UNSUCCEEDED in store.h).
DROP INDEX jobs_live;
CREATE INDEX jobs_unsucceeded ON jobs(state) WHERE state <> 'succeeded';
