SET lock_timeout = '10s';

-- Fails while two teams have tokens of the same name: revoke and rename
-- one first.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_pkey;
ALTER TABLE api_tokens ADD PRIMARY KEY (name);
