package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	hamqp "github.com/hookrelay/hookrelay/internal/amqp"
)

// fault is one injected failure: inject, hold, restore.
type fault struct {
	name string
	// interrupts is true when the fault can cut deliveries in flight (a
	// consumer's connection or process dies, or its Postgres record
	// fails after the POST): each such fault may cost up to one duplicate
	// POST per consumer (prefetch 1).
	interrupts bool
	// strands is true when the fault can make the broker lose or strand
	// a copy (a node dies: its retry tiers' dead-lettering can stall at
	// the leader change), so the reconciler may have to send pairs
	// again. After any other fault a re-send took a late copy for a lost
	// one: the suite fails.
	strands bool
	hold    time.Duration
	inject  func(ctx context.Context) (string, error) // returns a detail for the report
	restore func(ctx context.Context) error
	// check, when set, runs once the relay caught up after the restore
	// and says what went wrong during the fault ("" for nothing); since
	// is when the fault began.
	check func(ctx context.Context, since time.Time) (string, error)
}

// faultResult is one line of the report.
type faultResult struct {
	name      string
	detail    string
	at        time.Duration // since the start
	non2xx    int           // answers senders saw that were not 2xx
	recovery  time.Duration // restore → every pair accepted before it delivered
	recovered bool
	// restored is when the restore returned; answering is from then to
	// the first 2xx a sender got (answered is false when none came).
	restored   time.Time
	answering  time.Duration
	answered   bool
	reconciled int64 // pairs the reconciler re-sent during the fault and recovery
	// resent is reconciled by reason, from the dispatchers' metrics (a
	// dispatcher killed during the fault takes its count with it).
	resent map[string]float64
	// backlog is how many pairs accepted before the restore were still
	// undelivered, sampled every second from the restore on.
	backlog []backlogSample
	strands bool
	// injected is when the fault began; duplicates are the duplicate
	// POSTs answered from then until the next fault (or the end).
	injected   time.Time
	duplicates int
	// inversions are the ordered route's POSTs out of sequence in the
	// same window.
	inversions []inversion
	// tiersSettled is how long after the restore the retry tiers held no
	// more messages waiting to be dead-lettered than the load itself
	// keeps passing through (faults that strand only), and whether they
	// did within tiersSettleWithin.
	tiersSettled  time.Duration
	tiersSettleOK bool
	// tiersWhy says why they did not settle (a count, or no reading).
	tiersWhy string
	// checked is what the fault's own check found wrong ("": nothing).
	checked string
}

// tiersSettleWithin bounds how long after a node fault's restore the retry
// tiers may keep messages waiting to be dead-lettered (stranded by a
// leader change) before the suite fails; transientDeadLettering is what
// the flaky route's retries keep in them at any moment.
const (
	tiersSettleWithin      = time.Minute
	transientDeadLettering = 10
)

// backlogSample is the undelivered pairs at a time after the restore,
// and where their copies were: outbox rows, ready messages in the route
// queues, messages in the retry tiers (of which waiting to be
// dead-lettered), as Postgres and the management API (some seconds late)
// told.
type backlogSample struct {
	after                        time.Duration
	pairs                        int
	outbox, ready, tiers, tierDL int
	// unread names what could not be read ("outbox", "queues"): its
	// counts are unknown, not 0.
	unread []string
}

// reconcileReasons are the reasons of hookrelay_reconciled_total.
var reconcileReasons = []string{"lost", "stranded"}

