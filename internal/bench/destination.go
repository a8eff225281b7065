package bench

import (
	"bufio"
	"context"
	"crypto/hmac"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/signature"
	amqp "github.com/rabbitmq/amqp091-go"
)

// The destination's own endpoints sit under statsPath; deliveries go to
// hookPath + route name.
const (
	hookPath  = "/hook/"
	statsPath = "/_bench/"
)

// destination is the webhook target of every delivery phase: it answers
// 200 at once (or after --delay), and counts each (route, webhook-id) pair
// it got, when the first copy arrived, and whether its Standard Webhooks
// signature verified.
type destination struct {
	keys  [][]byte
	delay time.Duration

	mu     sync.Mutex
	pairs  map[pairKey]*received
	posts  int64 // every POST, duplicates included
	badSig int64 // POSTs whose signature did not verify
	noID   int64 // POSTs without a webhook-id
	lastNS int64 // arrival of the latest POST
}

type pairKey struct{ route, id string }

type received struct {
	count int
	bad   int   // copies whose signature did not verify
	first int64 // arrival of the first copy, Unix nanoseconds
}

// runDestination serves until ctx is done. It prints "ready <addr>" on
// stdout once it listens.
func runDestination(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("destination", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	secret := fs.String("secret", "", "whsec_ secret the deliveries are signed with")
	delay := fs.Duration("delay", 0, "wait this long before answering each POST")
	amqpURL := fs.String("amqp-url", "", "with --queue: the broker whose queue to consume")
	queue := fs.String("queue", "", "a queue to consume too: each message is a delivery to --queue-route (an amqp route's)")
	queueRoute := fs.String("queue-route", "", "the route the messages of --queue count for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key, err := signature.DecodeStandardSecret(*secret)
	if err != nil {
		return fmt.Errorf("--secret: %w", err)
	}
	d := newDestination([][]byte{key}, *delay)
	if *queue != "" {
		conn, err := dialAMQP(*amqpURL, "hookrelay-bench-destination")
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := d.consume(conn, *queue, *queueRoute); err != nil {
			return err
		}
	}
	return serve(ctx, *listen, d.mux(), *delay, stdout)
}

// newDestination returns the destination: deliveries at hookPath<route>,
// its counts under statsPath (its mux).
func newDestination(keys [][]byte, delay time.Duration) *destination {
	return &destination{keys: keys, delay: delay, pairs: map[pairKey]*received{}}
}

// consume records each message of queue as a delivery to route, as a
// POST would be: its webhook-* headers verified over its body. It acks
// what it recorded, and runs until the connection closes.
func (d *destination) consume(conn *amqp.Connection, queue, route string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	if err := ch.Qos(512, 0, false); err != nil {
		return fmt.Errorf("setting prefetch: %w", err)
	}
	msgs, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consuming %s: %w", queue, err)
	}
	header := func(m amqp.Delivery, name string) string {
		v, _ := m.Headers[name].(string)
		return v
	}
	go func() {
		// Acks go in batches (multiple), as a consumer keeping up with a
		// stream would: each ack of a quorum queue is a command of its
		// log.
		n := 0
		for m := range msgs {
			d.record(route, header(m, "webhook-id"), header(m, "webhook-timestamp"), header(m, "webhook-signature"), m.Body)
			if n++; n%64 != 0 && len(msgs) > 0 {
				continue
			}
			if err := m.Ack(true); err != nil {
				return // the channel is gone; the run sees deliveries stop
			}
		}
	}()
	return nil
}

// mux serves the destination.
func (d *destination) mux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+hookPath+"{route}", d.hook)
	mux.HandleFunc("GET "+statsPath+"stats", d.stats)
	mux.HandleFunc("GET "+statsPath+"dump", d.dump)
	mux.HandleFunc("POST "+statsPath+"reset", d.reset)
	return mux
}

// serve runs an HTTP server on listen until ctx is done, printing "ready
// <addr>" once it listens. Extra is added to the write timeout (a
// destination's delay).
func serve(ctx context.Context, listen string, h http.Handler, extra time.Duration, stdout io.Writer) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30*time.Second + extra,
		IdleTimeout:       2 * time.Minute,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if _, err := fmt.Fprintf(stdout, "ready %s\n", ln.Addr()); err != nil {
		_ = srv.Close()
		return fmt.Errorf("announcing the address: %w", err)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}

