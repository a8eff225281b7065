package ops

import (
	"context"
	"net/http"
	"slices"

	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/rs/zerolog"
)

// RoutePauser pauses and resumes routes in Postgres, where every dispatcher
// follows it (store.DB.RoutePause).
type RoutePauser interface {
	RoutePause(ctx context.Context, route string, paused bool, by string) (changed bool, err error)
}

// RoutePauseResult is the answer of POST /api/routes/{name}/pause and
// /resume.
type RoutePauseResult struct {
	Route  string `json:"route"`
	Paused bool   `json:"paused"`
	// Changed is false when the route already was in that state.
	Changed bool `json:"changed"`
}

// routesAPI serves
//
//	POST /api/routes/{name}/pause
//	POST /api/routes/{name}/resume
//
// A route that is not in the config is 404; every dispatcher follows the
// change within 2s.
func routesAPI(mux *http.ServeMux, s *Service, logger zerolog.Logger) {
	for _, action := range []string{"pause", "resume"} {
		paused := action == "pause"
		mux.HandleFunc("POST /api/routes/{name}/"+action, func(w http.ResponseWriter, r *http.Request) {
			route := r.PathValue("name")
			if !slices.Contains(s.Routes, route) {
				httpserver.WriteError(w, http.StatusNotFound, "route "+route+" is not in the config")
				return
			}
			if s.RoutePauser == nil {
				httpserver.WriteError(w, http.StatusServiceUnavailable, "route controls unavailable")
				return
			}
			changed, err := s.RoutePauser.RoutePause(r.Context(), route, paused, "admin api from "+r.RemoteAddr)
			if err != nil {
				logger.Error().Err(err).Str("route", route).Msg("pausing or resuming a route")
				httpserver.WriteError(w, http.StatusServiceUnavailable, "storage unavailable")
				return
			}
			if changed {
				logger.Info().Str("route", route).Bool("paused", paused).Str("by", r.RemoteAddr).Msg("route " + action + "d through the admin api")
			}
			httpserver.WriteJSON(w, http.StatusOK, RoutePauseResult{Route: route, Paused: paused, Changed: changed})
		})
	}
}
