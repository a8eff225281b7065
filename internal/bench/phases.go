package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// watchLoad prints a progress line every progress interval while a load
// runs, and cancels it (with the cause) when a child exits. The returned
// func stops the watcher and waits for it.
func (r *runner) watchLoad(ctx context.Context, cancel context.CancelCauseFunc, label string, l *loadRun, extra func() string) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		next := start.Add(r.o.progress)
		var lastN int64
		lastAt := start
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if err := r.alive(); err != nil {
					cancel(err)
					return
				}
				if now.Before(next) {
					continue
				}
				next = next.Add(r.o.progress)
				n := l.accepted.Load()
				line := fmt.Sprintf("  %-34s %6.1fs  accepted %7d  %6.0f/s (last %6.0f/s)",
					label, now.Sub(start).Seconds(), n, float64(n)/now.Sub(start).Seconds(),
					float64(n-lastN)/now.Sub(lastAt).Seconds())
				if f := l.failed.Load(); f > 0 {
					line += fmt.Sprintf("  failed %d", f)
				}
				if extra != nil {
					line += extra()
				}
				fmt.Fprintln(r.stderr, line)
				lastN, lastAt = n, now
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// runLoad runs load under a watcher and returns its result.
func (r *runner) runLoad(ctx context.Context, label string, extra func() string, load func(context.Context, *loadRun) error) (*loadRun, error) {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l := &loadRun{}
	stop := r.watchLoad(lctx, cancel, label, l, extra)
	err := load(lctx, l)
	stop()
	if cause := context.Cause(lctx); cause != nil && lctx.Err() != nil {
		return nil, cause
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// fillPhase fills the common fields of an ingest-like phase from its load.
func fillFromLoad(p *Phase, l *loadRun, start time.Time) {
	p.Count = l.accepted.Load()
	p.Failed = l.failed.Load()
	if l.firstErr != nil {
		p.FirstError = l.firstErr.Error()
	}
	if p.Count > 0 {
		p.Seconds = l.lastDone.Sub(start).Seconds()
		p.Rate = float64(p.Count) / p.Seconds
	}
	lat := make([]time.Duration, len(l.sent))
	for i, s := range l.sent {
		lat[i] = s.accepted.Sub(s.start)
	}
	p.Latency = summarize(lat)
}

func ids(sent []sent) []string {
	out := make([]string, len(sent))
	for i, s := range sent {
		out[i] = s.id
	}
	return out
}

func (r *runner) finish(p *Phase, u Usage) {
	p.Usage = u
	p.Round = r.round
	if p.Count > 0 {
		p.CPUPerEventMS = u.MachineCPU * 1000 / float64(p.Count)
		p.WALPerEvent = float64(u.WALBytes) / float64(p.Count)
		var own float64
		for _, name := range ownProcs[p.Key] {
			if pu, ok := u.Proc(name); ok {
				own += pu.CPU
			}
		}
		p.OwnCPUPerEventMS = own * 1000 / float64(p.Count)
	}
	if u.Checkpoints > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("Postgres started %d checkpoint(s) during the phase", u.Checkpoints))
	}
	r.res.Phases = append(r.res.Phases, p)
	r.logf("  %-34s done: %d events, %.0f/s, %.2f ms CPU per event", p.label(r.o.rounds), p.Count, p.Rate, p.CPUPerEventMS)
}

