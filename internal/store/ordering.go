package store

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	return deliveryStale(ctx, db.pool, eventID, route)
}

// deliveryStale is DeliveryStale through q.
func deliveryStale(ctx context.Context, q querier, eventID uuid.UUID, route string) (*Stale, error) {
	var s Stale
	err := q.QueryRow(ctx, withDays(`
		SELECT e.ordering_resource, e.ordering_version, v.version, v.event_id
		FROM events e
		JOIN route_resource_versions v
		  ON v.route = $2 AND v.source = e.source AND v.resource = e.ordering_resource
		WHERE e.id = $1 AND @day(e.id)
		  AND hookrelay_version_newer(v.version_num, v.version, e.ordering_version_num, e.ordering_version)
		  AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = $1 AND @day(d.event_id) AND d.route = $2 AND d.stale_override)`, eventID),
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

// ResourceVersion is the newest version of a source's resource delivered
// on a route, which makes older events of the resource stale there.
type ResourceVersion struct {
	Route, Source, Resource string
	Version                 string
	// Event is the event that carried it, delivered at DeliveredAt.
	Event       uuid.UUID
	DeliveredAt time.Time
}

// ResourceVersionGet returns the version of (route, source, resource), or
// ErrNotFound when none was delivered (or it was reset or purged).
func (db *DB) ResourceVersionGet(ctx context.Context, route, source, resource string) (*ResourceVersion, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	v := ResourceVersion{Route: route, Source: source, Resource: resource}
	err := db.pool.QueryRow(ctx, `
		SELECT version, event_id, delivered_at FROM route_resource_versions
		WHERE route = $1 AND source = $2 AND resource = $3`, route, source, resource,
	).Scan(&v.Version, &v.Event, &v.DeliveredAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading the version of %s %s on route %s: %w", source, resource, route, err)
	}
	return &v, nil
}

// ResourceVersionReset forgets the version of (route, source, resource):
// the resource's next event is not stale, whatever its version. It returns
// the version it forgot, or ErrNotFound when there was none.
func (db *DB) ResourceVersionReset(ctx context.Context, route, source, resource string) (*ResourceVersion, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	return resourceVersionReset(ctx, db.pool, route, source, resource)
}

// ResourceVersionResetAudited is ResourceVersionReset that writes e to the
// audit log in the same transaction, with the version it forgot.
func (db *DB) ResourceVersionResetAudited(ctx context.Context, route, source, resource string, e *AuditEntry) (*ResourceVersion, error) {
	var v *ResourceVersion
	err := db.audited(ctx, e, func(tx pgx.Tx) (map[string]any, error) {
		var err error
		if v, err = resourceVersionReset(ctx, tx, route, source, resource); err != nil {
			return nil, err
		}
		return map[string]any{"version": v.Version, "event_id": v.Event.String()}, nil
	})
	return v, err
}

func resourceVersionReset(ctx context.Context, q querier, route, source, resource string) (*ResourceVersion, error) {
	v := ResourceVersion{Route: route, Source: source, Resource: resource}
	err := q.QueryRow(ctx, `
		DELETE FROM route_resource_versions
		WHERE route = $1 AND source = $2 AND resource = $3
		RETURNING version, event_id, delivered_at`, route, source, resource,
	).Scan(&v.Version, &v.Event, &v.DeliveredAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("resetting the version of %s %s on route %s: %w", source, resource, route, err)
	}
	return &v, nil
}
