SET lock_timeout = '10s';

DROP TRIGGER IF EXISTS deliveries_resource_delivered ON deliveries;
DROP FUNCTION IF EXISTS hookrelay_resource_delivered();
DROP TABLE IF EXISTS route_resource_versions;
DROP FUNCTION IF EXISTS hookrelay_version_newer(numeric, text, numeric, text);
ALTER TABLE deliveries DROP COLUMN IF EXISTS stale_override;

-- A stale pair was never sent: dead is the older state an operator can
-- replay it from.
UPDATE deliveries SET state = 'dead' WHERE state = 'stale';
ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_state_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'delivered', 'retrying', 'dead'));

ALTER TABLE events
    DROP COLUMN IF EXISTS ordering_version_num,
    DROP COLUMN IF EXISTS ordering_version,
    DROP COLUMN IF EXISTS ordering_resource;
