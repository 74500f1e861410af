-- Version 27: device memory for shared jobs (DESIGN Part D). A shared
-- job's hold on a device records the bytes the scheduler expects it to
-- keep in that device's memory at once (the planner's estimate: the
-- largest of its computations' per-shard values, summed); a device's
-- memory is its worker's object store cap (workers.store_cap_bytes, from
-- heartbeats) divided by the worker's devices. A shared job joins devices
-- other shared jobs hold only while the holds' bytes and its own fit.
ALTER TABLE device_holds ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0 CHECK (bytes >= 0);
