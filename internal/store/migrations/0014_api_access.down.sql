SET lock_timeout = '10s';

DROP TABLE api_jobs;
DROP TABLE audit_log;
DROP TABLE api_tokens;
