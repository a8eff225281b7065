SET lock_timeout = '10s';

-- Teams (issue 22). One platform team runs the relay; product teams own
-- routes and see only their own. Isolation is Postgres row-level security,
-- keyed on the session setting hookrelay.team:
--
--   '*'        everything: the receiver, the dispatcher, the CLI and the
--              platform team's tokens (the policies admit it explicitly);
--   a team     that team's rows only (the admin API sets it for each
--              request of a team token);
--   unset, ''  nothing.
--
-- The processes connect as a role that owns no table (hookrelay migrate
-- creates it and grants it rows, never ownership: an owner bypasses the
-- policies unless they are forced, and a superuser always does). The
-- policies are forced too, so a migration role that is not a superuser is
-- held to them like everyone else.

CREATE TABLE teams (
    name       text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL DEFAULT ''
);
INSERT INTO teams (name, created_by) VALUES ('platform', 'migration 22');

-- Routes and sources as the relay knows them: those of config.yaml
-- (declared, written at every start of a receiver or dispatcher) and, to
-- come, those made at run time. A route's deliveries, attempts, state and
-- versions belong to the route's team; an event is seen by the team of its
-- source and by the teams of the routes it was delivered to.
CREATE TABLE routes (
    name       text PRIMARY KEY,
    team       text NOT NULL DEFAULT 'platform' REFERENCES teams (name),
    declared   boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX routes_team ON routes (team);

CREATE TABLE sources (
    name        text PRIMARY KEY,
    team        text NOT NULL DEFAULT 'platform' REFERENCES teams (name),
    -- Teams that may bind routes to the source's events ('*': all).
    subscribers text[] NOT NULL DEFAULT '{}',
    declared    boolean NOT NULL DEFAULT true,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sources_team ON sources (team);

-- What the relay served before teams belongs to the platform team: the
-- routes with a state row (every route a dispatcher ran since migration 13)
-- and the tokens, which keep the global reach they had.
INSERT INTO routes (name) SELECT route FROM route_state ON CONFLICT DO NOTHING;

ALTER TABLE api_tokens ADD COLUMN team text NOT NULL DEFAULT 'platform' REFERENCES teams (name);
ALTER TABLE audit_log ADD COLUMN team text NOT NULL DEFAULT 'platform';
ALTER TABLE api_jobs ADD COLUMN team text NOT NULL DEFAULT 'platform';
CREATE INDEX audit_log_team ON audit_log (team, id);

-- The policies. hookrelay.team is read with missing_ok, so an unset
-- setting is NULL and admits nothing.
CREATE FUNCTION hookrelay_team() RETURNS text
LANGUAGE sql STABLE AS $$ SELECT current_setting('hookrelay.team', true) $$;

-- The team a row written without one belongs to: the writer's own, the
-- platform's for a writer that sees every team.
CREATE FUNCTION hookrelay_own_team() RETURNS text
LANGUAGE sql STABLE AS $$ SELECT coalesce(nullif(nullif(hookrelay_team(), '*'), ''), 'platform') $$;
ALTER TABLE routes ALTER COLUMN team SET DEFAULT hookrelay_own_team();
ALTER TABLE api_tokens ALTER COLUMN team SET DEFAULT hookrelay_own_team();
ALTER TABLE audit_log ALTER COLUMN team SET DEFAULT hookrelay_own_team();
ALTER TABLE api_jobs ALTER COLUMN team SET DEFAULT hookrelay_own_team();

ALTER TABLE teams ENABLE ROW LEVEL SECURITY;
ALTER TABLE teams FORCE ROW LEVEL SECURITY;
CREATE POLICY teams_scope ON teams
    USING (hookrelay_team() = '*' OR name = hookrelay_team());

ALTER TABLE routes ENABLE ROW LEVEL SECURITY;
ALTER TABLE routes FORCE ROW LEVEL SECURITY;
CREATE POLICY routes_scope ON routes
    USING (hookrelay_team() = '*' OR team = hookrelay_team());

ALTER TABLE sources ENABLE ROW LEVEL SECURITY;
ALTER TABLE sources FORCE ROW LEVEL SECURITY;
CREATE POLICY sources_scope ON sources
    USING (hookrelay_team() = '*' OR team = hookrelay_team());
-- A team also reads the sources it may subscribe to (it changes none).
CREATE POLICY sources_subscribed ON sources FOR SELECT
    USING (hookrelay_team() = ANY (subscribers) OR '*' = ANY (subscribers));

ALTER TABLE api_tokens ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_tokens FORCE ROW LEVEL SECURITY;
CREATE POLICY api_tokens_scope ON api_tokens
    USING (hookrelay_team() = '*' OR team = hookrelay_team());

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY audit_log_scope ON audit_log
    USING (hookrelay_team() = '*' OR team = hookrelay_team());

ALTER TABLE api_jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_jobs FORCE ROW LEVEL SECURITY;
CREATE POLICY api_jobs_scope ON api_jobs
    USING (hookrelay_team() = '*' OR team = hookrelay_team());

-- By route, through a plpgsql function (never inlined): a subquery in a
-- policy is a subplan that every statement on the table sets up when it
-- starts, even where the first arm ('*') holds and it never runs, and the
-- receiver's and the dispatcher's statements run thousands of times a
-- second. The function's query on routes is under routes' own policy.
CREATE FUNCTION hookrelay_sees_route(route text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM routes r WHERE r.name = route);
END
$$;

ALTER TABLE deliveries ENABLE ROW LEVEL SECURITY;
ALTER TABLE deliveries FORCE ROW LEVEL SECURITY;
CREATE POLICY deliveries_scope ON deliveries
    USING (hookrelay_team() = '*' OR hookrelay_sees_route(route));

ALTER TABLE route_state ENABLE ROW LEVEL SECURITY;
ALTER TABLE route_state FORCE ROW LEVEL SECURITY;
CREATE POLICY route_state_scope ON route_state
    USING (hookrelay_team() = '*' OR hookrelay_sees_route(route));

ALTER TABLE route_resource_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE route_resource_versions FORCE ROW LEVEL SECURITY;
CREATE POLICY route_resource_versions_scope ON route_resource_versions
    USING (hookrelay_team() = '*' OR hookrelay_sees_route(route));

-- An attempt by its delivery, an event by its source's team or by a
-- delivery to one of the team's routes (a pending delivery is written with
-- the event), the same way: as subplans these would set up a scan of every
-- day partition of deliveries at each statement's start, and the
-- dispatcher's record took a third longer. The functions' queries run as
-- the caller, under deliveries' own policy.
CREATE FUNCTION hookrelay_sees_delivery(delivery bigint, event uuid) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM deliveries d WHERE d.id = delivery AND d.event_id = event);
END
$$;

