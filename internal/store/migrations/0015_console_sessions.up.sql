SET lock_timeout = '10s';

-- The web console's sessions (issue 20), kept by scs's postgresstore: a
-- session holds which token signed in (its hash and name), never the
-- token itself.
CREATE TABLE console_sessions (
    token  text PRIMARY KEY,
    data   bytea NOT NULL,
    expiry timestamptz NOT NULL
);
CREATE INDEX console_sessions_expiry_idx ON console_sessions (expiry);
