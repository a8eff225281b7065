SET lock_timeout = '10s';

-- Routes made at run time (hookrelay routes create, the API, the console)
-- live here with their settings; a route of config.yaml (declared) keeps
-- its settings in the config, and spec stays NULL.
ALTER TABLE routes
    ADD COLUMN spec jsonb,
    -- The signing secret, sealed with AES-256-GCM under secrets.key: the
    -- key's id (8 bytes), the nonce (12) and the ciphertext. Only the
    -- fingerprint is ever shown.
    ADD COLUMN secret bytea,
    ADD COLUMN secret_fingerprint text,
    -- After a rotation, the previous secret still signs until
    -- previous_until.
    ADD COLUMN previous_secret bytea,
    ADD COLUMN previous_fingerprint text,
    ADD COLUMN previous_until timestamptz,
    -- A deleted route retires: no event is routed to it any more, and
    -- the dispatchers finish its backlog as disposal says (deliver it, or
    -- move it to the route's dead letters) before its queue goes
    -- (retired_at). The row stays: the route's deliveries keep their team.
    ADD COLUMN deleted_at timestamptz,
    ADD COLUMN disposal text CHECK (disposal IN ('deliver', 'dead_letter')),
    ADD COLUMN retired_at timestamptz,
    ADD COLUMN version bigint NOT NULL DEFAULT 1,
    ADD CONSTRAINT routes_runtime_spec CHECK (declared OR spec IS NOT NULL),
    ADD CONSTRAINT routes_deleted_disposal CHECK ((deleted_at IS NULL) = (disposal IS NULL));

-- Every change of a route, whoever makes it, wakes every receiver and
-- dispatcher (they poll every second too).
CREATE FUNCTION hookrelay_routes_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('hookrelay_routes', '');
    RETURN NULL;
END $$;
CREATE TRIGGER routes_changed AFTER INSERT OR UPDATE OR DELETE ON routes
    FOR EACH STATEMENT EXECUTE FUNCTION hookrelay_routes_changed();
