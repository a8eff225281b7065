SET lock_timeout = '10s';

-- History by day (issue 21), step 1 of 3. Events, deliveries and attempts
-- become tables partitioned by day, so that retention drops a day whole
-- instead of deleting it row by row (0021). The conversion is online: no
-- step rewrites a table or builds an index on it while holding a lock that
-- stops ingest or delivery. This step holds no such lock but for its last
-- statements, which are instant; 0020 scans the tables holding only a lock
-- that lets every read and write go on; 0021 swaps them in a moment.
--
-- The partition key is the event id: ids are UUIDv7 (since the first
-- release), whose first 48 bits are the receiver's clock in milliseconds,
-- so a day is a range of ids. Partitioning by id keeps every lookup by id
-- on one partition, and lets deliveries and attempts be partitioned by
-- their event's id: a day of events, their deliveries and their attempts
-- are three partitions that go together.

-- hookrelay_uuid7_floor(t) is the smallest UUIDv7 of the millisecond t:
-- every event received from t on has an id at least this.
CREATE FUNCTION hookrelay_uuid7_floor(t timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || '70008000000000000000')::uuid
$$;

-- hookrelay_uuid7(t) is a new random UUIDv7 of the millisecond t, for
-- tools and tests that write events at a chosen time (the relay's ids come
-- from its receivers).
CREATE FUNCTION hookrelay_uuid7(t timestamptz) RETURNS uuid
LANGUAGE sql VOLATILE STRICT AS $$
    SELECT overlay(overlay(
        (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || substr(replace(gen_random_uuid()::text, '-', ''), 13))
        PLACING '7' FROM 13) PLACING to_hex(8 + floor(random() * 4)::int) FROM 17)::uuid
$$;

-- Idempotency stays exact across partitions: a unique index on a
-- partitioned table must hold its partition key, so (source,
-- idempotency_key) can no longer be unique on events. event_keys holds
-- every event's keys, unpartitioned, for retention.dedupe_window: ingest
-- inserts an event's keys first, and only an event whose keys went in is
-- stored. A purged event's keys stay until the window has passed, so a
-- resend is still answered with the first event's id.
CREATE TABLE event_keys (
    source          text  NOT NULL,
    idempotency_key text  NOT NULL,
    -- Set for sources that dedupe on the body (dedupe_body).
    body_sha256     bytea,
    event_id        uuid  NOT NULL,
    PRIMARY KEY (source, idempotency_key)
);
CREATE UNIQUE INDEX event_keys_source_body_sha256_key ON event_keys (source, body_sha256)
    WHERE body_sha256 IS NOT NULL;
-- Keys expire by their event's time, which the UUIDv7 id carries.
CREATE INDEX event_keys_event_id_idx ON event_keys (event_id);

-- The ids below cutover stay in the existing tables, which 0021 attaches
-- as the default partitions; days from the cutover on get partitions of
-- their own. An empty database needs no legacy range (the nil UUID); one
-- holding events keeps up to the end of the day after tomorrow (UTC) in
-- its legacy tables: the receivers running now write there until 0021,
-- and 0021 may come a day later on a large database. New ids in the legacy
-- range are still accepted there (a receiver whose clock is behind).
CREATE TABLE hookrelay_partitioning (
    one     boolean     PRIMARY KEY DEFAULT true CHECK (one),
    cutover uuid        NOT NULL,
    -- When the keys of the legacy events were copied: 0021 copies the keys
    -- of events stored since (minus a margin) under its lock.
    keys_copied_at timestamptz NOT NULL
);
INSERT INTO hookrelay_partitioning (cutover, keys_copied_at)
SELECT CASE WHEN EXISTS (SELECT 1 FROM events)
            THEN hookrelay_uuid7_floor(date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '3 days')
            ELSE '00000000-0000-0000-0000-000000000000'::uuid END,
       now();

-- The keys of every event stored so far. This reads events under the
-- weakest lock: ingest goes on, and its rows stored meanwhile are copied
-- by 0021.
INSERT INTO event_keys (source, idempotency_key, body_sha256, event_id)
SELECT source, idempotency_key, body_sha256, id FROM events
ON CONFLICT DO NOTHING;

-- An attempt is partitioned by its event's id, which it did not carry.
-- The column is added without a default (no rewrite); rows from before
-- keep NULL and stay in the legacy table (0021's default partition).
ALTER TABLE delivery_attempts ADD COLUMN event_id uuid;

-- The constraints that let 0021 attach the tables as default partitions
-- without a scan under its lock: they prove that no legacy row belongs in
-- a day partition. NOT VALID checks new rows only (instant); 0020
-- validates the existing ones. An empty database gets them in 0021, under
-- its lock (a constraint below the nil UUID would refuse, here, the
-- events of receivers still running).
DO $$
DECLARE
    cut uuid := (SELECT cutover FROM hookrelay_partitioning);
BEGIN
    IF cut <> '00000000-0000-0000-0000-000000000000'::uuid THEN
        EXECUTE format('ALTER TABLE events ADD CONSTRAINT events_legacy_before_cutover CHECK (id < %L) NOT VALID', cut);
        EXECUTE format('ALTER TABLE deliveries ADD CONSTRAINT deliveries_legacy_before_cutover CHECK (event_id < %L) NOT VALID', cut);
        -- An attempt from before has no event id; a new attempt of a
        -- legacy event has the event's.
        EXECUTE format('ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_legacy_before_cutover
                        CHECK (event_id IS NULL OR event_id < %L) NOT VALID', cut);
    END IF;
END
$$;
