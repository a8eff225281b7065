SET lock_timeout = '10s';

-- What each minute saw (issue 20's overview): webhook requests per source
-- by outcome and reason (accepted, duplicate, rejected: signature, ...)
-- and delivery outcomes per route (delivered, retry_scheduled, dead, ...).
-- Every receiver and dispatcher counts in memory and adds its counts here
-- every few seconds in one statement (internal/activity), so the console
-- answers "how is it going" for all processes at once at the cost of a
-- statement per process per flush, not a write per request; a process
-- killed loses at most its last unflushed seconds of counts, never an
-- event. Rows older than a week are deleted by the flushers.
CREATE TABLE activity_minutes (
    minute  timestamptz NOT NULL,
    kind    text        NOT NULL CHECK (kind IN ('ingest', 'delivery')),
    name    text        NOT NULL, -- the source (ingest) or the route (delivery)
    outcome text        NOT NULL,
    reason  text        NOT NULL DEFAULT '',
    n       bigint      NOT NULL,
    PRIMARY KEY (minute, kind, name, outcome, reason)
);

-- Why a route was paused, as its operator said (the console and the API
-- show it beside who and when).
ALTER TABLE route_state ADD COLUMN paused_reason text;


-- Two indexes for the console's pages on big tables (issue 20's page-time
-- benchmark). Each replaces one, so every row still costs one index entry
-- in each table. A plain CREATE INDEX blocks writes to its table while it
-- builds (about two seconds per million rows on the benchmark's machine);
-- on a big installation, build them first by hand with CREATE INDEX
-- CONCURRENTLY and the same names and definitions, and this migration
-- finds them and skips them (IF NOT EXISTS). CONCURRENTLY cannot be used
-- here: it waits for every other transaction, including a second
-- migrator's wait for the migration lock, which deadlocks.
--
-- Listing events by a pair's state (dead, retrying, stale...) and counting
-- each route's open pairs read only the pairs that are not delivered, a
-- few per cent of them. The (route, state) index held every pair, and each
-- pair moved to delivered wrote a new entry in it; this one holds only the
-- others (a pair leaves it when delivered, which writes nothing) and leads
-- with the state, which the events page asks without a route.
CREATE INDEX IF NOT EXISTS deliveries_open_idx ON deliveries (state, route, event_id) INCLUDE (created_at)
    WHERE state <> 'delivered';
DROP INDEX IF EXISTS deliveries_route_state_idx;

-- Events are listed newest first, by (received_at, id), and filtered by
-- source and event type: with both in the index, a filtered page or count
-- is read from the index alone, not from the wide event rows (bodies).
CREATE INDEX IF NOT EXISTS events_received_idx ON events (received_at, id) INCLUDE (source, event_type);
DROP INDEX IF EXISTS events_received_at_idx;
