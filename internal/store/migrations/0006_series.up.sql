SET lock_timeout = '10s';

-- Attempt series (issue 12). A pair's attempts are numbered 1, 2, 3...
-- within a series; a replay, a requeued dead letter and a dead letter
-- moved back by hand each start a new series at attempt 1, so an operator
-- reading the attempts sees "attempt 1 of series 2" instead of 1, 2, 3, 1.
-- deliveries.series is the pair's current series; each attempt row keeps
-- the series it was made in. Rows from before this migration are all
-- series 1 (earlier replays were not told apart).
ALTER TABLE deliveries ADD COLUMN series integer NOT NULL DEFAULT 1;
ALTER TABLE delivery_attempts ADD COLUMN series integer NOT NULL DEFAULT 1;

-- An outbox row that brings a retrying pair's next attempt forward
-- (`hookrelay retry`) carries that attempt's number, so the attempt keeps
-- its place in the series and max_attempts still counts. NULL: attempt 1
-- (an event's first copy, a replay, a reconciled resend).
ALTER TABLE outbox ADD COLUMN attempt integer;
