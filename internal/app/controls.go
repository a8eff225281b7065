package app

import (
	"context"
	"fmt"
	"os"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/control"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// newController builds the dispatcher's route controls (pause, circuit
// breaker, rate limit, Retry-After) over db.
func newController(cfg *config.Config, db *store.DB, routes []control.Route, reg prometheus.Registerer, logger zerolog.Logger) (*control.Controller, error) {
	return control.New(control.Config{
		Routes: routes,
		Store:  db,
		// A probe claim names its process; the random part tells apart two
		// dispatchers of one host (and of one test).
		Owner: fmt.Sprintf("%s/%d/%s", hostname(), os.Getpid(), uuid.NewString()[:8]),
		ListenFunc: func(ctx context.Context, wake chan<- struct{}) error {
			return db.Listen(ctx, store.RouteStateChannel, wake, logger)
		},
		// The hold a Retry-After puts on the route is part of the longest
		// hold config checks against amqp.consumer_timeout.
		MaxSlow:    config.RetryAfterMax,
		Registerer: reg,
		Logger:     logger,
	})
}
