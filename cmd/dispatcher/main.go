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
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
)

func main() {
	configPath := flag.String("config", "", "config file (default $HOOKRELAY_CONFIG or config.yaml)")
	flag.Parse()

	cfg, err := config.Load(config.Path(*configPath, os.LookupEnv), os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		os.Exit(2)
	}
	logger, err := app.NewLogger(cfg.Log, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.RunDispatcher(ctx, cfg, app.DispatcherOptions{Logger: logger}); err != nil {
		logger.Error().Err(err).Msg("dispatcher exited")
		stop()
		os.Exit(1)
	}
}
