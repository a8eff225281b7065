// Package api is the admin HTTP API, /api/v1: a thin layer of JSON in and
// out over ops.Service, the one way into operator actions (the CLI is the
// other layer over it). Its OpenAPI 3.1 document is generated from the
// handlers' Go types by huma, so the document and the handlers cannot
// disagree; it is committed as api/openapi.json (a test keeps it current)
// and served at /api/v1/openapi.json.
//
// Every operation but the document needs "Authorization: Bearer <token>":
// a named token (hookrelay tokens create) or the config's admin.token. An
// operation names the role it needs in the document (x-required-role).
package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/hookrelay/hookrelay/internal/httpserver"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/rs/zerolog"
)

// Prefix is where the API lives.
const Prefix = "/api/v1"

// DocumentPath serves the OpenAPI document, without a token.
const DocumentPath = Prefix + "/openapi.json"

// Error is every error the API answers with: a stable machine-readable
// code and a message for people.
type Error struct {
	status  int
	Code    string `json:"code" doc:"Stable machine-readable code: bad_request, invalid_request, destination_refused, unauthenticated, forbidden, not_found, unknown_route, conflict, confirm_required, idempotency_key_reused, too_many_requests, stalled, storage_unavailable, unavailable, internal." example:"unknown_route"`
	Message string `json:"message" doc:"What went wrong, for people."`
	// RequiredRole is the role a 403 needed.
	RequiredRole string `json:"required_role,omitempty" enum:"viewer,operator,admin" doc:"The role the operation needs (403 only)."`
}

func (e *Error) Error() string  { return e.Message }
func (e *Error) GetStatus() int { return e.status }

func apiError(status int, code, msg string) *Error {
	return &Error{status: status, Code: code, Message: msg}
}

func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return "bad_request"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "body_too_large"
	case http.StatusTooManyRequests:
		return "too_many_requests"
	case http.StatusServiceUnavailable:
		return "unavailable"
	}
	if status >= 500 {
		return "internal"
	}
	return "error"
}

// installErrors makes huma's own errors (validation, a malformed body)
// take our shape, so the document's one error schema is what is sent.
// huma keeps them in package variables: every API of this process has the
// same error shape, installed once (APIs made at once must not race on
// them).
func installErrors() { errorsOnce.Do(setErrors) }

var errorsOnce sync.Once

func setErrors() {
	huma.NewError = func(status int, msg string, errs ...error) huma.StatusError {
		e := apiError(status, codeFor(status), msg)
		var details []string
		for _, err := range errs {
			var ae *Error
			var ed huma.ErrorDetailer
			switch {
			case err == nil:
			case errors.As(err, &ae):
				e.Code, e.RequiredRole = ae.Code, ae.RequiredRole
			case errors.As(err, &ed):
				d := ed.ErrorDetail()
				details = append(details, strings.TrimPrefix(d.Location+": ", ": ")+d.Message)
			default:
				details = append(details, err.Error())
			}
		}
		if len(details) > 0 {
			e.Message = msg + ": " + strings.Join(details, "; ")
		}
		return e
	}
	huma.NewErrorWithContext = func(_ huma.Context, status int, msg string, errs ...error) huma.StatusError {
		return huma.NewError(status, msg, errs...)
	}
}

// Options configure the API.
type Options struct {
	// ConfigToken is the config's admin.token, an admin token; "" for
	// none.
	ConfigToken string
	// FailedAuthPerMinute is how many failed authentications one client
	// address may make a minute before it is answered 429; default 20.
	FailedAuthPerMinute int
	// Limiter, when set, counts the failures instead (shared with the
	// other handlers of the admin listener: see LimitFailures).
	Limiter *FailLimiter
	// Version is the document's info.version.
	Version string
	// Streams, when set, ends every open stream (GET /api/v1/listen)
	// when it is done: the server's shutdown, which a stream would
	// otherwise hold to its timeout.
	Streams context.Context
}

// Mux is where the API registers its routes: an *http.ServeMux, or a
// recorder around one in tests.
type Mux = humago.Mux

