SET lock_timeout = '10s';

-- Retry copies still waiting in the outbox would be published by an older
-- relay straight to their route queue, early but not lost.
ALTER TABLE outbox
    DROP COLUMN IF EXISTS first_attempt_at,
    DROP COLUMN IF EXISTS retry_ms;
