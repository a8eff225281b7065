SET lock_timeout = '10s';

ALTER TABLE deliveries DROP COLUMN replayed_by;
ALTER TABLE api_jobs DROP COLUMN cancel_requested_at;
UPDATE api_jobs SET state = 'failed' WHERE state = 'cancelled';
ALTER TABLE api_jobs DROP CONSTRAINT api_jobs_state_check;
ALTER TABLE api_jobs ADD CONSTRAINT api_jobs_state_check CHECK (state IN ('running', 'succeeded', 'failed'));
