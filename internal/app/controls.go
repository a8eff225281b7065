package app

import (
	"context"
	"fmt"
	"os"
	"time"

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
		Store:  controlStore{db},
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

// controlStore adapts *store.DB to control.Store.
type controlStore struct{ db *store.DB }

func (s controlStore) StateEnsure(ctx context.Context, routes []string) error {
	return s.db.RouteStateEnsure(ctx, routes)
}

func (s controlStore) StateList(ctx context.Context) ([]control.State, error) {
	list, err := s.db.RouteStateList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]control.State, len(list))
	for i, r := range list {
		out[i] = control.State{
			Route: r.Route, Paused: r.Paused, Circuit: r.Circuit, ProbeOwner: r.ProbeOwner,
			OpenedUntil: deref(r.OpenedUntil), ProbeAt: deref(r.ProbeAt), SlowUntil: deref(r.SlowUntil), Failures: r.ConsecutiveFailures, Now: r.Now,
		}
	}
	return out, nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func (s controlStore) Success(ctx context.Context, route string) error {
	return s.db.RouteSuccess(ctx, route)
}

func (s controlStore) Failure(ctx context.Context, route string, threshold int, cooldown, maxCooldown time.Duration) (string, int, error) {
	return s.db.RouteFailure(ctx, route, threshold, cooldown, maxCooldown)
}

func (s controlStore) ProbeClaim(ctx context.Context, route, owner string, stale time.Duration) (bool, error) {
	return s.db.RouteProbeClaim(ctx, route, owner, stale)
}

func (s controlStore) ProbeRefresh(ctx context.Context, route, owner string) (bool, error) {
	return s.db.RouteProbeRefresh(ctx, route, owner)
}

func (s controlStore) Slow(ctx context.Context, route string, d time.Duration) error {
	return s.db.RouteSlow(ctx, route, d)
}

func (s controlStore) RateTake(ctx context.Context, route string, interval time.Duration, burst int) (time.Duration, error) {
	return s.db.RouteRateTake(ctx, route, interval, burst)
}

func (s controlStore) Hold(ctx context.Context, route string, d time.Duration) error {
	return s.db.RouteHold(ctx, route, d)
}
