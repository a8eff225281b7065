SET lock_timeout = '10s';

-- Held deliveries (issue 18). A delivery held for its route's rate limit
-- or a Retry-After is a message in a dispatcher's hand, unacked and not yet
-- claimed: its pair looks undelivered and not in flight, and its route
-- queue may hold no ready message. A dispatcher about to hold one marks the
-- route held until the hold ends; the reconciler leaves a route alone
-- until a margin after that.
ALTER TABLE route_state ADD COLUMN held_until timestamptz;
