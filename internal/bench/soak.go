package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// The soak (--soak D): the end-to-end open loop at --rate for D, with a
// line per --soak-every of what would show a leak or a slow drift: the
// memory of every process, the receiver's and the dispatcher's
// goroutines and open files, Postgres backends on the relay's database,
// RabbitMQ connections, outbox rows, live leases, and the deliveries' p99.
// The summary says whether each stayed flat.

// SoakSample is one interval of a soak.
type SoakSample struct {
	// At is the end of the interval, from the start of the load.
	AtS float64 `json:"at_s"`
	// Sent is how many events the receiver accepted in the interval;
	// Delivered how many pairs reached the destination for the first
	// time in it, and P99MS their p99 from the 200 to the destination.
	Sent      int64   `json:"sent"`
	Delivered int     `json:"delivered"`
	P99MS     float64 `json:"p99_ms"`
	// MemMB per process group (RSS; PSS for Postgres and RabbitMQ).
	MemMB map[string]float64 `json:"mem_mb"`
	// Goroutines and OpenFDs of the receiver and the dispatcher (from
	// their /metrics).
	Goroutines map[string]float64 `json:"goroutines"`
	OpenFDs    map[string]float64 `json:"open_fds"`
	// PGBackends are the server's connections to the relay's database;
	// AMQPConns the broker's connections.
	PGBackends int `json:"pg_backends"`
	AMQPConns  int `json:"amqp_conns"`
	// OutboxRows and Leases (deliveries whose lease has not run out) at
	// the end of the interval.
	OutboxRows int `json:"outbox_rows"`
	Leases     int `json:"leases"`
}

// SoakSeries is the verdict on one series of a soak.
type SoakSeries struct {
	Name string  `json:"name"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	// Median of the samples after the first, against which flatness is
	// judged.
	Median float64 `json:"median"`
	Flat   bool    `json:"flat"`
	// Rule says what flat means for this series.
	Rule string `json:"rule"`
}

// Soak is the soak's result.
type Soak struct {
	DurationS float64      `json:"duration_s"`
	EveryS    float64      `json:"every_s"`
	Samples   []SoakSample `json:"samples"`
	Series    []SoakSeries `json:"series"`
	// FirstP99MS and LastP99MS are the p99 of the deliveries of the first
	// and the last five intervals (the first and last half when there are
	// fewer than ten); P99Flat says whether the last is within 20% of the
	// first.
	FirstP99MS float64 `json:"first_p99_ms"`
	LastP99MS  float64 `json:"last_p99_ms"`
	P99Flat    bool    `json:"p99_flat"`
	// Vacuums says the server runs without autovacuum, so the soak ran
	// VACUUM (ANALYZE) of the relay's tables after each sample instead: a
	// relay on a server that never vacuums falls behind within minutes at
	// 200 events/s (dead rows of the outbox and of deliveries, no
	// statistics), which says nothing about the relay on a server that
	// does.
	Vacuums bool `json:"vacuums"`
}

// soakPhase runs the soak. It fails the run (after the table) when an
// event is lost or duplicated, like every hookrelay phase; a series that
// did not stay flat is reported, not a failure: a soak's verdict is read.
func (r *runner) soakPhase(ctx context.Context) error {
	p := &Phase{Key: "soak", Title: fmt.Sprintf("soak, %d/s × %s", r.o.rate, r.o.soak), System: "hookrelay"}
	if err := r.dispatcherUp(ctx); err != nil {
		return err
	}
	if err := r.resetDest(ctx); err != nil {
		return err
	}
	conn, err := connect(ctx, r.relayURL)
	if err != nil {
		return fmt.Errorf("soak: connecting to the relay's database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	r.logf("%s: open loop, a line every %s", p.Title, r.o.soakEvery)
	m, err := r.begin(ctx)
	if err != nil {
		return err
	}
	soak := &Soak{DurationS: r.o.soak.Seconds(), EveryS: r.o.soakEvery.Seconds(), Vacuums: r.res.Postgres.Settings["autovacuum"] == "off"}
	if soak.Vacuums {
		r.logf("%s: the server runs without autovacuum: the soak VACUUM ANALYZEs the relay's tables after each sample in its place", p.Title)
	}
	// lats holds each interval's latencies, for the p99 of the first and
	// last intervals together.
	var lats [][]time.Duration
	l, err := r.runLoad(ctx, p.Title, r.deliveredSoFar(ctx), func(ctx context.Context, l *loadRun) error {
		sctx, stop := context.WithCancel(ctx)
		watched := make(chan error, 1)
		go func() { watched <- r.watchSoak(sctx, conn, l, soak, &lats) }()
		err := openLoop(ctx, r.relaySender, r.o.rate, r.o.soak, l)
		stop()
		return errors.Join(err, <-watched)
	})
	if err != nil {
		return err
	}
	if err := r.settleOpenLoop(ctx, p, l, m, r.o.soak, nil); err != nil {
		return err
	}
	judgeSoak(soak, lats)
	r.res.Soak = soak
	return nil
}

// watchSoak samples every --soak-every until ctx is done, and returns the
// first error that stopped it (nil when ctx ended it).
func (r *runner) watchSoak(ctx context.Context, conn *pgx.Conn, l *loadRun, soak *Soak, lats *[][]time.Duration) error {
	accepted := map[string]time.Time{}
	indexed := 0
	start := time.Now()
	from := start
	var lastSent int64
	t := time.NewTicker(r.o.soakEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			dump, err := r.dest.dumpSince(ctx, from)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("soak: reading the destination: %w", err)
			}
			// After the dump: a pair can reach the destination before its
			// 200 is read (the receiver publishes before it answers).
			l.mu.Lock()
			for _, s := range l.sent[indexed:] {
				accepted[s.id] = s.accepted
			}
			indexed = len(l.sent)
			l.mu.Unlock()
			var lat []time.Duration
			for k, rec := range dump {
				if k.route != benchRoute || !rec.first.Before(now) {
					continue
				}
				if at, ok := accepted[k.id]; ok {
					lat = append(lat, rec.first.Sub(at))
				}
			}
			sent := l.accepted.Load()
			s := SoakSample{AtS: now.Sub(start).Seconds(), Sent: sent - lastSent, Delivered: len(lat)}
			if sum := summarize(lat); sum != nil {
				s.P99MS = sum.P99
			}
			if err := r.soakState(ctx, conn, &s); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			soak.Samples = append(soak.Samples, s)
			*lats = append(*lats, lat)
			fmt.Fprintln(r.stderr, soakLine(s))
			if soak.Vacuums {
				// What autovacuum would have done by now on a server
				// that runs it.
				if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) events, event_keys, outbox, deliveries, delivery_attempts`); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("soak: vacuum in place of autovacuum: %w", err)
				}
			}
			from, lastSent = now, sent
		}
	}
}

