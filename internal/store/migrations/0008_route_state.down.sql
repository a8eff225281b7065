SET lock_timeout = '10s';

DROP TABLE IF EXISTS route_state;
