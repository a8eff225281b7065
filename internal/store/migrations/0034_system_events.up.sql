SET lock_timeout = '10s';

-- The relay's own events (docs/alerts.md): a circuit that opened or
-- closed, a route paused or resumed, a delivery dead-lettered, a job that
-- ended. Each is written here by the statement that makes the change it
-- reports, in its transaction (the outbox pattern: never without the
-- change, never lost with it); a receiver moves it into events as an
-- event of the built-in source hookrelay, its idempotency key the row's
-- id, and deletes the row: a crash in between stores it once all the same.
CREATE TABLE system_events (
    id         bigserial PRIMARY KEY,
    kind       text NOT NULL,
    -- The route (or job) it is about, and the team that owns it: only
    -- that team's routes (and the platform's) receive it.
    subject    text NOT NULL,
    team       text NOT NULL,
    body       jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- At most one event per kind and subject a minute (route.backlog: ten
-- minutes): a flapping circuit, a route dead-lettering a backlog, do not
-- flood the routes that alert.
CREATE TABLE system_event_limits (
    kind    text NOT NULL,
    subject text NOT NULL,
    last_at timestamptz NOT NULL,
    PRIMARY KEY (kind, subject)
);

-- The engine's own tables: no team sees them.
ALTER TABLE system_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE system_events FORCE ROW LEVEL SECURITY;
CREATE POLICY system_events_engine ON system_events USING (hookrelay_team() = '*');
ALTER TABLE system_event_limits ENABLE ROW LEVEL SECURITY;
ALTER TABLE system_event_limits FORCE ROW LEVEL SECURITY;
CREATE POLICY system_event_limits_engine ON system_event_limits USING (hookrelay_team() = '*');

-- hookrelay_emit writes one event of the relay's own, unless one of its
-- kind and subject was written less than p_every ago. team NULL: the
-- team of the route named subject (the platform's when there is no such
-- route). It runs as the role that migrated (SECURITY DEFINER, a fixed
-- search_path) and as the engine (hookrelay.team '*', restored on
-- return), so every statement that makes a change can call it, the
-- caller's team whatever it is (a team's pause through the API).
CREATE FUNCTION hookrelay_emit(p_kind text, p_subject text, p_team text, p_body jsonb, p_every interval DEFAULT interval '1 minute') RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT SET hookrelay.team = '*' AS $$
DECLARE
    owner_team text := p_team;
BEGIN
    INSERT INTO system_event_limits AS l (kind, subject, last_at) VALUES (p_kind, p_subject, now())
    ON CONFLICT (kind, subject) DO UPDATE SET last_at = now()
    WHERE l.last_at <= now() - p_every;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF owner_team IS NULL THEN
        SELECT r.team INTO owner_team FROM routes r WHERE r.name = p_subject;
    END IF;
    INSERT INTO system_events (kind, subject, team, body)
    VALUES (p_kind, p_subject, coalesce(owner_team, 'platform'),
            p_body || jsonb_build_object('type', p_kind, 'occurred_at', now(), 'team', coalesce(owner_team, 'platform')));
    PERFORM pg_notify('hookrelay_system_events', '');
    RETURN true;
END
$$;
