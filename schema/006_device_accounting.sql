-- Device accounting. Island utilization over a recent window
-- (GET /v1/islands, /metrics) sums the busy time of tasks that finished
-- inside the window; this index lets that read only recent tasks instead
-- of the whole history.
CREATE INDEX tasks_by_island_finish ON tasks(island_id, finished_us);
