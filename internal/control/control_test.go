package control

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// fakeStore records calls and returns canned states; the Postgres side
// is tested in internal/store and end to end in internal/app.
type fakeStore struct {
	mu       sync.Mutex
	states   []webhook.RouteState
	calls    []string
	circuit  string // what RouteFailure returns
	slowFor  time.Duration
	rateWait []time.Duration
}

func (f *fakeStore) call(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeStore) RouteStateEnsure(context.Context, []string) error { f.call("ensure"); return nil }
func (f *fakeStore) RouteStateList(context.Context) ([]webhook.RouteState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]webhook.RouteState(nil), f.states...), nil
}
func (f *fakeStore) RouteSuccess(_ context.Context, r string) error {
	f.call("success " + r)
	return nil
}
func (f *fakeStore) RouteFailure(_ context.Context, r string, _ int, _, _ time.Duration) (string, int, error) {
	f.call("failure " + r)
	return f.circuit, 1, nil
}
func (f *fakeStore) RouteProbeClaim(_ context.Context, r, _ string, _ time.Duration) (bool, error) {
	f.call("claim " + r)
	return false, nil
}
func (f *fakeStore) RouteProbeRefresh(_ context.Context, r, _ string) (bool, error) {
	f.call("refresh " + r)
	return true, nil
}
func (f *fakeStore) RouteSlow(_ context.Context, r string, d time.Duration) error {
	f.call("slow " + r)
	f.slowFor = d
	return nil
}
func (f *fakeStore) RouteHold(_ context.Context, r string, d time.Duration) error {
	f.call("hold " + r)
	return nil
}
func (f *fakeStore) RouteRateTake(context.Context, string, time.Duration, int) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.rateWait) == 0 {
		return 0, nil
	}
	w := f.rateWait[0]
	f.rateWait = f.rateWait[1:]
	return w, nil
}

func newTest(t *testing.T, st *fakeStore, routes ...Route) *Controller {
	t.Helper()
	c, err := New(Config{Routes: routes, Store: st, Owner: "me", Registerer: prometheus.NewRegistry(), Logger: zerolog.Nop()})
	require.NoError(t, err)
	return c
}

func TestGate(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name     string
		state    webhook.RouteState
		failures int
		want     [2]bool // consumers 0 and 1
	}{
		{"active", webhook.RouteState{Circuit: webhook.CircuitClosed}, 10, [2]bool{true, true}},
		{"paused", webhook.RouteState{Circuit: webhook.CircuitClosed, Paused: true}, 10, [2]bool{false, false}},
		{"open", webhook.RouteState{Circuit: webhook.CircuitOpen, OpenedUntil: timePtr(now.Add(time.Minute))}, 10, [2]bool{false, false}},
		{"half-open here", webhook.RouteState{Circuit: webhook.CircuitHalfOpen, ProbeOwner: "me", ProbeAt: timePtr(now)}, 10, [2]bool{true, false}},
		{"half-open elsewhere", webhook.RouteState{Circuit: webhook.CircuitHalfOpen, ProbeOwner: "other", ProbeAt: timePtr(now)}, 10, [2]bool{false, false}},
		{"open but breaker off here", webhook.RouteState{Circuit: webhook.CircuitOpen, OpenedUntil: timePtr(now.Add(time.Minute))}, 0, [2]bool{true, true}},
		{"held by Retry-After", webhook.RouteState{Circuit: webhook.CircuitClosed, SlowUntil: timePtr(now.Add(time.Minute))}, 10, [2]bool{false, false}},
		{"Retry-After over", webhook.RouteState{Circuit: webhook.CircuitClosed, SlowUntil: timePtr(now.Add(-time.Second))}, 10, [2]bool{true, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.state.Route, tc.state.Now = "billing", now
			st := &fakeStore{states: []webhook.RouteState{tc.state}}
			c := newTest(t, st, Route{Name: "billing", Failures: tc.failures, Cooldown: time.Second})
			g := c.Gate("billing")
			before, changed := g.Open(0)
			require.False(t, before, "closed until the state is read")
			require.NoError(t, c.Init(context.Background()))
			select {
			case <-changed:
			default:
				t.Fatal("reading the state did not wake the consumers")
			}
			for i, want := range tc.want {
				got, _ := g.Open(i)
				require.Equal(t, want, got, "consumer %d", i)
			}
		})
	}
}

