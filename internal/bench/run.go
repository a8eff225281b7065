package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"debug/buildinfo"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/jackc/pgx/v5"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"go.yaml.in/yaml/v3"
)

// runner is one benchmark run: the throwaway resources, the children, and
// the results.
type runner struct {
	o              options
	stdout, stderr io.Writer
	res            *Results

	exe, receiverBin, dispatcherBin string
	runID, prefix                   string
	work                            string
	workIsTemp                      bool

	admin               *pgx.Conn
	adminURL            string
	relayName, bareName string
	relayURL, bareURL   string
	// runningURL is the URL the receiver and the dispatcher log in with:
	// relayURL, or appURL in the even rounds of --rls.
	runningURL, appURL  string
	created             []string
	relay               *pgx.Conn // the relay's database, for counts
	mg                  *mgmt
	mgReady             bool
	amqpConn            *amqp091.Connection
	sampler             *sampler
	procs               *procs
	dest                *destClient
	configPath          string
	receiverAddr        string
	dispatcherAddr      string
	metricsAddr         string // the receiver's metrics listener
	sourceSecret        string
	signingSecret       string
	mu                  sync.Mutex
	current             map[string]*process // running child per group name
	postmaster, beamPID int
	relaySender         *sender
	checked             *checkedPhase
	round               int       // the round running, from 1
	prof                *profiler // --profile; nil without it
	// collector receives the spans of --tracing's even rounds, when
	// tracingOn.
	collector *benchCollector
	tracingOn bool
	// rulesOn: the routes have rules (--filters' even rounds).
	rulesOn bool
	// fifoOn: the route has ordering fifo (the delivery-fifo phase).
	fifoOn bool
	// amqpOn: the route publishes into the target exchange (the
	// delivery-amqp phase).
	amqpOn bool
}

// Group names of the per-process table.
const (
	procBench         = "bench"
	procReceiver      = "receiver"
	procDispatcher    = "dispatcher"
	procDestination   = "destination"
	procBareIngest    = "bare-ingest"
	procBareForwarder = "bare-forwarder"
	procBareRelay     = "bare-relay"
	procPostgres      = "postgres"
	procRabbitMQ      = "rabbitmq"
)

