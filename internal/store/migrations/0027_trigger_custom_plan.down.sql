SET lock_timeout = '10s';

ALTER FUNCTION hookrelay_resource_delivered() RESET plan_cache_mode;
