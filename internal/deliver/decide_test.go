package deliver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/deliver"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// What an attempt's answer leads to: the outcome recorded, and the retry or
// dead letter published (confirmed) before Handle returns nil.
func TestHandleDecidesByTheAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		attempt    int
		status     int
		retryAfter string
		outcome    webhook.DeliveryState
		retryIn    time.Duration // the tier of a retry
		deadReason string
	}{
		{name: "2xx is delivered", attempt: 1, status: 204, outcome: webhook.StateDelivered},
		{name: "the first failure goes to the first tier", attempt: 1, status: 500, outcome: webhook.StateRetrying, retryIn: time.Second},
		{name: "the second failure goes to the second tier", attempt: 2, status: 502, outcome: webhook.StateRetrying, retryIn: 2 * time.Second},
		{name: "the last tier repeats", attempt: 4, status: 500, outcome: webhook.StateRetrying, retryIn: 10 * time.Second},
		{name: "a redirect is a failure", attempt: 1, status: 302, outcome: webhook.StateRetrying, retryIn: time.Second},
		{name: "Retry-After on a 503 waits for a later tier", attempt: 1, status: 503, retryAfter: "5", outcome: webhook.StateRetrying, retryIn: 10 * time.Second},
		{name: "Retry-After on a 429 too", attempt: 1, status: 429, retryAfter: "2", outcome: webhook.StateRetrying, retryIn: 2 * time.Second},
		{name: "Retry-After as an HTTP date", attempt: 1, status: 503, retryAfter: "date+90s", outcome: webhook.StateRetrying, retryIn: 10 * time.Second},
		{name: "Retry-After past the last tier takes the last", attempt: 1, status: 429, retryAfter: "3600", outcome: webhook.StateRetrying, retryIn: 10 * time.Second},
		{name: "Retry-After on a 500 is ignored", attempt: 1, status: 500, retryAfter: "5", outcome: webhook.StateRetrying, retryIn: time.Second},
		{name: "410 is dead at once", attempt: 1, status: 410, outcome: webhook.StateDead, deadReason: "no_retry_status"},
		{name: "a no_retry_statuses status is dead at once", attempt: 2, status: 422, outcome: webhook.StateDead, deadReason: "no_retry_status"},
		{name: "the last attempt's failure is dead", attempt: 5, status: 500, outcome: webhook.StateDead, deadReason: "max_attempts"},
		{name: "the last attempt's 2xx is delivered", attempt: 5, status: 200, outcome: webhook.StateDelivered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, time.Minute, func(w http.ResponseWriter, _ *http.Request) {
				if v := tc.retryAfter; v != "" {
					if n, ok := strings.CutPrefix(v, "date+"); ok {
						d, _ := time.ParseDuration(n)
						v = time.Now().Add(d).UTC().Format(http.TimeFormat)
					}
					w.Header().Set("Retry-After", v)
				}
				w.WriteHeader(tc.status)
			})
			first := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			msg := message()
			msg.Attempt = tc.attempt
			if tc.attempt > 1 {
				msg.FirstAttemptAt = first
			}
			require.NoError(t, b.handler.Handle(context.Background(), "billing", msg, make(chan struct{})))

			p := recv(t, b.posts, "the POST")
			require.Equal(t, strconv.Itoa(tc.attempt), p.header.Get("X-Hookrelay-Attempt"))
			require.Equal(t, msg.EventID.String(), p.header.Get("webhook-id"))
			_, released, _, recorded := b.store.snapshot()
			require.Len(t, recorded, 1)
			require.Zero(t, released, "recording releases the lock")
			a := recorded[0]
			require.Equal(t, tc.outcome, a.Outcome)
			require.Equal(t, tc.status, a.Status)
			require.Equal(t, tc.attempt, a.Number)
			require.Equal(t, tc.retryIn, a.RetryIn)

			retries, deads := b.published()
			switch tc.outcome {
			case webhook.StateDelivered:
				require.Empty(t, retries)
				require.Empty(t, deads)
				require.Equal(t, map[string]float64{"delivered": 1}, b.outcomes(t))
			case webhook.StateRetrying:
				require.Empty(t, deads)
				require.Len(t, retries, 1)
				r := retries[0]
				require.Equal(t, "billing", r.route)
				require.Equal(t, tc.retryIn, r.delay)
				require.Equal(t, tc.attempt+1, r.next.Attempt, "the copy makes the next attempt")
				require.Equal(t, int64(1), r.next.Gen, "a retry is a new generation")
				require.Equal(t, msg.EventID, r.next.EventID)
				if tc.attempt > 1 {
					require.Equal(t, first, r.next.FirstAttemptAt, "the series keeps its start")
				} else {
					require.False(t, r.next.FirstAttemptAt.IsZero(), "the series starts now")
				}
				require.Equal(t, map[string]float64{"retry_scheduled": 1}, b.outcomes(t))
			case webhook.StateDead:
				require.Empty(t, retries)
				require.Len(t, deads, 1)
				why := deads[0].why
				require.Equal(t, "billing", why.Route)
				require.Equal(t, tc.deadReason, why.Reason)
				require.Equal(t, tc.attempt, why.Attempts)
				require.Equal(t, tc.status, why.LastStatus)
				require.Equal(t, fmt.Sprintf("HTTP %d", tc.status), why.LastError)
				require.Equal(t, a.StartedAt, why.LastAttemptAt)
				if tc.attempt > 1 {
					require.Equal(t, first, why.FirstAttemptAt)
				} else {
					require.Equal(t, a.StartedAt, why.FirstAttemptAt, "a series of one began at its attempt")
				}
				require.Equal(t, msg.EventID, deads[0].msg.EventID)
				require.Equal(t, map[string]float64{"dead": 1}, b.outcomes(t))
			}
		})
	}
}