func run(ctx context.Context, o options, stdout, stderr io.Writer) (err error) {
	if err := checkProc(); err != nil {
		return err
	}
	// Progress lines come from several goroutines (the load's watcher,
	// the soak's samples).
	stderr = &lockedWriter{w: stderr}
	r := &runner{o: o, stdout: stdout, stderr: stderr, current: map[string]*process{},
		res: &Results{Started: time.Now().UTC()}}
	defer func() {
		if terr := r.teardown(err == nil); terr != nil {
			err = errors.Join(err, fmt.Errorf("cleaning up: %w", terr))
		}
	}()
	if err := r.setup(ctx); err != nil {
		return err
	}
	r.logf("hookrelay bench %s: database %s, prefix %s, logs in %s", r.runID, r.relayName, r.prefix, r.work)
	r.printHeader(r.stderr)

	sctx, stopSampler := context.WithCancel(ctx)
	defer stopSampler()
	go r.sampler.run(sctx, time.Second)

	steps := []struct {
		phase string
		fn    func(context.Context) error
	}{
		{phaseIngest, r.ingestPhases},
		{phaseBareIngest, r.bareIngestPhase},
		{phaseDelivery, r.deliveryPhase},
		{phaseDeliveryFIFO, r.deliveryFIFOPhase},
		{phaseDeliveryAMQP, r.deliveryAMQPPhase},
		{phaseBareForwarder, func(ctx context.Context) error { return r.bareForwarderPhase(ctx, false) }},
		{phaseBareRecorder, func(ctx context.Context) error { return r.bareForwarderPhase(ctx, true) }},
		{phaseE2E, r.e2ePhase},
		{phaseBareE2E, func(ctx context.Context) error { return r.bareE2EPhase(ctx, false) }},
		{phaseBareRecorderE2E, func(ctx context.Context) error { return r.bareE2EPhase(ctx, true) }},
	}
	if o.soak > 0 {
		r.round = 1
		if err := r.soakPhase(ctx); err != nil {
			return fmt.Errorf("soak: %w", err)
		}
	}
	if o.search && o.phases[phaseIngest] {
		if err := r.searchWithoutIndex(ctx); err != nil {
			return err
		}
	} else if o.search {
		r.res.Search = &Search{}
	}
	for r.round = 1; o.soak == 0 && r.round <= o.rounds; r.round++ {
		if o.rounds > 1 {
			r.logf("round %d of %d", r.round, o.rounds)
		}
		if o.history > 0 && r.round == 2 {
			if err := r.prefillHistory(ctx, o.history); err != nil {
				return err
			}
		}
		if o.rls {
			if err := r.switchRole(ctx, r.round); err != nil {
				return err
			}
		}
		if o.tracing {
			if err := r.switchTracing(ctx, r.round); err != nil {
				return err
			}
		}
		if o.filters {
			if err := r.switchFilters(ctx, r.round); err != nil {
				return err
			}
		}
		for _, s := range steps {
			if !o.phases[s.phase] {
				continue
			}
			if err := s.fn(ctx); err != nil {
				return fmt.Errorf("round %d, phase %s: %w", r.round, s.phase, err)
			}
		}
	}
	if err := r.recheck(ctx); err != nil {
		return err
	}
	if o.history > 0 {
		if err := r.purgeHistory(ctx); err != nil {
			return err
		}
		r.compareHistory()
	}
	if o.search {
		if err := r.searchTimings(ctx); err != nil {
			return err
		}
		r.compareSearch()
	}
	r.compareRLS()
	r.compareTracing()
	r.compareFilters()
	if err := r.profileTops(ctx); err != nil {
		return err
	}
	r.res.WallS = time.Since(r.res.Started).Seconds()
	r.res.Host.LoadAvgEnd = loadAvg()
	r.summarize()
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r.res); err != nil {
			return fmt.Errorf("writing results: %w", err)
		}
	} else if err := r.printTable(stdout); err != nil {
		return fmt.Errorf("writing results: %w", err)
	}
	if len(r.res.Failures) > 0 {
		return fmt.Errorf("the relay failed its checks: %s", strings.Join(r.res.Failures, "; "))
	}
	return nil
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.stderr, format+"\n", args...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

