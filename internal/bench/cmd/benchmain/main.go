// Command benchmain runs the benchmark until `hookrelay bench` is wired:
//
//	go build -o bin/ ./cmd/... && go run ./internal/bench/cmd/benchmain [flags]
//
// It is the whole of what the CLI's bench command does: hand the arguments
// to bench.Main, including the child roles it starts itself with.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookrelay/hookrelay/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := bench.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