func (s *suite) faults() []fault {
	var leader, stopped string
	return []fault{
		{
			name: "kill -9 of the node leading the route queues", interrupts: true, strands: true, hold: 10 * time.Second,
			inject: func(ctx context.Context) (string, error) {
				out, err := s.cluster(ctx, "leader", prefix+".route.all")
				if err != nil {
					return "", err
				}
				leader = strings.Fields(out)[0]
				_, err = s.cluster(ctx, "kill", leader)
				return "node " + out, err
			},
			restore: func(ctx context.Context) error { _, err := s.cluster(ctx, "start", leader); return err },
		},
		{
			name: "graceful stop of another node", interrupts: true, strands: true, hold: 15 * time.Second,
			inject: func(ctx context.Context) (string, error) {
				n, _ := strconv.Atoi(leader)
				stopped = strconv.Itoa(n%3 + 1)
				_, err := s.cluster(ctx, "stop", stopped)
				return "node " + stopped, err
			},
			restore: func(ctx context.Context) error { _, err := s.cluster(ctx, "start", stopped); return err },
		},
		{
			name: "kill -9 of one receiver and one dispatcher", interrupts: true, hold: 3 * time.Second,
			inject: func(context.Context) (string, error) {
				if err := s.receivers[0].kill(); err != nil {
					return "", err
				}
				return s.receivers[0].name + ", " + s.dispatch[0].name, s.dispatch[0].kill()
			},
			restore: func(ctx context.Context) error {
				for _, p := range []*proc{s.receivers[0], s.dispatch[0]} {
					if err := p.start(); err != nil {
						return err
					}
					if err := p.waitHealthy(ctx, 60*time.Second); err != nil {
						return err
					}
				}
				return nil
			},
		},
		{
			name: "Postgres restart", interrupts: true, hold: 0,
			inject:  func(context.Context) (string, error) { return "pg_ctl restart -m fast", s.pg.restart() },
			restore: func(context.Context) error { return nil },
		},
		{
			// Claims commit without a WAL flush: a crash right after them
			// loses them while their POSTs are still in flight, held by the
			// destination. Their records must not take that for a lost
			// lease and POST again.
			name: "Postgres crash right after claims, POSTs in flight", interrupts: true, hold: 0,
			inject: func(ctx context.Context) (string, error) {
				s.dest.hold(4 * time.Second)
				if err := s.pause(ctx, 700*time.Millisecond); err != nil { // consumers claim and POST
					return "", err
				}
				return "destination holds POSTs 4s; pg_ctl stop -m immediate, start", s.pg.crash()
			},
			restore: func(context.Context) error { s.dest.hold(0); return nil },
		},
		{
			name: "Postgres unreachable, sockets open", interrupts: true, hold: 15 * time.Second,
			inject:  func(context.Context) (string, error) { s.hole.stall(); return "forwarder stops moving bytes", nil },
			restore: func(context.Context) error { s.hole.unstall(); return nil },
		},
		{
			name: "broker memory alarm", interrupts: false, hold: 10 * time.Second,
			inject: func(ctx context.Context) (string, error) {
				_, err := s.cluster(ctx, "ctl", "1", "set_vm_memory_high_watermark", "0.000001")
				return "vm_memory_high_watermark 0.000001 on node 1", err
			},
			restore: func(ctx context.Context) error {
				_, err := s.cluster(ctx, "ctl", "1", "set_vm_memory_high_watermark", "0.4")
				return err
			},
		},
		{
			name: "destination down", interrupts: false, hold: 30 * time.Second,
			inject:  func(context.Context) (string, error) { s.dest.down(); return "connections refused", nil },
			restore: func(context.Context) error { return s.dest.up() },
		},
		{
			// Last: from here on the promoted replica is the only Postgres
			// (the faults above restart and crash the primary). The hold is
			// a failover manager's detection time; every commit the relay
			// made was on the replica before it returned (synchronous
			// replication), and the processes must find the new primary
			// through their multi-host URL, without a restart.
			//
			// The primary dies just after lease takeovers (issue 40): a
			// dispatcher is killed with its POSTs held by the destination,
			// the other takes over its leases once they expire, and the
			// primary is killed as soon as the first takeover is in
			// Postgres, the takers' POSTs still held. A takeover the
			// promoted replica never received would bring the dead holder's
			// lease back: the taker's record after its 2xx would be refused
			// (lost_lease) and the pair POSTed again. check: no attempt
			// since the fault began was recorded as lost_lease.
			name: "Postgres failover right after lease takeovers", interrupts: true, hold: 5 * time.Second,
			inject: func(ctx context.Context) (string, error) {
				took, err := s.takeoversBeforeFailover(ctx)
				if err != nil {
					return "", err
				}
				return fmt.Sprintf("%s; primary :%d pg_ctl stop -m immediate, synchronous replica :%d promoted after the hold", took, s.pg.port, s.replica.port), s.pg.kill()
			},
			restore: func(ctx context.Context) error {
				if err := s.replica.promote(); err != nil {
					return err
				}
				s.dest.hold(0)
				if err := s.dispatch[0].start(); err != nil {
					return err
				}
				return s.dispatch[0].waitHealthy(ctx, 60*time.Second)
			},
			check: s.noLostLeaseSince,
		},
	}
}

// takeoverHold is how long the destination holds each POST while leases
// are taken over before the failover: the takers' POSTs are still in
// flight when the primary dies, so their records go to the promoted
// replica.
const takeoverHold = 4 * time.Second

