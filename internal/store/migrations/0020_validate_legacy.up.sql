SET lock_timeout = '10s';

-- History by day (issue 21), step 2 of 3: validate the constraints 0019
-- added. VALIDATE scans each table holding SHARE UPDATE EXCLUSIVE, which
-- lets every read and write go on (it only keeps other schema changes and
-- VACUUM out), so a large database converts online; 0021 then attaches the
-- tables without scanning them.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN SELECT conrelid::regclass AS tab, conname FROM pg_constraint
             WHERE conname IN ('events_legacy_before_cutover', 'deliveries_legacy_before_cutover',
                               'delivery_attempts_legacy_before_cutover') AND NOT convalidated
    LOOP
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', c.tab, c.conname);
    END LOOP;
END
$$;
