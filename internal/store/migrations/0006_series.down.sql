SET lock_timeout = '10s';

ALTER TABLE outbox DROP COLUMN IF EXISTS attempt;
ALTER TABLE delivery_attempts DROP COLUMN IF EXISTS series;
ALTER TABLE deliveries DROP COLUMN IF EXISTS series;
