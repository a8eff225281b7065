package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// built holds the binaries, built once per test process for the tests that
// run them and removed by RemoveBinaries.
var built struct {
	once sync.Once
	dir  string
	err  error
}

// Binaries builds receiver, dispatcher and hookrelay (once per test
// process, in one go build so they share its compile) and returns the
// folder that holds them. It skips under -short. A package whose tests call
// it removes the folder from its TestMain with RemoveBinaries.
func Binaries(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binaries; skipped under -short")
	}
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "hookrelay-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.dir = dir
		// A bound on the build, so a wedged toolchain fails the test
		// instead of hanging it; five minutes is far above a cold build
		// on a busy two-core machine.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// Package paths, not ./cmd/..., so it builds from any package's
		// folder in the module.
		cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=auto", "-o", dir+string(os.PathSeparator),
			"github.com/hookrelay/hookrelay/cmd/receiver",
			"github.com/hookrelay/hookrelay/cmd/dispatcher",
			"github.com/hookrelay/hookrelay/cmd/hookrelay")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("building the binaries: %v", built.err)
	}
	return built.dir
}

// RemoveBinaries removes what Binaries built, if anything. Call it from
// TestMain after m.Run.
func RemoveBinaries() {
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
}
