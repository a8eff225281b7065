SET lock_timeout = '10s';

ALTER TABLE delivery_attempts DROP COLUMN trace_id;
ALTER TABLE outbox DROP COLUMN trace_parent;
ALTER TABLE events DROP COLUMN trace_parent;
