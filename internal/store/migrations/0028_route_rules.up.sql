SET lock_timeout = '10s';

-- Routes that read the event (issue 39). A route with a filter is bound to
-- no pattern: the event reaches its queue only by a copy addressed to the
-- filtered routes that took it, an outbox row with route = the first of
-- them and cc = the others (one publish, RabbitMQ's sender-selected
-- distribution). NULL on every other row.
ALTER TABLE outbox ADD COLUMN cc text[];

-- The version of the route that shaped an attempt's request (its filter
-- and transformation): a run-time route's version; NULL for a route of
-- config.yaml and for attempts made before this migration.
ALTER TABLE delivery_attempts ADD COLUMN route_version bigint;
