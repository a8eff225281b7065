SET lock_timeout = '10s';

DROP INDEX IF EXISTS outbox_event_id_idx;

ALTER TABLE events DROP COLUMN IF EXISTS purged_at;
DROP INDEX IF EXISTS deliveries_undelivered_idx;
ALTER TABLE outbox DROP COLUMN IF EXISTS route;
