package bench

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"
)

// ChildArg, as the first argument of Main, selects a child role instead of
// a benchmark run: `<binary> bench-child destination|bare-ingest|bare-forwarder
// [flags]`. The benchmark starts each of its helpers that way, as a process
// of its own, so that its CPU time and memory are measured apart. A binary
// that runs Main must pass such arguments to it unchanged (see the package
// comment).
const ChildArg = "bench-child"

const (
	roleDestination   = "destination"
	roleBareIngest    = "bare-ingest"
	roleBareForwarder = "bare-forwarder"
	roleBareRelay     = "bare-relay"
)

// runChild runs one child role until SIGTERM or SIGINT (or ctx). A child
// announces on stdout when it is ready; its errors go to its stderr, which
// the benchmark keeps in a log file.
func runChild(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("a role is needed: %s, %s, %s or %s", roleDestination, roleBareIngest, roleBareForwarder, roleBareRelay)
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case roleDestination:
		return runDestination(ctx, args[1:], stdout)
	case roleBareIngest:
		return runBareIngest(ctx, args[1:], stdout)
	case roleBareForwarder:
		return runBareForwarder(ctx, args[1:], stdout)
	case roleBareRelay:
		return runBareRelay(ctx, args[1:], stdout)
	}
	return fmt.Errorf("unknown role %q", args[0])
}
