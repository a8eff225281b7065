SET lock_timeout = '10s';

ALTER TABLE delivery_attempts DROP COLUMN route_version;
ALTER TABLE outbox DROP COLUMN cc;