// takeoversBeforeFailover kills the first dispatcher while its POSTs are
// held, and returns once another dispatcher took over one of its expired
// leases (a lease_expired attempt in Postgres), the destination still
// holding POSTs.
func (s *suite) takeoversBeforeFailover(ctx context.Context) (string, error) {
	count := func() (int64, error) {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var n int64
		err := s.db.QueryRow(qctx, `SELECT count(*) FROM delivery_attempts WHERE outcome = 'lease_expired'`).Scan(&n)
		return n, err
	}
	before, err := count()
	if err != nil {
		return "", fmt.Errorf("counting lease takeovers: %w", err)
	}
	s.dest.hold(takeoverHold)
	if err := s.pause(ctx, 700*time.Millisecond); err != nil { // consumers claim and POST
		return "", err
	}
	if err := s.dispatch[0].kill(); err != nil {
		return "", err
	}
	killed := time.Now()
	// The leases run out after the route's timeout and lease_margin
	// (10s); then the waiting copies take them over.
	deadline := killed.Add(time.Minute)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := count()
		if err != nil {
			return "", fmt.Errorf("counting lease takeovers: %w", err)
		}
		if n > before {
			return fmt.Sprintf("%s killed with POSTs held %s, first takeover %s later", s.dispatch[0].name, takeoverHold,
				time.Since(killed).Round(100*time.Millisecond)), nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no lease of the killed %s was taken over within %s", s.dispatch[0].name, time.Minute)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-tick.C:
		}
	}
}

// noLostLeaseSince says whether an attempt since since was recorded as
// lost_lease: a record refused after its POST, which the relay then POSTs
// again.
func (s *suite) noLostLeaseSince(ctx context.Context, since time.Time) (string, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n int64
	if err := s.db.QueryRow(qctx, `SELECT count(*) FROM delivery_attempts WHERE outcome = 'lost_lease' AND started_at >= $1`, since).Scan(&n); err != nil {
		return "", fmt.Errorf("counting lost leases: %w", err)
	}
	if n > 0 {
		return fmt.Sprintf("%d record(s) refused as lost_lease after their POST: each pair is POSTed again", n), nil
	}
	return "", nil
}

// runFaults starts the load, injects every fault in turn, stops the load,
// waits for the relay to drain, and reports.
func (s *suite) runFaults(ctx context.Context) error {
	loadCtx, stopLoad := context.WithCancel(ctx)
	s.loadStop = stopLoad
	receivers := make([]string, len(s.receivers))
	for i, r := range s.receivers {
		receivers[i] = "http://" + r.listen
	}
	rate, why := s.opts.rate, "--rate"
	if s.opts.free > 0 {
		rate = sizeRate(s.opts.free)
		why = fmt.Sprintf("%d/s sized to the %.0f%% of the machine's CPU found free before the relay started; --rate N fixes it", fullRate, s.opts.free*100)
	}
	s.rate = rate
	s.load = newLoad(receivers, secret, rate)
	s.loadDone = make(chan struct{})
	// A twentieth of the load: a fifo route's backlog after a fault drains
	// one event per resource per wake-up (docs/ordering.md#cost), and at a
	// quarter of the load (25/s) it took the machine the suite shares with
	// three broker nodes and two Postgres past what it recovers from.
	ordered := max(rate/20, 5)
	s.load.runOrdered(loadCtx, ordered)
	go func() {
		defer close(s.loadDone)
		// A send that got no 2xx is retried for up to 3 minutes after the
		// load stops, as a real sender retries.
		s.load.run(loadCtx, 3*time.Minute)
	}()
	s.logf("load: %d events/s (%s) open loop over %d receivers, %.0f%% resends of earlier events; and %d events/s about %d resources, each resource's in sequence (route %s, ordering fifo)",
		rate, why, len(receivers), s.load.dupShare*100, ordered, orderedResources, orderedRoute)

	var results []faultResult
	var interrupting int
	faults := s.faults()
	if len(s.opts.only) > 0 {
		faults = slices.DeleteFunc(faults, func(f fault) bool {
			return !slices.ContainsFunc(s.opts.only, func(w string) bool { return strings.Contains(f.name, w) })
		})
		if len(faults) == 0 {
			return fmt.Errorf("--only %s matches no fault", strings.Join(s.opts.only, ","))
		}
	}
	for i, f := range faults {
		if err := s.pause(ctx, s.opts.settle); err != nil {
			return err
		}
		res, err := s.inject(ctx, i+1, len(faults), f)
		if err != nil {
			return fmt.Errorf("fault %q: %w", f.name, err)
		}
		if f.interrupts {
			interrupting++
		}
		results = append(results, res)
	}
	if err := s.pause(ctx, s.opts.settle); err != nil {
		return err
	}
	stopLoad()
	<-s.loadDone
	s.logf("load stopped; waiting for the relay to deliver everything accepted")
	drainStart := time.Now()
	drained, _ := s.waitCaughtUp(ctx, time.Now(), 4*time.Minute)
	s.logf("drain: every accepted pair delivered %s after the load stopped (complete: %v)", time.Since(drainStart).Round(100*time.Millisecond), drained)
	// Copies published twice (a confirm lost in a fault) are still in the
	// queues: the dispatchers drop them as duplicates. Wait for that too,
	// bounded: a message the broker strands in a tier never leaves.
	left := s.waitQueuesEmpty(ctx, 2*time.Minute)
	s.logf("drain: queues %s %s after the load stopped", left, time.Since(drainStart).Round(100*time.Millisecond))

	var stopErrs []string
	for _, p := range append(append([]*proc{}, s.receivers...), s.dispatch...) {
		if err := p.stop(30 * time.Second); err != nil {
			stopErrs = append(stopErrs, err.Error())
		}
	}
	return s.report(ctx, results, interrupting, stopErrs)
}

