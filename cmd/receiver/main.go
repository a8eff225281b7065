// Command receiver accepts webhooks, stores each event with an outbox row in
// one Postgres transaction, answers 200, and publishes the outbox to
// RabbitMQ with publisher confirms.
//
//	receiver [--config config.yaml]
package main

import (
	"context"

	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/rs/zerolog"
)

func main() {
	app.Main("receiver", func(ctx context.Context, cfg *config.Config, logger zerolog.Logger) error {
		return app.RunReceiver(ctx, cfg, app.ReceiverOptions{Logger: logger})
	})
}
