package deliver_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// fakeStore is deliver.Store over one pair: its state and generation when
// claimed, and what happened to it. Its lease behaves as Postgres's does
// (storecontract.Delivery holds both to the same cases): a live lease
// keeps other owners out and lets its own in again, a delivered pair or a
// copy of another generation is read and not claimed, a record under a
// lease taken over is refused. The fields below make it fail on purpose.
type fakeStore struct {
	mu    sync.Mutex
	state webhook.DeliveryState
	gen   int64
	// event, when set, is the pair's event: a claim of any other fails as
	// missing (as a purged event's).
	event uuid.UUID
	// leaseOwner holds the pair until leaseUntil; uuid.Nil when free.
	leaseOwner uuid.UUID
	leaseUntil time.Time
	// lockErrs fail the next DeliveryClaim calls, one each.
	lockErrs []error
	// lockFails fails every DeliveryClaim call with it, when set.
	lockFails error
	// busy fail the next DeliveryClaim calls with a live lease of that
	// remaining time, one each; busyThen is the pair's state once the
	// last of them is over (another claim recorded it).
	busy     []time.Duration
	busyThen webhook.DeliveryState
	// recordErrs fail the next Record calls, one each (Postgres errors).
	recordErrs []error
	// leaseLost makes Record find its lease taken over: the attempt is
	// kept in lost, the pair unchanged.
	leaseLost bool
	// movedOn makes Record find the pair at another generation (a replay
	// during the attempt).
	movedOn bool
	// locked is signalled on every DeliveryClaim call.
	locked chan struct{}

	locks, released, restarts int
	// restartErr fails Restart, when set.
	restartErr     error
	recorded, lost []*webhook.Attempt
	// retries are the retry copies records put in the outbox.
	retries []retry
	ttls    []time.Duration
}

func newFakeStore() *fakeStore {
	return &fakeStore{state: webhook.StatePending, locked: make(chan struct{}, 64)}
}

func (s *fakeStore) DeliveryClaim(_ context.Context, owner, eventID uuid.UUID, _ string, _ int, gen int64, ttl time.Duration) (deliver.Lease, error) {
	if s.locked != nil {
		s.locked <- struct{}{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.locks++
	s.ttls = append(s.ttls, ttl)
	if s.lockFails != nil {
		return nil, s.lockFails
	}
	if len(s.lockErrs) > 0 {
		err := s.lockErrs[0]
		s.lockErrs = s.lockErrs[1:]
		return nil, err
	}
	if len(s.busy) > 0 {
		rem := s.busy[0]
		s.busy = s.busy[1:]
		if len(s.busy) == 0 && s.busyThen != "" {
			s.state = s.busyThen
		}
		return nil, &webhook.LeaseBusyError{Remaining: rem}
	}
	if s.event != uuid.Nil && eventID != s.event {
		return nil, fmt.Errorf("%w: event %s", webhook.ErrEventMissing, eventID)
	}
	if s.state == webhook.StateDelivered || s.state == webhook.StateStale || gen != s.gen {
		return &fakeLock{s: s, owner: owner}, nil // read, not claimed
	}
	now := time.Now()
	if s.leaseOwner != uuid.Nil && s.leaseOwner != owner && now.Before(s.leaseUntil) {
		return nil, &webhook.LeaseBusyError{Remaining: s.leaseUntil.Sub(now)}
	}
	s.leaseOwner, s.leaseUntil = owner, now.Add(ttl)
	return &fakeLock{s: s, owner: owner, held: true}, nil
}

// record stores a and moves the pair on as Postgres does: a retry starts
// a new generation, whose copy goes into the outbox with the record.
func (s *fakeStore) record(a *webhook.Attempt) int64 {
	s.recorded = append(s.recorded, a)
	s.state = a.Outcome
	if a.Outcome == webhook.StateRetrying {
		s.gen++
		first := a.FirstAttemptAt
		if first.IsZero() {
			first = a.StartedAt
		}
		s.retries = append(s.retries, retry{route: a.Route, delay: a.RetryIn, next: webhook.RouteMessage{
			EventID: a.EventID, Gen: s.gen, Attempt: a.Number + 1, FirstAttemptAt: first,
		}})
	}
	return s.gen
}

// snapshot returns what happened to the pair.
func (s *fakeStore) snapshot() (locks, released, restarts int, recorded []*webhook.Attempt) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.locks, s.released, s.restarts, append([]*webhook.Attempt(nil), s.recorded...)
}

// fakeLock is a claim of fakeStore's: held when it took the lease.
type fakeLock struct {
	s     *fakeStore
	owner uuid.UUID
	held  bool
}

// releaseLocked frees the pair if l still holds it; s.mu is held.
func (l *fakeLock) releaseLocked() {
	if l.held && l.s.leaseOwner == l.owner {
		l.s.leaseOwner, l.s.leaseUntil = uuid.Nil, time.Time{}
	}
	l.held = false
}

func (l *fakeLock) State() webhook.DeliveryState {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.state
}

func (l *fakeLock) Gen() int64 {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.gen
}

func (l *fakeLock) Restart(context.Context) (int64, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.restartErr != nil {
		return 0, l.s.restartErr
	}
	l.s.restarts++
	l.s.state = webhook.StatePending
	l.s.gen++
	return l.s.gen, nil
}

func (l *fakeLock) Record(_ context.Context, a *webhook.Attempt) (int64, bool, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if len(l.s.recordErrs) > 0 {
		err := l.s.recordErrs[0]
		l.s.recordErrs = l.s.recordErrs[1:]
		return 0, false, err
	}
	if l.s.leaseLost || !l.held || l.s.leaseOwner != l.owner {
		l.s.lost = append(l.s.lost, a)
		return 0, false, webhook.ErrLeaseLost
	}
	defer l.releaseLocked()
	if l.s.movedOn {
		// A replay moved the pair on during the attempt: the attempt is
		// kept, the pair's state is not touched.
		l.s.recorded = append(l.s.recorded, a)
		return l.s.gen + 1, false, nil
	}
	return l.s.record(a), true, nil
}

func (l *fakeLock) Release(context.Context) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.released++
	l.releaseLocked()
	return nil
}

