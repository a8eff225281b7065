SET lock_timeout = '10s';

-- History by day (issue 21), step 3 of 3: events, deliveries and
-- delivery_attempts become partitioned by event id, a partition per UTC day
-- (see 0019). Every statement here changes the catalogue only: the
-- existing tables are renamed *_legacy and attached, unscanned (0020
-- validated the constraints that prove them disjoint from every day
-- partition), as the default partitions, holding every id below the
-- cutover; their indexes are attached to the new tables' indexes, not
-- built. The locks below are held for milliseconds, not for a scan.
--
-- Receivers of a release before this schema must not run on it: their
-- inserts do not write event_keys, so a resend they received would be
-- stored twice. The new events.keyed column has a default that refuses
-- such an insert with an error those receivers answer 503 (not 400): the
-- sender resends later, to an upgraded receiver. Dispatchers of the
-- previous release go on working (their attempts land in the legacy table,
-- without an event id) until they are replaced.

-- In the order ingest writes them, so that an insert holding events does
-- not wait for outbox while this waits for events.
LOCK TABLE events, outbox, deliveries, delivery_attempts IN ACCESS EXCLUSIVE MODE;

-- Keys of the events stored since 0019 copied them (the margin covers
-- transactions that were open then, and receivers' clocks).
INSERT INTO event_keys (source, idempotency_key, body_sha256, event_id)
SELECT source, idempotency_key, body_sha256, id FROM events
WHERE id >= hookrelay_uuid7_floor((SELECT keys_copied_at FROM hookrelay_partitioning) - interval '1 hour')
ON CONFLICT DO NOTHING;

-- A database that was empty at 0019 gets its constraints now, under the
-- lock; a receiver that stored events since then moved the cutover.
DO $$
DECLARE
    cut uuid;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'events_legacy_before_cutover') THEN
        IF EXISTS (SELECT 1 FROM events) THEN
            UPDATE hookrelay_partitioning
            SET cutover = hookrelay_uuid7_floor(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '3 days');
        END IF;
        cut := (SELECT cutover FROM hookrelay_partitioning);
        EXECUTE format('ALTER TABLE events ADD CONSTRAINT events_legacy_before_cutover CHECK (id < %L)', cut);
        EXECUTE format('ALTER TABLE deliveries ADD CONSTRAINT deliveries_legacy_before_cutover CHECK (event_id < %L)', cut);
        EXECUTE format('ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_legacy_before_cutover
                        CHECK (event_id IS NULL OR event_id < %L)', cut);
    END IF;
END
$$;

-- Foreign keys cannot follow a day dropped whole (a dropped partition
-- would have to be checked row by row); purge deletes in dependency order
-- instead, and drops the three partitions of a day together.
ALTER TABLE outbox DROP CONSTRAINT outbox_event_id_fkey;
ALTER TABLE deliveries DROP CONSTRAINT deliveries_event_id_fkey;
ALTER TABLE delivery_attempts DROP CONSTRAINT delivery_attempts_delivery_id_fkey;

-- The partitioned tables take the names; the legacy tables' own index
-- names and sequences move aside (index names are per schema). Uniqueness
-- of keys is event_keys' now: the legacy unique indexes on them go.
DROP TRIGGER deliveries_resource_delivered ON deliveries;
ALTER TABLE events DROP CONSTRAINT events_source_idempotency_key_key;
DROP INDEX events_source_body_sha256_key;
ALTER TABLE events RENAME TO events_legacy;
ALTER TABLE deliveries RENAME TO deliveries_legacy;
ALTER TABLE delivery_attempts RENAME TO delivery_attempts_legacy;
ALTER TABLE events_legacy RENAME CONSTRAINT events_pkey TO events_legacy_pkey;
ALTER TABLE deliveries_legacy RENAME CONSTRAINT deliveries_pkey TO deliveries_legacy_pkey;
ALTER TABLE deliveries_legacy RENAME CONSTRAINT deliveries_event_id_route_key TO deliveries_legacy_event_id_route_key;
ALTER TABLE delivery_attempts_legacy RENAME CONSTRAINT delivery_attempts_pkey TO delivery_attempts_legacy_pkey;
ALTER INDEX events_received_idx RENAME TO events_legacy_received_idx;
ALTER INDEX events_ordering_resource_idx RENAME TO events_legacy_ordering_resource_idx;
ALTER INDEX deliveries_open_idx RENAME TO deliveries_legacy_open_idx;
ALTER INDEX deliveries_due_idx RENAME TO deliveries_legacy_due_idx;
ALTER INDEX deliveries_undelivered_idx RENAME TO deliveries_legacy_undelivered_idx;
ALTER INDEX delivery_attempts_delivery_claim_idx RENAME TO delivery_attempts_legacy_delivery_claim_idx;
ALTER SEQUENCE deliveries_id_seq RENAME TO deliveries_legacy_id_seq;
ALTER SEQUENCE delivery_attempts_id_seq RENAME TO delivery_attempts_legacy_id_seq;

-- keyed is true on every row: an event's keys are in event_keys. It
-- exists for its default (below), the fence against old receivers. Added
-- with a constant default: no rewrite.
ALTER TABLE events_legacy ADD COLUMN keyed boolean NOT NULL DEFAULT true;

CREATE FUNCTION hookrelay_refuse_unkeyed_insert() RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events are stored with their keys since schema 21: this receiver predates it, upgrade it'
        USING ERRCODE = '55000';
END
$$;

CREATE TABLE events (LIKE events_legacy INCLUDING DEFAULTS) PARTITION BY RANGE (id);
ALTER TABLE events ALTER COLUMN keyed SET DEFAULT hookrelay_refuse_unkeyed_insert();
ALTER TABLE events ADD CONSTRAINT events_pkey PRIMARY KEY (id);
CREATE INDEX events_received_idx ON events (received_at, id) INCLUDE (source, event_type);
CREATE INDEX events_ordering_resource_idx ON events (source, ordering_resource)
    WHERE ordering_resource IS NOT NULL AND purged_at IS NULL;

-- deliveries.id and delivery_attempts.id stay unique across partitions by
-- coming from one sequence each, which goes on from the legacy one's.
CREATE TABLE deliveries (LIKE deliveries_legacy INCLUDING DEFAULTS INCLUDING IDENTITY) PARTITION BY RANGE (event_id);
ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'delivered', 'retrying', 'dead', 'stale'));
ALTER TABLE deliveries ADD CONSTRAINT deliveries_event_id_route_key UNIQUE (event_id, route);
CREATE INDEX deliveries_open_idx ON deliveries (state, route, event_id) INCLUDE (created_at)
    WHERE state <> 'delivered';
