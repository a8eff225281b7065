// Package group is group commit for calls that each make one small write:
// concurrent calls are gathered into batches, and each batch is made by one
// call of a function that writes it in one statement. Callers wait for
// their own result.
//
// There is no goroutine while nothing is queued. A call that finds fewer
// than Committers batches in progress starts a committer, which takes
// everything queued (up to Size) each time it is free and ends when the
// queue is empty. So a lone call is made at once, alone, with no wait; under
// load, calls queue while a batch is in the database and the next batch
// takes them all: batches grow with the load by themselves.
package group

import (
	"context"
	"errors"
	"sync"
)

// Func makes one batch: it returns one result per item, in the items'
// order, or an error that is every item's.
type Func[I, O any] func(ctx context.Context, items []I) ([]O, error)

// Batcher gathers concurrent Do calls into batches for its Func.
type Batcher[I, O any] struct {
	run        Func[I, O]
	size       int
	committers int
	// ctx is what each batch runs under (not a caller's: a caller that
	// gives up must not abort the other items of its batch half-way).
	ctx context.Context
	// observe, when set, is told each batch's size.
	observe func(n int)

	mu     sync.Mutex
	queue  []*call[I, O]
	active int
}

type call[I, O any] struct {
	ctx  context.Context
	item I
	done chan result[O] // buffered: a committer never waits for a caller
}

type result[O any] struct {
	out O
	err error
}

// Options configures New.
type Options struct {
	// Size is the largest batch; 1 makes every call alone (no grouping).
	Size int
	// Committers is how many batches may be in the database at once:
	// one is sent while another waits for its commit. Default 2.
	Committers int
	// Observe, when set, is told the size of each batch.
	Observe func(n int)
}

// New returns a Batcher that makes its batches with run under ctx (whose
// cancellation fails the batches not yet made).
func New[I, O any](ctx context.Context, opts Options, run Func[I, O]) *Batcher[I, O] {
	if opts.Size < 1 {
		opts.Size = 1
	}
	if opts.Committers < 1 {
		opts.Committers = 2
	}
	return &Batcher[I, O]{run: run, size: opts.Size, committers: opts.Committers, ctx: ctx, observe: opts.Observe}
}

// Do queues item and waits for its result. When ctx ends first, Do returns
// ctx's error at once: an item still queued is then left out of its batch,
// one already in a batch in progress may be made all the same (as with a
// single statement cancelled after the database received it, its outcome
// is unknown to the caller).
func (b *Batcher[I, O]) Do(ctx context.Context, item I) (O, error) {
	c := &call[I, O]{ctx: ctx, item: item, done: make(chan result[O], 1)}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.active < b.committers
	if start {
		b.active++
	}
	b.mu.Unlock()
	if start {
		go b.commitLoop()
	}
	select {
	case r := <-c.done:
		return r.out, r.err
	case <-ctx.Done():
		var zero O
		return zero, ctx.Err()
	}
}

// commitLoop makes batches until the queue is empty.
func (b *Batcher[I, O]) commitLoop() {
	for {
		batch := b.take()
		if len(batch) == 0 {
			return // take counted this committer out
		}
		b.commit(batch)
	}
}

// take moves up to Size queued calls into a batch, leaving out those whose
// caller gave up. When it finds none it counts the committer out, under the
// lock a Do checks, so no call is left without a committer.
func (b *Batcher[I, O]) take() []*call[I, O] {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*call[I, O]
	i := 0
	for ; i < len(b.queue) && len(batch) < b.size; i++ {
		c := b.queue[i]
		if err := c.ctx.Err(); err != nil {
			c.done <- result[O]{err: err}
			continue
		}
		batch = append(batch, c)
	}
	rest := copy(b.queue, b.queue[i:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	if len(batch) == 0 {
		b.active--
	}
	return batch
}

// commit makes one batch and answers each of its calls.
func (b *Batcher[I, O]) commit(batch []*call[I, O]) {
	if b.observe != nil {
		b.observe(len(batch))
	}
	items := make([]I, len(batch))
	for i, c := range batch {
		items[i] = c.item
	}
	out, err := b.run(b.ctx, items)
	if err == nil && len(out) != len(batch) {
		err = errors.New("group: a batch answered a different number of results than it was given items")
	}
	for i, c := range batch {
		if err != nil {
			c.done <- result[O]{err: err}
			continue
		}
		c.done <- result[O]{out: out[i]}
	}
}
