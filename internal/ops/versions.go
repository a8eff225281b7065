package ops

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/rs/zerolog"
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

// versionsAPI serves
//
//	GET    /api/routes/{name}/versions?source=S&resource=R
//	DELETE /api/routes/{name}/versions?source=S&resource=R
//
// (a resource id may hold slashes: gid://shopify/Order/1, so it is a query
// parameter). A route that is not in the config, or a resource with no
// version kept, is 404; DELETE answers what it forgot.
func versionsAPI(mux *http.ServeMux, s *Service, logger zerolog.Logger) {
	serve := func(reset bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			req := VersionRequest{Route: r.PathValue("name"), Source: r.URL.Query().Get("source"), Resource: r.URL.Query().Get("resource")}
			var (
				v   *Version
				err error
			)
			if reset {
				v, err = s.ResourceVersionReset(r.Context(), req)
			} else {
				v, err = s.ResourceVersion(r.Context(), req)
			}
			switch {
			case errors.Is(err, ErrUnknownRoute):
				httpserver.WriteError(w, http.StatusNotFound, err.Error())
			case errors.Is(err, store.ErrNotFound):
				httpserver.WriteError(w, http.StatusNotFound, "no version of "+req.Source+" "+req.Resource+" is kept on route "+req.Route)
			case errors.Is(err, ErrInvalidRequest):
				httpserver.WriteError(w, http.StatusBadRequest, "source and resource query parameters are required")
			case err != nil:
				logger.Error().Err(err).Str("route", req.Route).Msg("resource version")
				httpserver.WriteError(w, http.StatusServiceUnavailable, "storage unavailable")
			default:
				if reset {
					logger.Info().Str("route", req.Route).Str("source", req.Source).Str("resource", req.Resource).
						Str("version", v.Version).Str("by", r.RemoteAddr).Msg("resource version reset through the admin api")
				}
				httpserver.WriteJSON(w, http.StatusOK, v)
			}
		}
	}
	mux.HandleFunc("GET /api/routes/{name}/versions", serve(false))
	mux.HandleFunc("DELETE /api/routes/{name}/versions", serve(true))
}
