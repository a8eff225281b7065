SET lock_timeout = '10s';

-- A job's owner (issue 38): the runner (one per process serving the API)
-- that runs it. Only its owner moves its heartbeat and ends it, and only
-- while it is running. A running job whose heartbeat lapsed is marked
-- failed, abandoned, by a statement (store.JobsAbandon), once: its state
-- is what is stored, never judged at read time, so a process that comes
-- back cannot turn an abandoned job into a succeeded one. NULL for jobs
-- made before: nobody owns them, and they end abandoned.
ALTER TABLE api_jobs ADD COLUMN owner uuid;