// A success on a route with nothing to reset (no failures stored, circuit
// closed) writes nothing: the common case costs no round trip. After a
// failure of this dispatcher's, or a read that finds failures stored by
// another, the next success resets them, once.
func TestObserveSuccessWritesOnlyWhenSomethingToReset(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitClosed, Now: time.Now()}}, circuit: webhook.CircuitClosed}
	c := newTest(t, st, Route{Name: "billing", Failures: 3, Cooldown: time.Second})
	require.NoError(t, c.Init(ctx))
	st.calls = nil
	c.Observe(ctx, "billing", 200, 0)
	require.Empty(t, st.calls, "settled: nothing to write")
	c.Observe(ctx, "billing", 500, 0)
	c.Observe(ctx, "billing", 200, 0)
	c.Observe(ctx, "billing", 200, 0)
	require.Equal(t, []string{"failure billing", "success billing"}, st.calls, "own failure: one reset")

	st.mu.Lock()
	st.states[0].ConsecutiveFailures = 2 // another dispatcher's failures
	st.calls = nil
	st.mu.Unlock()
	_, err := c.refresh(ctx)
	require.NoError(t, err)
	c.Observe(ctx, "billing", 204, 0)
	require.Equal(t, []string{"success billing"}, st.calls, "read failures: reset on the next success")
}

func TestObserveClassifiesAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status     int
		retryAfter time.Duration
		want       []string
	}{
		{200, 0, []string{"success billing"}},
		{204, 0, []string{"success billing"}},
		{0, 0, []string{"failure billing"}},
		{408, 0, []string{"failure billing"}},
		{500, 0, []string{"failure billing"}},
		{503, 2 * time.Second, []string{"slow billing", "failure billing"}},
		{429, time.Hour, []string{"slow billing", "failure billing"}},
		{429, 0, []string{"failure billing"}},
		{500, time.Second, []string{"failure billing"}}, // Retry-After counts on 429 and 503 only
		{404, 0, nil},
		{400, 0, nil},
		{301, 0, nil},
	} {
		// One failure stored: a success has a count to reset.
		st := &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitClosed, ConsecutiveFailures: 1, Now: time.Now()}}, circuit: webhook.CircuitClosed}
		c := newTest(t, st, Route{Name: "billing", Failures: 3, Cooldown: time.Second})
		require.NoError(t, c.Init(context.Background()))
		st.calls = nil
		c.Observe(context.Background(), "billing", tc.status, tc.retryAfter)
		require.Equal(t, tc.want, st.calls, "status %d retry-after %s", tc.status, tc.retryAfter)
		if tc.retryAfter == time.Hour {
			require.Equal(t, 10*time.Minute, st.slowFor, "capped")
		}
	}

	// A failure that opens the circuit closes the gate at once, before
	// any poll.
	st := &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitClosed, Now: time.Now()}}, circuit: webhook.CircuitOpen}
	c := newTest(t, st, Route{Name: "billing", Failures: 3, Cooldown: time.Second})
	require.NoError(t, c.Init(context.Background()))
	open, changed := c.Gate("billing").Open(0)
	require.True(t, open)
	c.Observe(context.Background(), "billing", 500, 0)
	<-changed
	open, _ = c.Gate("billing").Open(0)
	require.False(t, open)

	// Breaker off: nothing counted.
	st = &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitClosed, Now: time.Now()}}}
	c = newTest(t, st, Route{Name: "billing"})
	require.NoError(t, c.Init(context.Background()))
	st.calls = nil
	c.Observe(context.Background(), "billing", 500, 0)
	require.Empty(t, st.calls)
}

