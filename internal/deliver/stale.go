package deliver

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// Staleness is why an event is stale on a route: the version of its
// resource it carries is older than one already delivered there.
type Staleness struct {
	Resource string
	Version  string
	// Delivered is the newest version of Resource delivered on the route.
	Delivered string
}

// OrderingStore is what the stale check needs from Postgres.
type OrderingStore interface {
	// DeliveryStale returns why the event is stale on route, or nil when
	// it is not (no ordering, nothing newer delivered, an operator's
	// replay that asked for it).
	DeliveryStale(ctx context.Context, eventID uuid.UUID, route string) (*Staleness, error)
}

// stale decides, with the pair claimed and its copy current, whether the
// event is stale on a route that drops stale events: a newer version of
// its resource was already delivered there. Then it records the pair as
// stale (an attempt without a status, whose error says why; no POST) and
// returns done: the message is acked, never retried or dead-lettered.
//
// The check is best-effort ordering, not a lock: two dispatchers holding
// two versions of one resource at once both find nothing newer delivered
// and both POST, in whatever order. What it guarantees is that a version
// is not POSTed once a newer one's delivery is recorded on the route.
func (d *delivery) stale(ctx context.Context, lease Lease) (done bool, err error) {
	if !d.route.DropStale || d.cfg.Ordering == nil {
		return false, nil
	}
	var s *Staleness
	err = d.retryStore(ctx, "checking for a newer version", func() (err error) {
		s, err = d.cfg.Ordering.DeliveryStale(ctx, d.msg.EventID, d.route.Name)
		return err
	})
	if err != nil {
		rerr := lease.Release(context.WithoutCancel(ctx))
		if rerr != nil {
			d.log.Warn().Err(rerr).Msg("releasing delivery lease")
		}
		return true, err
	}
	if s == nil {
		return false, nil
	}
	a := &webhook.Attempt{
		EventID: d.msg.EventID, Route: d.route.Name, Number: d.msg.Attempt, StartedAt: d.now(),
		Error: fmt.Sprintf("stale: version %q of resource %q is older than version %q already delivered on this route; not sent",
			s.Version, s.Resource, s.Delivered),
		Outcome: webhook.StateStale, Gen: d.msg.Gen,
	}
	if done, err := d.record(ctx, lease, a); done || err != nil {
		return true, err
	}
	d.cfg.Metrics.outcome(d.route.Name, "stale")
	d.cfg.Metrics.stale.WithLabelValues(d.route.Name).Inc()
	d.log.Info().Str("resource", s.Resource).Str("version", s.Version).Str("delivered_version", s.Delivered).
		Msg("stale event: a newer version was delivered; recorded stale, not sent")
	return true, nil
}
