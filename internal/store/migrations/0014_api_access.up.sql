SET lock_timeout = '10s';

-- One way in (issue 19): named API tokens with roles, an audit log of
-- every change an operator makes, and the jobs long actions run as.

-- A token is stored as the SHA-256 of its secret; the secret is printed
-- once, when it is created, and never again.
CREATE TABLE api_tokens (
    name         text PRIMARY KEY,
    role         text NOT NULL CHECK (role IN ('viewer', 'operator', 'admin')),
    secret_hash  bytea NOT NULL UNIQUE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    created_by   text NOT NULL,
    expires_at   timestamptz,
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- Who changed what, from the CLI or the API, with its arguments and
-- result. Rows are only ever added (purge leaves them).
CREATE TABLE audit_log (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT now(),
    actor   text NOT NULL,
    action  text NOT NULL,
    target  text NOT NULL DEFAULT '',
    args    jsonb NOT NULL DEFAULT '{}',
    outcome text NOT NULL CHECK (outcome IN ('ok', 'failed')),
    result  jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_at_idx ON audit_log (at DESC, id DESC);
CREATE INDEX audit_log_actor_idx ON audit_log (actor, at DESC);

-- Long actions (replay, retry of a route, requeue, purge) run as jobs: a
-- caller gets an id at once and polls it for progress and the report.
-- heartbeat_at is moved by the process running it; a running job whose
-- heartbeat stopped was abandoned by a process that died.
CREATE TABLE api_jobs (
    id              uuid PRIMARY KEY,
    kind            text NOT NULL,
    actor           text NOT NULL,
    idempotency_key text,
    request         jsonb NOT NULL DEFAULT '{}',
    state           text NOT NULL CHECK (state IN ('running', 'succeeded', 'failed')),
    progress        jsonb NOT NULL DEFAULT '{}',
    result          jsonb,
    error           text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
-- An Idempotency-Key names one job per actor: a repeated request finds it.
CREATE UNIQUE INDEX api_jobs_idempotency_idx ON api_jobs (actor, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX api_jobs_created_idx ON api_jobs (created_at DESC);
