package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/topic"
	"github.com/jackc/pgx/v5/pgxpool"
)

type options struct {
	bin, cluster, work string
	rate, pgPort       int
	settle             time.Duration
	amqpURLs, mgmtURLs []string
	// only, when set, keeps the faults whose names contain one of them.
	only []string
	// free, when rate is 0, is the share of the machine's CPU found free
	// before the suite started anything of its own; the load is sized to
	// it.
	free float64
}

// route is one route of the suite's config.
type route struct {
	name        string
	bindings    []string
	concurrency int
	// fifo: ordering fifo, by the source's resource.
	fifo bool
}

// The routes' bindings overlap: order.paid goes to three routes,
// refund.issued and order.created to two, customer.updated to one.
// Each route has 8 consumers per dispatcher, so a backlog built up during
// a fault drains in seconds; "paid" refuses each pair's first attempt (see
// flakyRoute), so its messages keep passing through the retry tiers.
var routes = []route{
	{name: "orders", bindings: []string{"chaos.order.*"}, concurrency: 8},
	{name: "all", bindings: []string{"chaos.#"}, concurrency: 8},
	{name: "paid", bindings: []string{"chaos.order.paid", "chaos.refund.*"}, concurrency: 8},
	// The ordered senders' events (50 resources, each in sequence): the
	// destination checks every arrival's place (orderedRoute).
	{name: orderedRoute, bindings: []string{"chaos." + orderedType}, concurrency: 8, fifo: true},
}

const (
	prefix     = "chaos"
	secret     = "chaos-secret"
	signing    = "whsec_Y2hhb3Mtc2lnbmluZy1zZWNyZXQtMTIzNDU2Nzg5MA=="
	dispatches = 2 // dispatcher processes
)

// routesOf returns the routes an event type is delivered to.
func routesOf(typ string) []string {
	routesOfMu.Lock()
	defer routesOfMu.Unlock()
	if rs, ok := routesOfType[typ]; ok {
		return rs
	}
	rs := matchRoutes(typ)
	routesOfType[typ] = rs
	return rs
}

var (
	routesOfMu   sync.Mutex
	routesOfType = map[string][]string{}
)

func matchRoutes(typ string) []string {
	var out []string
	for _, r := range routes {
		for _, b := range r.bindings {
			if topic.Match(b, prefix+"."+typ) {
				out = append(out, r.name)
				break
			}
		}
	}
	return out
}

type suite struct {
	opts  options
	out   io.Writer
	start time.Time
	pg    *postgres // the primary
	// replica streams from pg synchronously until the failover fault
	// promotes it.
	replica   *postgres
	hole      *blackhole
	dest      *destination
	receivers []*proc
	dispatch  []*proc
	load      *load
	rate      int // events/s of the load
	loadStop  context.CancelFunc
	loadDone  chan struct{}
	db        *pgxpool.Pool // straight to Postgres, for the counts (reconnects after a restart)
}

