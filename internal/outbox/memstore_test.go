package outbox

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/storecontract"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// memStore is an outbox in memory that behaves as the Postgres one does
// (storecontract.Outbox holds both to the same cases): rows claimed oldest
// first, a claimed row skipped by other claims until its batch ends, a
// refused row counted and due again after its RetryIn, a row a batch holds
// left alone by a direct publish's delete.
type memStore struct {
	mu     sync.Mutex
	nextID int64
	rows   []*memRow // by id
	now    func() time.Time
}

type memRow struct {
	msg  webhook.Message
	due  time.Time
	held bool
}

func newMemStore() *memStore { return &memStore{now: time.Now} }

// add stores msgs, each a row due at once, and returns their ids.
func (s *memStore) add(msgs ...webhook.Message) []int64 { return s.addHeld(0, msgs...) }

// addHeld stores msgs, each a row due after hold, and returns their ids.
func (s *memStore) addHeld(hold time.Duration, msgs ...webhook.Message) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		s.nextID++
		m.OutboxID, m.OutboxAttempts = s.nextID, 0
		s.rows = append(s.rows, &memRow{msg: m, due: s.now().Add(hold)})
		ids[i] = s.nextID
	}
	return ids
}

// left returns the ids of the rows still in the outbox.
func (s *memStore) left() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []int64
	for _, r := range s.rows {
		ids = append(ids, r.msg.OutboxID)
	}
	return ids
}

func (s *memStore) OutboxClaim(ctx context.Context, limit int) (Batch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &memBatch{s: s, open: true}
	now := s.now()
	for _, r := range s.rows {
		if len(b.msgs) == limit {
			break
		}
		if r.held || r.due.After(now) {
			continue
		}
		r.held = true
		b.msgs = append(b.msgs, r.msg)
	}
	return b, nil
}

func (s *memStore) OutboxDeletePublished(ctx context.Context, ids []int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = slices.DeleteFunc(s.rows, func(r *memRow) bool {
		return !r.held && slices.Contains(ids, r.msg.OutboxID)
	})
	return nil
}

func (s *memStore) OutboxDueNow(ctx context.Context, ids []int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for _, r := range s.rows {
		if slices.Contains(ids, r.msg.OutboxID) && r.msg.OutboxAttempts == 0 && r.due.After(now) {
			r.due = now
		}
	}
	return nil
}

// memBatch is a claim of memStore's: its rows stay held until Complete or
// Release, which end it (a second end does nothing, as an empty one).
type memBatch struct {
	s    *memStore
	msgs []webhook.Message
	open bool
}

func (b *memBatch) Messages() []webhook.Message { return b.msgs }

func (b *memBatch) Complete(ctx context.Context, confirmed []int64, failed []webhook.OutboxFailure) error {
	if err := ctx.Err(); err != nil {
		// Nothing written; the rows stay held until Release, as a
		// transaction whose commit failed leaves them to its rollback.
		return err
	}
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if !b.open {
		return nil
	}
	b.open = false
	now := b.s.now()
	mine := func(r *memRow) bool {
		return slices.ContainsFunc(b.msgs, func(m webhook.Message) bool { return m.OutboxID == r.msg.OutboxID })
	}
	b.s.rows = slices.DeleteFunc(b.s.rows, func(r *memRow) bool { return mine(r) && slices.Contains(confirmed, r.msg.OutboxID) })
	for _, r := range b.s.rows {
		if !mine(r) {
			continue
		}
		r.held = false
		for _, f := range failed {
			if f.OutboxID == r.msg.OutboxID {
				r.msg.OutboxAttempts++
				r.due = now.Add(f.RetryIn)
			}
		}
	}
	return nil
}

func (b *memBatch) Release(context.Context) error {
	b.s.mu.Lock()
	defer b.s.mu.Unlock()
	if !b.open {
		return nil
	}
	b.open = false
	for _, r := range b.s.rows {
		if slices.ContainsFunc(b.msgs, func(m webhook.Message) bool { return m.OutboxID == r.msg.OutboxID }) {
			r.held = false
		}
	}
	return nil
}

// The fake keeps the contract the Postgres outbox keeps.
func TestMemStoreKeepsTheOutboxContract(t *testing.T) {
	storecontract.Outbox(t, func(*testing.T) (storecontract.OutboxStore[Batch], func(int, time.Duration) []int64) {
		s := newMemStore()
		return s, func(n int, hold time.Duration) []int64 {
			msgs := make([]webhook.Message, n)
			for i := range msgs {
				msgs[i] = webhook.Message{EventID: uuid.New(), RoutingKey: "acme.invoice.paid", Attempt: 1, Body: []byte(`{}`)}
			}
			return s.addHeld(hold, msgs...)
		}
	})
}

// answerPublisher answers each message by answer, and records what it was
// given, batch by batch.
type answerPublisher struct {
	mu     sync.Mutex
	answer func(webhook.Message) Result
	got    [][]webhook.Message
}

func (p *answerPublisher) Publish(_ context.Context, msgs []webhook.Message) ([]Result, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.got = append(p.got, msgs)
	out := make([]Result, len(msgs))
	for i, m := range msgs {
		out[i] = p.answer(m)
	}
	return out, nil
}

// Over an outbox that behaves as Postgres's: a confirmed row is published
// once and gone, a refused one stays, is not due again before its backoff,
// and is published again after it with its refusal counted.
func TestRunOnceOverTheOutboxPublishesEachRowUntilConfirmed(t *testing.T) {
	t.Parallel()
	s := newMemStore()
	clock := time.Now()
	s.now = func() time.Time { return clock }
	ids := s.add(
		webhook.Message{EventID: uuid.New(), RoutingKey: "acme.a", Attempt: 1},
		webhook.Message{EventID: uuid.New(), RoutingKey: "acme.b", Attempt: 1},
		webhook.Message{EventID: uuid.New(), RoutingKey: "acme.c", Attempt: 1},
	)
	pub := &answerPublisher{answer: func(m webhook.Message) Result {
		if m.OutboxID == ids[1] && m.OutboxAttempts == 0 {
			return Result{Failure: "nack"}
		}
		return Result{Acked: true}
	}}
	r, err := New(Config{Store: s, Publisher: pub, BatchSize: 10, PollInterval: time.Second, PublishTimeout: time.Second, Logger: zerolog.Nop()})
	require.NoError(t, err)

	n, err := r.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, ids[1:2], s.left(), "the confirmed rows are deleted, the refused one kept")

	n, err = r.RunOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "the refused row waits out its backoff")

	clock = clock.Add(rowRetryMax)
	n, err = r.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Empty(t, s.left())
	require.Len(t, pub.got, 2)
	require.Equal(t, ids[1], pub.got[1][0].OutboxID)
	require.Equal(t, 1, pub.got[1][0].OutboxAttempts, "its refusal counted")
}
