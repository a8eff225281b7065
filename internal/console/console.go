// Package console is the web console on the admin listener: sign in with
// a named token, see the routes, find events, read every attempt, act on
// them. Server-rendered html/template pages with embedded assets and no
// script: reading and acting work without JavaScript, and the
// Content-Security-Policy allows none. It calls ops.Service, as the CLI
// and the admin API do.
package console

import (
	"cmp"
	"context"
	"crypto/subtle"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/alexedwards/scs/postgresstore"
	"github.com/alexedwards/scs/v2"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/rs/zerolog"
)

//go:embed assets templates
var files embed.FS

// Options configure the console.
type Options struct {
	// DB keeps the sessions (table console_sessions).
	DB *sql.DB
	// ConfigToken is the config's admin.token, an admin token; "" for
	// none.
	ConfigToken string
	// SecureCookie marks the session cookie Secure (served over TLS, by
	// a proxy that terminates it).
	SecureCookie bool
	// IdleTimeout ends a session unused that long; Lifetime ends any.
	IdleTimeout, Lifetime time.Duration
	// FailedSignIn counts a failed sign-in of a client address (the admin
	// listener's limiter); nil counts nothing.
	FailedSignIn func(r *http.Request)
	// Blocked says how long a client's wrong tokens are answered 429 (a
	// right one always signs in); nil never blocks.
	Blocked func(r *http.Request) time.Duration
}

// CSP is the console's Content-Security-Policy: its own styles and
// images, no script at all, no framing.
const CSP = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

type console struct {
	svc         *ops.Service
	opts        Options
	sessions    *scs.SessionManager
	configToken []byte
	pages       map[string]*template.Template
	logger      zerolog.Logger
}

// Handler serves the console over svc. ctx ends the sessions' clean-up.
func Handler(ctx context.Context, svc *ops.Service, opts Options, logger zerolog.Logger) (http.Handler, error) {
	c := &console{svc: svc, opts: opts, logger: logger}
	if opts.ConfigToken != "" {
		c.configToken = ops.HashToken(opts.ConfigToken)
	}
	var err error
	if c.pages, err = parsePages(); err != nil {
		return nil, err
	}
	store := postgresstore.NewWithConfig(opts.DB, postgresstore.Config{TableName: "console_sessions", CleanUpInterval: 5 * time.Minute})
	go func() {
		<-ctx.Done()
		store.StopCleanup()
	}()
	c.sessions = scs.New()
	c.sessions.Store = store
	c.sessions.IdleTimeout = cmp.Or(opts.IdleTimeout, 30*time.Minute)
	c.sessions.Lifetime = cmp.Or(opts.Lifetime, 12*time.Hour)
	c.sessions.Cookie.Name = "hookrelay_session"
	c.sessions.Cookie.HttpOnly = true
	c.sessions.Cookie.Secure = opts.SecureCookie
	c.sessions.Cookie.SameSite = http.SameSiteLaxMode
	c.sessions.Cookie.Path = "/"
	c.sessions.ErrorFunc = func(w http.ResponseWriter, _ *http.Request, err error) {
		c.logger.Error().Err(err).Msg("console session")
		http.Error(w, "sessions unavailable: storage unavailable", http.StatusServiceUnavailable)
	}

	mux := http.NewServeMux()
	assets, err := fs.Sub(files, "assets")
	if err != nil {
		return nil, err
	}
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(assets)))
	mux.HandleFunc("GET /signin", c.signInPage)
	mux.HandleFunc("POST /signin", c.signIn)
	mux.HandleFunc("POST /signout", c.signOut)
	for _, p := range Pages {
		if p.Role() == "" { // fail closed: ops must know every action
			return nil, fmt.Errorf("console page %s: ops knows no action %q", p.Pattern, p.Action)
		}
		mux.Handle(p.Pattern, c.authed(p.Action, func(w http.ResponseWriter, r *http.Request, u user) { p.serve(c, w, r, u) }))
	}
	mux.HandleFunc("/", c.notFound) // any other path: a page of the console saying so

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
	}))
	return securityHeaders(c.sessions.LoadAndSave(cop.Handler(mux))), nil
}

// Page is a page or an action of the console behind a sign-in: its
// pattern (method and path, as http.ServeMux takes it), the ops action it
// is (whose role ops says: ops.RoleOf) and what serves it.
type Page struct {
	Pattern string
	Action  ops.Action
	serve   func(c *console, w http.ResponseWriter, r *http.Request, u user)
}

