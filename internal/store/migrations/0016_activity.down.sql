SET lock_timeout = '10s';
CREATE INDEX IF NOT EXISTS events_received_at_idx ON events (received_at);
DROP INDEX IF EXISTS events_received_idx;
CREATE INDEX IF NOT EXISTS deliveries_route_state_idx ON deliveries (route, state);
DROP INDEX IF EXISTS deliveries_open_idx;
ALTER TABLE route_state DROP COLUMN paused_reason;
DROP TABLE activity_minutes;
