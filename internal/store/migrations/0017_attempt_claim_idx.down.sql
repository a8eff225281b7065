SET lock_timeout = '10s';
CREATE INDEX IF NOT EXISTS delivery_attempts_delivery_id_idx ON delivery_attempts (delivery_id);
DROP INDEX IF EXISTS delivery_attempts_delivery_claim_idx;
