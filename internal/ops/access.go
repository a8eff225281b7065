package ops

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
)

// AccessStore is what tokens, the audit log and jobs need from Postgres
// (*store.DB).
type AccessStore interface {
	AuditInsert(ctx context.Context, e *store.AuditEntry) error
	AuditList(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, int64, error)
	TokenCreate(ctx context.Context, t store.Token, secretHash []byte, e *store.AuditEntry) error
	TokenRevoke(ctx context.Context, team, name string, e *store.AuditEntry) error
	TokenList(ctx context.Context) ([]store.Token, error)
	TokenAuthenticate(ctx context.Context, secretHash []byte) (*store.Token, error)
	JobStore
}

// Shared row types: the store, the service, the CLI and the API use these
// as they are (River's rivertype is the model), so none converts twins.
type (
	Token       = store.Token
	AuditEntry  = store.AuditEntry
	EventFilter = store.EventFilter
	PurgeResult = store.PurgeResult
	Job         = store.Job
)

// ErrNotFound is returned when what was asked for does not exist.
var ErrNotFound = store.ErrNotFound

// ErrExists is returned when a name is taken.
var ErrExists = store.ErrExists

// Roles, each allowed what the one before it is and more: a viewer reads;
// an operator also retries, replays, requeues, drops and pauses; an admin
// also purges, resets versions and manages tokens.
const (
	RoleViewer   = store.RoleViewer
	RoleOperator = store.RoleOperator
	RoleAdmin    = store.RoleAdmin
)

// Roles lists the roles from least to most allowed.
var Roles = store.Roles

// RoleAllows reports whether a token of role has the rights of need.
func RoleAllows(role, need string) bool {
	have, want := slices.Index(Roles, role), slices.Index(Roles, need)
	return have >= 0 && want >= 0 && have >= want
}

type actorKey struct{}

// Teams. The platform team runs the relay and sees every team; a product
// team sees its own routes, their deliveries and the events they received,
// its sources, tokens, jobs and audit rows, and nothing of another team:
// Postgres' row-level security holds it to that (store.WithTeam), and what
// is not in Postgres (a route's queues) is reached only through a route
// the team sees.
const PlatformTeam = store.PlatformTeam

// WithTeam returns ctx acting for team: every call of ctx sees that
// team's rows only, or every team's for the platform team.
func WithTeam(ctx context.Context, team string) context.Context {
	if team == PlatformTeam {
		team = store.TeamAll
	}
	return store.WithTeam(ctx, team)
}

// TeamOf is the team ctx acts for ("" for the platform, or when none was
// named).
func TeamOf(ctx context.Context) string {
	if t := store.TeamOf(ctx); t != store.TeamAll {
		return t
	}
	return ""
}

// Platform reports whether ctx acts for the platform team.
func Platform(ctx context.Context) bool { return store.TeamOf(ctx) == store.TeamAll }

// OwnTeam is the team a row made by ctx belongs to.
func OwnTeam(ctx context.Context) string {
	if t := TeamOf(ctx); t != "" {
		return t
	}
	return PlatformTeam
}

// ErrForbidden refuses an action of the platform's to a team's token.
var ErrForbidden = errors.New("forbidden")

// requirePlatform refuses what only the platform team does (purge, teams).
func requirePlatform(ctx context.Context, what string) error {
	if !Platform(ctx) {
		return fmt.Errorf("%w: only the platform team's tokens %s", ErrForbidden, what)
	}
	return nil
}

