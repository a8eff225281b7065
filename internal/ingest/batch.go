package ingest

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
)

// Defaults of the group commit.
const (
	DefaultBatchSize = 64
	// committers is how many batches may be in the database at once: one
	// is gathered and sent while the other waits for its commit's WAL
	// flush. More would mostly split load that one batch takes whole.
	committers = 2
	// maxBatchBytes stops a batch from growing past this many body bytes
	// (a request bigger than it goes alone): one statement carries every
	// body of its batch.
	maxBatchBytes = 8 << 20
	// answerGrace is how long past its deadline a request waits for its
	// batch's answer before it answers 503 on its own: the batch's
	// statement is bounded by the same deadline, so this never fires
	// unless something is badly wrong.
	answerGrace = time.Second
)

// answer is what one request is told.
type answer struct {
	id        uuid.UUID
	duplicate bool
	// refused is the reason Postgres refused the row (400), or "".
	refused string
	// err is a storage failure (503).
	err error
	// batch is how many requests the statement that answered stored.
	batch int
}

// pending is a request waiting for its batch.
type pending struct {
	ins      webhook.Insert
	deadline time.Time
	done     chan answer // buffered: a committer never waits for the handler
}

func (p *pending) answer(a answer) { p.done <- a }

// batcher gathers concurrent requests into batches and stores each batch
// with one call to the store (group commit). There is no goroutine while
// nothing is queued: a request that finds fewer than `committers` batches
// in progress starts a committer, which takes what is queued when it is
// free and ends when the queue is empty. A lone request is thus stored at
// once; under load, requests queue while a batch commits and the next
// batch takes them all.
type batcher struct {
	store   Store
	size    int
	wait    time.Duration
	metrics *Metrics
	logger  zerolog.Logger
	now     func() time.Time

	mu     sync.Mutex
	queue  []*pending
	active int
	// more is signalled on every submit, so a committer gathering a
	// batch (batch_wait) sees new requests without polling.
	more chan struct{}
}

func newBatcher(store Store, size int, wait time.Duration, m *Metrics, logger zerolog.Logger) *batcher {
	return &batcher{store: store, size: size, wait: wait, metrics: m, logger: logger, now: time.Now, more: make(chan struct{}, 1)}
}

// storeOne queues ins and waits for its answer, at most until deadline plus
// answerGrace.
func (b *batcher) storeOne(ins webhook.Insert, deadline time.Time) answer {
	p := &pending{ins: ins, deadline: deadline, done: make(chan answer, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	b.metrics.queued.Set(float64(len(b.queue)))
	start := b.active < committers
	if start {
		b.active++
	}
	b.mu.Unlock()
	select {
	case b.more <- struct{}{}:
	default:
	}
	if start {
		go b.commitLoop()
	}
	t := time.NewTimer(time.Until(deadline) + answerGrace)
	defer t.Stop()
	select {
	case a := <-p.done:
		return a
	case <-t.C:
		return answer{err: errors.New("no answer from the batch within the store timeout")}
	}
}

// commitLoop stores batches until the queue is empty.
func (b *batcher) commitLoop() {
	for {
		batch := b.take(nil)
		if len(batch) == 0 {
			return // take counted this committer out
		}
		if len(batch) > 1 && len(batch) < b.size && b.wait > 0 {
			batch = b.gather(batch)
		}
		b.commit(batch)
	}
}

// take moves queued requests into batch, up to the batch size and
// maxBatchBytes, answering those already past their deadline with a 503.
// When batch stays empty it counts the committer out, under the same lock
// that a submit checks, so no request is left without a committer.
func (b *batcher) take(batch []*pending) []*pending {
	now := b.now()
	bytes := 0
	for _, p := range batch {
		bytes += len(p.ins.Event.Body)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	i := 0
	for ; i < len(b.queue) && len(batch) < b.size; i++ {
		p := b.queue[i]
		if !now.Before(p.deadline) {
			p.answer(answer{err: errors.New("store timeout passed while queued")})
			continue
		}
		if n := len(p.ins.Event.Body); len(batch) > 0 && bytes+n > maxBatchBytes {
			break
		}
		bytes += len(p.ins.Event.Body)
		batch = append(batch, p)
	}
	rest := copy(b.queue, b.queue[i:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	b.metrics.queued.Set(float64(rest))
	if len(batch) == 0 {
		b.active--
	}
	return batch
}

// gather waits up to the batch wait for more requests while batch is not
// full: only when it already holds more than one, because a request that
// came alone waits for nothing.
func (b *batcher) gather(batch []*pending) []*pending {
	t := time.NewTimer(b.wait)
	defer t.Stop()
	for len(batch) < b.size {
		select {
		case <-b.more:
			n := len(batch)
			batch = b.take(batch)
			if len(batch) == n {
				// Nothing new (another committer took it); take counted
				// this committer out only if batch were empty, never here.
				continue
			}
		case <-t.C:
			return batch
		}
	}
	return batch
}

// commit stores batch in one call and answers each request. When Postgres
// refuses a row's data, the batch's requests are stored one by one, so the
// refused one gets its 400 and the others commit; any other failure is a
// 503 for the whole batch, which stored nothing.
func (b *batcher) commit(batch []*pending) {
	deadline := batch[0].deadline
	inserts := make([]webhook.Insert, len(batch))
	for i, p := range batch {
		inserts[i] = p.ins
		if p.deadline.After(deadline) {
			deadline = p.deadline
		}
	}
	// Not the request's context: a sender hanging up must not abort a
	// commit half-way (the outcome would be unknown to both sides). The
	// latest deadline of the batch bounds it: bounded by the earliest, a
	// request that had queued long (Postgres slow) would leave the fresh
	// ones of its batch a sliver of time and fail them all. A request whose
	// own deadline passes first answers 503 on its own (storeOne's timer)
	// even if its event then commits: its retry is a duplicate, answered
	// 200 (a 503 for a stored event is allowed; a 200 for an unstored one
	// never).
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	b.metrics.batchSize.Observe(float64(len(batch)))
	stored, err := b.store.EventInsertBatch(ctx, inserts)
	if err == nil && len(stored) != len(batch) {
		err = errors.New("store answered a different number of events than it was given")
	}
	if err == nil {
		for i, p := range batch {
			s := stored[i]
			p.answer(answer{id: s.ID, duplicate: s.Duplicate, err: s.Err, batch: len(batch)})
		}
		return
	}
	var re *webhook.RefusedError
	if !errors.As(err, &re) {
		for _, p := range batch {
			p.answer(answer{err: err, batch: len(batch)})
		}
		return
	}
	if len(batch) == 1 {
		batch[0].answer(answer{refused: re.Reason, err: err, batch: 1})
		return
	}
	b.metrics.fallbacks.Inc()
	b.logger.Warn().Err(err).Int("batch_size", len(batch)).Msg("storage refused a row of a batch; storing its events one by one")
	for _, p := range batch {
		b.commit([]*pending{p})
	}
}
