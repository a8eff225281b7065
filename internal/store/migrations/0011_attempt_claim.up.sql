SET lock_timeout = '10s';

-- Records that can be made twice (issue 18). A record whose answer is lost
-- (its caller gave up while the statement or its batch was in Postgres, a
-- connection cut after the commit) used to be tried again and find the
-- lease released by its own first try: the attempt was stored a second
-- time as lost_lease, and the caller, told the lease was lost, acted on
-- an outcome that was not the one committed. Each attempt now keeps the
-- claim that made it (the lease owner) and what its record answered: the
-- pair's generation afterwards, and whether the attempt's copy was the
-- pair's current one. A record tried again by the same claim finds its
-- attempt and answers the same, changing nothing. NULL on rows from before
-- this migration and on attempts no claim recorded (lease_expired).
ALTER TABLE delivery_attempts
    ADD COLUMN claim        uuid,
    ADD COLUMN gen_after    bigint,
    ADD COLUMN copy_current boolean;
