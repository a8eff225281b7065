SET lock_timeout = '10s';

-- Back to one table each: the day partitions' rows are copied into the
-- legacy tables (this is not online: it holds the tables for the copy).
LOCK TABLE events, outbox, deliveries, delivery_attempts IN ACCESS EXCLUSIVE MODE;

DROP FUNCTION hookrelay_ensure_partitions(date, date);
DROP TRIGGER deliveries_resource_delivered ON deliveries;
ALTER TABLE events DETACH PARTITION events_legacy;
ALTER TABLE deliveries DETACH PARTITION deliveries_legacy;
ALTER TABLE delivery_attempts DETACH PARTITION delivery_attempts_legacy;
ALTER TABLE events_legacy DROP CONSTRAINT events_legacy_before_cutover;
ALTER TABLE deliveries_legacy DROP CONSTRAINT deliveries_legacy_before_cutover;
ALTER TABLE delivery_attempts_legacy DROP CONSTRAINT delivery_attempts_legacy_before_cutover;

INSERT INTO events_legacy SELECT * FROM events;
INSERT INTO deliveries_legacy OVERRIDING SYSTEM VALUE SELECT * FROM deliveries;
INSERT INTO delivery_attempts_legacy OVERRIDING SYSTEM VALUE SELECT * FROM delivery_attempts;
DO $$
BEGIN
    PERFORM setval('deliveries_legacy_id_seq', GREATEST((SELECT last_value FROM deliveries_legacy_id_seq),
        (SELECT COALESCE(max(id), 1) FROM deliveries_legacy)));
    PERFORM setval('delivery_attempts_legacy_id_seq', GREATEST((SELECT last_value FROM delivery_attempts_legacy_id_seq),
        (SELECT COALESCE(max(id), 1) FROM delivery_attempts_legacy)));
END
$$;

DROP TABLE events, deliveries, delivery_attempts;
DROP FUNCTION hookrelay_refuse_unkeyed_insert() CASCADE;
ALTER TABLE events_legacy DROP COLUMN keyed;

ALTER TABLE events_legacy RENAME TO events;
ALTER TABLE deliveries_legacy RENAME TO deliveries;
ALTER TABLE delivery_attempts_legacy RENAME TO delivery_attempts;
ALTER TABLE events RENAME CONSTRAINT events_legacy_pkey TO events_pkey;
ALTER TABLE deliveries RENAME CONSTRAINT deliveries_legacy_pkey TO deliveries_pkey;
ALTER TABLE deliveries RENAME CONSTRAINT deliveries_legacy_event_id_route_key TO deliveries_event_id_route_key;
ALTER TABLE delivery_attempts RENAME CONSTRAINT delivery_attempts_legacy_pkey TO delivery_attempts_pkey;
ALTER INDEX events_legacy_received_idx RENAME TO events_received_idx;
ALTER INDEX events_legacy_ordering_resource_idx RENAME TO events_ordering_resource_idx;
ALTER INDEX deliveries_legacy_open_idx RENAME TO deliveries_open_idx;
ALTER INDEX deliveries_legacy_due_idx RENAME TO deliveries_due_idx;
ALTER INDEX deliveries_legacy_undelivered_idx RENAME TO deliveries_undelivered_idx;
ALTER INDEX delivery_attempts_legacy_delivery_claim_idx RENAME TO delivery_attempts_delivery_claim_idx;
ALTER SEQUENCE deliveries_legacy_id_seq RENAME TO deliveries_id_seq;
ALTER SEQUENCE delivery_attempts_legacy_id_seq RENAME TO delivery_attempts_id_seq;

ALTER TABLE events ADD CONSTRAINT events_source_idempotency_key_key UNIQUE (source, idempotency_key);
CREATE UNIQUE INDEX events_source_body_sha256_key ON events (source, body_sha256) WHERE body_sha256 IS NOT NULL;
ALTER TABLE outbox ADD CONSTRAINT outbox_event_id_fkey FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_event_id_fkey FOREIGN KEY (event_id) REFERENCES events (id) ON DELETE CASCADE;
ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_delivery_id_fkey
    FOREIGN KEY (delivery_id) REFERENCES deliveries (id) ON DELETE CASCADE;
CREATE TRIGGER deliveries_resource_delivered
    AFTER UPDATE OF state ON deliveries
    FOR EACH ROW WHEN (NEW.state = 'delivered' AND OLD.state IS DISTINCT FROM 'delivered')
    EXECUTE FUNCTION hookrelay_resource_delivered();

-- 0019's constraints, as 0020 left them (0019's down drops them).
DO $$
DECLARE
    cut uuid := (SELECT cutover FROM hookrelay_partitioning);
BEGIN
    EXECUTE format('ALTER TABLE events ADD CONSTRAINT events_legacy_before_cutover CHECK (id < %L) NOT VALID', cut);
    EXECUTE format('ALTER TABLE deliveries ADD CONSTRAINT deliveries_legacy_before_cutover CHECK (event_id < %L) NOT VALID', cut);
    EXECUTE format('ALTER TABLE delivery_attempts ADD CONSTRAINT delivery_attempts_legacy_before_cutover
                    CHECK (event_id IS NULL OR event_id < %L) NOT VALID', cut);
END
$$;