CREATE FUNCTION hookrelay_sees_event(event uuid, event_source text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM sources s WHERE s.name = event_source AND s.team = hookrelay_team())
        OR EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = event);
END
$$;

ALTER TABLE delivery_attempts ENABLE ROW LEVEL SECURITY;
ALTER TABLE delivery_attempts FORCE ROW LEVEL SECURITY;
CREATE POLICY delivery_attempts_scope ON delivery_attempts
    USING (hookrelay_team() = '*' OR hookrelay_sees_delivery(delivery_id, event_id));

ALTER TABLE events ENABLE ROW LEVEL SECURITY;
ALTER TABLE events FORCE ROW LEVEL SECURITY;
CREATE POLICY events_scope ON events
    USING (hookrelay_team() = '*' OR hookrelay_sees_event(id, source));

ALTER TABLE activity_minutes ENABLE ROW LEVEL SECURITY;
ALTER TABLE activity_minutes FORCE ROW LEVEL SECURITY;
CREATE POLICY activity_minutes_scope ON activity_minutes
    USING (hookrelay_team() = '*'
        OR (kind = 'delivery' AND hookrelay_sees_route(name))
        OR (kind = 'ingest' AND name IN (SELECT name FROM sources WHERE team = hookrelay_team())));

-- The outbox: a team's retry or replay writes rows for its own routes
-- (their route is set); the receiver's (route NULL) are the engine's.
ALTER TABLE outbox ENABLE ROW LEVEL SECURITY;
ALTER TABLE outbox FORCE ROW LEVEL SECURITY;
CREATE POLICY outbox_scope ON outbox
    USING (hookrelay_team() = '*' OR hookrelay_sees_route(route));

-- The engine's own tables: no team sees them.

ALTER TABLE event_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE event_keys FORCE ROW LEVEL SECURITY;
CREATE POLICY event_keys_engine ON event_keys USING (hookrelay_team() = '*');

ALTER TABLE console_sessions ENABLE ROW LEVEL SECURITY;
ALTER TABLE console_sessions FORCE ROW LEVEL SECURITY;
CREATE POLICY console_sessions_engine ON console_sessions USING (hookrelay_team() = '*');

-- Partitions are made and dropped at run time by a role that owns no
-- table: these two run with their owner's rights (SECURITY DEFINER, with
-- the search path fixed to the migration's), for callers that see
-- everything only. A partition is reached only through its parent (the
-- application role is granted the parents, not the partitions), so the
-- parent's policy always applies.
ALTER FUNCTION hookrelay_ensure_partitions(date, date) SECURITY DEFINER SET search_path FROM CURRENT;

CREATE FUNCTION hookrelay_drop_day(day date) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF hookrelay_team() IS DISTINCT FROM '*' THEN
        RAISE EXCEPTION 'hookrelay_drop_day: only a caller that sees every team drops a day'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    EXECUTE format('DROP TABLE %I, %I, %I',
        'delivery_attempts_p' || to_char(day, 'YYYYMMDD'),
        'deliveries_p' || to_char(day, 'YYYYMMDD'),
        'events_p' || to_char(day, 'YYYYMMDD'));
END
$$;
REVOKE EXECUTE ON FUNCTION hookrelay_drop_day(date) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION hookrelay_ensure_partitions(date, date) FROM PUBLIC;
