SET lock_timeout = '10s';

DROP INDEX IF EXISTS events_ordering_resource_idx;
