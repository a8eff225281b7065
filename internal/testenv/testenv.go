// Package testenv decides whether integration tests run: they skip under
// -short, and when a service they need does not answer they skip on a
// developer's machine but fail under CI=true, so CI never passes by skipping.
package testenv

import (
	"os"
	"testing"
)

// Default service addresses; override with HOOKRELAY_TEST_DATABASE_URL and
// HOOKRELAY_TEST_AMQP_URL.
const (
	defaultDatabaseURL = "postgres://postgres:postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultAMQPURL     = "amqp://guest:guest@127.0.0.1:5672/"
	defaultMgmtURL     = "http://guest:guest@127.0.0.1:15672"
)

// AdminDatabaseURL is a URL to a database the tests may create databases
// from.
func AdminDatabaseURL() string { return getenv("HOOKRELAY_TEST_DATABASE_URL", defaultDatabaseURL) }

// AMQPURL is the RabbitMQ the tests use.
func AMQPURL() string { return getenv("HOOKRELAY_TEST_AMQP_URL", defaultAMQPURL) }

// ManagementURL is the RabbitMQ management API base URL, with credentials.
func ManagementURL() string { return getenv("HOOKRELAY_TEST_MANAGEMENT_URL", defaultMgmtURL) }

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// InCI reports whether the tests run in CI, where a missing service is a
// failure.
func InCI() bool { return os.Getenv("CI") == "true" }

// Require skips t under -short. Otherwise it runs check; when check fails the
// test fails in CI and skips elsewhere, naming what is missing.
func Require(t testing.TB, service string, check func() error) {
	t.Helper()
	if testing.Short() {
		t.Skipf("integration test needs %s; skipped under -short", service)
	}
	if err := check(); err != nil {
		if InCI() {
			t.Fatalf("%s is required in CI and is not reachable: %v", service, err)
		}
		t.Skipf("%s not reachable (%v); run scripts/services.sh, or set CI=true to make this a failure", service, err)
	}
}
