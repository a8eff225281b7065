package main

import (
	"testing"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/stretchr/testify/require"
)

// Issue 38, hardening: hookrelay migrate with database.url and
// database.migrate_url logging in as one role refuses, and says both
// ways out: a role of its own for the processes, which owns nothing, or
// no database.migrate_url for a relay of the platform team alone.
func TestMigrateWithOneRoleForBothNamesBothWaysOut(t *testing.T) {
	t.Parallel()
	s := newShell(t)
	dbURL := emptyDatabase(t)
	path := s.writeConfig("config.yaml", repoConfigAs(t, dbURL, dbURL, amqptest.Prefix(t)))
	res := s.run("hookrelay", "--config", path, "migrate")
	require.NotZero(t, res.code, "%s", res)
	for _, want := range []string{
		`database.url and database.migrate_url log in as the same role "postgres"`,
		"the processes must log in as a role that owns no table",
		"set database.url to a role of its own that owns nothing (hookrelay migrate creates it",
		"or, for a relay of the platform team alone, leave database.migrate_url empty",
	} {
		require.Contains(t, res.stderr, want, "%s", res)
	}
}
