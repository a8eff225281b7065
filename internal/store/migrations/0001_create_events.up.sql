-- Every migration sets lock_timeout first: DDL that waits behind a long
-- transaction fails fast instead of blocking every query queued behind it.
SET lock_timeout = '10s';

-- events holds every accepted webhook exactly as received. The unique key
-- (source, idempotency_key) is what makes ingest idempotent: a resend of the
-- same event conflicts here and is answered with the first event's id.
CREATE TABLE events (
    id              uuid        PRIMARY KEY,
    source          text        NOT NULL,
    idempotency_key text        NOT NULL,
    event_type      text        NOT NULL,
    content_type    text        NOT NULL DEFAULT '',
    headers         jsonb       NOT NULL DEFAULT '{}',
    body            bytea       NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT events_source_idempotency_key_key UNIQUE (source, idempotency_key)
);

-- Listing and purging walk events by time.
CREATE INDEX events_received_at_idx ON events (received_at);

-- outbox rows are written in the same transaction as their event and deleted
-- only after RabbitMQ confirmed the publish. The identity column gives the
-- publisher a cheap FIFO order.
CREATE TABLE outbox (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id    uuid        NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    routing_key text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Wake publishers as soon as rows commit (NOTIFY is delivered at commit, and
-- a statement-level trigger sends one per insert statement, not per row).
-- Publishers also poll, so a lost notification only delays.
CREATE FUNCTION hookrelay_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookrelay_outbox', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_notify
    AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION hookrelay_outbox_notify();

-- deliveries records, per (event, route), where delivery stands. The unique
-- key is what lets a dispatcher skip a redelivered message whose pair is
-- already delivered.
CREATE TABLE deliveries (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id         uuid        NOT NULL REFERENCES events (id) ON DELETE CASCADE,
    route            text        NOT NULL,
    state            text        NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'delivered', 'retrying', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_status      integer,
    last_error       text,
    first_attempt_at timestamptz,
    last_attempt_at  timestamptz,
    delivered_at     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT deliveries_event_id_route_key UNIQUE (event_id, route)
);

-- Operators look for what is stuck, per route and state.
CREATE INDEX deliveries_route_state_idx ON deliveries (route, state);

-- delivery_attempts keeps every HTTP attempt: status, duration, response
-- headers and the first KiB of the body, or the network error.
CREATE TABLE delivery_attempts (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id      bigint      NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempt          integer     NOT NULL,
    started_at       timestamptz NOT NULL,
    duration_ms      integer     NOT NULL,
    status           integer,
    response_headers jsonb,
    response_body    bytea,
    error            text,
    outcome          text        NOT NULL
);

CREATE INDEX delivery_attempts_delivery_id_idx ON delivery_attempts (delivery_id);
