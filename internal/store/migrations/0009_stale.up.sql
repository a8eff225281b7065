SET lock_timeout = '10s';

-- Stale-event protection (issue 13). A source may declare which resource
-- an event is about and its version (a sequence number or the provider's
-- creation time of the event). The receiver stores both: the version as
-- sent, and, when it reads as a decimal number or an RFC 3339 time (as
-- seconds since 1970), as a number that sorts. NULL: the source declares
-- no ordering, or the event lacks one of the two fields; such an event is
-- never stale.
ALTER TABLE events
    ADD COLUMN ordering_resource    text,
    ADD COLUMN ordering_version     text,
    ADD COLUMN ordering_version_num numeric;

-- 'stale': a route with ordering drop_stale did not POST the event because
-- a newer version of its resource had been delivered on the route. Final,
-- like delivered: never retried, never dead-lettered, replayed only on
-- request (replay --include-stale). The column's CHECK was created unnamed
-- in 0001, so Postgres named it deliveries_state_check.
ALTER TABLE deliveries DROP CONSTRAINT deliveries_state_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'delivered', 'retrying', 'dead', 'stale'));

-- Set by replay --include-stale on the stale pairs it enqueues: their next
-- copy is delivered without the stale check (the operator asked for it).
-- Any later replay sets it again from the pair's state at that time.
ALTER TABLE deliveries ADD COLUMN stale_override boolean NOT NULL DEFAULT false;

-- hookrelay_version_newer says whether version a is newer than version b,
-- each given as (number, text): by number when both have one, else by
-- text (byte order) when neither has one. A number and a text are not
-- comparable: the answer is false, so neither is stale against the other.
CREATE FUNCTION hookrelay_version_newer(a_num numeric, a_text text, b_num numeric, b_text text)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN a_num IS NOT NULL AND b_num IS NOT NULL THEN a_num > b_num
        WHEN a_num IS NULL AND b_num IS NULL THEN a_text COLLATE "C" > b_text COLLATE "C"
        ELSE false
    END
$$;

-- route_resource_versions holds, per route and (source, resource), the
-- newest version delivered on that route. Resources are scoped by source:
-- two providers' ids live in different namespaces. It is kept for every
-- route, so turning drop_stale on for a route works from its next event;
-- purge does not touch it (a late old version may come at any time).
CREATE TABLE route_resource_versions (
    route        text        NOT NULL,
    source       text        NOT NULL,
    resource     text        NOT NULL,
    version      text        NOT NULL,
    version_num  numeric,
    -- The event that delivered it; no foreign key, the event may be purged.
    event_id     uuid        NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (route, source, resource)
);

-- The table is kept by a trigger, in the transaction that records the
-- pair delivered, whichever code path records it (a held lock or a record
-- after the lock's connection was lost): it cannot drift from deliveries.
-- A version replaces the stored one when it is newer, or when the two are
-- not comparable (one a number, one a text): then the last delivered wins.
CREATE FUNCTION hookrelay_resource_delivered() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO route_resource_versions AS v (route, source, resource, version, version_num, event_id)
    SELECT NEW.route, e.source, e.ordering_resource, e.ordering_version, e.ordering_version_num, e.id
    FROM events e
    WHERE e.id = NEW.event_id AND e.ordering_resource IS NOT NULL AND e.ordering_version IS NOT NULL
    ON CONFLICT (route, source, resource) DO UPDATE SET
        version = EXCLUDED.version, version_num = EXCLUDED.version_num,
        event_id = EXCLUDED.event_id, delivered_at = now()
    WHERE hookrelay_version_newer(EXCLUDED.version_num, EXCLUDED.version, v.version_num, v.version)
       OR ((EXCLUDED.version_num IS NULL) <> (v.version_num IS NULL));
    RETURN NULL;
END
$$;

CREATE TRIGGER deliveries_resource_delivered
    AFTER UPDATE OF state ON deliveries
    FOR EACH ROW WHEN (NEW.state = 'delivered' AND OLD.state IS DISTINCT FROM 'delivered')
    EXECUTE FUNCTION hookrelay_resource_delivered();
