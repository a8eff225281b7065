SET lock_timeout = '10s';

DROP TRIGGER routes_changed ON routes;
DROP FUNCTION hookrelay_routes_changed();
-- Routes made at run time go with their settings: what they delivered
-- stays, as a declared route's does when it leaves config.yaml.
DELETE FROM routes WHERE NOT declared;
ALTER TABLE routes
    DROP CONSTRAINT routes_deleted_disposal,
    DROP CONSTRAINT routes_runtime_spec,
    DROP COLUMN version,
    DROP COLUMN retired_at,
    DROP COLUMN disposal,
    DROP COLUMN deleted_at,
    DROP COLUMN previous_until,
    DROP COLUMN previous_fingerprint,
    DROP COLUMN previous_secret,
    DROP COLUMN secret_fingerprint,
    DROP COLUMN secret,
    DROP COLUMN spec;
