SET lock_timeout = '10s';

-- Retries through the outbox (issue 25). A failed attempt used to be
-- recorded first (the pair moved to its next generation) and its retry
-- copy published by the dispatcher afterwards: a dispatcher killed, or a
-- publish refused, between the two left the pair retrying with no copy
-- anywhere, and only the reconciler could find it, a margin later. Now the
-- statement that records the attempt also puts the retry copy in the
-- outbox, so the two commit together, as an event and its first copy do,
-- and the outbox relay publishes it to its retry tier.
--
-- retry_ms is the delay of the tier the copy goes to (the tier's queue is
-- named after it); NULL for every other row. first_attempt_at is when the
-- copy's attempt series began, carried in the copy for its dead letter.
ALTER TABLE outbox
    ADD COLUMN retry_ms         bigint,
    ADD COLUMN first_attempt_at timestamptz;
