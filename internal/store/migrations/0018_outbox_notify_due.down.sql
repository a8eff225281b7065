SET lock_timeout = '10s';

DROP TRIGGER outbox_notify ON outbox;
CREATE OR REPLACE FUNCTION hookrelay_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookrelay_outbox', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_notify
    AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION hookrelay_outbox_notify();
