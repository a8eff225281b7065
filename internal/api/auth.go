package api

import (
	"cmp"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/ops"
)

// authenticate lets a request through with the actor its token names
// when the token is live and its role is at least the operation's; 401
// otherwise (missing, unknown, revoked or expired token), 403 naming the
// role needed. A wrong token from an address that failed too often this
// minute is answered 429 instead of 401; a right one always passes:
// behind a proxy every operator shares one address, and one client's
// failures must not lock the others out. The limit slows guessing only
// (a named token is 256 random bits; admin.token at least 16
// characters).
//
// A named token is looked up by the SHA-256 of its secret (tokens are 256
// random bits: the time a lookup takes tells nothing of another token);
// the config's admin.token is compared as a hash in constant time. Each
// request reads Postgres, so a revoked token is refused at once.
func (a *server) authenticate(ctx huma.Context, next func(huma.Context)) {
	// ops owns each action's role; every operation is an action ops
	// knows (fail closed).
	need := ops.RoleOf(ActionOf(ctx.Operation()))
	if need == "" {
		_ = huma.WriteErr(a.api, ctx, http.StatusInternalServerError, "the operation is no action ops knows")
		return
	}
	secret, ok := bearer(ctx.Header("Authorization"))
	actor, role, team := "", "", ""
	switch {
	case !ok || secret == "":
	case a.configToken != nil && subtle.ConstantTimeCompare(ops.HashToken(secret), a.configToken) == 1:
		actor, role, team = ops.ConfigTokenActor, ops.RoleAdmin, ops.PlatformTeam
	default:
		t, err := a.svc.TokenAuthenticate(ctx.Context(), secret)
		switch {
		case errors.Is(err, ops.ErrNotFound):
		case err != nil:
			a.logger.Error().Err(err).Msg("authenticating a token")
			_ = huma.WriteErr(a.api, ctx, http.StatusServiceUnavailable, "cannot check the token: storage unavailable",
				&Error{Code: "storage_unavailable"})
			return
		default:
			actor, role, team = "token:"+t.Name, t.Role, t.Team
		}
	}
	if actor == "" {
		client := clientAddr(ctx.RemoteAddr())
		if wait := a.limiter.blocked(client); wait > 0 {
			ctx.SetHeader("Retry-After", retryAfter(wait))
			_ = huma.WriteErr(a.api, ctx, http.StatusTooManyRequests, "too many failed authentications from this address; try again later")
			return
		}
		a.limiter.fail(client)
		ctx.SetHeader("WWW-Authenticate", `Bearer realm="hookrelay"`)
		_ = huma.WriteErr(a.api, ctx, http.StatusUnauthorized, "missing, unknown, revoked or expired bearer token")
		return
	}
	if !ops.RoleAllows(role, need) {
		_ = huma.WriteErr(a.api, ctx, http.StatusForbidden, "this operation needs role "+need+"; the token's role is "+role,
			&Error{Code: "forbidden", RequiredRole: need})
		return
	}
	// Every call of the request sees the rows of the token's team only
	// (row-level security on the admin pool): another team's route, event
	// or token is not found.
	next(huma.WithContext(ctx, ops.WithTeam(ops.WithActor(ctx.Context(), actor), team)))
}

// bearer reads the token of an Authorization header (the scheme is not
// case-sensitive).
func bearer(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// clientAddr is who a failed authentication is counted against: the host
// of a remote address, an IPv6 one by its /64 (one host's share).
func clientAddr(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is6() && !ip.Is4In6() && !ip.IsLoopback() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return host
}

// LimitFailures puts l in front of next, a handler that answers 401 to a
// failed authentication (the first admin API, pprof): each 401 counts,
// and once the address failed too often this minute its 401s become
// 429s. Whatever else next answers (a right token) passes as it is.
func LimitFailures(l *FailLimiter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&limitWriter{ResponseWriter: w, l: l, client: clientAddr(r.RemoteAddr)}, r)
	})
}

// limitWriter counts a 401 against client, or answers 429 in its place
// when client is blocked (the 401's body then goes nowhere).
type limitWriter struct {
	http.ResponseWriter
	l        *FailLimiter
	client   string
	wrote    bool
	replaced bool
}

func (w *limitWriter) WriteHeader(status int) {
	if w.wrote {
		w.ResponseWriter.WriteHeader(status) // net/http says it is superfluous
		return
	}
	w.wrote = true
	if status == http.StatusUnauthorized {
		if wait := w.l.blocked(w.client); wait > 0 {
			w.replaced = true
			w.Header().Del("WWW-Authenticate")
			w.Header().Set("Retry-After", retryAfter(wait))
			httpserver.WriteError(w.ResponseWriter, http.StatusTooManyRequests, "too many failed authentications from this address; try again later")
			return
		}
		w.l.fail(w.client)
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *limitWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.replaced {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *limitWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// retryAfter is a Retry-After header's whole seconds, rounded up.
func retryAfter(wait time.Duration) string { return strconv.Itoa(int(wait.Seconds() + 0.999)) }

// FailLimiter counts failed authentications per client address in
// one-minute windows. NewFailLimiter(0) allows 20 a minute.
type FailLimiter struct {
	limit int
	now   func() time.Time

	mu      sync.Mutex
	windows map[string]*failWindow
}

type failWindow struct {
	start time.Time
	n     int
}

func NewFailLimiter(perMinute int) *FailLimiter {
	return &FailLimiter{limit: cmp.Or(perMinute, 20), now: time.Now, windows: map[string]*failWindow{}}
}

// blocked returns how long client must wait, 0 when it may try.
func (l *FailLimiter) blocked(client string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.windows[client]
	if w == nil {
		return 0
	}
	left := time.Minute - l.now().Sub(w.start)
	if left <= 0 {
		delete(l.windows, client)
		return 0
	}
	if w.n < l.limit {
		return 0
	}
	return left
}

// fail counts a failed authentication of client.
func (l *FailLimiter) fail(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if len(l.windows) > 10000 { // forget the old windows of many addresses
		for k, w := range l.windows {
			if now.Sub(w.start) >= time.Minute {
				delete(l.windows, k)
			}
		}
	}
	w := l.windows[client]
	if w == nil || now.Sub(w.start) >= time.Minute {
		w = &failWindow{start: now}
		l.windows[client] = w
	}
	w.n++
}

// Blocked says how long r's client must wait before its next failed try
// is answered as such; 0 when it may try now (the console's sign-in
// shares the count, and asks only after a wrong token).
func (l *FailLimiter) Blocked(r *http.Request) time.Duration {
	return l.blocked(clientAddr(r.RemoteAddr))
}

// Fail counts a failed authentication of r's client.
func (l *FailLimiter) Fail(r *http.Request) { l.fail(clientAddr(r.RemoteAddr)) }
