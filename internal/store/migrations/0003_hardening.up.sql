SET lock_timeout = '10s';

-- Sources whose signature covers only the body (GitHub, Shopify, plain
-- HMAC without a timestamp) can be replayed with new unsigned headers: a
-- new delivery id or event type. With dedupe_body, ingest stores the
-- SHA-256 of the raw body here, and this index makes an identical body a
-- duplicate for as long as the event row is kept (retention.dedupe_window),
-- whatever the headers say. NULL (every other source) is never a conflict.
ALTER TABLE events ADD COLUMN body_sha256 bytea;
CREATE UNIQUE INDEX events_source_body_sha256_key ON events (source, body_sha256)
    WHERE body_sha256 IS NOT NULL;

-- A row the broker keeps refusing (its queue is missing, a queue lost its
-- majority, no confirm came) must not hold the head of the outbox: each
-- failure counts, pushes next_try_at out with backoff, and claims skip
-- rows that are not due yet.
ALTER TABLE outbox
    ADD COLUMN attempts    integer     NOT NULL DEFAULT 0,
    ADD COLUMN next_try_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN last_error  text;
