package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A database URL naming a primary and its replicas, with
// target_session_attrs (docs/production.md), is a valid database.url and
// migrate_url, kept as written for pgx to parse.
func TestLoadAcceptsAMultiHostDatabaseURL(t *testing.T) {
	t.Parallel()
	const multi = "postgres://hookrelay:pw@pg1:5432,pg2:5432,pg3:5433/hookrelay?target_session_attrs=read-write"
	cfg, err := Load(writeConfig(t, validYAML), envMap(map[string]string{
		"ACME_SECRET":                    "x",
		"HOOKRELAY_DATABASE_URL":         multi,
		"HOOKRELAY_DATABASE_MIGRATE_URL": multi,
	}))
	require.NoError(t, err)
	require.Equal(t, multi, cfg.Database.URL)
	require.Equal(t, multi, cfg.Database.MigrateURL)
}
