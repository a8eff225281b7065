// Command receiver accepts webhooks, stores each event with an outbox row in
// one Postgres transaction, answers 200, and publishes the outbox to
// RabbitMQ with publisher confirms.
//
//	receiver [--config config.yaml]
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
var errLogged = errors.New("receiver failed")

// run runs the receiver until ctx is done. A bad command line or config
// is reported on stderr, a failure while running in the log; the error is
// for the exit status. --help and --version print to stdout; the receiver
// itself writes nothing there.
func run(ctx context.Context, args []string, lookupEnv config.LookupEnvFunc, stdout, stderr io.Writer) error {
	cmd := setup.Daemon("receiver",
		"Accept webhooks, store them in Postgres, publish them to RabbitMQ",
		`The receiver answers POST /webhooks/{source} once the event and its outbox
row are committed in Postgres, and publishes the outbox to RabbitMQ with
publisher confirms. It also serves GET /healthz, /readyz and /metrics, and
the admin API when admin.listen is set. It checks Postgres (and its schema)
and RabbitMQ before it logs "ready", and stops gracefully on SIGTERM or
SIGINT.`,
		lookupEnv, stderr,
		func(ctx context.Context, cfg *config.Config, logger zerolog.Logger) error {
			if err := app.RunReceiver(ctx, cfg, app.ReceiverOptions{Logger: logger}); err != nil {
				logger.Error().Err(err).Msg("receiver exited")
				return errLogged
			}
			return nil
		})
	err := setup.Execute(ctx, cmd, args, stdout, stderr)
	if !errors.Is(err, errLogged) {
		setup.Report(err, "receiver", stderr)
	}
	return err
}