// soakState reads the processes' and the servers' state into s.
func (r *runner) soakState(ctx context.Context, conn *pgx.Conn, s *SoakSample) error {
	s.MemMB = map[string]float64{}
	for _, name := range []string{procReceiver, procDispatcher, procPostgres, procRabbitMQ} {
		s.MemMB[name] = float64(r.sampler.memKB(name)) / 1024
	}
	s.Goroutines, s.OpenFDs = map[string]float64{}, map[string]float64{}
	for name, base := range map[string]string{procReceiver: "http://" + r.metricsAddr, procDispatcher: "http://" + r.dispatcherAddr} {
		m, err := scrapeMetrics(ctx, base+"/metrics", "go_goroutines", "process_open_fds")
		if err != nil {
			return fmt.Errorf("soak: %s metrics: %w", name, err)
		}
		s.Goroutines[name], s.OpenFDs[name] = m["go_goroutines"], m["process_open_fds"]
	}
	err := conn.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()) - 1,
		       (SELECT count(*) FROM outbox),
		       (SELECT count(*) FROM deliveries WHERE lease_until > now())`).Scan(&s.PGBackends, &s.OutboxRows, &s.Leases)
	if err != nil {
		return fmt.Errorf("soak: reading the relay's database: %w", err)
	}
	var conns []struct {
		Name string `json:"name"`
	}
	if err := r.mg.do(ctx, http.MethodGet, "connections?columns=name", &conns); err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	s.AMQPConns = len(conns)
	return nil
}

// scrapeMetrics reads the named unlabelled series of a Prometheus text
// exposition.
func scrapeMetrics(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	return parseMetrics(resp.Body, names...)
}

func parseMetrics(body io.Reader, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", name, err)
		}
		out[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, ok := out[n]; !ok {
			return nil, fmt.Errorf("metric %s not served", n)
		}
	}
	return out, nil
}

func soakLine(s SoakSample) string {
	return fmt.Sprintf("  soak %6.0fs  sent %6d  delivered %6d  p99 %6.1f ms  MB recv %5.1f disp %5.1f pg %6.1f rmq %6.1f"+
		"  goroutines %3.0f/%3.0f  fds %3.0f/%3.0f  pg conns %2d  amqp conns %2d  outbox %4d  leases %3d",
		s.AtS, s.Sent, s.Delivered, s.P99MS, s.MemMB[procReceiver], s.MemMB[procDispatcher], s.MemMB[procPostgres], s.MemMB[procRabbitMQ],
		s.Goroutines[procReceiver], s.Goroutines[procDispatcher], s.OpenFDs[procReceiver], s.OpenFDs[procDispatcher],
		s.PGBackends, s.AMQPConns, s.OutboxRows, s.Leases)
}

// Flatness. A series is flat when, after the first interval (start-up:
// pools filling, caches warming), every sample is within 10% of the
// series' median, or within an absolute slack for series that are small
// counts by nature: at 200 events/s the outbox holds the last 100 ms of
// events (their rows are deleted together) and a few leases are live, so
// 20 outbox rows either way is noise, not growth.
type flatRule struct {
	name  string
	value func(SoakSample) float64
	slack float64 // absolute, in the series' unit
}

func soakRules() []flatRule {
	rules := []flatRule{}
	for _, p := range []string{procReceiver, procDispatcher, procPostgres, procRabbitMQ} {
		rules = append(rules, flatRule{name: "memory MB, " + p, value: func(s SoakSample) float64 { return s.MemMB[p] }, slack: 4})
	}
	for _, p := range []string{procReceiver, procDispatcher} {
		rules = append(rules,
			flatRule{name: "goroutines, " + p, value: func(s SoakSample) float64 { return s.Goroutines[p] }, slack: 10},
			flatRule{name: "open files, " + p, value: func(s SoakSample) float64 { return s.OpenFDs[p] }, slack: 4})
	}
	return append(rules,
		flatRule{name: "postgres connections", value: func(s SoakSample) float64 { return float64(s.PGBackends) }, slack: 2},
		flatRule{name: "rabbitmq connections", value: func(s SoakSample) float64 { return float64(s.AMQPConns) }, slack: 1},
		flatRule{name: "outbox rows", value: func(s SoakSample) float64 { return float64(s.OutboxRows) }, slack: 40},
		flatRule{name: "live leases", value: func(s SoakSample) float64 { return float64(s.Leases) }, slack: 20},
	)
}

// judgeSoak fills the soak's verdicts from its samples and each sample's
// latencies.
func judgeSoak(s *Soak, lats [][]time.Duration) {
	samples := s.Samples
	if len(samples) > 1 {
		samples = samples[1:]
	}
	for _, rule := range soakRules() {
		vals := make([]float64, len(samples))
		for i, smp := range samples {
			vals[i] = rule.value(smp)
		}
		ser := SoakSeries{Name: rule.name, Rule: fmt.Sprintf("within 10%% or %g of the median after the first interval", rule.slack), Flat: true}
		if len(vals) > 0 {
			ser.Min, ser.Max, ser.Median = slices.Min(vals), slices.Max(vals), median(vals)
			tol := max(0.1*ser.Median, rule.slack)
			ser.Flat = ser.Max-ser.Median <= tol && ser.Median-ser.Min <= tol
		}
		s.Series = append(s.Series, ser)
	}
	n := min(5, len(lats)/2)
	if n == 0 {
		return
	}
	first := summarize(slices.Concat(lats[:n]...))
	last := summarize(slices.Concat(lats[len(lats)-n:]...))
	if first == nil || last == nil {
		return
	}
	s.FirstP99MS, s.LastP99MS = first.P99, last.P99
	// Lower is not a drift (the first intervals include the start-up).
	s.P99Flat = last.P99 <= 1.2*first.P99
}

// printSoak writes the soak's intervals and verdicts.
func printSoak(w io.Writer, s *Soak) error {
	fmt.Fprintf(w, "\nsoak: a sample every %.0fs (memory: RSS, PSS for postgres and rabbitmq; goroutines, open files: receiver/dispatcher)\n", s.EveryS)
	if s.Vacuums {
		fmt.Fprintln(w, "  the server runs without autovacuum: the soak ran VACUUM (ANALYZE) of events, event_keys, outbox, deliveries and delivery_attempts after each sample in its place")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "at s\tsent\tdelivered\tp99 ms\trecv MB\tdisp MB\tpg MB\trmq MB\tgoroutines\topen files\tpg conns\tamqp conns\toutbox\tleases\t\n")
	for _, x := range s.Samples {
		fmt.Fprintf(tw, "%.0f\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f/%.0f\t%.0f/%.0f\t%d\t%d\t%d\t%d\t\n",
			x.AtS, x.Sent, x.Delivered, x.P99MS, x.MemMB[procReceiver], x.MemMB[procDispatcher], x.MemMB[procPostgres], x.MemMB[procRabbitMQ],
			x.Goroutines[procReceiver], x.Goroutines[procDispatcher], x.OpenFDs[procReceiver], x.OpenFDs[procDispatcher],
			x.PGBackends, x.AMQPConns, x.OutboxRows, x.Leases)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nsoak verdict (after the first sample; flat: within 10%% of the median, or an absolute slack for small counts)\n")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  series\tmin\tmedian\tmax\tflat\n")
	for _, x := range s.Series {
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t%.1f\t%s\n", x.Name, x.Min, x.Median, x.Max, yesNo(x.Flat))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.FirstP99MS > 0 {
		fmt.Fprintf(w, "  p99 of the first intervals %.1f ms, of the last %.1f ms: %s (at most 20%% above)\n", s.FirstP99MS, s.LastP99MS, yesNo(s.P99Flat))
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}