// pause keeps the load running for d, failing early if a relay process
// died on its own.
func (s *suite) pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		case <-tick.C:
			for _, p := range append(append([]*proc{}, s.receivers...), s.dispatch...) {
				if err := p.exited(); err != nil {
					return err
				}
			}
		}
	}
}

func (s *suite) inject(ctx context.Context, n, total int, f fault) (faultResult, error) {
	res := faultResult{name: f.name, at: time.Since(s.start), strands: f.strands}
	_, non2xxBefore := s.load.counts()
	reconciledBefore, err := s.reconciled(ctx)
	if err != nil {
		return res, err
	}
	resentBefore := s.resent()
	res.injected = time.Now()
	if res.detail, err = f.inject(ctx); err != nil {
		return res, err
	}
	s.logf("fault %d/%d: %s (%s), held %s", n, total, f.name, res.detail, f.hold)
	if err := s.pause(ctx, f.hold); err != nil {
		return res, err
	}
	if err := f.restore(ctx); err != nil {
		return res, fmt.Errorf("restoring: %w", err)
	}
	restored := time.Now()
	res.recovered, res.backlog = s.waitCaughtUp(ctx, restored, 3*time.Minute)
	res.recovery = time.Since(restored)
	res.restored = restored
	if f.strands {
		res.tiersSettleOK, res.tiersWhy = s.waitTiersSettled(ctx, restored.Add(tiersSettleWithin))
		res.tiersSettled = time.Since(restored)
		s.logf("fault %d/%d: %s: retry tiers settled %s after the restore (%v%s)", n, total, f.name,
			res.tiersSettled.Round(100*time.Millisecond), res.tiersSettleOK, strings.TrimSuffix(": "+res.tiersWhy, ": "))
	}
	if f.check != nil {
		if res.checked, err = f.check(ctx, res.injected); err != nil {
			return res, err
		}
		s.logf("fault %d/%d: %s: its check: %s", n, total, f.name, cmp.Or(res.checked, "nothing wrong"))
	}
	_, non2xxAfter := s.load.counts()
	res.non2xx = non2xxAfter - non2xxBefore
	reconciledAfter, err := s.reconciled(ctx)
	if err != nil {
		return res, err
	}
	res.reconciled = reconciledAfter - reconciledBefore
	res.resent = s.resent().since(resentBefore)
	state := "recovered"
	if !res.recovered {
		state = "NOT recovered"
	}
	s.logf("fault %d/%d: %s: senders saw %d non-2xx; %s %s after the restore; reconciler re-sent %d pair(s) (%s); backlog after the restore: %s; where: %s",
		n, total, f.name, res.non2xx, state, res.recovery.Round(100*time.Millisecond), res.reconciled, formatResent(res.resent),
		formatBacklog(res.backlog), formatWhere(res.backlog))
	return res, nil
}

// resentCounts are the dispatchers' hookrelay_reconciled_total by reason,
// per process run ("dispatcher1#2").
type resentCounts map[string]map[string]float64

// resent reads every running dispatcher's re-sends by reason; one that
// does not answer (killed, restarting) is left out.
func (s *suite) resent() resentCounts {
	out := resentCounts{}
	for _, d := range s.dispatch {
		counts := map[string]float64{}
		ok := true
		for _, reason := range reconcileReasons {
			v, err := d.metric("hookrelay_reconciled_total", `reason="`+reason+`"`)
			if err != nil {
				ok = false
				break
			}
			counts[reason] = v
		}
		if ok {
			out[fmt.Sprintf("%s#%d", d.name, d.run())] = counts
		}
	}
	return out
}