func setup(ctx context.Context, opts options, out io.Writer) (*suite, error) {
	if opts.settle == 0 {
		opts.settle = 8 * time.Second
	}
	if opts.work == "" {
		dir, err := os.MkdirTemp("", "hookrelay-chaos-")
		if err != nil {
			return nil, err
		}
		opts.work = dir
	}
	s := &suite{opts: opts, out: out, start: time.Now()}
	s.logf("work folder %s", opts.work)
	var err error
	if s.pg, err = newPostgres(opts.work, opts.pgPort); err != nil {
		return nil, err
	}
	if err := s.pg.start(); err != nil {
		return nil, err
	}
	if err := s.pg.createDatabase("hookrelay"); err != nil {
		s.teardown()
		return nil, err
	}
	// A synchronous streaming replica: every commit (a 200 to a sender
	// among them) is on both before it returns, so promoting it loses
	// none of them.
	if s.replica, err = s.pg.newReplica(opts.work, "replica", opts.pgPort+1); err != nil {
		s.teardown()
		return nil, err
	}
	if err := s.pg.syncStandby(ctx); err != nil {
		s.teardown()
		return nil, err
	}
	if s.hole, err = newBlackhole(s.pg.addr()); err != nil {
		s.teardown()
		return nil, err
	}
	if s.dest, err = newDestination(); err != nil {
		s.teardown()
		return nil, err
	}
	cfgPath := filepath.Join(opts.work, "config.yaml")
	// The relay reaches the primary through the forwarder, then the
	// replica, and keeps the first that accepts writes: after the
	// failover that is the promoted replica, with no restart.
	dbURL := failoverURL("hookrelay", s.hole.addr(), s.replica.addr())
	if err := os.WriteFile(cfgPath, []byte(s.config(dbURL)), 0o600); err != nil {
		s.teardown()
		return nil, err
	}
	migrate := exec.CommandContext(ctx, filepath.Join(opts.bin, "hookrelay"), "--config", cfgPath, "migrate")
	if b, err := migrate.CombinedOutput(); err != nil {
		s.teardown()
		return nil, fmt.Errorf("hookrelay migrate: %w\n%s", err, b)
	}
	if s.db, err = pgxpool.New(ctx, failoverURL("hookrelay", s.pg.addr(), s.replica.addr())); err != nil {
		s.teardown()
		return nil, err
	}
	for i := range 2 {
		r := &proc{name: fmt.Sprintf("receiver%d", i+1), binary: filepath.Join(opts.bin, "receiver"), listen: freeAddr(), logDir: opts.work}
		r.env = []string{"HOOKRELAY_CONFIG=" + cfgPath, "HOOKRELAY_RECEIVER_LISTEN=" + r.listen, "HOOKRELAY_RECEIVER_METRICS_LISTEN=" + freeAddr()}
		s.receivers = append(s.receivers, r)
	}
	for i := range dispatches {
		d := &proc{name: fmt.Sprintf("dispatcher%d", i+1), binary: filepath.Join(opts.bin, "dispatcher"), listen: freeAddr(), logDir: opts.work}
		d.env = []string{"HOOKRELAY_CONFIG=" + cfgPath, "HOOKRELAY_DISPATCHER_LISTEN=" + d.listen}
		s.dispatch = append(s.dispatch, d)
	}
	for _, p := range append(append([]*proc{}, s.receivers...), s.dispatch...) {
		if err := p.start(); err != nil {
			s.teardown()
			return nil, err
		}
	}
	for _, p := range append(append([]*proc{}, s.receivers...), s.dispatch...) {
		if err := p.waitHealthy(ctx, 60*time.Second); err != nil {
			s.teardown()
			return nil, err
		}
	}
	s.logf("postgres primary on :%d (relay through a forwarder at %s), synchronous replica on :%d, destination %s, %d receivers, %d dispatchers, cluster %s",
		opts.pgPort, s.hole.addr(), s.replica.port, s.dest.addr, len(s.receivers), len(s.dispatch), strings.Join(nodesOf(opts.amqpURLs), " "))
	return s, nil
}

