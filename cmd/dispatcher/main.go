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

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/rs/zerolog"
)

func main() {
	app.Main("dispatcher", func(ctx context.Context, cfg *config.Config, logger zerolog.Logger) error {
		return app.RunDispatcher(ctx, cfg, app.DispatcherOptions{Logger: logger})
	})
}
