package main

import (
	"testing"

	"github.com/hookrelay/hookrelay/internal/setup/setuptest"
)

// What reaches the dispatcher before it runs: --help, a bad flag, a bad config.
func TestRunBeforeStart(t *testing.T) {
	t.Parallel()
	setuptest.RunBeforeStart(t, "dispatcher", run)
}
