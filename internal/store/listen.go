package store

import (
	"context"
	"errors"
	"time"

	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// Listen holds a dedicated connection that LISTENs on channel and sends on
// wake (without blocking) for every notification, and once after each
// (re)connect so nothing committed while it was away waits for a poll. It
// reconnects with backoff until ctx is done, then returns nil.
func (db *DB) Listen(ctx context.Context, channel string, wake chan<- struct{}, logger zerolog.Logger) error {
	logger = logger.With().Str("component", "listener").Str("channel", channel).Logger()
	retry := backoff.Backoff{Min: 200 * time.Millisecond, Max: 30 * time.Second}
	for {
		err := db.listenOnce(ctx, channel, wake, retry.Reset)
		if ctx.Err() != nil {
			return nil
		}
		wait := retry.Next()
		logger.Warn().Err(err).Dur("retry_in", wait).Msg("listen connection lost; polling meanwhile")
		if !backoff.Sleep(ctx, wait) {
			return nil
		}
	}
}

func (db *DB) listenOnce(ctx context.Context, channel string, wake chan<- struct{}, connected func()) error {
	actx, cancel := db.bound(ctx)
	defer cancel()
	conn, err := db.pool.Acquire(actx)
	if err != nil {
		return err
	}
	// A connection that has LISTENed must not go back to the pool.
	defer func() {
		cctx, cancel := db.bound(context.WithoutCancel(ctx))
		defer cancel()
		_ = conn.Conn().Close(cctx)
		conn.Release()
	}()
	if _, err := conn.Exec(actx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return err
	}
	connected()
	signal(wake)
	// No deadline on the wait itself: silence is its normal state. A peer
	// that vanished is noticed by TCP keepalive (see dial.go); meanwhile
	// the publisher polls.
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		signal(wake)
	}
}

func signal(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}
