SET lock_timeout = '10s';

-- Expand only: a replay to one route publishes straight to that route's
-- queue. NULL keeps the old meaning (publish to the topic exchange), so a
-- receiver one release behind still drains the outbox correctly.
ALTER TABLE outbox ADD COLUMN route text;

-- The oldest undelivered pair per route is what on-call alerts on; pairs
-- are created pending at ingest and leave this index once final.
CREATE INDEX deliveries_undelivered_idx ON deliveries (route, created_at)
    WHERE state IN ('pending', 'retrying');

-- purge keeps an event's dedupe key for retention.dedupe_window but drops
-- its body and headers once it is older than the purge age; purged_at says
-- so (a purged event cannot be replayed).
ALTER TABLE events ADD COLUMN purged_at timestamptz;

-- Purge and the cascade from events check the outbox by event; while a
-- backlog builds up that must not be a scan per event.
CREATE INDEX outbox_event_id_idx ON outbox (event_id);
