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