// A destination that cannot be reached is a failed attempt, retried; the
// error names the failure, not the URL.
func TestHandleRetriesARefusedConnection(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(200))
	b.handler = newHandlerFor(t, b, "http://127.0.0.1:1/hooks?token=secret")
	require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
	_, _, _, recorded := b.store.snapshot()
	require.Len(t, recorded, 1)
	require.Equal(t, webhook.StateRetrying, recorded[0].Outcome)
	require.Zero(t, recorded[0].Status)
	require.Contains(t, recorded[0].Error, "refused")
	require.NotContains(t, recorded[0].Error, "secret")
	retries, _ := b.published()
	require.Len(t, retries, 1)
}

// A message without a valid event id can be neither delivered nor
// recorded: it is parked as it came, without a lock or a POST.
func TestHandleParksAMalformedMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(200))
	msg := webhook.RouteMessage{
		Attempt: 1, Body: []byte("?"), ContentType: "text/plain", Malformed: errors.New("message has no valid event id: invalid UUID length: 3"),
		Wire: webhook.Wire{MessageID: "abc", Headers: map[string]any{"x-hookrelay-source": "acme"}},
	}
	require.NoError(t, b.handler.Handle(context.Background(), "billing", msg, make(chan struct{})))
	locks, _, _, recorded := b.store.snapshot()
	require.Zero(t, locks, "nothing to lock")
	require.Empty(t, recorded)
	require.Empty(t, b.posts)
	retries, deads := b.published()
	require.Empty(t, retries)
	require.Len(t, deads, 1)
	require.Equal(t, msg.Wire, deads[0].msg.Wire, "parked as it came")
	require.Equal(t, "malformed", deads[0].why.Reason)
	require.Equal(t, 1, deads[0].why.Attempts)
	require.Equal(t, msg.Malformed.Error(), deads[0].why.LastError)
}

