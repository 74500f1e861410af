-- Version 23: one outputs row per host task and output, not per shard.
-- A report brings each output of its task for every local shard; stored
-- one row per shard, a 4-device worker's report cost 4 inserts per output
-- (each with its primary-key index), the largest part of applying a report
-- of a chain. Now the row holds the task's shards together:
--   meta  JSON array, one entry per shard in increasing shard order:
--         [shard, shape (array), sum (number, or null when not finite),
--          nvals (how many f32 values of vals are this shard's: 0 or the
--          shape's element count)]
--   vals  the listed shards' values, f32 little-endian, in meta's order
--         (NULL when no shard lists values)
-- keyed by the task's first shard (shard0), so a computation's rows, in
-- shard0 order, cover its shards once. GET /v1/jobs/{id}/result still
-- answers one entry per shard (store/store_jobs.c splits the rows).
-- Old rows become one-shard rows; sums keep all 17 digits.
CREATE TABLE outputs_v23 (
  job_id    INTEGER NOT NULL REFERENCES jobs(id),
  comp_idx  INTEGER NOT NULL,
  value     TEXT NOT NULL,
  shard0    INTEGER NOT NULL,
  meta      TEXT NOT NULL,
  vals      BLOB,
  PRIMARY KEY (job_id, comp_idx, value, shard0)
);
INSERT INTO outputs_v23 (job_id, comp_idx, value, shard0, meta, vals)
  SELECT job_id, comp_idx, value, shard,
         '[[' || shard || ',' || shape || ','
           || CASE WHEN sum IS NULL THEN 'null' ELSE printf('%!.17g', sum) END
           || ',' || (COALESCE(length(vals), 0) / 4) || ']]',
         vals
  FROM outputs;
DROP TABLE outputs;
ALTER TABLE outputs_v23 RENAME TO outputs;
