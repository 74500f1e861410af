-- Version 31: what a succeeded report of a computation must carry, written
-- once with the computation (store_job_create): per declared output, in
-- order, "name:d0,d1,...;" with each shard's shape ("name:;" for a
-- scalar, "name:?;" when only the program knows it: a run computation's
-- undeclared output). The report applier refuses a report whose outputs
-- are not exactly these (another name, one missing, another shape):
-- before, a worker's report could store any outputs under any names, and
-- the job succeeded with them. NULL (computations written before this
-- version): not checked.
ALTER TABLE computations ADD COLUMN outputs TEXT;