// A message whose event is not in the database (never stored, or a dead
// letter moved back whose event was purged since) cannot be recorded,
// ever: parked as event_missing at once, without a POST or a retry.
func TestHandleParksAMessageOfAPurgedEvent(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		err       error
		movedBack bool
	}{
		"never stored":       {fmt.Errorf("%w: event gone", webhook.ErrEventMissing), false},
		"moved back, purged": {fmt.Errorf("%w: %w: event gone", webhook.ErrEventPurged, webhook.ErrEventMissing), true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, time.Minute, status(200))
			b.store.lockErrs = []error{c.err}
			msg := message()
			msg.Attempt, msg.MovedBack = 3, c.movedBack
			require.NoError(t, b.handler.Handle(context.Background(), "billing", msg, make(chan struct{})))
			require.Empty(t, b.posts)
			locks, _, _, _ := b.store.snapshot()
			require.Equal(t, 1, locks, "not retried")
			_, deads := b.published()
			require.Len(t, deads, 1)
			require.Equal(t, "event_missing", deads[0].why.Reason)
			require.Equal(t, 3, deads[0].why.Attempts)
			require.Equal(t, "event purged from the database", deads[0].why.LastError)
		})
	}
}

// Issue 38, reliability 6(d): any other copy of a purged event is stale
// (purge keeps an event with a pair still to deliver): dropped without a
// POST and without a dead letter, counted superseded.
func TestHandleDropsAStaleCopyOfAPurgedEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(200))
	b.store.lockErrs = []error{fmt.Errorf("%w: %w: event gone", webhook.ErrEventPurged, webhook.ErrEventMissing)}
	msg := message()
	msg.Attempt = 3
	require.NoError(t, b.handler.Handle(context.Background(), "billing", msg, make(chan struct{})), "acked")
	require.Empty(t, b.posts)
	retries, deads := b.published()
	require.Empty(t, retries)
	require.Empty(t, deads, "no dead letter for a pair that was final")
	require.Equal(t, 1.0, b.outcomes(t)["superseded"])
}

// With the pair locked, the copy in hand is delivered only if it is the
// current one: a pair already delivered, a stale copy and a copy whose
// dead letter is already recorded are handled without a POST.
func TestHandleDeliversOnlyTheCurrentCopy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		state     webhook.DeliveryState
		pairGen   int64
		msgGen    int64
		movedBack bool
		post      bool
		restarts  int
		outcome   string
		dead      string // the dead letter published again, by reason
	}{
		{name: "already delivered: acked, no POST", state: webhook.StateDelivered, outcome: "skipped_duplicate"},
		{name: "a delivered pair's moved-back dead letter: no POST", state: webhook.StateDelivered, movedBack: true, outcome: "skipped_duplicate"},
		{name: "a stale generation is superseded", state: webhook.StateRetrying, pairGen: 2, msgGen: 1, outcome: "superseded"},
		{name: "a tier's copy after a retry-now delivered the pair is superseded", state: webhook.StateDelivered, pairGen: 2, msgGen: 1, outcome: "superseded"},
		{name: "the first copy after a replay is superseded", state: webhook.StatePending, pairGen: 1, msgGen: 0, outcome: "superseded"},
		{name: "a generation Postgres never held is dropped", state: webhook.StatePending, pairGen: 1, msgGen: 2, outcome: "superseded"},
		{name: "a moved-back dead letter of an older series is superseded", state: webhook.StateDead, pairGen: 3, msgGen: 2, movedBack: true, outcome: "superseded"},
		{name: "a moved-back dead letter restarts the series", state: webhook.StateDead, pairGen: 3, msgGen: 3, movedBack: true, post: true, restarts: 1, outcome: "delivered"},
		{name: "a copy recorded dead publishes its dead letter again", state: webhook.StateDead, pairGen: 2, msgGen: 2, dead: "max_attempts"},
		{name: "the current copy is delivered", state: webhook.StateRetrying, pairGen: 4, msgGen: 4, post: true, outcome: "delivered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, time.Minute, status(200))
			b.store.state, b.store.gen = tc.state, tc.pairGen
			msg := message()
			msg.Gen, msg.MovedBack = tc.msgGen, tc.movedBack
			require.NoError(t, b.handler.Handle(context.Background(), "billing", msg, make(chan struct{})))

			_, released, restarts, recorded := b.store.snapshot()
			require.Equal(t, tc.restarts, restarts)
			if !tc.post {
				require.Empty(t, b.posts, "no POST")
				require.Empty(t, recorded)
				require.Equal(t, 1, released, "the lock is given back")
			} else {
				recv(t, b.posts, "the POST")
				require.Len(t, recorded, 1)
				require.Equal(t, tc.pairGen+int64(tc.restarts), recorded[0].Gen, "recorded under the pair's generation")
			}
			retries, deads := b.published()
			require.Empty(t, retries)
			if tc.dead != "" {
				require.Len(t, deads, 1)
				require.Equal(t, tc.dead, deads[0].why.Reason)
			} else {
				require.Empty(t, deads)
			}
			want := map[string]float64{}
			if tc.outcome != "" {
				want[tc.outcome] = 1
			}
			require.Equal(t, want, b.outcomes(t))
		})
	}
}

