SET lock_timeout = '10s';

DROP INDEX deliveries_lane_leased_idx;
DROP INDEX deliveries_lane_idx;
ALTER TABLE deliveries DROP COLUMN lane;
