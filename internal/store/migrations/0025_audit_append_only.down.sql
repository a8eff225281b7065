SET lock_timeout = '10s';

-- The rights taken back are not given again: the release before gives
-- them to its role at its next hookrelay migrate (EnsureAppRole).