// A moved-back dead letter whose restart fails gives its lease back: the
// message's next try claims at once, instead of waiting the lease out as
// if a dispatcher had died (and counting an attempt nobody made).
func TestHandleRestartFailureReleasesTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(200))
	b.store.state, b.store.gen = webhook.StateDead, 3
	b.store.restartErr = errors.New("connection reset")
	msg := message()
	msg.Gen, msg.MovedBack = 3, true
	err := b.handler.Handle(context.Background(), "billing", msg, make(chan struct{}))
	require.ErrorContains(t, err, "restarting a moved-back dead letter")
	_, released, restarts, recorded := b.store.snapshot()
	require.Equal(t, 1, released, "the lease is given back")
	require.Zero(t, restarts)
	require.Empty(t, recorded)
	require.Empty(t, b.posts, "no POST")
}

// While Postgres fails, the message is held (unacked, no POST) and the
// claim retried; the delivery goes on once it answers.
func TestHandleHoldsWhileTheStoreIsDown(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(200))
	b.store.lockErrs = []error{errors.New("connection refused"), errors.New("connection refused")}
	require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
	locks, _, _, recorded := b.store.snapshot()
	require.Equal(t, 3, locks)
	require.Len(t, recorded, 1)
	require.Equal(t, webhook.StateDelivered, recorded[0].Outcome)
	require.Len(t, b.posts, 1, "one POST, after the store answered")
}

// Shutdown ends the hold: Handle fails (the message is requeued) without a
// POST.
func TestHandleGivesUpAHeldMessageAtShutdown(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(200))
	b.store.lockFails = errors.New("connection refused")
	stopping := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- b.handler.Handle(context.Background(), "billing", message(), stopping) }()
	recv(t, b.store.locked, "the first lock")
	recv(t, b.store.locked, "a retried lock") // held, not failed
	close(stopping)
	err := recv(t, done, "Handle to return")
	require.ErrorContains(t, err, "claiming delivery: connection refused (shutting down)")
	require.Empty(t, b.posts)
	requireNothingPublished(t, b)
}

// A record that fails on a Postgres error is retried (the lease is still
// held: the record is fenced by it, not by a connection), and the outcome
// goes on.
func TestHandleRetriesAFailedRecord(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(500))
	b.store.recordErrs = []error{errors.New("conn closed")}
	require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
	_, _, _, recorded := b.store.snapshot()
	require.Len(t, recorded, 1)
	retries, _ := b.published()
	require.Len(t, retries, 1)
	require.Equal(t, int64(1), retries[0].next.Gen)
}

// A replay that moved the pair on during the attempt owns what comes
// next: a failed attempt is recorded, and neither a retry nor a dead
// letter is published for it.
func TestHandleRecordsAPairMovedOnAsSuperseded(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(500))
	b.store.movedOn = true
	require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
	_, _, _, recorded := b.store.snapshot()
	require.Len(t, recorded, 1, "the attempt is recorded")
	requireNothingPublished(t, b)
	require.Equal(t, map[string]float64{"superseded": 1}, b.outcomes(t))
}

