// Command dispatcher consumes every route queue with prefetch 1, POSTs each
// event to its route's URL with Standard Webhooks signatures, records every
// attempt in Postgres, retries through RabbitMQ TTL tiers, and dead-letters
// after the last attempt. A message is acked only after its outcome is
// stored.
//
//	dispatcher [--config config.yaml]
package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/rs/zerolog"
)

func main() {
	// Durations in the log carry their unit: "retry_in":"10s".
	zerolog.DurationFieldFormat = zerolog.DurationFormatString
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(setup.ExitCode(err))
}

// errLogged is a failure while running, which the log has reported.
var errLogged = errors.New("dispatcher failed")

// run runs the dispatcher until ctx is done. A bad command line or config
// is reported on stderr, a failure while running in the log; the error is
// for the exit status. --help and --version print to stdout; the
// dispatcher itself writes nothing there.
func run(ctx context.Context, args []string, lookupEnv config.LookupEnvFunc, stdout, stderr io.Writer) error {
	cmd := setup.Daemon("dispatcher",
		"Deliver the events in RabbitMQ to the routes' destinations",
		`The dispatcher consumes every route's queue, POSTs each event to the
route's URL signed with Standard Webhooks headers, records every attempt in
Postgres, retries through RabbitMQ's TTL tiers and dead-letters after the
last attempt; a message is acked only once its outcome is stored. It serves
GET /healthz, /readyz and /metrics on dispatcher.listen, logs a summary per
route every dispatcher.summary_interval, and stops gracefully on SIGTERM or
SIGINT, letting deliveries in flight finish.`,
		lookupEnv, stderr,
		func(ctx context.Context, cfg *config.Config, logger zerolog.Logger) error {
			if err := app.RunDispatcher(ctx, cfg, app.DispatcherOptions{Logger: logger}); err != nil {
				logger.Error().Err(err).Msg("dispatcher exited")
				return errLogged
			}
			return nil
		})
	err := setup.Execute(ctx, cmd, args, stdout, stderr)
	if !errors.Is(err, errLogged) {
		setup.Report(err, "dispatcher", stderr)
	}
	return err
}
