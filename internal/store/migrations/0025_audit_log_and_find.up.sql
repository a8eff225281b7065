SET lock_timeout = '10s';

-- Issue 38. The audit log is added to, never changed: the processes'
-- role (hookrelay migrate grants it, store.EnsureAppRole) may insert
-- rows and read them, and no longer update, delete or truncate them.
-- The grants come from EnsureAppRole, which now gives the audit log
-- SELECT and INSERT only; this takes back what earlier releases gave,
-- from every role but the table's owner, so the change holds from this
-- migration on, before EnsureAppRole runs again.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole::text AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'audit_log'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
          AND a.privilege_type IN ('UPDATE', 'DELETE', 'TRUNCATE')
    LOOP
        EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM %s', r.grantee);
    END LOOP;
END
$$;
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM PUBLIC;

-- A change that spans transactions (replay, purge, requeue, retry, drop)
-- writes a row before it starts ('started'), so a process that dies
-- half-way leaves it logged, and a second row when it ends: 'ok',
-- 'failed', or 'refused' (a request that turned out to change nothing).
-- The check is swapped under the table's lock for a moment; VALIDATE
-- reads rows the old check admitted already.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_outcome_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_outcome_check
    CHECK (outcome IN ('ok', 'failed', 'started', 'refused')) NOT VALID;
ALTER TABLE audit_log VALIDATE CONSTRAINT audit_log_outcome_check;

-- The console's find box: the events of any source whose idempotency key
-- (the sender's id) is wanted, among the events the caller sees. event_keys
-- is the engine's (no team reads it, migration 22), and its primary key,
-- (source, idempotency_key), answers a key source by source: the sources
-- are walked through it (a loose index scan; Postgres 15 has no skip
-- scan). The walk and the lookup run with every team's reach, for this
-- statement only (set_config local, restored before the function
-- returns; an error aborts the transaction, which drops it); the ids
-- found are then read from events under the caller's own policy, so a
-- team gets the events it sees and another team's key answers as a key of
-- nothing, also to a direct call. A caller without a team gets nothing.
CREATE FUNCTION hookrelay_event_ids_by_key(wanted text) RETURNS SETOF uuid
LANGUAGE plpgsql VOLATILE ROWS 4 AS $$
DECLARE
    caller text := hookrelay_team();
    found  uuid[];
BEGIN
    IF caller IS NULL OR caller = '' THEN
        RETURN;
    END IF;
    PERFORM set_config('hookrelay.team', '*', true);
    WITH RECURSIVE walked AS (
        SELECT min(k.source) AS source FROM event_keys k
        UNION ALL
        SELECT (SELECT min(k.source) FROM event_keys k WHERE k.source > w.source) FROM walked w WHERE w.source IS NOT NULL
    )
    SELECT array_agg(k.event_id) INTO found FROM event_keys k
    WHERE k.source IN (SELECT w.source FROM walked w WHERE w.source IS NOT NULL) AND k.idempotency_key = wanted;
    PERFORM set_config('hookrelay.team', caller, true);
    RETURN QUERY SELECT e.id FROM events e WHERE e.id = ANY (found);
END
$$;