// WithActor returns ctx naming who acts: "token:NAME", "cli:USER",
// "config:admin.token". Every change is audited under that name.
func WithActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorOf returns who acts in ctx, "" when nobody was named.
func ActorOf(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// errNoActor refuses a change nobody answers for: every caller (CLI, API)
// names its actor, so this is a wiring fault, never an operator's.
var errNoActor = errors.New("ops: a change needs an actor (ops.WithActor)")

// entry starts the audit row of a change in ctx; an action that is not a
// change of the actions table is refused, so every action the log holds
// is one its filter takes.
func entry(ctx context.Context, action Action, target string, args map[string]any) (*store.AuditEntry, error) {
	if !audits(action) {
		return nil, errUndeclared(action)
	}
	actor := ActorOf(ctx)
	if actor == "" {
		return nil, errNoActor
	}
	return &store.AuditEntry{Actor: actor, Action: string(action), Target: target, Args: args}, nil
}

// audited runs a change that spans transactions (a replay, a purge, a
// requeue) between two audit rows: one written (and committed) before
// the change starts, outcome "started", so a process that dies half-way
// leaves the change logged; and one when it ends, with the same
// arguments, naming the first ("started": its id), with the result's
// counts ("ok"), or the error as PublicError words it and what was done
// before it ("failed"), or the refusal of a request that changed nothing
// ("refused"). The log is added to, never changed. A change whose first
// row cannot be written does not start; one whose last row cannot be
// written is an error of the call even when the change succeeded, so
// nobody takes a half-audited change for a clean one.
func audited[T any](ctx context.Context, s *Service, action Action, target string, args map[string]any, run func() (T, error), result func(T) map[string]any) (T, error) {
	var zero T
	start, err := entry(ctx, action, target, args)
	if err != nil {
		return zero, err
	}
	end := *start
	start.Outcome = store.OutcomeStarted
	if err := s.Store.AuditInsert(ctx, start); err != nil {
		return zero, fmt.Errorf("the %s did not start: its audit row was not written: %w", action, err)
	}
	out, err := run()
	switch {
	case refused(err):
		end.Outcome, end.Result = store.OutcomeRefused, map[string]any{"error": PublicError(err)}
	case err != nil:
		end.Outcome, end.Result = store.OutcomeFailed, map[string]any{"error": PublicError(err)}
		if !isNil(out) {
			end.Result["done"] = result(out) // what it did before it failed
		}
	default:
		end.Outcome, end.Result = store.OutcomeOK, result(out)
	}
	if end.Result == nil {
		end.Result = map[string]any{}
	}
	end.Result["started"] = start.ID
	// The change happened (or failed) whatever ctx says now: log it.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if lerr := s.Store.AuditInsert(lctx, &end); lerr != nil {
		return out, errors.Join(err, fmt.Errorf("the %s ended but its last audit row was not written (its first is %d): %w", action, start.ID, lerr))
	}
	return out, err
}

// isNil reports whether v is nil or a nil pointer.
func isNil(v any) bool {
	r := reflect.ValueOf(v)
	return v == nil || (r.Kind() == reflect.Pointer && r.IsNil())
}

// refused reports whether err refused a request before it changed
// anything.
func refused(err error) bool {
	return errors.Is(err, ErrInvalidRequest) || errors.Is(err, ErrUnknownRoute) || errors.Is(err, ErrNotFound) ||
		errors.Is(err, ErrExists) || errors.Is(err, ErrForbidden) || errors.Is(err, ErrConflict)
}

// AuditList lists audit rows, newest first.
func (s *Service) AuditList(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, int64, error) {
	if f.Limit <= 0 {
		f.Limit = DefaultListLimit
	}
	return s.Store.AuditList(ctx, f)
}

// TokenRequest asks for a new token.
type TokenRequest struct {
	Name string
	Role string
	// ExpiresIn ends the token that long after its creation; 0 never.
	ExpiresIn time.Duration
	// Team the token acts for; "" is the caller's own team (the platform
	// team for the CLI and the platform's tokens). Only the platform names
	// another team.
	Team string
}

// NewToken is a created token with its secret, shown this once.
type NewToken struct {
	store.Token
	Secret string `json:"secret"`
}

var tokenName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// TokenPrefix starts every token's secret, so a leaked one is easy to
// find in a scan.
const TokenPrefix = "hrt_"

// HashToken is how a secret is stored and looked up.
func HashToken(secret string) []byte {
	sum := sha256.Sum256([]byte(secret))
	return sum[:]
}