// ownProcs are, per phase, the processes of the system under test: its
// own, and the servers it uses. Their CPU per event leaves out the load
// generator, the destination and everything else on the machine (but not
// other users of the same Postgres or RabbitMQ).
var ownProcs = map[string][]string{
	"ingest-running":  {procReceiver, procDispatcher, procPostgres, procRabbitMQ},
	"ingest-stopped":  {procReceiver, procPostgres, procRabbitMQ},
	"bare-ingest":     {procBareIngest, procPostgres},
	"delivery":        {procReceiver, procDispatcher, procPostgres, procRabbitMQ},
	phaseDeliveryFIFO: {procReceiver, procDispatcher, procPostgres, procRabbitMQ},
	// The target queue is on the same broker: its work counts here.
	phaseDeliveryAMQP: {procReceiver, procDispatcher, procPostgres, procRabbitMQ},
	"bare-forwarder":  {procBareForwarder, procRabbitMQ},
	"e2e":             {procReceiver, procDispatcher, procPostgres, procRabbitMQ},
	"soak":            {procReceiver, procDispatcher, procPostgres, procRabbitMQ},
	"bare-e2e":        {procBareRelay, procBareForwarder, procPostgres, procRabbitMQ},
	// The recording forwarder runs as procBareForwarder.
	phaseBareRecorder:    {procBareForwarder, procPostgres, procRabbitMQ},
	phaseBareRecorderE2E: {procBareRelay, procBareForwarder, procPostgres, procRabbitMQ},
}

// forwarderArgs are the bare forwarder's arguments for queue, delivering on
// route; recording, it records each outcome in the bare database, in a
// table of the round's own (a message id may come again next round).
func (r *runner) forwarderArgs(queue, route string, recording bool) []string {
	args := []string{ChildArg, roleBareForwarder,
		"--amqp-url", r.o.amqpURL, "--queue", queue, "--concurrency", fmt.Sprint(r.o.concurrency),
		"--url", r.dest.url(route), "--secret", r.signingSecret}
	if recording {
		args = append(args, "--database-url", r.bareURL, "--max-conns", fmt.Sprint(r.o.dbConns),
			"--table", fmt.Sprintf("bench_outcomes_%s_%d", strings.ReplaceAll(route, "-", "_"), r.round))
	}
	return args
}

// ingestPhases runs the closed loop against the receiver with the
// dispatcher running, then with it stopped. After each, every accepted
// event must reach the destination once.
func (r *runner) ingestPhases(ctx context.Context) error {
	for _, running := range []bool{true, false} {
		p := &Phase{Key: "ingest-running", Title: "ingest, dispatcher running", System: "hookrelay"}
		if running {
			if err := r.dispatcherUp(ctx); err != nil {
				return err
			}
		} else {
			p.Key, p.Title = "ingest-stopped", "ingest, dispatcher stopped"
			if err := r.dispatcherDown(); err != nil {
				return err
			}
		}
		if err := r.resetDest(ctx); err != nil {
			return err
		}
		r.logf("%s: %d clients × %s, closed loop", p.Title, r.o.clients, r.o.duration)
		m, err := r.begin(ctx)
		if err != nil {
			return err
		}
		var prof *phaseProfile
		if running {
			if prof, err = r.profilePhase(ctx, p.Key, profileSeconds(r.o.duration), false); err != nil {
				return err
			}
		}
		l, err := r.runLoad(ctx, p.Title, nil, func(ctx context.Context, l *loadRun) error {
			return closedLoop(ctx, r.relaySender, r.o.clients, r.o.duration, 0, l)
		})
		if err != nil {
			return err
		}
		u, err := r.end(ctx, m)
		if err != nil {
			return err
		}
		if err := prof.finish(ctx); err != nil {
			return err
		}
		fillFromLoad(p, l, m.at)
		if !running {
			if err := r.dispatcherUp(ctx); err != nil {
				return err
			}
		}
		dump, err := r.awaitPairs(ctx, p.Title+", delivering", benchRoute, ids(l.sent))
		if err != nil {
			return err
		}
		r.check(p, dump, benchRoute, ids(l.sent))
		if err := r.awaitRecorded(ctx, p, ids(l.sent)); err != nil {
			return err
		}
		first, last := span(dump, benchRoute, ids(l.sent))
		if running && !last.IsZero() {
			p.Notes = append(p.Notes, fmt.Sprintf("the last delivery came %.0f ms after the last 200", ms(last.Sub(l.lastDone))))
		} else if n := len(l.sent); n > 1 && last.After(first) {
			p.Notes = append(p.Notes, fmt.Sprintf("then the dispatcher drained these %d events in %.1fs (%.0f/s)", n, last.Sub(first).Seconds(), float64(n)/last.Sub(first).Seconds()))
		}
		r.finish(p, u)
	}
	return nil
}

