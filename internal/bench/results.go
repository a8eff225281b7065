package bench

import "time"

// Results is one run, as --json prints it.
type Results struct {
	Started  time.Time  `json:"started"`
	WallS    float64    `json:"wall_s"`
	Host     Host       `json:"host"`
	Binaries []Binary   `json:"binaries"`
	Postgres pgInfo     `json:"postgres"`
	RabbitMQ brokerInfo `json:"rabbitmq"`
	Load     Load       `json:"load"`
	// Database and Prefix are the run's throwaway names (dropped and
	// deleted at the end).
	Database string   `json:"database"`
	Prefix   string   `json:"prefix"`
	Phases   []*Phase `json:"phases"`
	Ratios   []Ratio  `json:"ratios"`
	// Rounds is how many times the phases ran, one after the other.
	Rounds int `json:"rounds"`
	// CPUPerEventMS is the machine's CPU time per event through the whole
	// relay: ingest with the dispatcher stopped plus the delivery drain
	// (each event crosses each once); the median over the rounds, each of
	// which is in CPUPerEventRounds. 0 when either phase did not run.
	CPUPerEventMS     float64   `json:"cpu_per_event_ms"`
	CPUPerEventRounds []float64 `json:"cpu_per_event_rounds"`
	// OwnCPUPerEventMS is the same with the relay's own processes
	// (receiver, dispatcher, Postgres, RabbitMQ) instead of the machine.
	OwnCPUPerEventMS     float64   `json:"own_cpu_per_event_ms"`
	OwnCPUPerEventRounds []float64 `json:"own_cpu_per_event_rounds"`
	// EndToEnd compares, per round, the end-to-end phase with the bare
	// end-to-end reference run at the same rate.
	EndToEnd []E2ECompare `json:"end_to_end"`
	// Soak is the soak's result (--soak); nil without it.
	Soak *Soak `json:"soak,omitempty"`
	// History is what --history measured; nil without it.
	History *History `json:"history,omitempty"`
	// RLS is --rls's comparison.
	RLS *RLS `json:"rls,omitempty"`
	// Tracing is --tracing's comparison.
	Tracing *Tracing `json:"tracing,omitempty"`
	// Filters is --filters' comparison.
	Filters *Filters `json:"filters,omitempty"`
	// Search is what --search measured.
	Search *Search `json:"search,omitempty"`
	// Failures are the reasons the run failed its checks (lost,
	// duplicated or mis-signed events); empty when it passed.
	Failures []string `json:"failures"`
}

// Host describes the machine.
type Host struct {
	CPUs         int    `json:"cpus"`
	Kernel       string `json:"kernel"`
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

// Binary is one binary under test, with what its build info says.
type Binary struct {
	Name      string `json:"name"`
	Path      string `json:"path"`
	GoVersion string `json:"go_version,omitempty"`
	Revision  string `json:"revision,omitempty"`
	Modified  bool   `json:"modified,omitempty"`
	// Built is the file's modification time: a stale binary shows here.
	Built time.Time `json:"built"`
}

// Load is the run's sizes.
type Load struct {
	Clients      int     `json:"clients"`
	DurationS    float64 `json:"duration_s"`
	Backlog      int     `json:"backlog"`
	Rate         int     `json:"rate"`
	E2EDurationS float64 `json:"e2e_duration_s"`
	Concurrency  int     `json:"concurrency"`
	DBConns      int     `json:"db_conns"`
	BodyBytes    int     `json:"body_bytes"`
	DestDelayMS  float64 `json:"dest_delay_ms"`
}

// Phase is one measurement.
type Phase struct {
	Key string `json:"key"`
	// Round numbers the rounds from 1.
	Round  int    `json:"round"`
	Title  string `json:"title"`
	System string `json:"system"` // hookrelay, or reference
	// Count is the events accepted (ingest, end to end) or delivered
	// (delivery) in the measured window.
	Count int64 `json:"count"`
	// Failed counts requests not answered 200 (ingest, end to end).
	Failed     int64  `json:"failed"`
	FirstError string `json:"first_error,omitempty"`
	// Seconds is the window Rate is computed over: first request to last
	// answer (ingest), first delivery to last (delivery), the sending time
	// (end to end).
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate"`
	// Latency is the request latency (ingest), or the time from the
	// receiver's 200 to the destination (end to end).
	Latency *Latency `json:"latency,omitempty"`
	// IngestLatency is the request latency of the end-to-end phase.
	IngestLatency *Latency `json:"ingest_latency,omitempty"`
	// StallMS is the longest gap between two deliveries (end to end).
	StallMS float64 `json:"stall_ms,omitempty"`
	// StartupMS is from starting the consumer process to its first
	// delivery (delivery).
	StartupMS float64 `json:"startup_ms,omitempty"`
	// Checked says whether the destination's counts were checked;
	// Lost, Duplicates, Unexpected and BadSignatures are those counts.
	// For the bare ingest server, Lost counts accepted events missing
	// from its database.
	Checked       bool `json:"checked"`
	Lost          int  `json:"lost"`
	Duplicates    int  `json:"duplicates"`
	Unexpected    int  `json:"unexpected"`
	BadSignatures int  `json:"bad_signatures"`
	// Unrecorded counts events the relay's database does not record as
	// delivered once the destination had them all (hookrelay phases):
	// they would be sent again.
	Unrecorded int `json:"unrecorded"`
	// CPUPerEventMS is the machine's CPU time in the window over Count.
	CPUPerEventMS float64 `json:"cpu_per_event_ms"`
	// OwnCPUPerEventMS is the CPU time of the system under test's
	// processes (the relay's, or the reference's, with Postgres and
	// RabbitMQ when it uses them) over Count.
	OwnCPUPerEventMS float64 `json:"own_cpu_per_event_ms"`
	// WALPerEvent is the Postgres WAL written in the window over Count,
	// in bytes.
	WALPerEvent float64  `json:"wal_per_event"`
	Usage       Usage    `json:"usage"`
	Notes       []string `json:"notes,omitempty"`
}

// Ratio compares the rate of a hookrelay phase with its reference's.
type Ratio struct {
	Name string `json:"name"`
	Of   string `json:"of"`
	To   string `json:"to"`
	// Round is the round both were measured in; 0 is the median over the
	// rounds (present when there are several).
	Round int     `json:"round"`
	Value float64 `json:"value"`
}

// E2ECompare is hookrelay end to end against the bare relay and forwarder
// at the same rate, in one round: own CPU per event and latency from the
// 200 to the destination, each with its ratio (hookrelay / bare).
type E2ECompare struct {
	Round int `json:"round"`
	// Reference is the reference phase's key: bare-e2e, or
	// bare-recorder-e2e (the recording forwarder).
	Reference string  `json:"reference"`
	OwnCPU    Compare `json:"own_cpu_per_event_ms"`
	P50       Compare `json:"p50_ms"`
	P99       Compare `json:"p99_ms"`
}

// Compare is one measure of hookrelay and of its reference.
type Compare struct {
	Hookrelay float64 `json:"hookrelay"`
	Bare      float64 `json:"bare"`
	// Ratio is Hookrelay / Bare; 0 when Bare is 0.
	Ratio float64 `json:"ratio"`
}

func compare(a, b float64) Compare {
	c := Compare{Hookrelay: a, Bare: b}
	if b > 0 {
		c.Ratio = a / b
	}
	return c
}