// Role is the role the page needs: its action's, as ops says.
func (p Page) Role() string { return ops.RoleOf(p.Action) }

// Pages lists every page and action behind a sign-in: the handler serves
// these, and the tests that try each one (teams, roles) read them here,
// so a new page is covered without editing them.
var Pages = []Page{
	{"GET /{$}", ops.ActionRead, (*console).overview},
	{"GET /events", ops.ActionRead, (*console).events},
	{"GET /events/{id}", ops.ActionRead, (*console).event},
	{"POST /events/{id}/retry", ops.ActionRetry, (*console).retry},
	{"POST /events/{id}/replay", ops.ActionReplay, (*console).replayEvent},
	{"POST /routes/{route}/pause", ops.ActionRoutePause, func(c *console, w http.ResponseWriter, r *http.Request, u user) { c.pause(true)(w, r, u) }},
	{"POST /routes/{route}/resume", ops.ActionRouteResume, func(c *console, w http.ResponseWriter, r *http.Request, u user) { c.pause(false)(w, r, u) }},
	{"GET /routes/{route}", ops.ActionRead, (*console).routePage},
	{"GET /routes/new", ops.ActionRouteCreate, (*console).newRoutePage}, // the form of the action
	{"POST /routes", ops.ActionRouteCreate, (*console).createRoute},
	{"POST /routes/{route}/update", ops.ActionRouteUpdate, (*console).updateRoute},
	{"POST /routes/{route}/test", ops.ActionRead, (*console).routeTest}, // reads: tries rules, saves nothing
	{"POST /routes/{route}/rotate-secret", ops.ActionRouteRotateSecret, (*console).rotateSecret},
	{"POST /routes/{route}/delete", ops.ActionRouteDelete, (*console).deleteRoute},
	{"POST /routes/{route}/versions/reset", ops.ActionVersionReset, (*console).versionReset},
	{"GET /routes/{route}/dead-letters", ops.ActionRead, (*console).deadLetters},
	{"POST /routes/{route}/dead-letters/requeue", ops.ActionDeadRequeue, (*console).requeue},
	{"POST /routes/{route}/dead-letters/drop-delivered", ops.ActionDeadDrop, (*console).dropDelivered},
	{"POST /routes/{route}/dead-letters/drop", ops.ActionDeadDrop, (*console).dropAll},
	{"GET /replay", ops.ActionRead, (*console).replayPage},
	{"POST /replay", ops.ActionReplay, (*console).replay},
	{"GET /jobs/{id}", ops.ActionRead, (*console).job},
	{"POST /jobs/{id}/cancel", ops.ActionJobCancel, (*console).jobCancel},
	{"POST /jobs/{id}/resume", ops.ActionReplay, (*console).jobResume},
	{"GET /audit", ops.ActionRead, (*console).audit},
}

// securityHeaders sets the console's headers on every answer.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// user is who signed in: the actor the audit log names, and its role.
type user struct {
	Actor, Role string
	// Team the user acts for: every page and action sees its rows only
	// (the platform team sees every team's).
	Team string
}

// May says whether the user's role allows action a, as ops says
// (templates hide what it does not; the server refuses it anyway). An
// action ops does not know is allowed to nobody.
func (u user) May(a ops.Action) bool {
	need := ops.RoleOf(a)
	return need != "" && ops.RoleAllows(u.Role, need)
}

const (
	sessionHash  = "token_hash" // hex SHA-256 of the token signed in with
	sessionFlash = "flash"
)

// current re-reads the session's token every request: a token revoked or
// expired since sign-in ends the session, and so does a change of
// admin.token for a session signed in with it (the hash it keeps is
// compared with the current admin.token's, in constant time). An error
// is a token that could not be read (storage), not a user signed out.
func (c *console) current(r *http.Request) (user, bool, error) {
	hexHash := c.sessions.GetString(r.Context(), sessionHash)
	if hexHash == "" {
		return user{}, false, nil
	}
	hash, err := hex.DecodeString(hexHash)
	if err != nil { // a session of before (it kept "config"): signed out
		return user{}, false, nil
	}
	if c.configToken != nil && subtle.ConstantTimeCompare(hash, c.configToken) == 1 {
		return user{Actor: ops.ConfigTokenActor, Role: ops.RoleAdmin, Team: ops.PlatformTeam}, true, nil
	}
	t, err := c.svc.TokenByHash(r.Context(), hash)
	switch {
	case errors.Is(err, ops.ErrNotFound):
		return user{}, false, nil
	case err != nil:
		return user{}, false, err
	}
	return user{Actor: "token:" + t.Name, Role: t.Role, Team: t.Team}, true, nil
}

