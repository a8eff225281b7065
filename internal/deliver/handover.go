package deliver

import (
	"sync"

	"github.com/google/uuid"
)

// handedGens remembers, for the pairs this handler's records handed over
// (HandOver), the generation each was claimed at. Their copies on their
// way (the one that parked a pair, or its event's first copy) are of an
// older generation, and a pair's generation only grows: such a copy is
// stale, and is dropped without asking Postgres. A pair it does not know
// (handed over elsewhere, or forgotten) is asked about as before, so the
// map only saves round trips. Bounded: two generations of up to
// handedKeep pairs each, the older dropped when the newer fills.
type handedGens struct {
	mu        sync.Mutex
	cur, prev map[handedKey]int64
}

type handedKey struct {
	route string
	event uuid.UUID
}

// handedKeep bounds each generation of handedGens.
const handedKeep = 50000

// add remembers that route's pair of event was handed over at gen.
func (c *handedGens) add(route string, event uuid.UUID, gen int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || len(c.cur) >= handedKeep {
		c.prev, c.cur = c.cur, make(map[handedKey]int64)
	}
	c.cur[handedKey{route, event}] = gen
}

// stale reports whether a copy of route's pair of event at gen is older
// than a generation the pair was handed over at.
func (c *handedGens) stale(route string, event uuid.UUID, gen int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := handedKey{route, event}
	if g, ok := c.cur[k]; ok {
		return gen < g
	}
	if g, ok := c.prev[k]; ok {
		return gen < g
	}
	return false
}
