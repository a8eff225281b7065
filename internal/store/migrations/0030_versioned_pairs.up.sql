SET lock_timeout = '10s';

-- A pair recorded delivered ran the trigger that keeps
-- route_resource_versions (the drop_stale check) whatever its event: a
-- PL/pgSQL call and a custom-planned read of the event under row-level
-- security, about 60-90µs of Postgres per delivery (issue 40), for events
-- that carry no ordering version at all, which are most of them.
-- deliveries.versioned says whether the pair's event has one (resource
-- and version): the statements that make pairs on the hot path (ingest,
-- a claim that creates its pair, a route's backfill) set it from the event
-- they insert or read. NULL (a pair made before this migration, or by a
-- statement that does not set it) is "not known", and runs the trigger as
-- before: only a pair known to have no version skips it.
ALTER TABLE deliveries ADD COLUMN versioned boolean;

DROP TRIGGER deliveries_resource_delivered ON deliveries;
CREATE TRIGGER deliveries_resource_delivered
    AFTER UPDATE OF state ON deliveries
    FOR EACH ROW WHEN (NEW.state = 'delivered' AND OLD.state IS DISTINCT FROM 'delivered' AND NEW.versioned IS NOT FALSE)
    EXECUTE FUNCTION hookrelay_resource_delivered();