// TokenCreate makes a token with a fresh random secret and stores only its
// hash; the secret is in the answer and nowhere else.
func (s *Service) TokenCreate(ctx context.Context, req TokenRequest) (*NewToken, error) {
	if !tokenName.MatchString(req.Name) {
		return nil, fmt.Errorf("%w: a token name is 1-63 of a-z 0-9 . _ -, starting with a letter or digit", ErrInvalidRequest)
	}
	if !slices.Contains(Roles, req.Role) {
		return nil, fmt.Errorf("%w: role must be viewer, operator or admin", ErrInvalidRequest)
	}
	if req.ExpiresIn < 0 {
		return nil, fmt.Errorf("%w: expiry must be positive", ErrInvalidRequest)
	}
	args := map[string]any{"role": req.Role}
	if req.ExpiresIn > 0 {
		args["expires_in"] = req.ExpiresIn.String()
	}
	if req.Team != "" {
		if !Platform(ctx) {
			if req.Team != TeamOf(ctx) {
				return nil, fmt.Errorf("%w: a team's token makes tokens for its own team only", ErrForbidden)
			}
		} else if !store.ValidTeamName(req.Team) {
			return nil, fmt.Errorf("%w: %q is not a team name", ErrInvalidRequest, req.Team)
		}
		args["team"] = req.Team
	}
	e, err := entry(ctx, ActionTokenCreate, req.Name, args)
	if err != nil {
		return nil, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("making a token secret: %w", err)
	}
	secret := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw)
	t := store.Token{Name: req.Name, Role: req.Role, Team: cmp.Or(req.Team, OwnTeam(ctx)), CreatedBy: e.Actor, CreatedAt: s.now()}
	if req.ExpiresIn > 0 {
		exp := s.now().Add(req.ExpiresIn).UTC().Truncate(time.Second)
		t.ExpiresAt = &exp
	}
	if err := s.Store.TokenCreate(ctx, t, HashToken(secret), e); err != nil {
		return nil, err
	}
	return &NewToken{Token: t, Secret: secret}, nil
}

// TokenRevoke revokes the token name: the next request that carries it is
// refused. Token names are each team's own: a team revokes its own; the
// platform names another team's as TEAM:NAME, or NAME alone when one team
// only has a live token so named (several: ErrInvalidRequest, naming
// them). A team that names another team's token finds nothing.
func (s *Service) TokenRevoke(ctx context.Context, name string) error {
	team, short, qualified := strings.Cut(name, ":")
	if !qualified {
		team, short = "", name
	}
	if !Platform(ctx) {
		if qualified && team != OwnTeam(ctx) {
			return fmt.Errorf("token %q (or it is revoked already): %w", name, ErrNotFound)
		}
		team = OwnTeam(ctx)
	}
	e, err := entry(ctx, ActionTokenRevoke, name, nil)
	if err != nil {
		return err
	}
	err = s.Store.TokenRevoke(ctx, team, short, e)
	if errors.Is(err, store.ErrAmbiguous) {
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	}
	return err
}

// TokenList lists the tokens, revoked ones too; never their secrets.
func (s *Service) TokenList(ctx context.Context) ([]store.Token, error) {
	return s.Store.TokenList(ctx)
}

// TokenByHash returns the live token whose secret hashes to hash, or
// ErrNotFound (a console session keeps the hash, never the secret). The
// lookup is across every team: nobody is known yet.
func (s *Service) TokenByHash(ctx context.Context, hash []byte) (*store.Token, error) {
	return s.Store.TokenAuthenticate(store.WithTeam(ctx, store.TeamAll), hash)
}

// TokenAuthenticate returns the live token whose secret is secret, or
// ErrNotFound.
func (s *Service) TokenAuthenticate(ctx context.Context, secret string) (*store.Token, error) {
	return s.TokenByHash(ctx, HashToken(secret))
}

// AuditFilterFlags is an audit filter as typed (CLI flags, query
// parameters): times as RFC 3339 or an age.
type AuditFilterFlags struct {
	Actor, Action, Target, Since, Until string
	Limit                               int
	// Before pages: rows older than the row with this id.
	Before int64
}

// Filter checks and reads f.
func (f AuditFilterFlags) Filter() (store.AuditFilter, error) {
	out := store.AuditFilter{Actor: f.Actor, Action: f.Action, Target: f.Target, Limit: f.Limit, Before: f.Before}
	if f.Action != "" && !slices.Contains(AuditActions, f.Action) {
		return out, fmt.Errorf("%w: action must be one of %v", ErrInvalidRequest, AuditActions)
	}
	if f.Limit < 0 || f.Limit > MaxPageLimit {
		return out, fmt.Errorf("%w: limit must be 1 to %d", ErrInvalidRequest, MaxPageLimit)
	}
	var err error
	if out.Since, err = parseTime(f.Since); err != nil {
		return out, fmt.Errorf("%w: since: %w", ErrInvalidRequest, err)
	}
	if out.Until, err = parseTime(f.Until); err != nil {
		return out, fmt.Errorf("%w: until: %w", ErrInvalidRequest, err)
	}
	return out, nil
}

// MaxPageLimit is the most rows one page of a listing holds.
const MaxPageLimit = 1000
