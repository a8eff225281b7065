SET lock_timeout = '10s';

-- Nothing to undo: validating a constraint changes no data.
