package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/store"
)

// VersionStore reads and resets the newest delivered version of a
// source's resource on a route (*store.DB), which makes older events of
// the resource stale there (routes with ordering drop_stale).
type VersionStore interface {
	ResourceVersionGet(ctx context.Context, route, source, resource string) (*store.ResourceVersion, error)
	ResourceVersionResetAudited(ctx context.Context, route, source, resource string, e *store.AuditEntry) (*store.ResourceVersion, error)
}

// VersionRequest names a resource of a source on a route.
type VersionRequest struct {
	Route, Source, Resource string
}

func (s *Service) checkVersion(ctx context.Context, req VersionRequest) error {
	if err := s.requireRoute(ctx, req.Route); err != nil {
		return err
	}
	if req.Source == "" || req.Resource == "" {
		return fmt.Errorf("%w: a source and a resource are required (--source, --resource)", ErrInvalidRequest)
	}
	return nil
}

// Version is a resource's newest delivered version on a route, as the CLI
// and the admin API show it.
type Version struct {
	Route    string `json:"route"`
	Source   string `json:"source"`
	Resource string `json:"resource"`
	Version  string `json:"version"`
	// EventID is the event that carried it, delivered at DeliveredAt.
	EventID     uuid.UUID `json:"event_id"`
	DeliveredAt time.Time `json:"delivered_at"`
}

func versionOf(v *store.ResourceVersion) *Version {
	return &Version{Route: v.Route, Source: v.Source, Resource: v.Resource, Version: v.Version, EventID: v.Event, DeliveredAt: v.DeliveredAt}
}

// ResourceVersion returns the newest version of req's resource delivered
// on its route, or store.ErrNotFound when none is kept (none delivered, or
// reset, or purged with the resource's last event).
func (s *Service) ResourceVersion(ctx context.Context, req VersionRequest) (*Version, error) {
	if err := s.checkVersion(ctx, req); err != nil {
		return nil, err
	}
	v, err := s.Store.ResourceVersionGet(ctx, req.Route, req.Source, req.Resource)
	if err != nil {
		return nil, err
	}
	return versionOf(v), nil
}

// ResourceVersionReset forgets the version of req's resource on its
// route, so that its next event is delivered whatever its version (a
// sender whose versions went back, a forged one that silenced the
// resource), and returns what it forgot; store.ErrNotFound when nothing
// was kept.
func (s *Service) ResourceVersionReset(ctx context.Context, req VersionRequest) (*Version, error) {
	if err := s.checkVersion(ctx, req); err != nil {
		return nil, err
	}
	e, err := entry(ctx, ActionVersionReset, req.Route, map[string]any{"source": req.Source, "resource": req.Resource})
	if err != nil {
		return nil, err
	}
	v, err := s.Store.ResourceVersionResetAudited(ctx, req.Route, req.Source, req.Resource, e)
	if err != nil {
		return nil, err
	}
	return versionOf(v), nil
}