// since is c minus before, by reason: a process run that before did not
// see counts from zero.
func (c resentCounts) since(before resentCounts) map[string]float64 {
	out := map[string]float64{}
	for run, counts := range c {
		for reason, v := range counts {
			out[reason] += v - before[run][reason]
		}
	}
	return out
}

func formatAnswering(r faultResult) string {
	if !r.answered {
		return "none"
	}
	return r.answering.Round(10 * time.Millisecond).String()
}

func formatResent(r map[string]float64) string {
	var parts []string
	for _, reason := range reconcileReasons {
		parts = append(parts, fmt.Sprintf("%s %.0f", reason, r[reason]))
	}
	return strings.Join(parts, ", ")
}

// waitTiersSettled waits until a reading of the retry tiers counts no
// more messages waiting to be dead-lettered than the load keeps passing
// through, until deadline, and says whether it came; when it did not, why
// (the last count, or that the management API did not answer: a reading
// that failed is not a count of zero).
func (s *suite) waitTiersSettled(ctx context.Context, deadline time.Time) (bool, string) {
	for {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		b, err := s.queueSample(qctx, backlogSample{})
		cancel()
		why := ""
		switch {
		case err != nil:
			why = "the management API did not answer: " + err.Error()
		case b.tierDL <= transientDeadLettering:
			return true, ""
		default:
			why = fmt.Sprintf("%d message(s) waiting to be dead-lettered", b.tierDL)
		}
		if time.Now().After(deadline) {
			return false, why
		}
		select {
		case <-ctx.Done():
			return false, why + " (" + ctx.Err().Error() + ")"
		case <-time.After(time.Second): // the statistics refresh every few seconds
		}
	}
}

// where fills in b where the copies are; what cannot be read is named in
// b.unread, never counted as 0.
func (s *suite) where(ctx context.Context, b backlogSample) backlogSample {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.db.QueryRow(qctx, `SELECT count(*) FROM outbox`).Scan(&b.outbox); err != nil {
		b.unread = append(b.unread, "outbox")
	}
	b, err := s.queueSample(qctx, b)
	if err != nil {
		b.unread = append(b.unread, "queues")
	}
	return b
}

// queueSample fills in b's queue counts from the management API.
func (s *suite) queueSample(ctx context.Context, b backlogSample) (backlogSample, error) {
	m, err := hamqp.NewManagement(s.opts.mgmtURLs, s.opts.amqpURLs[0])
	if err != nil {
		return b, err
	}
	stats, err := m.QueueStats(ctx, prefix+".")
	if err != nil {
		return b, err
	}
	for _, q := range stats {
		switch {
		case strings.HasPrefix(q.Name, prefix+".route.") && !strings.HasSuffix(q.Name, ".dead"):
			b.ready += q.Ready
		case strings.HasPrefix(q.Name, prefix+".retry."):
			b.tiers += q.Messages
			b.tierDL += q.DeadLettering
		}
	}
	return b, nil
}

// formatWhere writes, for the samples formatBacklog picks, where the
// copies were.
func formatWhere(b []backlogSample) string {
	if len(b) == 0 {
		return "none"
	}
	step := (len(b) + 5) / 6
	var parts []string
	for i := 0; i < len(b); i += step {
		outbox, queues := fmt.Sprint(b[i].outbox), fmt.Sprintf("route queues ready %d, tiers %d (dead-lettering %d)", b[i].ready, b[i].tiers, b[i].tierDL)
		if slices.Contains(b[i].unread, "outbox") {
			outbox = "unknown"
		}
		if slices.Contains(b[i].unread, "queues") {
			queues = "queues unknown (the management API did not answer)"
		}
		parts = append(parts, fmt.Sprintf("%.0fs: outbox %s, %s", b[i].after.Seconds(), outbox, queues))
	}
	return strings.Join(parts, "; ")
}

// formatBacklog writes at most a dozen samples of a backlog series, the
// last one always (0 once recovered).
func formatBacklog(b []backlogSample) string {
	if len(b) == 0 {
		return "none"
	}
	step := (len(b) + 11) / 12
	var parts []string
	for i := 0; i < len(b); i += step {
		parts = append(parts, fmt.Sprintf("%.0fs:%d", b[i].after.Seconds(), b[i].pairs))
	}
	if last := b[len(b)-1]; (len(b)-1)%step != 0 {
		parts = append(parts, fmt.Sprintf("%.0fs:%d", last.after.Seconds(), last.pairs))
	}
	return strings.Join(parts, " ")
}

