SET lock_timeout = '10s';

DROP TABLE IF EXISTS delivery_attempts;
DROP TABLE IF EXISTS deliveries;
DROP TABLE IF EXISTS outbox;
DROP FUNCTION IF EXISTS hookrelay_outbox_notify();
DROP TABLE IF EXISTS events;
