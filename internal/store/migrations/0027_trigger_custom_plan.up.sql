SET lock_timeout = '10s';

-- The trigger that keeps route_resource_versions reads the delivered
-- pair's event by id (issue 38). The processes' sessions reuse generic
-- plans (plan_cache_mode force_generic_plan), and a generic plan of that
-- read cannot prune the day partitions of events when it is made: it locks
-- every one of them, with their indexes, each time a pair is recorded
-- delivered, in the record's transaction. A custom plan, made for the
-- event's id, prunes to its day when it is made.
ALTER FUNCTION hookrelay_resource_delivered() SET plan_cache_mode = force_custom_plan;