func (d *destination) hook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 16<<20))
	if err != nil {
		http.Error(w, "reading body", http.StatusBadRequest)
		return
	}
	if !d.record(r.PathValue("route"), r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body) {
		http.Error(w, "no webhook-id", http.StatusBadRequest)
		return
	}
	if d.delay > 0 {
		t := time.NewTimer(d.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// record counts one delivery to route; false when it had no webhook-id.
func (d *destination) record(route, id, ts, sig string, body []byte) bool {
	now := time.Now().UnixNano()
	ok := d.verify(id, ts, sig, body)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.posts++
	d.lastNS = now
	if !ok {
		d.badSig++
	}
	if id == "" {
		d.noID++
		return false
	}
	k := pairKey{route: route, id: id}
	rec := d.pairs[k]
	if rec == nil {
		rec = &received{first: now}
		d.pairs[k] = rec
	}
	rec.count++
	if !ok {
		rec.bad++
	}
	return true
}

// verify checks a Standard Webhooks signature: one of the space-separated
// signatures must be the HMAC of "id.timestamp.body" with our key.
func (d *destination) verify(id, ts, sigs string, body []byte) bool {
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || err != nil {
		return false
	}
	want := []byte(signature.SignStandard(d.keys, id, time.Unix(sec, 0), body))
	for _, s := range strings.Fields(sigs) {
		if hmac.Equal([]byte(s), want) {
			return true
		}
	}
	return false
}

// destStats are the destination's running totals.
type destStats struct {
	Pairs  int   `json:"pairs"`
	Posts  int64 `json:"posts"`
	BadSig int64 `json:"bad_signatures"`
	NoID   int64 `json:"no_id"`
	LastNS int64 `json:"last_ns"`
}

func (d *destination) stats(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	st := destStats{Pairs: len(d.pairs), Posts: d.posts, BadSig: d.badSig, NoID: d.noID, LastNS: d.lastNS}
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st) // a failed write is the client's problem
}

// dump writes one line per pair: route, id, copies, copies with a bad
// signature, first arrival (Unix ns), tab-separated, then "end" so the
// reader knows it got everything.
// dump lists the pairs received; ?since=N (Unix nanoseconds) only those
// whose first copy came at N or later.
func (d *destination) dump(w http.ResponseWriter, req *http.Request) {
	var since int64
	if v := req.URL.Query().Get("since"); v != "" {
		var err error
		if since, err = strconv.ParseInt(v, 10, 64); err != nil {
			http.Error(w, "since: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	d.mu.Lock()
	var b strings.Builder
	b.Grow(len(d.pairs) * 80)
	for k, rec := range d.pairs {
		if rec.first < since {
			continue
		}
		fmt.Fprintf(&b, "%s\t%s\t%d\t%d\t%d\n", k.route, k.id, rec.count, rec.bad, rec.first)
	}
	d.mu.Unlock()
	b.WriteString("end\n")
	w.Header().Set("Content-Type", "text/tab-separated-values")
	_, _ = io.WriteString(w, b.String())
}

func (d *destination) reset(w http.ResponseWriter, _ *http.Request) {
	d.mu.Lock()
	d.pairs = map[pairKey]*received{}
	d.posts, d.badSig, d.noID, d.lastNS = 0, 0, 0, 0
	d.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// destClient reads and resets a destination child.
type destClient struct {
	base   string // http://addr
	client *http.Client
}

func newDestClient(addr string) *destClient {
	return &destClient{base: "http://" + addr, client: &http.Client{Timeout: 30 * time.Second}}
}

// url is where a route delivers.
func (c *destClient) url(route string) string { return c.base + hookPath + route }

func (c *destClient) do(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+statsPath+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking the destination (%s %s): %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		resp.Body.Close()
		return nil, fmt.Errorf("asking the destination (%s %s): HTTP %d", method, path, resp.StatusCode)
	}
	return resp, nil
}

func (c *destClient) stats(ctx context.Context) (destStats, error) {
	resp, err := c.do(ctx, http.MethodGet, "stats")
	if err != nil {
		return destStats{}, err
	}
	defer resp.Body.Close()
	var st destStats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return destStats{}, fmt.Errorf("reading destination stats: %w", err)
	}
	return st, nil
}

func (c *destClient) reset(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodPost, "reset")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// destRecord is one pair as the destination saw it.
type destRecord struct {
	count, bad int
	first      time.Time
}

func (c *destClient) dump(ctx context.Context) (map[pairKey]destRecord, error) {
	return c.dumpSince(ctx, time.Time{})
}

// dumpSince is dump of the pairs whose first copy came at since or later.
func (c *destClient) dumpSince(ctx context.Context, since time.Time) (map[pairKey]destRecord, error) {
	path := "dump"
	if !since.IsZero() {
		path += "?since=" + strconv.FormatInt(since.UnixNano(), 10)
	}
	resp, err := c.do(ctx, http.MethodGet, path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseDump(resp.Body)
}

func parseDump(r io.Reader) (map[pairKey]destRecord, error) {
	out := map[pairKey]destRecord{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "end" {
			return out, nil
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			return nil, fmt.Errorf("destination dump: malformed line %q", line)
		}
		var n [3]int64
		for i := range n {
			v, err := strconv.ParseInt(f[2+i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("destination dump: line %q: %w", line, err)
			}
			n[i] = v
		}
		out[pairKey{route: f[0], id: f[1]}] = destRecord{count: int(n[0]), bad: int(n[1]), first: time.Unix(0, n[2])}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading destination dump: %w", err)
	}
	return nil, errors.New("destination dump ended early (no end line)")
}
