// Command receiver accepts webhooks, stores each event with an outbox row in
// one Postgres transaction, answers 200, and publishes the outbox to
// RabbitMQ with publisher confirms.
//
//	receiver [--config config.yaml]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err))
}

// run runs the receiver until ctx is done. It reports its own failure, a
// bad config on stderr and a failure while running in the log, and returns
// it for the exit status. The receiver writes nothing to stdout.
func run(ctx context.Context, args []string, lookupEnv config.LookupEnvFunc, _, stderr io.Writer) error {
	cfg, logger, err := setup.Daemon("receiver", args, lookupEnv, stderr)
	var bad *setup.ConfigError
	if errors.As(err, &bad) {
		fmt.Fprintf(stderr, "receiver: %v\n", err)
	}
	if err != nil {
		return err // a bad flag or --help: the flag package has printed it
	}
	if err := app.RunReceiver(ctx, cfg, app.ReceiverOptions{Logger: logger}); err != nil {
		logger.Error().Err(err).Msg("receiver exited")
		return err
	}
	return nil
}

// exitCode is 0 after a clean stop or --help, 2 for a bad command line or
// config, 1 when the receiver failed.
func exitCode(err error) int {
	var usage *setup.UsageError
	var bad *setup.ConfigError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage), errors.As(err, &bad):
		return 2
	}
	return 1
}
