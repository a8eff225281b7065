SET lock_timeout = '10s';

-- Route controls (issue 13): one row per route, shared by every
-- dispatcher. A dispatcher follows a change within a poll (1s) and at once
-- when it hears NOTIFY hookrelay_route_state (payload: the route).
CREATE TABLE route_state (
    route text PRIMARY KEY,
    -- Paused by an operator: no dispatcher consumes the route's queue.
    paused boolean NOT NULL DEFAULT false,
    paused_at timestamptz,
    paused_by text,
    -- Circuit breaker: closed (delivering), open (nobody consumes until
    -- opened_until), half_open (one probe delivery, made by probe_owner,
    -- which refreshes probe_at while it holds the probe; a stale probe_at
    -- means the owner is gone and another dispatcher may take it over).
    circuit text NOT NULL DEFAULT 'closed' CHECK (circuit IN ('closed', 'open', 'half_open')),
    -- Consecutive failed attempts across all dispatchers; a success resets.
    consecutive_failures integer NOT NULL DEFAULT 0,
    opened_until timestamptz,
    -- The current cool-down in milliseconds: doubles each time a probe
    -- fails, up to the maximum; NULL while closed.
    cooldown_ms bigint,
    probe_owner text,
    probe_at timestamptz,
    -- A 429 or 503 with Retry-After holds every delivery of the route
    -- until then.
    slow_until timestamptz,
    -- Rate limit (GCRA): the theoretical arrival time of the next
    -- delivery. NULL: none made yet.
    tat timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