// span returns the first and the last arrival among the pairs of ids.
func span(dump map[pairKey]destRecord, route string, ids []string) (first, last time.Time) {
	for _, id := range ids {
		rec, ok := dump[pairKey{route: route, id: id}]
		if !ok {
			continue
		}
		if first.IsZero() || rec.first.Before(first) {
			first = rec.first
		}
		if rec.first.After(last) {
			last = rec.first
		}
	}
	return first, last
}

// bareIngestPhase runs the same closed loop against the bare ingest
// server, on a database of its own, and checks that every accepted event
// is in it.
func (r *runner) bareIngestPhase(ctx context.Context) error {
	p := &Phase{Key: "bare-ingest", Title: "ingest, bare one-statement server", System: "reference"}
	proc, line, err := r.procs.start(ctx, procBareIngest, r.exe,
		[]string{ChildArg, roleBareIngest, "--database-url", r.bareURL, "--max-conns", fmt.Sprint(r.o.dbConns)}, true, 30*time.Second)
	if err != nil {
		return err
	}
	r.setCurrent(procBareIngest, proc)
	defer r.setCurrent(procBareIngest, nil)
	addr, ok := cutReady(line)
	if !ok {
		return fmt.Errorf("bare ingest server announced %q", line)
	}
	s := newSender("http://"+addr+"/webhooks/"+benchSource, []byte(r.sourceSecret), r.runID+"b", r.o.bodySize, r.o.clients)
	r.logf("%s: %d clients × %s, closed loop", p.Title, r.o.clients, r.o.duration)
	m, err := r.begin(ctx)
	if err != nil {
		return err
	}
	l, err := r.runLoad(ctx, p.Title, nil, func(ctx context.Context, l *loadRun) error {
		return closedLoop(ctx, s, r.o.clients, r.o.duration, 0, l)
	})
	if err != nil {
		return err
	}
	u, err := r.end(ctx, m)
	if err != nil {
		return err
	}
	if err := proc.stop(15 * time.Second); err != nil {
		return err
	}
	fillFromLoad(p, l, m.at)
	conn, err := connect(ctx, r.bareURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var stored int
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := conn.QueryRow(qctx, `SELECT count(*) FROM events WHERE id = ANY($1::uuid[])`, ids(l.sent)).Scan(&stored); err != nil {
		return fmt.Errorf("counting the bare server's events: %w", err)
	}
	p.Checked = true
	p.Lost = len(l.sent) - stored
	r.finish(p, u)
	return nil
}

func cutReady(line string) (string, bool) {
	const prefix = "ready "
	if len(line) <= len(prefix) || line[:len(prefix)] != prefix {
		return "", false
	}
	return line[len(prefix):], true
}

// deliveryPhase fills a backlog through the receiver with the dispatcher
// stopped, waits until the outbox is empty and the route queue holds it,
// then starts the dispatcher and times the drain.
func (r *runner) deliveryPhase(ctx context.Context) error {
	return r.drainPhase(ctx, &Phase{Key: "delivery", Title: fmt.Sprintf("delivery, drain of %d", r.o.backlog), System: "hookrelay"})
}

// deliveryFIFOPhase is the delivery phase on the route with ordering fifo:
// the same backlog, its events about fifoResources resources, delivered
// one at a time per resource.
func (r *runner) deliveryFIFOPhase(ctx context.Context) error {
	p := &Phase{Key: phaseDeliveryFIFO, Title: fmt.Sprintf("delivery in order (fifo, %d resources), drain of %d", fifoResources, r.o.backlog), System: "hookrelay"}
	if err := r.dispatcherDown(); err != nil {
		return err
	}
	r.fifoOn = true
	if err := r.writeConfig(); err != nil {
		return err
	}
	err := r.drainPhase(ctx, p)
	if derr := r.dispatcherDown(); derr != nil {
		err = errors.Join(err, derr)
	}
	r.fifoOn = false
	if werr := r.writeConfig(); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}

// deliveryAMQPPhase is the delivery phase on the route of kind amqp: the
// same backlog, published into the target exchange, whose queue the
// destination consumes (each message a delivery, its signature checked).
func (r *runner) deliveryAMQPPhase(ctx context.Context) error {
	p := &Phase{Key: phaseDeliveryAMQP, Title: fmt.Sprintf("delivery into an exchange (amqp), drain of %d", r.o.backlog), System: "hookrelay"}
	if err := r.dispatcherDown(); err != nil {
		return err
	}
	r.amqpOn = true
	if err := r.writeConfig(); err != nil {
		return err
	}
	err := r.drainPhase(ctx, p)
	if derr := r.dispatcherDown(); derr != nil {
		err = errors.Join(err, derr)
	}
	r.amqpOn = false
	if werr := r.writeConfig(); werr != nil {
		err = errors.Join(err, werr)
	}
	return err
}

// targetName names the amqp route's exchange and queue: the run's prefix
// and a dash, as the relay refuses a route exchange named like its own.
func (r *runner) targetName() string { return r.prefix + "-target" }

// drainPhase fills a backlog with the dispatcher stopped, then starts it
// and measures how fast the route drains.
func (r *runner) drainPhase(ctx context.Context, p *Phase) error {
	if err := r.dispatcherDown(); err != nil {
		return err
	}
	r.logf("%s: filling the backlog through the receiver, dispatcher stopped", p.Title)
	l, err := r.runLoad(ctx, "filling the backlog", nil, func(ctx context.Context, l *loadRun) error {
		return closedLoop(ctx, r.relaySender, r.o.clients, 0, int64(r.o.backlog), l)
	})
	if err != nil {
		return err
	}
	want := ids(l.sent)
	if err := r.awaitQueued(ctx, len(want)); err != nil {
		return err
	}
	if err := r.resetDest(ctx); err != nil {
		return err
	}
	r.logf("%s: starting the dispatcher (route concurrency %d)", p.Title, r.o.concurrency)
	m, err := r.begin(ctx)
	if err != nil {
		return err
	}
	if _, err := r.startDispatcher(ctx); err != nil {
		return err
	}
	prof, err := r.profilePhase(ctx, p.Key, r.deliverySeconds(), true)
	if err != nil {
		return err
	}
	dump, err := r.awaitPairs(ctx, p.Title, benchRoute, want)
	if err != nil {
		return err
	}
	u, err := r.end(ctx, m)
	if err != nil {
		return err
	}
	if err := prof.finish(ctx); err != nil {
		return err
	}
	r.drained(p, dump, benchRoute, want, m.at)
	if err := r.awaitRecorded(ctx, p, want); err != nil {
		return err
	}
	r.finish(p, u)
	return nil
}

// drained fills a delivery phase from the destination's records: the rate
// is over the first to the last arrival, so that the consumer's start-up
// (reported apart) does not count.
func (r *runner) drained(p *Phase, dump map[pairKey]destRecord, route string, want []string, started time.Time) {
	r.check(p, dump, route, want)
	first, last := span(dump, route, want)
	p.Count = int64(len(want) - p.Lost)
	if !first.IsZero() {
		p.StartupMS = ms(first.Sub(started))
		if last.After(first) {
			p.Seconds = last.Sub(first).Seconds()
			p.Rate = float64(p.Count) / p.Seconds
		}
	}
}

// awaitQueued waits until the outbox is empty and the route queue holds n
// messages, giving up after the settle timeout without progress.
func (r *runner) awaitQueued(ctx context.Context, n int) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	lastChange := time.Now()
	var lastOutbox int64 = -1
	lastReady := -1
	for {
		if err := r.alive(); err != nil {
			return err
		}
		outbox, err := countRows(ctx, r.relay, "outbox")
		if err != nil {
			return err
		}
		ready, err := queueReady(r.amqpConn, r.routeQueue())
		if err != nil {
			return err
		}
		if outbox == 0 && ready >= n {
			if ready > n {
				return fmt.Errorf("route queue holds %d messages, want %d: an earlier phase left messages behind", ready, n)
			}
			return nil
		}
		if outbox != lastOutbox || ready != lastReady {
			lastOutbox, lastReady, lastChange = outbox, ready, time.Now()
		}
		if time.Since(lastChange) > r.o.settleTimeout {
			return fmt.Errorf("backlog stuck: outbox %d rows, route queue %d of %d messages, no change for %s", outbox, ready, n, r.o.settleTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// bareForwarderPhase publishes the same number of messages to a queue of
// its own and times the bare forwarder's drain to the destination
// (recording: the recording forwarder's).
func (r *runner) bareForwarderPhase(ctx context.Context, recording bool) error {
	p := &Phase{Key: phaseBareForwarder, Title: fmt.Sprintf("delivery, bare forwarder, %d", r.o.backlog), System: "reference"}
	queue, route := fmt.Sprintf("%s.bare.%d", r.prefix, r.round), bareRoute
	if recording {
		p.Key, p.Title = phaseBareRecorder, fmt.Sprintf("delivery, recording forwarder, %d", r.o.backlog)
		queue, route = fmt.Sprintf("%s.bare-rec.%d", r.prefix, r.round), bareRecRoute
	}
	// The dispatcher is idle now; stopped, it takes nothing from the
	// machine while the reference runs.
	if err := r.dispatcherDown(); err != nil {
		return err
	}
	// A queue per round: messages the stopped forwarder had not acked yet
	// are requeued into the round's own queue, not into the next round's.
	if err := declareQuorum(r.amqpConn, queue); err != nil {
		return err
	}
	r.logf("%s: publishing %d messages to %s", p.Title, r.o.backlog, queue)
	s := r.relaySender
	want, err := publishBacklog(ctx, r.amqpConn, queue, r.o.backlog, func(i int) []byte { return s.body(int64(i), s.pad) })
	if err != nil {
		return err
	}
	if n, err := queueReady(r.amqpConn, queue); err != nil {
		return err
	} else if n != len(want) {
		return fmt.Errorf("queue %s holds %d messages after %d confirmed publishes", queue, n, len(want))
	}
	if err := r.resetDest(ctx); err != nil {
		return err
	}
	r.logf("%s: starting the forwarder (concurrency %d)", p.Title, r.o.concurrency)
	m, err := r.begin(ctx)
	if err != nil {
		return err
	}
	proc, _, err := r.procs.start(ctx, procBareForwarder, r.exe, r.forwarderArgs(queue, route, recording), true, 30*time.Second)
	if err != nil {
		return err
	}
	r.setCurrent(procBareForwarder, proc)
	defer r.setCurrent(procBareForwarder, nil)
	dump, err := r.awaitPairs(ctx, p.Title, route, want)
	if err != nil {
		return err
	}
	u, err := r.end(ctx, m)
	if err != nil {
		return err
	}
	if err := proc.stop(15 * time.Second); err != nil {
		return err
	}
	r.drained(p, dump, route, want, m.at)
	r.finish(p, u)
	return nil
}

// e2ePhase sends at a fixed rate with the dispatcher running and measures
// the time from each 200 to the destination.
func (r *runner) e2ePhase(ctx context.Context) error {
	p := &Phase{Key: "e2e", Title: fmt.Sprintf("end to end, %d/s × %s", r.o.rate, r.o.e2eDuration), System: "hookrelay"}
	if err := r.dispatcherUp(ctx); err != nil {
		return err
	}
	if err := r.resetDest(ctx); err != nil {
		return err
	}
	r.logf("%s: open loop", p.Title)
	m, err := r.begin(ctx)
	if err != nil {
		return err
	}
	prof, err := r.profilePhase(ctx, p.Key, profileSeconds(r.o.e2eDuration), false)
	if err != nil {
		return err
	}
	l, err := r.runLoad(ctx, p.Title, r.deliveredSoFar(ctx), func(ctx context.Context, l *loadRun) error {
		return openLoop(ctx, r.relaySender, r.o.rate, r.o.e2eDuration, l)
	})
	if err != nil {
		return err
	}
	return r.settleOpenLoop(ctx, p, l, m, r.o.e2eDuration, prof.finish)
}

// settleOpenLoop ends an open-loop phase of the relay that sent for dur:
// it waits for every accepted event at the destination, takes the usage
// since m (then runs afterEnd, if set), checks what arrived and was
// recorded, and fills the phase's rate and latencies.
func (r *runner) settleOpenLoop(ctx context.Context, p *Phase, l *loadRun, m phaseMark, dur time.Duration, afterEnd func(context.Context) error) error {
	want := ids(l.sent)
	routes := r.benchRoutes()
	var dump map[pairKey]destRecord
	for _, route := range routes {
		var err error
		if dump, err = r.awaitPairs(ctx, p.Title+", delivering to "+route, route, want); err != nil {
			return err
		}
	}
	u, err := r.end(ctx, m)
	if err != nil {
		return err
	}
	if afterEnd != nil {
		if err := afterEnd(ctx); err != nil {
			return err
		}
	}
	fillFromLoad(p, l, m.at)
	p.Seconds = dur.Seconds()
	p.Rate = float64(p.Count) / p.Seconds
	p.IngestLatency = p.Latency
	r.checkRoutes(p, dump, routes, want)
	if err := r.awaitRecorded(ctx, p, want); err != nil {
		return err
	}
	endToEnd(p, l, dump, routes, m.at)
	r.finish(p, u)
	return nil
}

// deliveredSoFar is a progress line's tail: the pairs the destination
// holds (nothing when it cannot be asked).
func (r *runner) deliveredSoFar(ctx context.Context) func() string {
	return func() string {
		st, err := r.dest.stats(ctx)
		if err != nil {
			return ""
		}
		return fmt.Sprintf("  delivered %d", st.Pairs)
	}
}

// endToEnd fills an end-to-end phase's latency (each 200 to the first
// copy at the destination) and longest gap between deliveries.
func endToEnd(p *Phase, l *loadRun, dump map[pairKey]destRecord, routes []string, started time.Time) {
	var lat []time.Duration
	var arrivals []time.Time
	for _, s := range l.sent {
		for _, route := range routes {
			if rec, ok := dump[pairKey{route: route, id: s.id}]; ok {
				lat = append(lat, rec.first.Sub(s.accepted))
				arrivals = append(arrivals, rec.first)
			}
		}
	}
	slices.SortFunc(arrivals, func(a, b time.Time) int { return a.Compare(b) })
	p.Latency = summarize(lat)
	gap, at := longestGap(arrivals)
	p.StallMS = ms(gap)
	if gap > 0 {
		p.Notes = append(p.Notes, fmt.Sprintf("longest gap between deliveries %.0f ms, %.1fs into the phase", ms(gap), at.Sub(started).Seconds()))
	}
}

// bareE2EPhase is the end-to-end reference: the same open loop against
// the bare relay (HMAC, one INSERT, a confirmed publish to a quorum
// queue, 200), with the bare forwarder delivering from that queue
// (recording: the recording forwarder).
func (r *runner) bareE2EPhase(ctx context.Context, recording bool) error {
	p := &Phase{Key: phaseBareE2E, Title: fmt.Sprintf("end to end, bare relay + forwarder, %d/s × %s", r.o.rate, r.o.e2eDuration), System: "reference"}
	queue, route := fmt.Sprintf("%s.bare-e2e.%d", r.prefix, r.round), bareE2ERoute
	if recording {
		p.Key, p.Title = phaseBareRecorderE2E, fmt.Sprintf("end to end, bare relay + recording forwarder, %d/s × %s", r.o.rate, r.o.e2eDuration)
		queue, route = fmt.Sprintf("%s.bare-rec-e2e.%d", r.prefix, r.round), bareRecE2ERoute
	}
	// Stopped, the dispatcher takes nothing from the machine meanwhile.
	if err := r.dispatcherDown(); err != nil {
		return err
	}
	if err := declareQuorum(r.amqpConn, queue); err != nil {
		return err
	}
	fwd, _, err := r.procs.start(ctx, procBareForwarder, r.exe, r.forwarderArgs(queue, route, recording), true, 30*time.Second)
	if err != nil {
		return err
	}
	r.setCurrent(procBareForwarder, fwd)
	defer r.setCurrent(procBareForwarder, nil)
	relay, line, err := r.procs.start(ctx, procBareRelay, r.exe, []string{ChildArg, roleBareRelay,
		"--database-url", r.bareURL, "--max-conns", fmt.Sprint(r.o.dbConns),
		"--amqp-url", r.o.amqpURL, "--queue", queue, "--secret", r.sourceSecret}, true, 30*time.Second)
	if err != nil {
		return err
	}
	r.setCurrent(procBareRelay, relay)
	defer r.setCurrent(procBareRelay, nil)
	addr, ok := cutReady(line)
	if !ok {
		return fmt.Errorf("bare relay announced %q", line)
	}
	if err := r.resetDest(ctx); err != nil {
		return err
	}
	// Ids of the phase's own: both phases store into the same database.
	idPrefix := fmt.Sprintf("%se%d", r.runID, r.round)
	if recording {
		idPrefix = fmt.Sprintf("%sr%d", r.runID, r.round)
	}
	s := newSender("http://"+addr+"/webhooks/"+benchSource, []byte(r.sourceSecret), idPrefix, r.o.bodySize, r.o.clients)
	r.logf("%s: open loop", p.Title)
	m, err := r.begin(ctx)
	if err != nil {
		return err
	}
	l, err := r.runLoad(ctx, p.Title, r.deliveredSoFar(ctx), func(ctx context.Context, l *loadRun) error {
		return openLoop(ctx, s, r.o.rate, r.o.e2eDuration, l)
	})
	if err != nil {
		return err
	}
	want := ids(l.sent)
	dump, err := r.awaitPairs(ctx, p.Title+", delivering", route, want)
	if err != nil {
		return err
	}
	u, err := r.end(ctx, m)
	if err != nil {
		return err
	}
	for _, proc := range []*process{relay, fwd} {
		if err := proc.stop(15 * time.Second); err != nil {
			return err
		}
	}
	fillFromLoad(p, l, m.at)
	p.Seconds = r.o.e2eDuration.Seconds()
	p.Rate = float64(p.Count) / p.Seconds
	p.IngestLatency = p.Latency
	r.check(p, dump, route, want)
	endToEnd(p, l, dump, []string{route}, m.at)
	r.finish(p, u)
	return nil
}

// awaitPairs waits until the destination holds the pair (route, id) of
// every id, printing progress; it stops waiting when no new pair arrived
// for the settle timeout (the check then counts what is missing as lost).
// It returns the destination's records.
func (r *runner) awaitPairs(ctx context.Context, label, route string, want []string) (map[pairKey]destRecord, error) {
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	next := start.Add(r.o.progress)
	lastPairs, lastChange := -1, start
	lastPrinted, lastPrintedAt := 0, start
	for {
		if err := r.alive(); err != nil {
			return nil, err
		}
		st, err := r.dest.stats(ctx)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		if st.Pairs != lastPairs {
			lastPairs, lastChange = st.Pairs, now
		}
		if st.Pairs >= len(want) {
			dump, err := r.dest.dump(ctx)
			if err != nil {
				return nil, err
			}
			if missing(dump, route, want) == 0 {
				return dump, nil
			}
		}
		if now.Sub(lastChange) > r.o.settleTimeout {
			r.logf("  %s: no new delivery for %s; giving up waiting", label, r.o.settleTimeout)
			return r.dest.dump(ctx)
		}
		if !now.Before(next) {
			next = next.Add(r.o.progress)
			fmt.Fprintf(r.stderr, "  %-34s %6.1fs  delivered %6d of %d  %6.0f/s (last %6.0f/s)\n",
				label, now.Sub(start).Seconds(), st.Pairs, len(want),
				float64(st.Pairs)/now.Sub(start).Seconds(), float64(st.Pairs-lastPrinted)/now.Sub(lastPrintedAt).Seconds())
			lastPrinted, lastPrintedAt = st.Pairs, now
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

func missing(dump map[pairKey]destRecord, route string, want []string) int {
	n := 0
	for _, id := range want {
		if _, ok := dump[pairKey{route: route, id: id}]; !ok {
			n++
		}
	}
	return n
}

// check counts, for the pairs of want: lost (never arrived), duplicates
// (copies beyond the first), bad signatures; and pairs that arrived but
// were not expected (left over from elsewhere).
func (r *runner) check(p *Phase, dump map[pairKey]destRecord, route string, want []string) {
	r.checkRoutes(p, dump, []string{route}, want)
}

// checkRoutes is check for the pairs of want on each of routes.
func (r *runner) checkRoutes(p *Phase, dump map[pairKey]destRecord, routes []string, want []string) {
	p.Checked = true
	p.Lost, p.Duplicates, p.BadSignatures, p.Unexpected = 0, 0, 0, 0
	var posts int64
	for _, rec := range dump {
		posts += int64(rec.count)
	}
	r.checked = &checkedPhase{phase: p, routes: routes, want: want, posts: posts}
	expected := make(map[string]bool, len(want))
	for _, id := range want {
		expected[id] = true
		for _, route := range routes {
			rec, ok := dump[pairKey{route: route, id: id}]
			if !ok {
				p.Lost++
				continue
			}
			p.Duplicates += rec.count - 1
			p.BadSignatures += rec.bad
		}
	}
	for k := range dump {
		if !slices.Contains(routes, k.route) || !expected[k.id] {
			p.Unexpected++
		}
	}
}

// checkedPhase is the last phase checked against the destination, kept
// so that POSTs arriving after its check (a late duplicate) are still
// charged to it.
type checkedPhase struct {
	phase  *Phase
	routes []string
	want   []string
	posts  int64 // POSTs the destination had when the phase was checked
}

// recheck counts again the last checked phase when the destination got
// POSTs since; it runs before the destination is reset for the next
// phase, and after the last.
func (r *runner) recheck(ctx context.Context) error {
	c := r.checked
	if c == nil || r.dest == nil {
		return nil
	}
	st, err := r.dest.stats(ctx)
	if err != nil {
		return err
	}
	if st.Posts == c.posts {
		return nil
	}
	dump, err := r.dest.dump(ctx)
	if err != nil {
		return err
	}
	late := st.Posts - c.posts
	r.checkRoutes(c.phase, dump, c.routes, c.want)
	c.phase.Notes = append(c.phase.Notes, fmt.Sprintf("%d more POSTs arrived after the phase was checked; counted again", late))
	return nil
}

// resetDest clears the destination's counts for a new phase, after
// charging any late POSTs to the previous one.
func (r *runner) resetDest(ctx context.Context) error {
	if err := r.recheck(ctx); err != nil {
		return err
	}
	return r.dest.reset(ctx)
}

// awaitRecorded waits until the relay's database records every event of
// want as delivered to the route (it records a delivery just after the
// destination's answer), giving up after the settle timeout without
// progress. An event the destination got but the relay does not record as
// delivered would be sent again: it is counted as unrecorded, a failure.
// Events delivered after a retry are noted.
func (r *runner) awaitRecorded(ctx context.Context, p *Phase, want []string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := -1, time.Now()
	for {
		delivered, retried := 0, 0
		for _, route := range r.benchRoutes() {
			d, rt, err := deliveriesRecorded(ctx, r.relay, route, want)
			if err != nil {
				return err
			}
			delivered, retried = delivered+d, retried+rt
		}
		if delivered != last {
			last, lastChange = delivered, time.Now()
		}
		if all := len(want) * len(r.benchRoutes()); delivered == all || time.Since(lastChange) > r.o.settleTimeout {
			p.Unrecorded = all - delivered
			if retried > 0 {
				p.Notes = append(p.Notes, fmt.Sprintf("%d events were delivered only after a retry", retried))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