func TestAdmitWaitsForTheRateLimitAndStops(t *testing.T) {
	t.Parallel()
	st := &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitClosed, Now: time.Now()}},
		rateWait: []time.Duration{20 * time.Millisecond, 20 * time.Millisecond}}
	c := newTest(t, st, Route{Name: "billing", RateLimit: 50, Burst: 1})
	require.NoError(t, c.Init(context.Background()))
	start := time.Now()
	require.NoError(t, c.Admit(context.Background(), "billing", nil))
	require.GreaterOrEqual(t, time.Since(start), 40*time.Millisecond, "waited twice")
	holds := 0
	for _, call := range st.calls {
		if call == "hold billing" {
			holds++
		}
	}
	require.Equal(t, 1, holds, "the route marked held for the reconciler, once for both waits: %v", st.calls)

	// A Retry-After hold is the route's slow_until already: no mark.
	ra := &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitClosed, Now: time.Now()}}}
	rc := newTest(t, ra, Route{Name: "billing"})
	require.NoError(t, rc.Init(context.Background()))
	rc.Observe(context.Background(), "billing", 503, 30*time.Millisecond)
	start = time.Now()
	require.NoError(t, rc.Admit(context.Background(), "billing", nil))
	require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond, "held for the Retry-After")
	require.Contains(t, ra.calls, "slow billing")
	require.NotContains(t, ra.calls, "hold billing", "a Retry-After is marked as the route's slow_until")

	st.rateWait = []time.Duration{time.Hour}
	stopping := make(chan struct{})
	close(stopping)
	require.ErrorIs(t, c.Admit(context.Background(), "billing", stopping), ErrStopping, "shutdown ends the wait")

	_, err := New(Config{Routes: []Route{{Name: "x", RateLimit: 5}}, Store: st, Owner: "me", Registerer: prometheus.NewRegistry()})
	require.Error(t, err, "a rate limit needs a burst")
}

// A delivery held for the rate limit (or a Retry-After hold) when the
// route is paused, or its circuit opens, must not go: the pause stops the
// route's deliveries within 2s, however long the hold. Admit gives the
// message back (ErrGateClosed) as soon as the controller sees the change.
func TestAdmitGivesBackAHeldDeliveryWhenTheRouteStops(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change webhook.RouteState
	}{
		{"paused", webhook.RouteState{Route: "billing", Circuit: webhook.CircuitClosed, Paused: true}},
		{"circuit open", webhook.RouteState{Route: "billing", Circuit: webhook.CircuitOpen, OpenedUntil: timePtr(time.Now().Add(time.Minute))}},
		{"half-open elsewhere", webhook.RouteState{Route: "billing", Circuit: webhook.CircuitHalfOpen, ProbeOwner: "other", ProbeAt: timePtr(time.Now())}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitClosed, Now: time.Now()}},
				rateWait: []time.Duration{time.Hour}}
			c := newTest(t, st, Route{Name: "billing", Failures: 3, Cooldown: time.Second, RateLimit: 1, Burst: 1})
			require.NoError(t, c.Init(context.Background()))
			done := make(chan error, 1)
			go func() { done <- c.Admit(context.Background(), "billing", nil) }()
			require.Eventually(t, func() bool {
				st.mu.Lock()
				defer st.mu.Unlock()
				return len(st.rateWait) == 0
			}, testenv.Scaled(5*time.Second), time.Millisecond, "Admit asked the rate limit")

			st.mu.Lock()
			tc.change.Now = time.Now()
			st.states = []webhook.RouteState{tc.change}
			st.mu.Unlock()
			_, err := c.refresh(context.Background())
			require.NoError(t, err)
			select {
			case err := <-done:
				require.ErrorIs(t, err, ErrGateClosed)
			case <-time.After(testenv.Scaled(5 * time.Second)):
				t.Fatal("the held delivery still waits for its hour after the route stopped")
			}
		})
	}

	// The probe itself (half-open here) is not given back, nor a delivery
	// of a route whose breaker is off here.
	st := &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitHalfOpen, ProbeOwner: "me", ProbeAt: timePtr(time.Now()), Now: time.Now()}},
		rateWait: []time.Duration{20 * time.Millisecond}}
	c := newTest(t, st, Route{Name: "billing", Failures: 3, Cooldown: time.Second, RateLimit: 1, Burst: 1})
	require.NoError(t, c.Init(context.Background()))
	require.NoError(t, c.Admit(context.Background(), "billing", nil))
	st = &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitOpen, OpenedUntil: timePtr(time.Now().Add(time.Minute)), Now: time.Now()}},
		rateWait: []time.Duration{20 * time.Millisecond}}
	c = newTest(t, st, Route{Name: "billing", RateLimit: 1, Burst: 1})
	require.NoError(t, c.Init(context.Background()))
	require.NoError(t, c.Admit(context.Background(), "billing", nil))
}

