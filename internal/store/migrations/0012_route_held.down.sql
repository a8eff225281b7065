SET lock_timeout = '10s';

ALTER TABLE route_state DROP COLUMN IF EXISTS held_until;
