SET lock_timeout = '10s';

-- Delivery leases (issue 11). A dispatcher used to hold a row lock on the
-- (event, route) pair, and so a pooled connection, for the whole POST. It
-- now claims the pair with a lease in one statement, POSTs holding no
-- connection, and records the attempt and releases the lease in one
-- statement fenced by lease_owner. A pair with a live lease is in flight:
-- a duplicate message waits for it, and the reconciler, `hookrelay retry`
-- and purge leave it alone.
--
-- lease_owner is the claim's random id (NULL: not in flight), lease_at when
-- it was taken, lease_until when it expires (the route's timeout plus a
-- margin, by Postgres' clock), lease_attempt the attempt number of the
-- copy that took it. A lease still set past lease_until belongs to a
-- dispatcher that died mid-attempt (or lost Postgres for longer than the
-- margin): the next claim takes it over and records that attempt as
-- 'lease_expired', its outcome unknown.
ALTER TABLE deliveries
    ADD COLUMN lease_owner   uuid,
    ADD COLUMN lease_at      timestamptz,
    ADD COLUMN lease_until   timestamptz,
    ADD COLUMN lease_attempt integer;
