SET lock_timeout = '10s';

-- The rights taken back are not given again: the release before gives
-- them to its role at its next hookrelay migrate (EnsureAppRole).

-- Rows already 'started' or 'refused' stay as written (the log is never
-- changed): the old check holds for new rows only.
ALTER TABLE audit_log DROP CONSTRAINT audit_log_outcome_check;
ALTER TABLE audit_log ADD CONSTRAINT audit_log_outcome_check
    CHECK (outcome IN ('ok', 'failed')) NOT VALID;

DROP FUNCTION hookrelay_event_ids_by_key(text);
