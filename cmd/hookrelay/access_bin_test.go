package main

import (
	"encoding/json"
	"os/user"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tokens create prints the token once, on stdout alone; Postgres keeps its
// hash; list shows it without the secret; revoke ends it. Each change is
// one audit row under cli:<os user>, and listing writes none.
func TestTokensAndAuditFromTheShell(t *testing.T) {
	t.Parallel()
	s, db, _ := opsShell(t)
	me, err := user.Current()
	require.NoError(t, err)

	res := s.run("hookrelay", "tokens", "create", "ci-bot", "--role", "operator", "--expires", "90d")
	require.Equal(t, 0, res.code, res.String())
	secret := strings.TrimSpace(res.stdout)
	require.Regexp(t, `^hrt_[A-Za-z0-9_-]{43}$`, secret, "stdout is the token alone, for $(...)")
	require.Contains(t, res.stderr, "shown this once")
	var stored int
	require.NoError(t, db.Pool().QueryRow(t.Context(), `SELECT count(*) FROM api_tokens WHERE secret_hash = sha256($1::bytea)`, []byte(secret)).Scan(&stored))
	require.Equal(t, 1, stored, "Postgres keeps the SHA-256 of the token")

	res = s.run("hookrelay", "tokens", "create", "ci-bot", "--role", "viewer")
	require.NotEqual(t, 0, res.code, "a name is one token")
	require.Contains(t, res.stderr, "already exists")
	res = s.run("hookrelay", "tokens", "create", "x", "--role", "root")
	require.Equal(t, 2, res.code, "a usage error: %s", res)
	require.Contains(t, res.stderr, "role must be viewer, operator or admin")
	res = s.run("hookrelay", "tokens", "create", "x", "--role", "viewer", "--expires", "90")
	require.Equal(t, 2, res.code, "a duration needs a unit: %s", res)

	res = s.run("hookrelay", "tokens", "list")
	require.Equal(t, 0, res.code, res.String())
	require.Contains(t, res.stdout, "ci-bot  operator")
	require.Contains(t, res.stdout, "cli:"+me.Username)
	require.NotContains(t, res.stdout, secret)
	require.Contains(t, res.stdout, "1 token(s)")

	require.Equal(t, 0, s.run("hookrelay", "routes", "pause", "billing").code)
	res = s.run("hookrelay", "tokens", "revoke", "ci-bot")
	require.Equal(t, 0, res.code, res.String())
	require.Contains(t, res.stdout, "token ci-bot revoked")
	res = s.run("hookrelay", "tokens", "revoke", "ci-bot")
	require.NotEqual(t, 0, res.code, "revoked already")
	res = s.run("hookrelay", "tokens", "list")
	require.Contains(t, res.stdout, "revoked")

	res = s.run("hookrelay", "audit", "--json")
	require.Equal(t, 0, res.code, res.String())
	var audit struct {
		Total int64 `json:"total"`
		Items []struct {
			Actor, Action, Target, Outcome string
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &audit))
	var got []string
	for _, e := range audit.Items {
		require.Equal(t, "cli:"+me.Username, e.Actor)
		got = append(got, e.Action+" "+e.Target+" "+e.Outcome)
	}
	require.Equal(t, []string{"token.revoke ci-bot ok", "route.pause billing ok", "token.create ci-bot ok"}, got,
		"newest first, one row per change; a refusal (a taken name, a bad role, a token revoked already) changed nothing and is not logged")
	again := s.run("hookrelay", "audit", "--json")
	require.Equal(t, res.stdout, again.stdout, "reading the audit log writes nothing to it")

	res = s.run("hookrelay", "audit", "--action", "route.pause")
	require.Equal(t, 0, res.code, res.String())
	require.Contains(t, res.stdout, "route.pause  billing")
	require.Contains(t, res.stdout, "1 of 1 row(s)")
	res = s.run("hookrelay", "audit", "--action", "bogus")
	require.Equal(t, 2, res.code, res.String())
}
