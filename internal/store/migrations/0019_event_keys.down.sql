SET lock_timeout = '10s';

ALTER TABLE delivery_attempts DROP CONSTRAINT IF EXISTS delivery_attempts_legacy_before_cutover;
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_legacy_before_cutover;
ALTER TABLE events DROP CONSTRAINT IF EXISTS events_legacy_before_cutover;
ALTER TABLE delivery_attempts DROP COLUMN event_id;
DROP TABLE hookrelay_partitioning;
DROP TABLE event_keys;
DROP FUNCTION hookrelay_uuid7(timestamptz);
DROP FUNCTION hookrelay_uuid7_floor(timestamptz);
