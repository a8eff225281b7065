package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
)

// ListenInput is what a listener follows.
type ListenInput struct {
	Route      string `query:"route" maxLength:"200" doc:"Follow the events this route gets."`
	Events     string `query:"events" maxLength:"255" doc:"Or follow the events whose source.event_type this topic pattern matches (* one word, # any): a listen-only tap, bound to nothing."`
	ReplayFrom string `query:"replay_from" doc:"Start with the events stored this long ago (10m) or since this time (RFC 3339); without it, only events from now on."`
}

// ListenReady is the stream's first message: what it follows.
type ListenReady struct {
	Route  string    `json:"route,omitempty"`
	Events string    `json:"events,omitempty"`
	From   time.Time `json:"from" doc:"Events received from this time on are sent."`
}

// ListenError ends a stream that could not go on.
type ListenError struct {
	Message string `json:"message"`
}

// listenHeartbeat is how often an idle stream writes a comment, so
// proxies and the client see it alive.
const listenHeartbeat = 15 * time.Second

// listenWriteTimeout bounds each write of a stream (the listener's
// WriteTimeout would end a long stream; each write moves the deadline).
const listenWriteTimeout = 30 * time.Second

func (a *server) listen() {
	o := op(http.MethodGet, "/listen", "listen", ops.ActionRead,
		"Stream a copy of each event a route gets (or a topic pattern matches) as server-sent events, for a local listener (hookrelay listen); the route's deliveries are unaffected",
		http.StatusNotFound)
	o.Description += " The stream is text/event-stream: first an event \"ready\" (ListenReady), then an event \"event\" (ListenEvent) per event, " +
		"oldest first and each once, and \"error\" (ListenError) if it cannot go on."
	o.Responses = map[string]*huma.Response{"200": {
		Description: "The stream.",
		Content: map[string]*huma.MediaType{"text/event-stream": {Schema: &huma.Schema{
			Description: "Server-sent events: ready, event, error.",
			OneOf: []*huma.Schema{
				a.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[ListenReady](), true, "ListenReady"),
				a.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[ops.ListenEvent](), true, "ListenEvent"),
				a.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[ListenError](), true, "ListenError"),
			},
		}}},
	}}
	huma.Register(a.api, o, func(ctx context.Context, in *ListenInput) (*huma.StreamResponse, error) {
		req := ops.ListenRequest{Route: in.Route, Pattern: in.Events}
		if in.ReplayFrom != "" {
			from, err := listenFrom(in.ReplayFrom, time.Now())
			if err != nil {
				return nil, a.fail(ctx, "listen", err)
			}
			req.From = from
		}
		if err := a.svc.CheckListen(ctx, req); err != nil {
			return nil, a.fail(ctx, "listen", err)
		}
		return &huma.StreamResponse{Body: func(hctx huma.Context) {
			a.stream(ctx, hctx, req)
		}}, nil
	})
}

// stream writes the listen stream until the client goes or the store
// fails. ctx is the request's, with its caller's team.
func (a *server) stream(ctx context.Context, hctx huma.Context, req ops.ListenRequest) {
	hctx.SetHeader("Content-Type", "text/event-stream")
	hctx.SetHeader("Cache-Control", "no-store")
	hctx.SetStatus(http.StatusOK)
	w := hctx.BodyWriter()
	rw, ok := w.(http.ResponseWriter) // humago's is the server's, through Unwrap
	if !ok {
		a.logger.Error().Msg("listen: the adapter's body writer is not an http.ResponseWriter: cannot stream")
		return
	}
	rc := http.NewResponseController(rw)
	var mu sync.Mutex
	write := func(frame []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if err := rc.SetWriteDeadline(time.Now().Add(listenWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return err
		}
		if _, err := w.Write(frame); err != nil {
			return err
		}
		return rc.Flush()
	}
	send := func(event string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return write(fmt.Appendf(nil, "event: %s\ndata: %s\n\n", event, data))
	}
	// The stream starts now: what ready announces is what Listen follows,
	// so an event accepted between this ready and Listen's first read of
	// the store is not missed.
	req.Start = time.Now()
	from := req.From
	if from.IsZero() {
		from = req.Start
	}
	if err := send("ready", ListenReady{Route: req.Route, Events: req.Pattern, From: from.UTC()}); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.streams != nil {
		defer context.AfterFunc(a.streams, cancel)()
	}
	// The heartbeat writes too: it ends before the handler returns, as
	// nothing may write to a response once its handler returned.
	beating := make(chan struct{})
	defer func() { cancel(); <-beating }()
	go func() {
		defer close(beating)
		t := time.NewTicker(listenHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if write([]byte(": alive\n\n")) != nil {
					cancel()
					return
				}
			}
		}
	}()
	err := a.svc.Listen(ctx, req, func(ev ops.ListenEvent) error { return send("event", ev) })
	if a.streams != nil && a.streams.Err() != nil {
		_ = send("error", ListenError{Message: "the relay is stopping (a restart?): listen again"}) // the client may be gone too
		return
	}
	if err != nil && ctx.Err() == nil {
		a.logger.Error().Err(err).Str("actor", ops.ActorOf(ctx)).Msg("listen stream ended")
		_ = send("error", ListenError{Message: "the stream ended: storage unavailable (the receiver's log says why); listen again"}) // the client may be gone too
	}
}

// listenFrom reads replay_from: an age (10m) or an RFC 3339 time.
func listenFrom(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	d, err := config.ParseDuration(v)
	if err != nil || d <= 0 {
		return time.Time{}, ops.Invalid("replay_from: want an age with a unit (10m, 2h) or an RFC 3339 time")
	}
	return now.Add(-d), nil
}
