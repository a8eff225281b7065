SET lock_timeout = '10s';

DROP FUNCTION hookrelay_emit(text, text, text, jsonb, interval);
DROP TABLE system_event_limits;
DROP TABLE system_events;
