SET lock_timeout = '10s';

-- Search by content (docs/search.md). An event's body is kept as the
-- sender's bytes (bytea: the signature covers them); a search reads it as
-- JSON through this function, and a GIN index of the function's value
-- (jsonb_path_ops: one hash per leaf and its path) finds the events that
-- contain a given document (@>) without reading the others. A body that
-- is not JSON (form data, XML, empty) or that jsonb refuses (a \u0000 in
-- a string) is NULL: it is in no index entry, and found only by a
-- search the index cannot serve (a scan of the window).
--
-- IMMUTABLE: the value depends on the bytes alone (the database's
-- encoding is fixed for its life), which an index expression requires.
-- The EXCEPTION block costs a subtransaction per call, but no XID (it
-- writes nothing); a body that does not start as JSON does returns before
-- it.
CREATE FUNCTION hookrelay_body_json(body bytea) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    i int := 0;
    n int := length(body);
    c int;
BEGIN
    IF n = 0 THEN
        RETURN NULL;
    END IF;
    c := get_byte(body, 0);
    -- Whitespace before the JSON: rare, so looked at only then.
    WHILE c IN (9, 10, 13, 32) AND i < n - 1 LOOP
        i := i + 1;
        c := get_byte(body, i);
    END LOOP;
    IF c NOT IN (123, 91) THEN  -- '{' or '['
        RETURN NULL;
    END IF;
    BEGIN
        RETURN convert_from(body, 'UTF8')::jsonb;
    EXCEPTION WHEN others THEN
        RETURN NULL;
    END;
END
$$;

-- One index per day partition (made with each partition), so a window
-- reads the indexes of its days only and a dropped day drops its index
-- with it.
CREATE INDEX events_body_idx ON events USING gin (hookrelay_body_json(body) jsonb_path_ops);

-- The ids of the events whose body contains wanted, received in
-- [lo, hi) (their ids within [lo_id, hi_id): the day partitions the
-- window touches), after the cursor (after_at, after_id) in the order
-- asked, that the caller's team sees, at most lim.
--
-- Why a function: row-level security keeps a search under a team's
-- policy from using the index (the planner applies no operator that is
-- not leakproof, as @> is not, before the policy, so it would read every
-- body of the window). This function runs as the role that migrated
-- (SECURITY DEFINER; a fixed search_path), which reads events through the
-- index when it is a superuser or has BYPASSRLS (docs/search.md), and
-- applies the caller's reach itself, in the statement, with the policy's
-- own condition: another team's event is neither returned nor named, and
-- a caller without a team gets nothing. Otherwise the policy applies on
-- top, and the answer is the same.
--
-- The plan: a search is mostly for a few events (a customer's), which
-- the index finds at once, where reading the window in received_at order
-- to the first lim matches would read all of it. The planner cannot tell
-- the two apart (a jsonb document's selectivity is a guess, and a day
-- partition not yet analyzed has no statistics at all), so the function
-- first collects the matches of each day partition the window touches
-- through the body index alone (the other conditions are written so that
-- no other index serves them, and sequential and ordered index scans are
-- off for those statements), up to search_cap in all. Only a document that
-- matches more than that (most of the window) is then read in order,
-- where the first lim come soon.
CREATE FUNCTION hookrelay_event_ids_by_body(wanted jsonb, lo timestamptz, hi timestamptz, lo_id uuid, hi_id uuid,
    after_at timestamptz, after_id uuid, newest_first boolean, lim int)
RETURNS TABLE (id uuid, received_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT ROWS 100 AS $$
DECLARE
    caller     text := hookrelay_team();
    search_cap constant int := 10000;
    dir        text := CASE WHEN newest_first THEN 'DESC' ELSE 'ASC' END;
    cmp        text := CASE WHEN newest_first THEN '<' ELSE '>' END;
    seqscan    text := current_setting('enable_seqscan');
    idxscan    text := current_setting('enable_indexscan');
    part       text;
    got        uuid[];
    got_at     timestamptz[];
    matches    uuid[] := '{}';
    ats        timestamptz[] := '{}';
BEGIN
    IF caller IS NULL OR caller = '' THEN
        RETURN;
    END IF;
    PERFORM set_config('enable_seqscan', 'off', true), set_config('enable_indexscan', 'off', true);
    FOR part IN
        SELECT c.relname FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
        WHERE h.inhparent = 'events'::regclass
          AND (c.relname = 'events_legacy'
               OR (c.relname ~ '^events_p[0-9]{8}$'
                   AND to_date(substr(c.relname, 9), 'YYYYMMDD') BETWEEN (lo - interval '1 day')::date AND (hi + interval '1 day')::date))
    LOOP
        EXECUTE format($q$
            SELECT array_agg(m.id), array_agg(m.received_at) FROM (
                SELECT e.id, e.received_at FROM %I e
                WHERE hookrelay_body_json(e.body) @> $1
                  AND (e.received_at >= $2 AND e.received_at < $3) IS TRUE
                  AND ($6::timestamptz IS NULL OR ((e.received_at, e.id) %s ($6, $7)) IS TRUE)
                  AND ($9 = '*' OR hookrelay_sees_event(e.id, e.source))
                LIMIT $8) m$q$, part, cmp)
            INTO got, got_at
            USING wanted, lo, hi, lo_id, hi_id, after_at, after_id, search_cap + 1 - cardinality(matches), caller;
        matches := matches || coalesce(got, '{}');
        ats := ats || coalesce(got_at, '{}');
        EXIT WHEN cardinality(matches) > search_cap;
    END LOOP;
    PERFORM set_config('enable_seqscan', seqscan, true), set_config('enable_indexscan', idxscan, true);
    IF cardinality(matches) <= search_cap THEN
        RETURN QUERY EXECUTE format('SELECT m.id, m.at FROM unnest($1, $2) AS m (id, at) ORDER BY m.at %1$s, m.id %1$s LIMIT $3', dir)
            USING matches, ats, lim;
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($q$
        SELECT e.id, e.received_at FROM events e
        WHERE hookrelay_body_json(e.body) @> $1
          AND e.received_at >= $2 AND e.received_at < $3
          AND e.id >= $4 AND e.id < $5
          AND ($6::timestamptz IS NULL OR (e.received_at, e.id) %s ($6, $7))
          AND ($9 = '*' OR hookrelay_sees_event(e.id, e.source))
        ORDER BY e.received_at %s, e.id %s LIMIT $8$q$, cmp, dir, dir)
        USING wanted, lo, hi, lo_id, hi_id, after_at, after_id, lim, caller;
END
$$;
REVOKE ALL ON FUNCTION hookrelay_event_ids_by_body(jsonb, timestamptz, timestamptz, uuid, uuid, timestamptz, uuid, boolean, int) FROM PUBLIC;