func (r *runner) setup(ctx context.Context) error {
	var err error
	if r.exe, err = os.Executable(); err != nil {
		return fmt.Errorf("finding the running executable: %w", err)
	}
	if r.receiverBin, err = findBinary(r.o.receiverBin, "receiver", r.exe); err != nil {
		return err
	}
	if r.dispatcherBin, err = findBinary(r.o.dispatcherBin, "dispatcher", r.exe); err != nil {
		return err
	}
	r.res.Binaries = []Binary{binaryInfo("receiver", r.receiverBin), binaryInfo("dispatcher", r.dispatcherBin)}
	r.res.Host = Host{CPUs: runtime.NumCPU(), Kernel: kernel(), LoadAvgStart: loadAvg()}
	r.res.Load = Load{
		Clients: r.o.clients, DurationS: r.o.duration.Seconds(), Backlog: r.o.backlog, Rate: r.o.rate,
		E2EDurationS: r.o.e2eDuration.Seconds(), Concurrency: r.o.concurrency, DBConns: r.o.dbConns,
		BodyBytes: r.o.bodySize, DestDelayMS: ms(r.o.destDelay),
	}
	r.runID = randomHex(4)
	r.prefix = "hrbench-" + r.runID
	r.relayName = "hookrelay_bench_" + r.runID
	r.bareName = r.relayName + "_bare"
	r.res.Database, r.res.Prefix = r.relayName, r.prefix
	r.res.Rounds = r.o.rounds

	if r.o.work == "" {
		if r.work, err = os.MkdirTemp("", "hookrelay-bench-"); err != nil {
			return fmt.Errorf("creating work folder: %w", err)
		}
		r.workIsTemp = true
	} else {
		r.work = r.o.work
		if err := os.MkdirAll(r.work, 0o755); err != nil {
			return fmt.Errorf("creating work folder: %w", err)
		}
	}
	r.procs = newProcs(r.work)

	// Postgres: settings, the server's processes, the throwaway databases.
	r.adminURL = r.o.databaseURL
	if r.admin, err = connect(ctx, r.adminURL); err != nil {
		return err
	}
	info, err := readPGInfo(ctx, r.admin)
	if err != nil {
		return err
	}
	r.res.Postgres, r.postmaster = info, info.postmaster
	if r.relayURL, err = r.createDB(ctx, r.relayName); err != nil {
		return err
	}
	if r.o.phases[phaseBareIngest] || r.o.phases[phaseBareE2E] || r.o.phases[phaseBareRecorder] || r.o.phases[phaseBareRecorderE2E] {
		if r.bareURL, err = r.createDB(ctx, r.bareName); err != nil {
			return err
		}
	}
	if r.relay, err = connect(ctx, r.relayURL); err != nil {
		return err
	}
	if err := r.setupProfiler(ctx); err != nil {
		return err
	}

	// RabbitMQ: version, beam's pid; from here the prefix is cleaned up.
	if r.mg, err = newMgmt(r.o.managementURL, r.o.amqpURL); err != nil {
		return err
	}
	bi, err := r.mg.info(ctx)
	if err != nil {
		return err
	}
	r.res.RabbitMQ, r.beamPID = bi, bi.pid
	r.mgReady = true
	if r.amqpConn, err = dialAMQP(r.o.amqpURL, "hookrelay-bench"); err != nil {
		return err
	}

	groups := []group{
		{name: procBench, pidsFunc: selfPIDs},
		{name: procReceiver, pidsFunc: r.pidsOf(procReceiver)},
		{name: procDispatcher, pidsFunc: r.pidsOf(procDispatcher)},
		{name: procDestination, pidsFunc: r.pidsOf(procDestination)},
		{name: procBareIngest, pidsFunc: r.pidsOf(procBareIngest)},
		{name: procBareForwarder, pidsFunc: r.pidsOf(procBareForwarder)},
		{name: procBareRelay, pidsFunc: r.pidsOf(procBareRelay)},
	}
	if r.postmaster > 1 {
		groups = append(groups, group{name: procPostgres, pidsFunc: serverPIDs(r.postmaster), pss: true})
	} else {
		r.logf("note: Postgres is not a process of this machine; its CPU is not measured")
	}
	if _, err := readPidStat(r.beamPID); err == nil {
		groups = append(groups, group{name: procRabbitMQ, pidsFunc: serverPIDs(r.beamPID), pss: true})
	} else {
		r.logf("note: RabbitMQ (os pid %d) is not a process of this machine; its CPU is not measured", r.beamPID)
	}
	r.sampler = newSampler(groups)

	// The destination, then the config that points the route at it.
	r.signingSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte(randomHex(16)))
	r.sourceSecret = randomHex(16)
	destArgs := []string{ChildArg, roleDestination, "--secret", r.signingSecret, "--delay", r.o.destDelay.String()}
	if r.o.phases[phaseDeliveryAMQP] {
		// The amqp route's exchange and its queue, which the destination
		// consumes, recording each message as a delivery to the route.
		if err := declareTarget(r.amqpConn, r.targetName(), r.o.targetQueue); err != nil {
			return err
		}
		destArgs = append(destArgs, "--amqp-url", r.o.amqpURL, "--queue", r.targetName(), "--queue-route", benchRoute)
	}
	p, line, err := r.procs.start(ctx, procDestination, r.exe, destArgs, true, 15*time.Second)
	if err != nil {
		return err
	}
	r.setCurrent(procDestination, p)
	addr, ok := strings.CutPrefix(line, "ready ")
	if !ok {
		return fmt.Errorf("destination announced %q, want \"ready <addr>\"", line)
	}
	r.dest = newDestClient(addr)
	if err := r.writeConfig(); err != nil {
		return err
	}
	r.relaySender = newSender("http://"+r.receiverAddr+"/webhooks/"+benchSource, []byte(r.sourceSecret), r.runID, r.o.bodySize, r.o.clients)
	if err := r.startReceiver(ctx); err != nil {
		return err
	}
	return r.dispatcherUp(ctx)
}

