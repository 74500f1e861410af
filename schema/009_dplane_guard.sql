-- Version 9: what each worker's data plane refused, reported with its
-- heartbeat (cumulative counts since the worker started), so /metrics can
-- show frames dropped and connections refused across the cluster.
ALTER TABLE workers ADD COLUMN dplane_dropped INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN dplane_dropped_bytes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN dplane_refused INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workers ADD COLUMN dplane_bad_frames INTEGER NOT NULL DEFAULT 0;
