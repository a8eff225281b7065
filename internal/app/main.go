package app

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/rs/zerolog"
)

// Main is the body of the receiver and dispatcher commands: parse --config,
// load and validate the config (exit 2 when invalid), build the logger, and
// run until SIGINT or SIGTERM (exit 1 when run fails).
func Main(name string, run func(ctx context.Context, cfg *config.Config, logger zerolog.Logger) error) {
	configPath := flag.String("config", "", "config file (default $HOOKRELAY_CONFIG or config.yaml)")
	flag.Parse()

	cfg, err := config.Load(config.Path(*configPath, os.LookupEnv), os.LookupEnv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	logger, err := NewLogger(cfg.Log, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, logger); err != nil {
		logger.Error().Err(err).Msg(name + " exited")
		stop()
		os.Exit(1)
	}
}
