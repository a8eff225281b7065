package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Stale says why an event is stale on a route: the version of its resource
// it carries, and the newer one already delivered there.
type Stale struct {
	Resource string
	Version  string
	// Delivered is the newest version of Resource delivered on the route,
	// and DeliveredEvent the event that carried it.
	Delivered      string
	DeliveredEvent uuid.UUID
}

// DeliveryStale reports whether the event is stale on route: it carries a
// resource and version (its source declares ordering), and a newer version
// of that resource (route_resource_versions, kept by a trigger when a pair
// is recorded delivered) was delivered on route. It returns nil when the
// event is not stale: it has no ordering, nothing newer was delivered (an
// equal version is not newer: it may be this very event's duplicate, which
// the delivered state handles), the versions are not comparable (one a
// number, one a text), or an operator replayed the pair with
// --include-stale. It reads without locking; the caller holds the pair.
func (db *DB) DeliveryStale(ctx context.Context, eventID uuid.UUID, route string) (*Stale, error) {
	ctx, cancel := db.bound(ctx)
	defer cancel()
	var s Stale
	err := db.pool.QueryRow(ctx, `
		SELECT e.ordering_resource, e.ordering_version, v.version, v.event_id
		FROM events e
		JOIN route_resource_versions v
		  ON v.route = $2 AND v.source = e.source AND v.resource = e.ordering_resource
		WHERE e.id = $1
		  AND hookrelay_version_newer(v.version_num, v.version, e.ordering_version_num, e.ordering_version)
		  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = $1 AND d.route = $2 AND d.stale_override)`,
		eventID, route,
	).Scan(&s.Resource, &s.Version, &s.Delivered, &s.DeliveredEvent)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checking for a newer version: %w", err)
	}
	return &s, nil
}
