SET lock_timeout = '10s';

ALTER TABLE outbox
    DROP COLUMN last_error,
    DROP COLUMN next_try_at,
    DROP COLUMN attempts;
DROP INDEX events_source_body_sha256_key;
ALTER TABLE events DROP COLUMN body_sha256;
