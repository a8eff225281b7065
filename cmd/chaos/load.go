package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// eventTypes are what the senders send; the routes' bindings overlap on
// them (see chaosConfig).
var eventTypes = []string{"order.created", "order.paid", "refund.issued", "customer.updated"}

// sentEvent is one event as the senders know it.
type sentEvent struct {
	id       string
	typ      string
	body     []byte
	started  time.Time // first send
	accepted time.Time // first 2xx; zero until then
}

// load is an open-loop sender: it starts a send every 1/rate seconds
// whatever the answers, as real senders do, and retries a send that was
// not answered 2xx (to either receiver, as behind a load balancer) with
// backoff until it is.
type load struct {
	receivers []string // base URLs
	secret    string
	rate      int
	dupShare  float64 // share of sends that resend an earlier event

	client *http.Client
	seq    atomic.Int64
	giveUp atomic.Int64 // unix nanoseconds after which a send stops retrying; 0: never

	mu     sync.Mutex
	events []*sentEvent
	non2xx int // answers other than 2xx, and failed requests
	sends  int // requests made, retries included
	dups   int // resends of an earlier event started

	wg sync.WaitGroup
}

func newLoad(receivers []string, secret string, rate int) *load {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &load{
		receivers: receivers, secret: secret, rate: rate, dupShare: 0.05,
		client: &http.Client{Transport: tr, Timeout: 10 * time.Second},
	}
}

// run sends until ctx is done, then waits for every started send to get
// its 2xx, or to give up retrying retryFor after ctx is done.
func (l *load) run(ctx context.Context, retryFor time.Duration) {
	tick := time.NewTicker(time.Second / time.Duration(l.rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			l.giveUp.Store(time.Now().Add(retryFor).UnixNano())
			l.wg.Wait()
			return
		case <-tick.C:
		}
		ev := l.pick()
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			l.deliver(ev)
		}()
	}
}

// orderedType is the event type of the ordered senders' events: only the
// routes "all" and "ordered" (fifo) bind it.
const orderedType = "ordered.update"

// orderedResources is how many resources the ordered senders send about.
const orderedResources = 50

// runOrdered starts one sender per resource (orderedResources in all, at
// rate events/s together), each sending its resource's events in
// sequence: the next only after the previous was answered 2xx, so the
// order of acceptance is the sequence, which the fifo route must keep. A
// sender stops when ctx is done, or when an event of its resource was
// never accepted. It must be called before run, whose end waits for them.
func (l *load) runOrdered(ctx context.Context, rate int) {
	every := time.Second * orderedResources / time.Duration(max(rate, 1))
	for r := range orderedResources {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for seq := 1; ; seq++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				ev := l.newOrdered(r, seq)
				l.deliver(ev)
				l.mu.Lock()
				accepted := !ev.accepted.IsZero()
				l.mu.Unlock()
				if !accepted {
					return
				}
			}
		}()
	}
}

// newOrdered makes resource r's event number seq.
func (l *load) newOrdered(r, seq int) *sentEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	id := fmt.Sprintf("ord_%02d_%06d", r, seq)
	ev := &sentEvent{id: id, typ: orderedType, started: time.Now(),
		body: fmt.Appendf(nil, `{"id":%q,"type":%q,"resource":"res_%02d","seq":%d,"pad":"%s"}`, id, orderedType, r, seq, padding)}
	l.events = append(l.events, ev)
	return ev
}

// pick returns a new event, or now and then one sent before (a duplicate).
func (l *load) pick() *sentEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.events) > 10 && rand.Float64() < l.dupShare {
		l.dups++
		return l.events[rand.IntN(len(l.events))]
	}
	n := l.seq.Add(1)
	typ := eventTypes[rand.IntN(len(eventTypes))]
	id := fmt.Sprintf("evt_%07d", n)
	ev := &sentEvent{id: id, typ: typ, started: time.Now(), body: fmt.Appendf(nil, `{"id":%q,"type":%q,"amount":%d,"pad":"%s"}`, id, typ, n, padding)}
	l.events = append(l.events, ev)
	return ev
}

// padding makes each body about 1 KB, like a typical provider event.
var padding = string(bytes.Repeat([]byte("x"), 900))

// deliver sends ev until a receiver answers 2xx, alternating receivers and
// backing off from 200ms to 5s between tries.
func (l *load) deliver(ev *sentEvent) {
	wait := 200 * time.Millisecond
	for try := 0; ; try++ {
		url := l.receivers[(rand.IntN(len(l.receivers))+try)%len(l.receivers)] + "/webhooks/chaos"
		ok := l.post(url, ev)
		l.mu.Lock()
		l.sends++
		if ok {
			if ev.accepted.IsZero() {
				ev.accepted = time.Now()
			}
			l.mu.Unlock()
			return
		}
		l.non2xx++
		l.mu.Unlock()
		if g := l.giveUp.Load(); g != 0 && time.Now().UnixNano() > g {
			return
		}
		time.Sleep(wait + rand.N(wait/2)) // a sender's retry pause, not synchronisation
		wait = min(wait*2, 5*time.Second)
	}
}

func (l *load) post(url string, ev *sentEvent) bool {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(ev.body))
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, []byte(l.secret))
	m.Write(ev.body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Chaos-Signature", "sha256="+hex.EncodeToString(m.Sum(nil)))
	resp, err := l.client.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode >= 200 && resp.StatusCode < 300
}

// counts returns requests made and non-2xx answers so far.
func (l *load) counts() (sends, non2xx int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sends, l.non2xx
}

// startedBetween returns the events first sent in [from, to).
func (l *load) startedBetween(from, to time.Time) []*sentEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*sentEvent
	for _, ev := range l.events {
		if !ev.started.Before(from) && ev.started.Before(to) {
			out = append(out, ev)
		}
	}
	return out
}

// firstAcceptedAfter is the first 2xx answered after t (to any event),
// zero when none was.
func (l *load) firstAcceptedAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, ev := range l.events {
		if ev.accepted.After(t) && (first.IsZero() || ev.accepted.Before(first)) {
			first = ev.accepted
		}
	}
	return first
}

// accepted returns the events answered 2xx at or before t (all when t is
// zero), and how many events were started in all.
func (l *load) accepted(t time.Time) (acc []*sentEvent, started int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range l.events {
		if !ev.accepted.IsZero() && (t.IsZero() || !ev.accepted.After(t)) {
			acc = append(acc, ev)
		}
	}
	return acc, len(l.events)
}
