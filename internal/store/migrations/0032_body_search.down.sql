SET lock_timeout = '10s';

DROP FUNCTION hookrelay_event_ids_by_body(jsonb, timestamptz, timestamptz, uuid, uuid, timestamptz, uuid, boolean, int);
DROP INDEX events_body_idx;
DROP FUNCTION hookrelay_body_json(bytea);