// New registers the API over svc on mux and returns it.
func New(mux Mux, svc *ops.Service, opts Options, logger zerolog.Logger) huma.API {
	installErrors()
	cfg := huma.DefaultConfig("hookrelay admin API", cmp.Or(opts.Version, "1"))
	cfg.Info.Description = "Every operator action on a hookrelay: routes, events, retries, replays, dead letters, purges, " +
		"resource versions, tokens and the audit log. Long actions run as jobs (GET /api/v1/jobs/{id}). " +
		"Every operation needs a bearer token whose role is at least the operation's x-required-role."
	cfg.OpenAPIPath, cfg.DocsPath, cfg.SchemasPath = "", "", "" // the document is served below, nothing else
	cfg.CreateHooks = nil                                       // no "$schema" field or Link header in answers
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "A named token (hookrelay tokens create) or the config's admin.token."},
	}
	cfg.Security = []map[string][]string{{"bearer": {}}}
	api := humago.New(mux, cfg)
	a := &server{api: api, svc: svc, logger: logger, limiter: opts.Limiter, streams: opts.Streams}
	if a.limiter == nil {
		a.limiter = NewFailLimiter(opts.FailedAuthPerMinute)
	}
	if opts.ConfigToken != "" {
		a.configToken = ops.HashToken(opts.ConfigToken)
	}
	api.UseMiddleware(keepReadDeadline, a.authenticate)
	a.routes()
	a.events()
	a.deadLetters()
	a.jobs()
	a.admin()
	a.listen()
	return api
}

// Handler is the API over svc with its document, ready to serve.
func Handler(svc *ops.Service, opts Options, logger zerolog.Logger) (http.Handler, error) {
	mux := http.NewServeMux()
	api := New(mux, svc, opts, logger)
	doc, err := Document(api)
	if err != nil {
		return nil, err
	}
	mux.HandleFunc("GET "+DocumentPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/openapi+json")
		_, _ = w.Write(doc) // a client gone mid-answer has nothing to be told
	})
	return mux, nil
}

// Document is api's OpenAPI document as committed and served.
func Document(api huma.API) ([]byte, error) {
	b, err := json.MarshalIndent(api.OpenAPI(), "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshalling the OpenAPI document: %w", err)
	}
	return append(b, '\n'), nil
}

type server struct {
	api         huma.API
	svc         *ops.Service
	logger      zerolog.Logger
	configToken []byte
	limiter     *FailLimiter
	streams     context.Context // nil: streams end with their request only
}

// roleKey is where an operation's document says the role it needs;
// actionKey where the operation keeps its ops action (not documented).
const (
	roleKey   = "x-required-role"
	actionKey = "action"
)

// RequiredRole is the role op's document names, "" when it names none.
func RequiredRole(op *huma.Operation) string {
	r, _ := op.Extensions[roleKey].(string)
	return r
}

// ActionOf is the ops action op is, "" when it names none; its role is
// ops.RoleOf's, which authentication asks.
func ActionOf(op *huma.Operation) ops.Action {
	a, _ := op.Metadata[actionKey].(ops.Action)
	return a
}

// op describes an operation that is ops action action, needing the role
// ops gives it; errs are the error statuses it can answer besides 400,
// 401, 403, 429 and 503, which all can.
func op(method, path, id string, action ops.Action, summary string, errs ...int) huma.Operation {
	if method == http.MethodPost {
		errs = append(errs, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType)
	}
	role := ops.RoleOf(action)
	if role == "" {
		panic("api: operation " + id + ": ops knows no action " + string(action)) // a wiring fault, found by every test
	}
	return huma.Operation{
		OperationID: id,
		Method:      method,
		Path:        Prefix + path,
		Summary:     summary,
		Description: summary + ". Needs role " + role + ".",
		Extensions:  map[string]any{roleKey: role},
		Metadata:    map[string]any{actionKey: action},
		Errors: append([]int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden,
			http.StatusTooManyRequests, http.StatusServiceUnavailable}, errs...),
	}
}

