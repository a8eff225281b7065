SET lock_timeout = '10s';

-- A record looks up its pairs' attempts by (delivery_id, claim): a record
-- tried again finds its own attempt, and a claim whose attempt is stored
-- already is answered as then (deliveries_batch.go). With only an index on
-- delivery_id, a table without statistics (autovacuum off, as on the CI
-- machine, or not yet analyzed after a fast start) is estimated at 0.5%
-- of its rows per delivery, and the generic plan of the grouped record
-- hashes the whole of delivery_attempts on every call: 117 ms at 51,580
-- attempts, growing with the table (a 50,000-event backlog drained at
-- 290/s). On both columns, each probe is estimated at a row whatever the
-- statistics, and the plan probes the index. It replaces the index on
-- delivery_id alone, which it serves as its prefix (the cascade from
-- deliveries, an event's attempts).
--
-- The build holds writes to delivery_attempts (records wait) for as long
-- as it takes: on a large table, create the index by hand first with
-- CREATE INDEX CONCURRENTLY delivery_attempts_delivery_claim_idx ON
-- delivery_attempts (delivery_id, claim); this statement then skips it.
CREATE INDEX IF NOT EXISTS delivery_attempts_delivery_claim_idx ON delivery_attempts (delivery_id, claim);
DROP INDEX IF EXISTS delivery_attempts_delivery_id_idx;