// waitCaughtUp waits until every pair of an event accepted at or before t
// reached the destination, up to timeout. It reports whether they all did,
// and how many were missing, each second from the start.
func (s *suite) waitCaughtUp(ctx context.Context, t time.Time, timeout time.Duration) (bool, []backlogSample) {
	start := time.Now()
	deadline := start.Add(timeout)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var samples []backlogSample
	// The pairs missing now, then only those still missing: the suite
	// must not take the CPU the relay needs to catch up.
	pending := s.missing(t)
	for {
		pending = s.dest.undelivered(pending)
		missing := len(pending)
		if since := time.Since(start); len(samples) == 0 || since-samples[len(samples)-1].after >= time.Second || missing == 0 {
			samples = append(samples, s.where(ctx, backlogSample{after: since, pairs: missing}))
		}
		if missing == 0 {
			return true, samples
		}
		if time.Now().After(deadline) {
			return false, samples
		}
		select {
		case <-ctx.Done():
			return false, samples
		case <-tick.C:
		}
	}
}

// waitQueuesEmpty waits until every queue of the suite holds no message,
// up to timeout, and says how it ended.
func (s *suite) waitQueuesEmpty(ctx context.Context, timeout time.Duration) string {
	deadline := time.Now().Add(timeout)
	for {
		qs, err := s.queueMessages(ctx)
		left := 0
		for _, n := range qs {
			left += n
		}
		if err == nil && left == 0 {
			return "empty"
		}
		if time.Now().After(deadline) {
			if err != nil {
				return "unknown: " + err.Error()
			}
			return fmt.Sprintf("still holding %d message(s)", left)
		}
		select {
		case <-ctx.Done():
			return "unknown: " + ctx.Err().Error()
		case <-time.After(500 * time.Millisecond): // polling the management API
		}
	}
}