// retry is a retry copy a record put in the outbox.
type retry struct {
	route string
	delay time.Duration
	next  webhook.RouteMessage
}

// dead is a confirmed DeadLetter.
type dead struct {
	msg webhook.RouteMessage
	why webhook.DeadLetter
}

// fakePublisher confirms every publish, except while blocked: then a
// publish fails, and Blocked returns a channel that Unblock closes.
type fakePublisher struct {
	mu       sync.Mutex
	lifted   chan struct{} // nil when not blocked
	dead     []dead
	attempts chan struct{} // signalled on every publish
}

func newFakePublisher() *fakePublisher {
	return &fakePublisher{attempts: make(chan struct{}, 64)}
}

func (p *fakePublisher) DeadLetter(_ context.Context, m webhook.RouteMessage, why webhook.DeadLetter) error {
	return p.publish(func() { p.dead = append(p.dead, dead{m, why}) })
}

func (p *fakePublisher) publish(confirmed func()) error {
	p.attempts <- struct{}{}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lifted != nil {
		return errors.New("blocked")
	}
	confirmed()
	return nil
}

func (p *fakePublisher) Blocked() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lifted == nil {
		return nil
	}
	return p.lifted
}

func (p *fakePublisher) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lifted = make(chan struct{})
}

func (p *fakePublisher) Unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.lifted)
	p.lifted = nil
}

// deadLetters returns the confirmed dead letters.
func (p *fakePublisher) deadLetters() []dead {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]dead(nil), p.dead...)
}

// published returns the retry copies recorded and the dead letters
// published.
func published(s *fakeStore, p *fakePublisher) ([]retry, []dead) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]retry(nil), s.retries...), p.deadLetters()
}

func (b *bundle) published() ([]retry, []dead) { return published(b.store, b.pub) }

// post is a request the destination received.
type post struct {
	header http.Header
	body   string
}

type bundle struct {
	handler *deliver.Handler
	store   *fakeStore
	pub     *fakePublisher
	reg     *prometheus.Registry
	posts   chan post
}

// tiers are the test handler's retry tiers.
var tiers = []deliver.Tier{{Name: "1s", Delay: time.Second}, {Name: "2s", Delay: 2 * time.Second}, {Name: "10s", Delay: 10 * time.Second}}

// setup returns a handler of route billing (5 attempts, 422 not retried)
// whose destination answers with respond; each POST is sent on posts.
func setup(t *testing.T, holdFor time.Duration, respond func(w http.ResponseWriter, r *http.Request)) *bundle {
	t.Helper()
	b := &bundle{store: newFakeStore(), pub: newFakePublisher(), reg: prometheus.NewRegistry(), posts: make(chan post, 16)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice a client that hangs up.
		body, _ := io.ReadAll(r.Body)
		b.posts <- post{header: r.Header.Clone(), body: string(body)}
		respond(w, r)
	}))
	t.Cleanup(srv.Close)
	h, err := deliver.New(deliver.Config{
		Routes: []deliver.Route{{
			Name: "billing", URL: srv.URL, Timeout: 30 * time.Second, MaxAttempts: 5, NoRetry: map[int]bool{422: true},
			SigningKeys: [][]byte{[]byte("key")},
		}},
		Tiers:          tiers,
		Store:          b.store,
		Publisher:      b.pub,
		Metrics:        deliver.NewMetrics(b.reg, []string{"billing"}),
		Logger:         zerolog.New(zerolog.NewTestWriter(t)),
		PublishHoldFor: holdFor,
		StoreRetryFor:  time.Minute,
	})
	require.NoError(t, err)
	b.handler = h
	return b
}

// leases returns hookrelay_delivery_leases_total by event, for billing.
func (b *bundle) leases(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := b.reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "hookrelay_delivery_leases_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				for _, l := range m.GetLabel() {
					if l.GetName() == "event" {
						out[l.GetValue()] = v
					}
				}
			}
		}
	}
	return out
}

// outcomes returns hookrelay_deliveries_total by outcome, for billing.
func (b *bundle) outcomes(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := b.reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "hookrelay_deliveries_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if v := m.GetCounter().GetValue(); v > 0 {
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" {
						out[l.GetValue()] = v
					}
				}
			}
		}
	}
	return out
}

// message is the first copy of a new event.
func message() webhook.RouteMessage {
	return webhook.RouteMessage{EventID: uuid.New(), Source: "acme", EventType: "invoice.paid", Attempt: 1, Body: []byte(`{}`)}
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func status(code int) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

func requireNothingPublished(t *testing.T, b *bundle) {
	t.Helper()
	retries, dead := b.published()
	require.Empty(t, retries, "no retry")
	require.Empty(t, dead, "no dead letter")
}
