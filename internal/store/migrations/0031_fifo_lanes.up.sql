SET lock_timeout = '10s';

-- Routes with ordering: fifo deliver the events of one resource one at a
-- time, in the order their pairs were made (docs/ordering.md). A pair's
-- lane is its event's source and resource ("<source> <resource>"), set
-- when the pair is made for an event that carries a resource, whatever
-- its route: a route made fifo later finds its pairs' lanes already
-- there. NULL: no resource, or a pair that left its lane (dead-lettered
-- on a route whose on_dead is skip, or skipped by an operator).
ALTER TABLE deliveries ADD COLUMN lane text;

-- A lane's head is its lowest-id pair still owed (pending, retrying, or
-- dead and blocking). Only pairs of events with a resource are indexed.
CREATE INDEX deliveries_lane_idx ON deliveries (route, lane, id)
    WHERE lane IS NOT NULL AND state IN ('pending', 'retrying', 'dead');

-- A lane's pairs in flight (a live lease): what a claim checks besides
-- the head, without reading every owed pair of the lane. A claim adds the
-- entry, and the record that releases the lease takes the pair out.
CREATE INDEX deliveries_lane_leased_idx ON deliveries (route, lane)
    WHERE lane IS NOT NULL AND lease_owner IS NOT NULL;
