SET lock_timeout = '10s';

-- Trace context (issue 23): one trace per event, through both processes
-- and the broker. NULL wherever tracing was off, so a relay that does not
-- trace writes nothing more. Adding a column without a default changes
-- only the catalog, on every day partition alike.
--
-- events.trace_parent: the W3C traceparent of the receiver's span for the
-- event; its first copy's publish continues that trace.
ALTER TABLE events ADD COLUMN trace_parent text;
-- outbox.trace_parent: the span a copy continues (a retry copy: the failed
-- attempt's delivery). NULL on an event's first copy (its event's is
-- used), and on a copy addressed to one route by an operator or the
-- reconciler (a replay, a resend): those start a trace of their own,
-- linked to the event's.
ALTER TABLE outbox ADD COLUMN trace_parent text;
-- delivery_attempts.trace_id: the trace the attempt was made in (a
-- replay's differs from its event's).
ALTER TABLE delivery_attempts ADD COLUMN trace_id text;
