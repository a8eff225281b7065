SET lock_timeout = '10s';

-- A token's name is its team's own (issue 38): a name another team uses
-- is free, so taking it answers as for a name nobody uses, instead of a
-- conflict that tells of the other team's token. A token is named by its
-- team and its name; its secret's hash stays unique across all.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_pkey;
ALTER TABLE api_tokens ADD PRIMARY KEY (team, name);
