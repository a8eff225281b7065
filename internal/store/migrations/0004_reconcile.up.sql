SET lock_timeout = '10s';

-- Postgres is the source of truth for every (event, route) pair, and the
-- broker can strand a message (at-least-once dead-lettering out of a retry
-- tier after a leader change, a queue purged or deleted by hand). Three
-- columns let a reconciler notice and repair that:
--
-- gen counts the copies of the pair's message: each new copy (a retry, a
-- replay, a reconciled resend) carries the new number, and a dispatcher
-- delivers only the copy whose number matches the row, so a stranded copy
-- that shows up after its replacement is recognised and dropped, never
-- delivered twice. The first copy, published through the topic exchange
-- to every route at once, is generation 0.
--
-- due_at is when the pair's current copy should reach a dispatcher: at
-- acceptance for a new pair, at the end of its retry tier's delay for a
-- retry. A pair still pending or retrying well past due_at, not in flight
-- and with nothing left in the outbox, has lost its copy.
--
-- reconciled counts how often that happened to the pair, for operators and
-- the fault suite.
ALTER TABLE deliveries
    ADD COLUMN gen        bigint      NOT NULL DEFAULT 0,
    ADD COLUMN due_at     timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN reconciled integer     NOT NULL DEFAULT 0;

-- The reconciler walks each route's undelivered pairs by due time.
CREATE INDEX deliveries_due_idx ON deliveries (route, due_at)
    WHERE state IN ('pending', 'retrying');

-- An outbox row addressed to one route (a replay, a reconciled resend)
-- carries the generation of the copy it publishes; NULL for the first copy
-- of an event, which goes through the topic exchange.
ALTER TABLE outbox ADD COLUMN gen bigint;
