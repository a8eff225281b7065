SET lock_timeout = '10s';

ALTER TABLE outbox DROP COLUMN IF EXISTS gen;
DROP INDEX IF EXISTS deliveries_due_idx;
ALTER TABLE deliveries
    DROP COLUMN IF EXISTS reconciled,
    DROP COLUMN IF EXISTS due_at,
    DROP COLUMN IF EXISTS gen;
