SET lock_timeout = '10s';

ALTER TABLE delivery_attempts
    DROP COLUMN IF EXISTS copy_current,
    DROP COLUMN IF EXISTS gen_after,
    DROP COLUMN IF EXISTS claim;
