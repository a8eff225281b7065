package bench

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The benchmark's one source and one event type: the route binds
// "<benchSource>.#".
const (
	benchSource    = "bench"
	benchEventType = "invoice.paid"
	benchSigHeader = "X-Bench-Signature"
	benchSigPrefix = "sha256="
	benchRoute     = "bench"
	// fifoResources is how many resources (data.object.lane) the events
	// are about: what the delivery-fifo phase orders by.
	fifoResources = 50
	bareRoute     = "bare"
	bareE2ERoute  = "bare-e2e"
	// The recording forwarder's phases deliver on routes of their own.
	bareRecRoute    = "bare-rec"
	bareRecE2ERoute = "bare-rec-e2e"
	requestTimeout  = 30 * time.Second
	maxFailedInARow = 200
)

// sender posts webhook events, each with a new id, signed as the source's
// hmac scheme expects.
type sender struct {
	url    string
	secret []byte
	client *http.Client
	runID  string
	pad    string
	seq    atomic.Int64
}

func newSender(url string, secret []byte, runID string, bodySize, conns int) *sender {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	tr.MaxIdleConns = conns
	s := &sender{url: url, secret: secret, client: &http.Client{Transport: tr, Timeout: requestTimeout}, runID: runID}
	s.pad = strings.Repeat("x", max(0, bodySize-len(s.body(1_000_000, ""))))
	return s
}

// body is a Stripe-like invoice event; pad brings it to the body size.
func (s *sender) body(n int64, pad string) []byte {
	return fmt.Appendf(nil, `{"id":"evt_%s_%d","object":"event","type":%q,"created":%d,"livemode":false,`+
		`"data":{"object":{"id":"in_%d","object":"invoice","amount_due":4200,"currency":"brl","customer":"cus_%d","lane":"lane_%d",`+
		`"status":"paid","lines":[{"description":"Plan","amount":4200}],"description":"%s"}}}`,
		s.runID, n, benchEventType, time.Now().Unix(), n, n%1000, n%fifoResources, pad)
}

// sent is one accepted event.
type sent struct {
	id       string    // the event id in the answer: the destination's webhook-id
	start    time.Time // request sent
	accepted time.Time // 2xx answer read
}

// post sends one new event and returns it once answered 2xx.
func (s *sender) post(ctx context.Context) (sent, error) {
	body := s.body(s.seq.Add(1), s.pad)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, bytes.NewReader(body))
	if err != nil {
		return sent{}, err
	}
	m := hmac.New(sha256.New, s.secret)
	m.Write(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(benchSigHeader, benchSigPrefix+hex.EncodeToString(m.Sum(nil)))
	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		return sent{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return sent{}, fmt.Errorf("reading answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return sent{}, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(raw))
	}
	var ans struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if err := json.Unmarshal(raw, &ans); err != nil || ans.ID == "" {
		return sent{}, fmt.Errorf("answer without an id: %s", bytes.TrimSpace(raw))
	}
	if ans.Duplicate {
		return sent{}, fmt.Errorf("a new event was answered as a duplicate of %s", ans.ID)
	}
	return sent{id: ans.ID, start: start, accepted: time.Now()}, nil
}

// loadRun collects what one load run got.
type loadRun struct {
	accepted atomic.Int64
	failed   atomic.Int64

	mu       sync.Mutex
	sent     []sent
	firstErr error
	lastDone time.Time
}

func (l *loadRun) record(s sent, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed.Add(1)
		if l.firstErr == nil {
			l.firstErr = err
		}
		return
	}
	l.accepted.Add(1)
	l.sent = append(l.sent, s)
	if s.accepted.After(l.lastDone) {
		l.lastDone = s.accepted
	}
}

// closedLoop runs clients that each send one event after the other, until
// dur has passed or, with limit > 0, limit events were accepted. A send in
// flight when time is up finishes and counts. A client that fails
// maxFailedInARow times in a row stops, and the run reports the first
// error.
func closedLoop(ctx context.Context, s *sender, clients int, dur time.Duration, limit int64, l *loadRun) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deadline := time.Now().Add(dur)
	var claimed atomic.Int64
	var wg sync.WaitGroup
	var broke atomic.Bool
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inARow := 0
			for ctx.Err() == nil && (dur <= 0 || time.Now().Before(deadline)) {
				if limit > 0 && claimed.Add(1) > limit {
					return
				}
				ev, err := s.post(ctx)
				l.record(ev, err)
				if err == nil {
					inARow = 0
					continue
				}
				if limit > 0 {
					claimed.Add(-1) // try this one again
				}
				if inARow++; inARow >= maxFailedInARow {
					broke.Store(true)
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if broke.Load() {
		l.mu.Lock()
		defer l.mu.Unlock()
		return fmt.Errorf("%d requests in a row failed; the first failure: %w", maxFailedInARow, l.firstErr)
	}
	return ctx.Err()
}

// openLoop starts one send every 1/rate seconds for dur, whatever the
// answers (as real senders do), and waits for every send to finish.
func openLoop(ctx context.Context, s *sender, rate int, dur time.Duration, l *loadRun) error {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTimer(0)
	defer t.Stop()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if at.Sub(start) >= dur {
			return nil
		}
		t.Reset(time.Until(at))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.record(s.post(ctx))
		}()
	}
}
