-- Version 26: a worker's UCX worker address, kept by the controller.
-- Peers used to fetch it from the worker's own data_addr port; at 512
-- workers on one machine, the 511 peers of a whole-island collective's
-- root all asked the root at once while it was busy wiring them up, and
-- every fetch timed out. The worker now sends it with its registration
-- and peers ask atolld (GET /v1/workers/{id}/peers?addr=), which answers
-- from this column. Base64 (RFC 4648, padded) of 1..8192 bytes; NULL for a
-- worker that registered without one (a peer's lookup of it is 404).
ALTER TABLE workers ADD COLUMN ucx_address TEXT;
-- Peers look workers up by data_addr (the directory, and a report's
-- unreachable peer): newest first, without a scan of every registration
-- the cluster has seen.
CREATE INDEX workers_by_data_addr ON workers(data_addr, id);
