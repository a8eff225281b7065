SET lock_timeout = '10s';

ALTER TABLE deliveries
    DROP COLUMN IF EXISTS lease_attempt,
    DROP COLUMN IF EXISTS lease_until,
    DROP COLUMN IF EXISTS lease_at,
    DROP COLUMN IF EXISTS lease_owner;