// createDB creates and migrates a throwaway database, dropped at the end
// (also when migrating it fails), and returns its URL.
func (r *runner) createDB(ctx context.Context, name string) (string, error) {
	dbURL, err := withDatabase(r.adminURL, name)
	if err != nil {
		return "", err
	}
	if err := createDatabase(ctx, r.admin, name); err != nil {
		return "", err
	}
	r.created = append(r.created, name)
	return dbURL, migrateDatabase(ctx, dbURL)
}

// teardown stops the children, deletes the broker names and drops the
// databases. The work folder is removed after a passing run unless asked to
// keep it; after a failure it stays, for its logs.
func (r *runner) teardown(passed bool) error {
	var errs []error
	if r.procs != nil {
		if err := r.procs.stopAll(45 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if r.collector != nil {
		r.collector.close() // after the children's last exports
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r.amqpConn != nil {
		_ = r.amqpConn.Close() // nothing depends on a clean close
	}
	if r.mgReady {
		if err := r.mg.cleanup(ctx, r.prefix); err != nil {
			errs = append(errs, err)
		}
	}
	r.closeProfiler(ctx)
	if r.relay != nil {
		_ = r.relay.Close(ctx)
	}
	for _, name := range r.created {
		if err := dropDatabase(ctx, r.admin, name); err != nil {
			errs = append(errs, err)
		}
	}
	if r.admin != nil {
		_ = r.admin.Close(ctx)
	}
	if r.work != "" {
		if passed && len(errs) == 0 && r.workIsTemp && !r.o.keep {
			if err := os.RemoveAll(r.work); err != nil {
				errs = append(errs, fmt.Errorf("removing %s: %w", r.work, err))
			}
		} else {
			r.logf("logs and config kept in %s", r.work)
		}
	}
	return errors.Join(errs...)
}

// freeAddr returns a loopback address with a port free at the time of the
// call, for the receiver's and the dispatcher's listeners.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// writeConfig writes the config of the receiver and the dispatcher: one
// source with an hmac signature, one route to the destination, the
// throwaway database and prefix, defaults elsewhere. It loads the file
// with the real loader before anything starts, so a config the binaries
// would refuse stops the run here with the loader's message.
func (r *runner) writeConfig() error {
	// The addresses stay what they were on a rewrite (--rls): the senders
	// keep theirs.
	for _, addr := range []*string{&r.receiverAddr, &r.dispatcherAddr, &r.metricsAddr} {
		if *addr != "" {
			continue
		}
		var err error
		if *addr, err = freeAddr(); err != nil {
			return err
		}
	}
	if r.runningURL == "" {
		r.runningURL = r.relayURL
	}
	cfg := map[string]any{
		"database": map[string]any{"url": r.runningURL, "max_conns": r.o.dbConns},
		"amqp": map[string]any{
			"url": r.o.amqpURL, "prefix": r.prefix, "management_url": r.o.managementURL,
		},
		"receiver":   map[string]any{"listen": r.receiverAddr, "metrics_listen": r.metricsAddr},
		"dispatcher": map[string]any{"listen": r.dispatcherAddr},
		"log":        map[string]any{"level": "info", "format": "json"},
		"tracing":    map[string]any{"enabled": r.tracingOn},
		"sources": []any{map[string]any{
			"name": benchSource,
			"verify": map[string]any{
				"scheme": "hmac", "secrets": []string{r.sourceSecret}, "algorithm": "sha256",
				"encoding": "hex", "header": benchSigHeader, "prefix": benchSigPrefix,
			},
			"idempotency": map[string]any{"json_path": "id"},
			"event_type":  map[string]any{"json_path": "type"},
		}},
		"routes": r.routesConfig(),
	}
	if r.o.phases[phaseDeliveryFIFO] {
		// Every phase of such a run has the resources, so that delivery
		// and delivery-fifo differ in the route's ordering alone.
		cfg["sources"].([]any)[0].(map[string]any)["ordering"] = map[string]any{"resource": map[string]any{"json_path": "data.object.lane"}}
	}
	r.profileConfig(cfg)
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("encoding config: %w", err)
	}
	r.configPath = filepath.Join(r.work, "config.yaml")
	// 0600: it holds the run's secrets (random, used once).
	if err := os.WriteFile(r.configPath, out, 0o600); err != nil {
		return fmt.Errorf("writing config: %w", err)
	}
	noEnv := func(string) (string, bool) { return "", false }
	if _, err := config.Load(r.configPath, noEnv); err != nil {
		return fmt.Errorf("the benchmark's config does not load: %w", err)
	}
	return nil
}

func (r *runner) setCurrent(name string, p *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p == nil {
		delete(r.current, name)
		return
	}
	r.current[name] = p
}

func (r *runner) pidsOf(name string) func() []int {
	return func() []int {
		r.mu.Lock()
		defer r.mu.Unlock()
		if p := r.current[name]; p != nil {
			return []int{p.pid()}
		}
		return nil
	}
}

// alive returns an error when a child that should be running has exited.
func (r *runner) alive() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.current {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

func (r *runner) startReceiver(ctx context.Context) error {
	p, _, err := r.procs.start(ctx, procReceiver, r.receiverBin, []string{"--config", r.configPath}, false, 0)
	if err != nil {
		return err
	}
	r.setCurrent(procReceiver, p)
	return waitReady(ctx, p, "http://"+r.receiverAddr+"/readyz", 60*time.Second)
}

// dispatcherUp starts the dispatcher unless it runs; with wait it returns
// once it is ready.
func (r *runner) dispatcherUp(ctx context.Context) error {
	p, err := r.startDispatcher(ctx)
	if err != nil {
		return err
	}
	return waitReady(ctx, p, "http://"+r.dispatcherAddr+"/readyz", 60*time.Second)
}

func (r *runner) startDispatcher(ctx context.Context) (*process, error) {
	r.mu.Lock()
	p := r.current[procDispatcher]
	r.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, _, err := r.procs.start(ctx, procDispatcher, r.dispatcherBin, []string{"--config", r.configPath}, false, 0)
	if err != nil {
		return nil, err
	}
	r.setCurrent(procDispatcher, p)
	return p, nil
}

// dispatcherDown stops the dispatcher (SIGTERM: in-flight deliveries
// finish and are acked) unless it is stopped.
// receiverDown stops the receiver.
func (r *runner) receiverDown() error { return r.stopChild(procReceiver) }

func (r *runner) dispatcherDown() error { return r.stopChild(procDispatcher) }

// stopChild stops the child name when it runs.
func (r *runner) stopChild(name string) error {
	r.mu.Lock()
	p := r.current[name]
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	err := p.stop(45 * time.Second)
	r.setCurrent(name, nil)
	return err
}

func binaryInfo(name, path string) Binary {
	b := Binary{Name: name, Path: path}
	if st, err := os.Stat(path); err == nil {
		b.Built = st.ModTime()
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return b
	}
	b.GoVersion = bi.GoVersion
	b.Revision, b.Modified = vcs(bi.Settings)
	return b
}

func vcs(settings []debug.BuildSetting) (rev string, modified bool) {
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return rev, modified
}

func kernel() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return runtime.GOOS + " " + strings.TrimSpace(string(b))
}

// loadAvg returns the 1, 5 and 15 minute load averages: how busy the
// machine was, which on a shared machine says how far to trust a run.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// phaseMark is where a phase's measurements start.
type phaseMark struct {
	mark
	pg pgActivity
}

// begin marks the start of a measured window.
func (r *runner) begin(ctx context.Context) (phaseMark, error) {
	pg, err := readPGActivity(ctx, r.admin, r.res.Postgres.versionNum)
	if err != nil {
		return phaseMark{}, err
	}
	m, err := r.sampler.mark()
	if err != nil {
		return phaseMark{}, err
	}
	return phaseMark{mark: m, pg: pg}, nil
}

// end returns what was used since m.
func (r *runner) end(ctx context.Context, m phaseMark) (Usage, error) {
	u, err := r.sampler.since(m.mark)
	if err != nil {
		return Usage{}, err
	}
	pg, err := readPGActivity(ctx, r.admin, r.res.Postgres.versionNum)
	if err != nil {
		return Usage{}, err
	}
	u.WALBytes = pg.wal - m.pg.wal
	u.Checkpoints = pg.checkpoints - m.pg.checkpoints
	return u, nil
}

// routeQueue is the relay's queue for the benchmark's route.
func (r *runner) routeQueue() string { return amqp.Names{Prefix: r.prefix}.RouteQueue(benchRoute) }