CREATE INDEX deliveries_due_idx ON deliveries (route, due_at) WHERE state IN ('pending', 'retrying');
CREATE INDEX deliveries_undelivered_idx ON deliveries (route, created_at) WHERE state IN ('pending', 'retrying');

CREATE TABLE delivery_attempts (LIKE delivery_attempts_legacy INCLUDING DEFAULTS INCLUDING IDENTITY)
    PARTITION BY RANGE (event_id);
CREATE INDEX delivery_attempts_delivery_claim_idx ON delivery_attempts (delivery_id, claim);

DO $$
BEGIN
    EXECUTE format('ALTER TABLE deliveries ALTER COLUMN id RESTART WITH %s',
                   (SELECT last_value + 1 FROM deliveries_legacy_id_seq));
    EXECUTE format('ALTER TABLE delivery_attempts ALTER COLUMN id RESTART WITH %s',
                   (SELECT last_value + 1 FROM delivery_attempts_legacy_id_seq));
END
$$;

ALTER TABLE events ATTACH PARTITION events_legacy DEFAULT;
ALTER TABLE deliveries ATTACH PARTITION deliveries_legacy DEFAULT;
ALTER TABLE delivery_attempts ATTACH PARTITION delivery_attempts_legacy DEFAULT;

CREATE TRIGGER deliveries_resource_delivered
    AFTER UPDATE OF state ON deliveries
    FOR EACH ROW WHEN (NEW.state = 'delivered' AND OLD.state IS DISTINCT FROM 'delivered')
    EXECUTE FUNCTION hookrelay_resource_delivered();

-- hookrelay_ensure_partitions creates the day partitions of the three
-- tables for the UTC days first..last that lack them, skipping days below
-- the cutover (the legacy tables hold those), and answers how many tables
-- it created. Every receiver and dispatcher calls it at start and hourly
-- for yesterday to two days ahead (store.EnsurePartitions); a transaction
-- lock makes concurrent calls take turns. Creating a partition locks its
-- table for a moment.
CREATE FUNCTION hookrelay_ensure_partitions(first date, last date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d       date;
    t       text;
    name    text;
    lo      uuid;
    hi      uuid;
    created integer := 0;
    cut     uuid := (SELECT cutover FROM hookrelay_partitioning);
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('hookrelay_ensure_partitions'));
    FOR d IN SELECT generate_series(first, last, interval '1 day')::date LOOP
        lo := hookrelay_uuid7_floor(d::timestamp AT TIME ZONE 'UTC');
        hi := hookrelay_uuid7_floor((d + 1)::timestamp AT TIME ZONE 'UTC');
        CONTINUE WHEN lo < cut;
        FOREACH t IN ARRAY ARRAY['events', 'deliveries', 'delivery_attempts'] LOOP
            name := t || '_p' || to_char(d, 'YYYYMMDD');
            IF to_regclass(name) IS NULL THEN
                EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)', name, t, lo, hi);
                IF t = 'deliveries' THEN
                    -- A day's own unique index on id, as the legacy table's
                    -- primary key: a statement that finds pairs by id
                    -- (id = ANY(...)) is planned as index probes even on
                    -- a partition without statistics (autovacuum off, or
                    -- not yet analyzed), never as a scan of the day. It
                    -- cannot be the parent's: an index there would have
                    -- to be built on the legacy table.
                    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (id)', name || '_id_key', name);
                END IF;
                created := created + 1;
            END IF;
        END LOOP;
    END LOOP;
    RETURN created;
END
$$;

SELECT hookrelay_ensure_partitions((now() AT TIME ZONE 'UTC')::date - 1, (now() AT TIME ZONE 'UTC')::date + 2);
