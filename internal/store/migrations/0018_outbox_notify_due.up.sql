SET lock_timeout = '10s';

-- A receiver publishes the events it stored itself, right after their
-- commit, and inserts their outbox rows due only later (store.HoldOutbox):
-- the rows are the safety net, swept by a publisher only when the direct
-- publish did not confirm in time. Waking every publisher (receivers and
-- dispatchers) for such rows made each of them claim nothing, a round trip
-- and a transaction per event. The trigger now notifies only when a row it
-- inserted is due at once (retry copies, replays, resends, and rows of a
-- receiver that publishes only through the outbox); the others are found by
-- the publishers' poll once due.
CREATE OR REPLACE FUNCTION hookrelay_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM outbox_inserted WHERE next_try_at <= now()) THEN
        PERFORM pg_notify('hookrelay_outbox', '');
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER outbox_notify ON outbox;
CREATE TRIGGER outbox_notify
    AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS outbox_inserted
    FOR EACH STATEMENT EXECUTE FUNCTION hookrelay_outbox_notify();
