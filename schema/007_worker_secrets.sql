-- Per-worker credentials (docs/worker-protocol.md, "Credentials"): the hash
-- (auth_hash_token, hex) of the secret a worker got in its registration
-- answer; every later call about the worker must present that secret.
-- NULL for a worker registered before this migration: it is told it is not
-- registered (404) and registers again, getting a secret.
ALTER TABLE workers ADD COLUMN secret_hash TEXT;
