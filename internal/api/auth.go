package api

import (
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/hookrelay/hookrelay/internal/ops"
)

// authenticate lets a request through with the actor its token names
// when the token is live and its role is at least the operation's; 401
// otherwise (missing, unknown, revoked or expired token), 403 naming the
// role needed, 429 for an address that failed too often this minute.
//
// A named token is looked up by the SHA-256 of its secret (tokens are 256
// random bits: the time a lookup takes tells nothing of another token);
// the config's admin.token is compared as a hash in constant time. Each
// request reads Postgres, so a revoked token is refused at once.
func (a *server) authenticate(ctx huma.Context, next func(huma.Context)) {
	need := RequiredRole(ctx.Operation())
	if need == "" { // every operation names one: fail closed
		_ = huma.WriteErr(a.api, ctx, http.StatusInternalServerError, "the operation names no role")
		return
	}
	client := clientAddr(ctx.RemoteAddr())
	if wait := a.limiter.blocked(client); wait > 0 {
		ctx.SetHeader("Retry-After", strconv.Itoa(int(wait.Seconds()+0.999)))
		_ = huma.WriteErr(a.api, ctx, http.StatusTooManyRequests, "too many failed authentications from this address; try again later")
		return
	}
	secret, ok := strings.CutPrefix(ctx.Header("Authorization"), "Bearer ")
	actor, role := "", ""
	switch {
	case !ok || secret == "":
	case a.configToken != nil && subtle.ConstantTimeCompare(ops.HashToken(secret), a.configToken) == 1:
		actor, role = ops.ConfigTokenActor, ops.RoleAdmin
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
			actor, role = "token:"+t.Name, t.Role
		}
	}
	if actor == "" {
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
	next(huma.WithContext(ctx, ops.WithActor(ctx.Context(), actor)))
}

// clientAddr is the host of a remote address.
func clientAddr(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

// failLimiter counts failed authentications per client address in
// one-minute windows.
type failLimiter struct {
	limit int
	now   func() time.Time

	mu      sync.Mutex
	windows map[string]*failWindow
}

type failWindow struct {
	start time.Time
	n     int
}

func newFailLimiter(perMinute int) *failLimiter {
	return &failLimiter{limit: perMinute, now: time.Now, windows: map[string]*failWindow{}}
}

// blocked returns how long client must wait, 0 when it may try.
func (l *failLimiter) blocked(client string) time.Duration {
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
func (l *failLimiter) fail(client string) {
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