// jobOp is op for an action that runs as a job: it answers 202 with the
// job, whose Location is where to poll it.
func jobOp(method, path, id string, action ops.Action, summary string, errs ...int) huma.Operation {
	o := op(method, path, id, action, summary, errs...)
	o.DefaultStatus = http.StatusAccepted
	o.Description += " Answers 202 with the job at once; poll GET /api/v1/jobs/{id} (the Location header) for progress and the report."
	return o
}

// fail turns an ops error into the API's: what the caller can act on by
// its kind, anything else (a driver error naming hosts and users) logged
// and answered as unavailable storage.
func (a *server) fail(ctx context.Context, what string, err error) error {
	var stalled *ops.StalledError
	switch {
	case errors.Is(err, ops.ErrUnknownRoute):
		return apiError(http.StatusNotFound, "unknown_route", err.Error())
	case errors.Is(err, ops.ErrNotFound):
		return apiError(http.StatusNotFound, "not_found", err.Error())
	case errors.Is(err, ops.ErrDestinationRefused):
		// A team probing the relay's side is the operator's business too.
		a.logger.Warn().Err(err).Str("actor", ops.ActorOf(ctx)).Msg("a team's route to the relay's own side refused")
		return apiError(http.StatusUnprocessableEntity, "destination_refused", strings.TrimPrefix(err.Error(), ops.ErrInvalidRequest.Error()+": "))
	case errors.Is(err, ops.ErrInvalidRequest):
		return apiError(http.StatusBadRequest, "invalid_request", strings.TrimPrefix(err.Error(), ops.ErrInvalidRequest.Error()+": "))
	case errors.Is(err, ops.ErrIdempotencyKeyReused):
		return apiError(http.StatusUnprocessableEntity, "idempotency_key_reused", strings.TrimPrefix(err.Error(), ops.ErrIdempotencyKeyReused.Error()+": "))
	case errors.Is(err, ops.ErrExists):
		return apiError(http.StatusConflict, "conflict", err.Error())
	case errors.Is(err, ops.ErrConflict):
		return apiError(http.StatusConflict, "conflict", strings.TrimPrefix(err.Error(), ops.ErrConflict.Error()+": "))
	case errors.Is(err, ops.ErrForbidden):
		return apiError(http.StatusForbidden, "forbidden", strings.TrimPrefix(err.Error(), ops.ErrForbidden.Error()+": "))
	case errors.As(err, &stalled):
		return apiError(http.StatusServiceUnavailable, "stalled", err.Error())
	case errors.Is(err, ops.ErrNoKey):
		return apiError(http.StatusServiceUnavailable, "not_configured", err.Error())
	case errors.Is(err, ops.ErrNoJobs):
		return apiError(http.StatusServiceUnavailable, "unavailable", "this process runs no jobs")
	case ctx.Err() != nil:
		return apiError(http.StatusServiceUnavailable, "unavailable", "the request ended before it was answered")
	}
	a.logger.Error().Err(err).Str("actor", ops.ActorOf(ctx)).Msg(what)
	return apiError(http.StatusServiceUnavailable, "storage_unavailable", what+" failed: storage unavailable (the receiver's log says why)")
}

// Gone answers every request under /api/ outside Prefix: 404 with the
// API's error shape, naming where the API is. The first admin API
// (/api/events, /api/replay, ...) lived there; it is gone, and a script
// still calling it learns where to go instead of reading the console's
// sign-in page.
func Gone() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpserver.WriteJSON(w, http.StatusNotFound, apiError(http.StatusNotFound, "not_found",
			"no such API: the admin API is "+Prefix+" (its document: "+DocumentPath+")"))
	})
}

// keepReadDeadline keeps the listener's read_timeout in force while an
// operation reads its body: huma would replace it with its own 5s (a
// stalled body then held a connection past admin.read_timeout).
func keepReadDeadline(ctx huma.Context, next func(huma.Context)) {
	next(serverDeadline{ctx})
}

// humaContext names huma.Context for embedding (a field named Context
// would hide the interface's method of that name).
type humaContext = huma.Context

type serverDeadline struct{ humaContext }

// SetReadDeadline leaves the server's deadline as it is.
func (serverDeadline) SetReadDeadline(time.Time) error { return nil }