// authed serves next to a signed-in user whose role allows action (as
// ops says): others go to the sign-in page (reading) or are refused
// (acting).
func (c *console) authed(action ops.Action, next func(w http.ResponseWriter, r *http.Request, u user)) http.Handler {
	need := ops.RoleOf(action)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok, err := c.current(r)
		if err != nil {
			c.failed(w, r, "reading the session's token", err)
			return
		}
		if !ok {
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/signin", http.StatusSeeOther)
				return
			}
			http.Error(w, "sign in first", http.StatusUnauthorized)
			return
		}
		if !u.May(action) {
			http.Error(w, "this needs role "+need+"; you signed in as "+u.Role, http.StatusForbidden)
			return
		}
		next(w, r.WithContext(ops.WithTeam(ops.WithActor(r.Context(), u.Actor), u.Team)), u)
	})
}

func (c *console) signInPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, "signin", user{}, map[string]any{})
}

// signIn checks the token first: a right one always signs in, however
// many wrong ones the address sent (behind a proxy every operator shares
// it); a wrong one counts, and is answered 429 once the address failed
// too often this minute.
//
// It is the one form served without a session, so it takes a small
// urlencoded body and nothing else: a multipart one (which Go's form
// parser spools to disk) is refused unread.
func (c *console) signIn(w http.ResponseWriter, r *http.Request) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		w.WriteHeader(http.StatusUnsupportedMediaType)
		c.render(w, r, "signin", user{}, map[string]any{"Error": "The sign-in takes the form of this page (application/x-www-form-urlencoded), nothing else."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxSignInBytes)
	if err := r.ParseForm(); err != nil {
		status, msg := http.StatusBadRequest, "The sign-in form could not be read."
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			status, msg = http.StatusRequestEntityTooLarge, "The sign-in form is too large."
		}
		w.WriteHeader(status)
		c.render(w, r, "signin", user{}, map[string]any{"Error": msg})
		return
	}
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	hash := ops.HashToken(secret)
	value := ""
	switch {
	case secret == "":
	case c.configToken != nil && subtle.ConstantTimeCompare(hash, c.configToken) == 1:
		value = hex.EncodeToString(hash) // its hash, checked against admin.token at every request
	default:
		if _, err := c.svc.TokenByHash(r.Context(), hash); err == nil {
			value = hex.EncodeToString(hash)
		} else if !errors.Is(err, ops.ErrNotFound) {
			c.logger.Error().Err(err).Msg("console: checking a token")
			w.WriteHeader(http.StatusServiceUnavailable)
			c.render(w, r, "signin", user{}, map[string]any{"Error": "Cannot check the token now: storage unavailable."})
			return
		}
	}
	if value == "" {
		if c.opts.Blocked != nil {
			if wait := c.opts.Blocked(r); wait > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds()+0.999)))
				w.WriteHeader(http.StatusTooManyRequests)
				c.render(w, r, "signin", user{}, map[string]any{"Error": "Too many failed sign-ins from this address: try again in " + wait.Round(time.Second).String() + "."})
				return
			}
		}
		if c.opts.FailedSignIn != nil {
			c.opts.FailedSignIn(r)
		}
		w.WriteHeader(http.StatusUnauthorized)
		c.render(w, r, "signin", user{}, map[string]any{"Error": "That token is unknown, revoked or expired."})
		return
	}
	// A new session id at sign-in: one fixed before it is worth nothing.
	if err := c.sessions.RenewToken(r.Context()); err != nil {
		c.sessions.ErrorFunc(w, r, err)
		return
	}
	c.sessions.Put(r.Context(), sessionHash, value)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// maxSignInBytes bounds the sign-in form: a token is under 100 bytes.
const maxSignInBytes = 4 << 10

func (c *console) signOut(w http.ResponseWriter, r *http.Request) {
	if err := c.sessions.Destroy(r.Context()); err != nil {
		c.sessions.ErrorFunc(w, r, err)
		return
	}
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// flash keeps a message for the next page the user sees.
func (c *console) flash(r *http.Request, msg string) {
	c.sessions.Put(r.Context(), sessionFlash, msg)
}
