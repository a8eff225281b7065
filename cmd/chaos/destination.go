package main

import (
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// pair is one (event, route): what the relay must deliver exactly once.
type pair struct {
	event string // the sender's event id (the body's "id")
	route string
}

// flakyRoute is the route whose destination refuses each pair's first
// attempt.
const flakyRoute = "paid"

// orderedRoute is the route with ordering fifo: the destination checks
// that each resource's events arrive in sequence, and refuses the first
// attempt of every fifth one, so that a retry holds its resource now and
// then while faults happen.
const orderedRoute = "ordered"

// destination counts what it receives: every POST per pair, and when the
// first one arrived. It can go down (its port refuses connections) and
// come back on the same port.
type destination struct {
	addr string

	mu        sync.Mutex
	srv       *http.Server
	posts     map[pair]int       // 2xx answers per pair
	refused   map[pair]int       // 503s of the flaky route per pair
	first     map[pair]time.Time // first 2xx
	requests  int
	malformed int
	// delay holds every request this long before it is answered.
	delay time.Duration
	// attempts are the attempt numbers (X-Hookrelay-Attempt) each pair's
	// POSTs carried, whatever they were answered.
	attempts map[pair]map[int]bool
	// duplicates counts each pair's duplicate POSTs, and dups are when
	// they arrived (see isDuplicate).
	duplicates map[pair]int
	dups       []time.Time
	// done is the last sequence number of each resource delivered (2xx)
	// on the ordered route; inversions are when a POST of it arrived out
	// of sequence: neither the resource's next event nor the last one
	// again.
	done       map[string]int
	inversions []inversion
}

// inversion is a POST of the ordered route that came out of sequence.
type inversion struct {
	at       time.Time
	resource string
	seq      int
	after    int // the resource's last delivered sequence number then
}

// inversionsBetween returns the inversions seen in [from, to).
func (d *destination) inversionsBetween(from, to time.Time) []inversion {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []inversion
	for _, inv := range d.inversions {
		if !inv.at.Before(from) && inv.at.Before(to) {
			out = append(out, inv)
		}
	}
	return out
}

// A duplicate POST is one the pair's delivery did not need, whatever the
// destination answered it: a POST after the one the destination accepted
// (2xx), or a second POST of an attempt number the pair received already
// (a copy redelivered after a fault; the flaky route's refused first
// attempt included, even when the copy is the one accepted). The relay's
// bound (invariant 5) is about the first kind; the second is what a
// fault costs while the pair is still failing, and would hide among the
// refusals if only 2xx answers were counted.
func (d *destination) isDuplicate(p pair, attempt int) bool {
	return d.posts[p] > 0 || d.attempts[p][attempt]
}

// duplicatesBetween counts the duplicate POSTs received in [from, to).
func (d *destination) duplicatesBetween(from, to time.Time) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, t := range d.dups {
		if !t.Before(from) && t.Before(to) {
			n++
		}
	}
	return n
}

// hold makes every request wait d before its answer (0: answer at once).
func (d *destination) hold(delay time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.delay = delay
}

func newDestination() (*destination, error) {
	d := &destination{posts: map[pair]int{}, first: map[pair]time.Time{}, refused: map[pair]int{},
		attempts: map[pair]map[int]bool{}, duplicates: map[pair]int{}, done: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d.addr = ln.Addr().String()
	d.serve(ln)
	return d, nil
}

func (d *destination) url(route string) string { return "http://" + d.addr + "/" + route }

func (d *destination) serve(ln net.Listener) {
	srv := &http.Server{Handler: http.HandlerFunc(d.handle), ReadHeaderTimeout: 5 * time.Second}
	d.mu.Lock()
	d.srv = srv
	d.mu.Unlock()
	go func() { _ = srv.Serve(ln) }() // ends when down() closes it
}

func (d *destination) handle(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var ev struct {
		ID       string `json:"id"`
		Resource string `json:"resource"`
		Seq      int    `json:"seq"`
	}
	if err == nil {
		err = json.Unmarshal(body, &ev)
	}
	route := strings.TrimPrefix(r.URL.Path, "/")
	d.mu.Lock()
	delay := d.delay
	if route == orderedRoute && err == nil {
		// Checked as the request arrives, before any hold: a POST sent
		// before a crash and answered late is still in its place.
		if last := d.done[ev.Resource]; ev.Seq != last+1 && ev.Seq != last {
			d.inversions = append(d.inversions, inversion{at: time.Now(), resource: ev.Resource, seq: ev.Seq, after: last})
		}
	}
	d.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay) // the destination's own slowness, which the fault is about
	}
	attempt, aerr := strconv.Atoi(r.Header.Get("X-Hookrelay-Attempt"))
	d.mu.Lock()
	d.requests++
	if err != nil || ev.ID == "" || aerr != nil {
		d.malformed++
		d.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	p := pair{event: ev.ID, route: route}
	if d.isDuplicate(p, attempt) {
		d.duplicates[p]++
		d.dups = append(d.dups, time.Now())
	}
	if d.attempts[p] == nil {
		d.attempts[p] = map[int]bool{}
	}
	d.attempts[p][attempt] = true
	if route == orderedRoute {
		if ev.Seq%5 == 0 && d.refused[p] == 0 {
			d.refused[p]++
			d.mu.Unlock()
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		d.done[ev.Resource] = max(d.done[ev.Resource], ev.Seq)
	}
	if route == flakyRoute && d.refused[p] == 0 {
		// The flaky route refuses each pair's first attempt: its messages
		// keep passing through the retry tiers while nodes die.
		d.refused[p]++
		d.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	d.posts[p]++
	if _, ok := d.first[p]; !ok {
		d.first[p] = time.Now()
	}
	d.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// down closes the listener and every connection: deliveries are refused.
func (d *destination) down() {
	d.mu.Lock()
	srv := d.srv
	d.srv = nil
	d.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// up listens again on the same port.
func (d *destination) up() error {
	var ln net.Listener
	var err error
	for range 50 {
		if ln, err = net.Listen("tcp", d.addr); err == nil {
			d.serve(ln)
			return nil
		}
		time.Sleep(100 * time.Millisecond) // the port is in TIME_WAIT for a moment at most
	}
	return err
}

// delivered returns whether p arrived, and how many 2xx POSTs it took.
func (d *destination) delivered(p pair) (bool, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.posts[p]
	return n > 0, n
}

// undelivered returns the pairs of ps that have received no POST yet.
func (d *destination) undelivered(ps []pair) []pair {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := ps[:0:0]
	for _, p := range ps {
		if d.posts[p] == 0 {
			out = append(out, p)
		}
	}
	return out
}

// snapshot copies the per-pair counts: 2xx answers, duplicate POSTs (see
// isDuplicate), and the requests and malformed ones in all.
func (d *destination) snapshot() (posts, duplicates map[pair]int, requests, malformed int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.posts), maps.Clone(d.duplicates), d.requests, d.malformed
}
