-- Data-plane keys (issue 12): one random 32-byte secret per cluster, made
-- by atolld on first start (store_global_init). The key of a job attempt is
-- HMAC-SHA256(secret, job, attempt) cut to 128 bits (store_attempt_key):
-- every attempt gets a key of its own that no other attempt's key reveals,
-- and a restarted controller hands out the same key again, so work in
-- flight keeps its peers.
CREATE TABLE cluster_secret (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    secret BLOB NOT NULL CHECK (length(secret) = 32)
);

-- Frames a worker's data plane dropped because their key was not that of
-- the attempt they claimed (heartbeat "dplane.bad_key", cumulative).
ALTER TABLE workers ADD COLUMN dplane_bad_key INTEGER NOT NULL DEFAULT 0;
