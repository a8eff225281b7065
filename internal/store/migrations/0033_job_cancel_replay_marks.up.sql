SET lock_timeout = '10s';

-- A running job can be cancelled (docs/search.md, bulk actions): the
-- request is stored, the process running it sees it within a second and
-- stops, and the job ends cancelled, its progress saying how far it got.
ALTER TABLE api_jobs DROP CONSTRAINT api_jobs_state_check;
ALTER TABLE api_jobs ADD CONSTRAINT api_jobs_state_check CHECK (state IN ('running', 'succeeded', 'failed', 'cancelled'));
ALTER TABLE api_jobs ADD COLUMN cancel_requested_at timestamptz;

-- The replay that last put a pair back in its queue: the first job of a
-- replay and every run that goes on with it ("run it again for the
-- rest") share one id, and a pair that id replayed already is not
-- replayed by it again, whatever the pair's state is since (a delivered
-- pair of a replay with include_delivered is not POSTed a second time).
-- Stored in the same statement that enqueues the pair. NULL: no replay.
ALTER TABLE deliveries ADD COLUMN replayed_by uuid;
