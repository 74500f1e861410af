-- Version 30: a computation's success looks for consumers blocked on it
-- (sequential dispatch: waiting with a seq) through an index of exactly
-- those. computations_waiting (version 17) also held the computations of
-- an exclusive job whose dispatch chunk is not written yet (waiting
-- without a seq, version 24), so under parallel dispatch every success
-- of a long chain read all of its unfed computations again: about 0.1 ms
-- a computation with 200 of them, n^2 over the chain. The release of
-- blocked consumers (store_progress.c) reads only these too.
DROP INDEX computations_waiting;
CREATE INDEX computations_blocked ON computations(job_id)
  WHERE state = 'waiting' AND seq IS NOT NULL;