// Issue 18, item 4: the dispatcher holding a half-open circuit's probe
// keeps its claim fresh only while its probe consumer can make the probe:
// subscribed and waiting (not for longer than the stale window: with the
// route's backlog queued, a working consumer gets a message at once), or
// handling a message for less than a delivery can take, or starting just
// after the claim. Otherwise the claim goes stale and another dispatcher
// takes it over.
func TestProbeKeptOnlyWhileItCanBeMade(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for _, tc := range []struct {
		name    string
		probe   activity
		claimed time.Time
		refresh bool
	}{
		{"waiting for a message", activity{state: idle, since: now.Add(-time.Second)}, time.Time{}, true},
		{"handling the probe", activity{state: busy, since: now.Add(-20 * time.Second)}, time.Time{}, true},
		{"starting after the claim", activity{state: stopped, since: now.Add(-time.Minute)}, now.Add(-time.Second), true},
		{"no message for long: its connection does not move", activity{state: idle, since: now.Add(-10 * time.Second)}, time.Time{}, false},
		{"stuck on one message (a lease wait, a hold)", activity{state: busy, since: now.Add(-2 * time.Minute)}, time.Time{}, false},
		{"not consuming (reconnecting)", activity{state: stopped, since: now.Add(-time.Minute)}, now.Add(-time.Minute), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := &fakeStore{states: []webhook.RouteState{{Route: "billing", Circuit: webhook.CircuitHalfOpen, ProbeOwner: "me", ProbeAt: timePtr(now), Now: now}}}
			c := newTest(t, st, Route{Name: "billing", Failures: 3, Cooldown: time.Second, ProbeBusy: 30 * time.Second})
			r := c.routes["billing"]
			r.probe, r.claimedAt = tc.probe, tc.claimed
			_, err := c.refresh(context.Background())
			require.NoError(t, err)
			st.mu.Lock()
			defer st.mu.Unlock()
			if tc.refresh {
				require.Contains(t, st.calls, "refresh billing")
			} else {
				require.NotContains(t, st.calls, "refresh billing")
			}
		})
	}
}

// The gate follows what consumer 0 does; other consumers do not count.
func TestGateTracksTheProbeConsumer(t *testing.T) {
	t.Parallel()
	st := &fakeStore{}
	c := newTest(t, st, Route{Name: "billing", Failures: 3, Cooldown: time.Second})
	g := c.Gate("billing")
	r := c.routes["billing"]
	g.Consuming(0, false)
	require.Equal(t, idle, r.probe.state)
	g.Consuming(1, true)
	require.Equal(t, idle, r.probe.state, "consumer 1 is not the probe's")
	g.Consuming(0, true)
	require.Equal(t, busy, r.probe.state)
	g.Stopped(0)
	require.Equal(t, stopped, r.probe.state)
}

// timePtr is &t, for a route state's times.
func timePtr(t time.Time) *time.Time { return &t }
