package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// post sends one delivery of event to route as the relay would (its
// attempt number in X-Hookrelay-Attempt) and returns the answer's status.
func post(t *testing.T, d *destination, route, event string, attempt int) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.url(route), strings.NewReader(fmt.Sprintf(`{"id": %q}`, event)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Hookrelay-Attempt", fmt.Sprint(attempt))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Issue 38, reliability 5: a duplicate is a POST the pair's delivery did
// not need, whatever the destination answered it: the same attempt sent
// twice (the flaky route's refused first attempt too), or any POST after
// the one the destination accepted.
func TestDestinationCountsDuplicatesWhateverTheAnswer(t *testing.T) {
	t.Parallel()
	d, err := newDestination()
	if err != nil {
		t.Fatal(err)
	}
	defer d.down()
	from := time.Now()

	// The flaky route refuses the pair's first POST; the same attempt
	// again (a redelivered copy) is a duplicate even though it is the
	// first the destination accepts.
	if got := post(t, d, flakyRoute, "evt_1", 1); got != http.StatusServiceUnavailable {
		t.Fatalf("flaky route's first POST answered %d", got)
	}
	if got := post(t, d, flakyRoute, "evt_1", 1); got/100 != 2 {
		t.Fatalf("flaky route's second POST answered %d", got)
	}
	// A pair the destination accepted once: the next POST is a duplicate.
	post(t, d, "orders", "evt_2", 1)
	post(t, d, "orders", "evt_2", 2)
	// A pair that needed its retry: no duplicate.
	post(t, d, flakyRoute, "evt_3", 1)
	post(t, d, flakyRoute, "evt_3", 2)

	if got := d.duplicatesBetween(from, time.Now().Add(time.Second)); got != 2 {
		t.Fatalf("duplicate POSTs: got %d, want 2 (evt_1's attempt 1 twice on %s, evt_2 after its 2xx)", got, flakyRoute)
	}
}

// Issue 38, reliability 5: a reading of the retry tiers that the
// management API did not answer is no reading: the tiers are not settled
// because nothing was seen.
func TestTiersSettledNeedsAReading(t *testing.T) {
	t.Parallel()
	mgmt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer mgmt.Close()
	s := &suite{opts: options{mgmtURLs: []string{mgmt.URL}, amqpURLs: []string{"amqp://guest:guest@127.0.0.1:5672/"}}}
	ok, why := s.waitTiersSettled(context.Background(), time.Now().Add(100*time.Millisecond))
	if ok {
		t.Fatal("settled, though the management API never answered")
	}
	if !strings.Contains(why, "did not answer") {
		t.Fatalf("why: %q, want it to say the management API did not answer", why)
	}
}

// Issue 38, reliability 5: queues that still hold messages after the
// drain fail the run, unless the only ones left are in the retry tiers
// after a fault that strands messages there (explained in the line); and
// queues that could not be read fail it too.
func TestUndrainedQueuesFailTheRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		queues    map[string]int
		qerr      error
		stranding bool
		fails     bool
		line      string
	}{
		{name: "drained", queues: map[string]int{"chaos.route.all": 0, "chaos.retry.300ms": 0}, line: "yes (2 queues)"},
		{name: "route queue", queues: map[string]int{"chaos.route.all": 3}, stranding: true, fails: true, line: "no: chaos.route.all=3"},
		{name: "dead letters", queues: map[string]int{"chaos.route.paid.dead": 1}, stranding: true, fails: true, line: "no: chaos.route.paid.dead=1"},
		{name: "tiers, nothing strands", queues: map[string]int{"chaos.retry.300ms": 2}, fails: true, line: "no: chaos.retry.300ms=2"},
		{name: "tiers after a node fault", queues: map[string]int{"chaos.retry.300ms": 2}, stranding: true,
			line: "no, explained: chaos.retry.300ms=2 stranded in the retry tiers by a node fault"},
		{name: "unreadable", qerr: fmt.Errorf("management API: 503"), stranding: true, fails: true, line: "unknown: management API: 503"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			line, failure := drainVerdict(tc.queues, tc.qerr, tc.stranding)
			if !strings.HasPrefix(line, tc.line) {
				t.Errorf("line %q, want it to start with %q", line, tc.line)
			}
			if (failure != "") != tc.fails {
				t.Errorf("failure %q, want failing %v", failure, tc.fails)
			}
		})
	}
}
