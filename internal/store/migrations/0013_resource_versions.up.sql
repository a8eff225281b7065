SET lock_timeout = '10s';

-- Resource versions an operator can see and reset, and purge clears
-- (issue 18). Purge deletes a route's stored version of a resource once no
-- event of that resource is left whole (deleted, or stripped to its
-- dedupe key): nothing can be delivered or replayed for it any more, and a
-- version kept for ever would make a later event of the resource stale if
-- its sender's versions ever went back (a sequence reset, a forged one).
-- This index answers "is any event of (source, resource) left" per row.
CREATE INDEX events_ordering_resource_idx ON events (source, ordering_resource)
    WHERE ordering_resource IS NOT NULL AND purged_at IS NULL;