// missing lists the pairs of events accepted at or before t (all when t is
// zero) that the destination has not received.
func (s *suite) missing(t time.Time) []pair {
	acc, _ := s.load.accepted(t)
	var out []pair
	for _, ev := range acc {
		for _, r := range routesOf(ev.typ) {
			p := pair{event: ev.id, route: r}
			if ok, _ := s.dest.delivered(p); !ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// windowCounts are the events first sent in a fault's window and what
// became of them.
type windowCounts struct {
	sent, answered, pairs, delivered, lost int
}

// window counts the events first sent in [from, to) against the
// destination's POSTs per pair.
func (s *suite) window(posts map[pair]int, from, to time.Time) windowCounts {
	var w windowCounts
	evs := s.load.startedBetween(from, to)
	w.sent = len(evs)
	for _, ev := range evs {
		if ev.accepted.IsZero() {
			continue
		}
		w.answered++
		for _, r := range routesOf(ev.typ) {
			w.pairs++
			if posts[pair{event: ev.id, route: r}] > 0 {
				w.delivered++
			} else {
				w.lost++
			}
		}
	}
	return w
}

// reconciled is the number of times the reconciler re-sent a pair, from
// Postgres (dispatchers restart; their counters would not add up).
func (s *suite) reconciled(ctx context.Context) (int64, error) {
	// Right after a Postgres restart the pool may hand out a connection
	// that died with it: try a few times.
	var err error
	for range 5 {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var n int64
		err = s.db.QueryRow(qctx, `SELECT COALESCE(sum(reconciled), 0) FROM deliveries`).Scan(&n)
		cancel()
		if err == nil {
			return n, nil
		}
		time.Sleep(time.Second) // waiting out a restart
	}
	return 0, fmt.Errorf("reading reconciled pairs: %w", err)
}

func (s *suite) report(ctx context.Context, results []faultResult, interrupting int, stopErrs []string) error {
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }

	acc, started := s.load.accepted(time.Time{})
	sends, non2xx := s.load.counts()
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stored, outbox int64
	if err := s.db.QueryRow(qctx, `SELECT count(*) FROM events`).Scan(&stored); err != nil {
		return err
	}
	if err := s.db.QueryRow(qctx, `SELECT count(*) FROM outbox`).Scan(&outbox); err != nil {
		return err
	}
	posts, duplicates, requests, malformed := s.dest.snapshot()
	expected := map[string]int{}
	delivered := map[string]int{}
	dupPosts := map[string]int{}
	lost := 0
	for _, ev := range acc {
		for _, r := range routesOf(ev.typ) {
			expected[r]++
			n := posts[pair{event: ev.id, route: r}]
			if n == 0 {
				lost++
				continue
			}
			delivered[r]++
			dupPosts[r] += duplicates[pair{event: ev.id, route: r}]
		}
	}
	queues, qerr := s.queueMessages(qctx)
	stranding := slices.ContainsFunc(results, func(r faultResult) bool { return r.strands })
	drainLine, drainFail := drainVerdict(queues, qerr, stranding)

	fmt.Fprintln(s.out)
	fmt.Fprintln(s.out, "faults, one after another under load:")
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tat\tfault\tdetail\tsenders saw non-2xx\trecovery\treconciled pairs\tby reason\tduplicate POSTs\tinversions\tbacklog after the restore (s:pairs)")
	for i := range results {
		until := time.Now()
		if i+1 < len(results) {
			until = results[i+1].injected
		}
		results[i].duplicates = s.dest.duplicatesBetween(results[i].injected, until)
		results[i].inversions = s.dest.inversionsBetween(results[i].injected, until)
		if first := s.load.firstAcceptedAfter(results[i].restored); !first.IsZero() {
			results[i].answering, results[i].answered = first.Sub(results[i].restored), true
		}
	}
	for i, r := range results {
		rec := r.recovery.Round(100 * time.Millisecond).String()
		if !r.recovered {
			rec = "not within 3m"
			fail("fault %q: not recovered within 3m", r.name)
		}
		if r.strands && !r.tiersSettleOK {
			fail("fault %q: the retry tiers were not seen settled %s after the restore: %s", r.name, tiersSettleWithin, r.tiersWhy)
		}
		if r.checked != "" {
			fail("fault %q: %s", r.name, r.checked)
		}
		if !r.strands && r.reconciled > 0 {
			fail("fault %q strands nothing, yet the reconciler re-sent %d pair(s): late copies taken for lost ones", r.name, r.reconciled)
		}
		if len(r.inversions) > 0 {
			inv := r.inversions[0]
			fail("fault %q: %d POST(s) of route %s out of sequence, e.g. %s #%d after #%d was delivered", r.name, len(r.inversions), orderedRoute, inv.resource, inv.seq, inv.after)
		}
		fmt.Fprintf(tw, "  %d\t+%.0fs\t%s\t%s\t%d\t%s\t%d\t%s\t%d\t%d\t%s\n", i+1, r.at.Seconds(), r.name, r.detail, r.non2xx, rec, r.reconciled,
			formatResent(r.resent), r.duplicates, len(r.inversions), formatBacklog(r.backlog))
	}
	_ = tw.Flush()

	fmt.Fprintln(s.out)
	fmt.Fprintln(s.out, "events first sent from each fault's start to the next one's:")
	tw = tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tfault\tevents sent\tanswered 2xx\tpairs delivered\tlost\tduplicate POSTs\tfirst 2xx after the restore\tall accepted delivered after the restore")
	for i, r := range results {
		until := time.Now()
		if i+1 < len(results) {
			until = results[i+1].injected
		}
		w := s.window(posts, r.injected, until)
		rec := r.recovery.Round(100 * time.Millisecond).String()
		if !r.recovered {
			rec = "not within 3m"
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%d of %d\t%d\t%d\t%s\t%s\n", i+1, r.name, w.sent, w.answered, w.delivered, w.pairs, w.lost,
			r.duplicates, formatAnswering(r), rec)
	}
	_ = tw.Flush()

	fmt.Fprintln(s.out)
	tw = tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	pairsExpected, pairsDelivered := 0, 0
	for _, r := range routes {
		pairsExpected += expected[r.name]
		pairsDelivered += delivered[r.name]
	}
	fmt.Fprintf(tw, "  load\t%d events/s\n", s.rate)
	fmt.Fprintf(tw, "  events sent\t%d (%d requests, %d resends of earlier events)\n", started, sends, s.load.dups)
	fmt.Fprintf(tw, "  answered 2xx\t%d events (%d non-2xx answers on the way)\n", len(acc), non2xx)
	fmt.Fprintf(tw, "  stored\t%d events\n", stored)
	fmt.Fprintf(tw, "  pairs delivered\t%d of %d\n", pairsDelivered, pairsExpected)
	fmt.Fprintf(tw, "  LOST (must be 0)\t%d\n", lost)
	allInversions := s.dest.inversionsBetween(time.Time{}, time.Now())
	fmt.Fprintf(tw, "  INVERSIONS on route %s (must be 0)\t%d\n", orderedRoute, len(allInversions))
	fmt.Fprintf(tw, "  destination requests\t%d (%d malformed)\n", requests, malformed)
	fmt.Fprintf(tw, "  outbox empty\t%v (%d rows)\n", outbox == 0, outbox)
	fmt.Fprintf(tw, "  queues drained\t%s\n", drainLine)
	_ = tw.Flush()

	fmt.Fprintln(s.out)
	tw = tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	// What a duplicate is: destination.isDuplicate.
	fmt.Fprintln(s.out, "duplicate POSTs: those a pair's delivery did not need, whatever their answer (after the accepted one, or an attempt number sent again)")
	fmt.Fprintln(tw, "  route\tpairs\tdelivered\tduplicate POSTs\tbound (consumers × prefetch 1 × interrupting faults)")
	for _, r := range routes {
		bound := dispatches * r.concurrency * interrupting
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\n", r.name, expected[r.name], delivered[r.name], dupPosts[r.name], bound)
		if dupPosts[r.name] > bound {
			fail("route %s: %d duplicate POSTs, over the bound %d", r.name, dupPosts[r.name], bound)
		}
	}
	_ = tw.Flush()

	if lost > 0 {
		miss := s.missing(time.Time{})
		sample := miss
		if len(sample) > 10 {
			sample = sample[:10]
		}
		fail("%d pair(s) lost, e.g. %v", lost, sample)
	}
	if len(allInversions) > 0 {
		inv := allInversions[0]
		fail("%d POST(s) of route %s out of sequence in all, e.g. %s #%d after #%d was delivered", len(allInversions), orderedRoute, inv.resource, inv.seq, inv.after)
	}
	if stored != int64(len(acc)) {
		fail("%d events stored, %d answered 2xx: each accepted event must be stored exactly once", stored, len(acc))
	}
	if outbox != 0 {
		fail("outbox holds %d rows after the drain", outbox)
	}
	if malformed > 0 {
		fail("destination got %d malformed requests", malformed)
	}
	if drainFail != "" {
		fail("%s", drainFail)
	}
	fails = append(fails, stopErrs...)
	if len(fails) > 0 {
		fmt.Fprintln(s.out, "\nchaos: FAIL")
		for _, f := range fails {
			fmt.Fprintln(s.out, "  -", f)
		}
		return &failedError{reasons: fails}
	}
	fmt.Fprintln(s.out, "\nchaos: PASS: nothing lost, nothing out of order, duplicates within their bounds")
	return nil
}

// drainVerdict says whether the suite's queues drained after the load
// stopped: the report's line, and why the run fails ("" when it does
// not). queues are the message counts of every queue of the suite (qerr:
// they could not be read: the run fails, as nothing was seen); stranding
// says whether a fault that can strand messages in the retry tiers ran.
//
// Every pair is delivered by then (the run fails otherwise), so a message
// left is a copy of a delivered pair. In a route queue it means no
// dispatcher consumes it, in a dead-letter queue that a copy exhausted
// its attempts or found its event missing: both fail the run. In a retry
// tier it may be one the broker stranded at a node's death (the
// reconciler re-sent its pair): explained after a fault that strands,
// a failure after any other.
func drainVerdict(queues map[string]int, qerr error, stranding bool) (line, failure string) {
	if qerr != nil {
		return fmt.Sprintf("unknown: %v", qerr), fmt.Sprintf("the queues could not be read after the drain: %v", qerr)
	}
	var left, inTiers []string
	tiersOnly := true
	for name, n := range queues {
		if n == 0 {
			continue
		}
		left = append(left, fmt.Sprintf("%s=%d", name, n))
		if strings.HasPrefix(name, prefix+".retry.") {
			inTiers = append(inTiers, fmt.Sprintf("%s=%d", name, n))
		} else {
			tiersOnly = false
		}
	}
	sort.Strings(left)
	sort.Strings(inTiers)
	switch {
	case len(left) == 0:
		return fmt.Sprintf("yes (%d queues)", len(queues)), ""
	case tiersOnly && stranding:
		return "no, explained: " + strings.Join(inTiers, " ") +
			" stranded in the retry tiers by a node fault (the reconciler re-sent their pairs, every pair is delivered)", ""
	case tiersOnly:
		return "no: " + strings.Join(left, " "),
			"messages left in the retry tiers after the drain, and no fault of the run strands any: " + strings.Join(left, " ")
	default:
		return "no: " + strings.Join(left, " "), "queues still hold messages after the drain: " + strings.Join(left, " ")
	}
}
