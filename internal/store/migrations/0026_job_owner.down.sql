SET lock_timeout = '10s';

ALTER TABLE api_jobs DROP COLUMN owner;
