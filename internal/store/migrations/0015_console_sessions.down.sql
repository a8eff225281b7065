SET lock_timeout = '10s';

DROP TABLE console_sessions;
