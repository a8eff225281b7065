package ops

import (
	"context"
	"fmt"

	"github.com/hookrelay/hookrelay/internal/store"
)

// TeamStore is what teams need from Postgres (*store.DB).
type TeamStore interface {
	TeamCreate(ctx context.Context, t store.Team, e *store.AuditEntry) error
	TeamList(ctx context.Context) ([]store.Team, error)
	// RoutesVisible names the routes ctx's team sees.
	RoutesVisible(ctx context.Context) (map[string]bool, error)
	// Isolation says whether row-level security holds the store's role.
	Isolation(ctx context.Context) (store.Isolation, error)
}

// Team is a team as stored.
type Team = store.Team

// TeamCreate makes a team; only the platform does.
func (s *Service) TeamCreate(ctx context.Context, name string) (*store.Team, error) {
	if err := requirePlatform(ctx, "create teams"); err != nil {
		return nil, err
	}
	if !store.ValidTeamName(name) {
		return nil, fmt.Errorf("%w: a team name is 1-63 of a-z 0-9 _ -, starting with a letter or digit", ErrInvalidRequest)
	}
	iso, err := s.Store.Isolation(ctx)
	if err != nil {
		return nil, err
	}
	if iso.Bypass != "" {
		return nil, fmt.Errorf("database.url logs in as %q (%s), which row-level security does not hold: the new team would see every team's rows; "+
			"set database.migrate_url to this role's URL and database.url to a role that owns nothing, then run hookrelay migrate", iso.Role, iso.Bypass)
	}
	e, err := entry(ctx, ActionTeamCreate, name, nil)
	if err != nil {
		return nil, err
	}
	t := store.Team{Name: name, CreatedBy: e.Actor, CreatedAt: s.now()}
	if err := s.Store.TeamCreate(ctx, t, e); err != nil {
		return nil, err
	}
	return &t, nil
}

// TeamList lists the teams ctx sees: every one for the platform, its own
// for a team.
func (s *Service) TeamList(ctx context.Context) ([]store.Team, error) {
	return s.Store.TeamList(ctx)
}

// visibleRoutes filters names to the routes ctx's team sees (all of them
// for the platform).
func (s *Service) visibleRoutes(ctx context.Context, names []string) ([]string, error) {
	if Platform(ctx) {
		return names, nil
	}
	seen, err := s.Store.RoutesVisible(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		if seen[n] {
			out = append(out, n)
		}
	}
	return out, nil
}