// Issue 11: a lease lost before the record (it expired and another copy
// took the pair over) leaves the pair to that copy: the attempt is kept as
// lost, nothing is published, and the message is not acked, so it comes
// back and reads what Postgres says then.
func TestHandleLostLeaseIsNotAcked(t *testing.T) {
	t.Parallel()
	for _, code := range []int{200, 500} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, time.Minute, status(code))
			b.store.leaseLost = true
			err := b.handler.Handle(context.Background(), "billing", message(), make(chan struct{}))
			require.ErrorIs(t, err, webhook.ErrLeaseLost)
			_, _, _, recorded := b.store.snapshot()
			require.Empty(t, recorded, "nothing of the pair changes")
			require.Len(t, b.store.lost, 1)
			require.Equal(t, code, b.store.lost[0].Status)
			requireNothingPublished(t, b)
			require.Empty(t, b.outcomes(t), "neither delivered nor failed")
			require.Equal(t, map[string]float64{"lost": 1}, b.leases(t))
		})
	}
}

// Issue 11: a message that meets a live lease on its pair waits for it,
// polling, without a POST; then it reads the pair: delivered meanwhile,
// it is acked without a POST; else it is delivered.
func TestHandleWaitsForALiveLease(t *testing.T) {
	t.Parallel()
	t.Run("delivered meanwhile", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Minute, status(200))
		b.store.busy = []time.Duration{30 * time.Millisecond, 10 * time.Millisecond}
		b.store.busyThen = webhook.StateDelivered
		require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
		locks, _, _, recorded := b.store.snapshot()
		require.Equal(t, 3, locks, "two claims met the lease, the third read the pair")
		require.Empty(t, recorded, "no attempt consumed")
		require.Empty(t, b.posts)
		require.Equal(t, map[string]float64{"skipped_duplicate": 1}, b.outcomes(t))
		require.Equal(t, map[string]float64{"waited": 1}, b.leases(t))
	})
	t.Run("expired", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Minute, status(200))
		b.store.busy = []time.Duration{20 * time.Millisecond}
		require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
		_, _, _, recorded := b.store.snapshot()
		require.Len(t, recorded, 1)
		require.Equal(t, webhook.StateDelivered, recorded[0].Outcome)
		require.Len(t, b.posts, 1)
	})
	t.Run("shutdown ends the wait", func(t *testing.T) {
		t.Parallel()
		b := setup(t, time.Minute, status(200))
		b.store.busy = []time.Duration{time.Hour, time.Hour, time.Hour, time.Hour, time.Hour, time.Hour, time.Hour, time.Hour}
		stopping := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- b.handler.Handle(context.Background(), "billing", message(), stopping) }()
		recv(t, b.store.locked, "the first claim")
		close(stopping)
		err := recv(t, done, "Handle to return")
		require.ErrorContains(t, err, "waiting for the pair's lease")
		require.Empty(t, b.posts)
	})
}

// The lease a delivery takes lasts the route's timeout plus the margin.
func TestHandleLeaseOutlastsTheTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(200))
	require.NoError(t, b.handler.Handle(context.Background(), "billing", message(), make(chan struct{})))
	require.Equal(t, []time.Duration{30*time.Second + 10*time.Second}, b.store.ttls, "route timeout 30s + default margin 10s")
}

// A route the handler does not know is an error (the message is not acked).
func TestHandleUnknownRoute(t *testing.T) {
	t.Parallel()
	b := setup(t, time.Minute, status(200))
	require.ErrorContains(t, b.handler.Handle(context.Background(), "nope", message(), make(chan struct{})), `no route "nope"`)
}

// newHandlerFor is b's handler with billing's URL replaced.
func newHandlerFor(t *testing.T, b *bundle, url string) *deliver.Handler {
	t.Helper()
	b.reg = prometheus.NewRegistry()
	h, err := deliver.New(deliver.Config{
		Routes:    []deliver.Route{{Name: "billing", URL: url, Timeout: 5 * time.Second, MaxAttempts: 5, SigningKeys: [][]byte{[]byte("key")}}},
		Tiers:     tiers,
		Store:     b.store,
		Publisher: b.pub,
		Metrics:   deliver.NewMetrics(b.reg, []string{"billing"}),
	})
	require.NoError(t, err)
	return h
}
