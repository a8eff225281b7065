// Command receiver accepts webhooks, stores each event with an outbox row in
// one Postgres transaction, answers 200, and publishes the outbox to
// RabbitMQ with publisher confirms.
//
//	receiver [--config config.yaml]
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
		fmt.Fprintln(os.Stderr, "receiver:", err)
		os.Exit(2)
	}
	logger, err := app.NewLogger(cfg.Log, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.RunReceiver(ctx, cfg, app.ReceiverOptions{Logger: logger}); err != nil {
		logger.Error().Err(err).Msg("receiver exited")
		stop()
		os.Exit(1)
	}
}