// config is the relay's config for the suite: short retry tiers and a
// reconciler margin short enough to repair within the run, and enough
// attempts that a 30 s destination outage dead-letters nothing.
func (s *suite) config(dbURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "database: {url: %q, max_conns: 20}\n", dbURL)
	fmt.Fprintf(&b, "amqp:\n  prefix: %s\n  urls: [%s]\n  management_urls: [%s]\n", prefix, quoteList(s.opts.amqpURLs), quoteList(s.opts.mgmtURLs))
	b.WriteString("receiver: {listen: \"127.0.0.1:8080\", max_body_bytes: 65536}\n") // each process listens where HOOKRELAY_RECEIVER_LISTEN and _METRICS_LISTEN say
	// A dispatcher killed mid-delivery leaves its leases behind, and the
	// redelivered copies wait them out (the dead holder's POST may have
	// landed): route timeout 5s + lease_margin. 5s of margin is plenty for
	// a claim and a record here.
	b.WriteString("dispatcher: {listen: \"127.0.0.1:8081\", shutdown_timeout: 20s, lease_margin: 5s}\n")
	b.WriteString("outbox: {batch_size: 200, poll_interval: 250ms, publish_timeout: 5s}\n")
	b.WriteString("retry: {backoff: [300ms, 600ms, 1200ms, 2400ms, 5s]}\n")
	// strand_after 60s: on a slow day (2026-12-01) the 300ms tier counted
	// a few messages waiting to be dead-lettered at every reading for 30 s
	// while the broker was merely busy after the destination outage, and
	// clearing it turned late copies into lost ones.
	b.WriteString("reconcile: {interval: 2s, margin: 15s, strand_after: 60s}\n")
	b.WriteString("log: {level: info, format: json}\n")
	b.WriteString("sources:\n  - name: chaos\n")
	fmt.Fprintf(&b, "    verify: {scheme: hmac, secrets: [%q], header: X-Chaos-Signature, prefix: \"sha256=\"}\n", secret)
	b.WriteString("    idempotency: {json_path: id}\n    event_type: {json_path: type}\n    ordering: {resource: {json_path: resource}}\n")
	b.WriteString("routes:\n")
	// The circuit breaker is off: the suite proves that faults lose
	// nothing, with the flaky route's refusals passing through the retry
	// tiers while nodes die; an open circuit would park them in the route
	// queue instead (internal/app tests the breaker).
	for _, r := range routes {
		fmt.Fprintf(&b, "  - name: %s\n    url: %q\n    bindings: [%s]\n    concurrency: %d\n    timeout: 5s\n    max_attempts: 60\n    circuit: {failures: 0}\n    signing_secret: %q\n",
			r.name, s.dest.url(r.name), quoteList(r.bindings), r.concurrency, signing)
		if r.fifo {
			b.WriteString("    ordering: fifo\n")
		}
	}
	return b.String()
}

func (s *suite) teardown() {
	if s.loadStop != nil {
		s.loadStop()
	}
	for _, p := range append(append([]*proc{}, s.receivers...), s.dispatch...) {
		if p.cmd != nil && p.exited() == nil {
			_ = p.kill()
		}
	}
	if s.db != nil {
		s.db.Close()
	}
	if s.hole != nil {
		_ = s.hole.close()
	}
	if s.dest != nil {
		s.dest.down()
	}
	for _, pg := range []*postgres{s.pg, s.replica} {
		if pg == nil {
			continue
		}
		if err := pg.stop(); err != nil {
			s.logf("stopping postgres: %v", err)
		}
	}
}

func (s *suite) logf(format string, args ...any) {
	fmt.Fprintf(s.out, "chaos: +%5.1fs %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

// cluster runs the cluster script.
func (s *suite) cluster(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, s.opts.cluster, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w\n%s", s.opts.cluster, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// queueMessages reads every queue of the suite's prefix through the
// management API of the first node that answers.
func (s *suite) queueMessages(ctx context.Context) (map[string]int, error) {
	m, err := hamqp.NewManagement(s.opts.mgmtURLs, s.opts.amqpURLs[0])
	if err != nil {
		return nil, err
	}
	body, err := m.Do(ctx, http.MethodGet, "queues/{vhost}?columns=name,messages", nil)
	if err != nil {
		return nil, err
	}
	var qs []struct {
		Name     string `json:"name"`
		Messages int    `json:"messages"`
	}
	if err := json.Unmarshal(body, &qs); err != nil {
		return nil, fmt.Errorf("reading queues: %w", err)
	}
	out := map[string]int{}
	for _, q := range qs {
		if strings.HasPrefix(q.Name, prefix+".") {
			out[q.Name] = q.Messages
		}
	}
	return out, nil
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

func nodesOf(urls []string) []string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = hamqp.Node(u)
	}
	sort.Strings(out)
	return out
}
