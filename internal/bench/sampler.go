package bench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// group is a set of processes measured as one: a child of the benchmark,
// or a server made of several processes (Postgres, RabbitMQ).
type group struct {
	name string
	// pidsFunc returns the current members; called at every sample, so
	// members may come and go (a restarted dispatcher, a new backend).
	pidsFunc func() []int
	// pss measures memory as summed PSS instead of RSS, for processes that
	// share memory (Postgres' shared buffers would otherwise count once
	// per backend).
	pss bool
}

type procKey struct {
	pid   int
	start uint64
}

type groupState struct {
	group
	started bool
	last    map[procKey]uint64 // CPU ticks at the previous sample
	ticks   uint64             // CPU ticks accumulated since the first sample
	peakKB  uint64             // largest memory sample since the last mark
	lastKB  uint64             // the latest memory sample
	pssOK   bool               // every PSS read of the last sample succeeded
}

// sampler accumulates the CPU time and the peak memory of each group. CPU
// time comes from /proc/<pid>/stat, whose counters include everything a
// process used since it started, so a sample every interval loses only the
// CPU of a process that ended between two samples (after its last one).
// Memory peaks are the largest of the samples, so a spike shorter than the
// interval can be missed.
type sampler struct {
	mu     sync.Mutex
	groups []*groupState
}

func newSampler(groups []group) *sampler {
	s := &sampler{}
	for _, g := range groups {
		s.groups = append(s.groups, &groupState{group: g, last: map[procKey]uint64{}, pssOK: true})
	}
	return s
}

// run samples every interval until ctx is done.
func (s *sampler) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.sample()
		}
	}
}

// sample reads every member of every group once. A process that is gone
// between listing and reading is skipped.
func (s *sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		seen := make(map[procKey]uint64, len(g.last))
		var memKB uint64
		pssOK := true
		for _, pid := range g.pidsFunc() {
			st, err := readPidStat(pid)
			if err != nil {
				continue
			}
			key := procKey{pid: pid, start: st.Start}
			seen[key] = st.Ticks
			if prev, ok := g.last[key]; ok {
				g.ticks += st.Ticks - prev
			} else if g.started {
				// A process that appeared since the previous sample: all
				// of its CPU time is new.
				g.ticks += st.Ticks
			}
			if g.pss {
				kb, ok, err := readPSS(pid)
				if err != nil {
					continue // gone since its stat was read
				}
				if ok {
					memKB += kb
					continue
				}
				pssOK = false // refused: fall back to RSS
			}
			if kb, err := readRSS(pid); err == nil {
				memKB += kb
			}
		}
		g.last = seen
		g.started = true
		g.peakKB = max(g.peakKB, memKB)
		g.lastKB = memKB
		g.pssOK = g.pssOK && pssOK
	}
}

// memKB returns the latest memory sample of the group name (0 when there
// is none).
func (s *sampler) memKB(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		if g.name == name {
			return g.lastKB
		}
	}
	return 0
}

// mark is a point to measure from.
type mark struct {
	at      time.Time
	machine machineCPU
	ticks   map[string]uint64
}

// mark samples now, starts new memory peaks, and returns the point.
func (s *sampler) mark() (mark, error) {
	s.sample()
	m := mark{at: time.Now(), ticks: map[string]uint64{}}
	var err error
	if m.machine, err = readMachineCPU(); err != nil {
		return mark{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.groups {
		m.ticks[g.name] = g.ticks
		g.peakKB = 0
	}
	return m, nil
}

// since samples now and returns what was used since m.
func (s *sampler) since(m mark) (Usage, error) {
	s.sample()
	now, err := readMachineCPU()
	if err != nil {
		return Usage{}, err
	}
	u := Usage{
		Wall:       time.Since(m.at).Seconds(),
		MachineCPU: float64(now.Busy-m.machine.Busy) / ticksPerSecond,
	}
	if total := now.Total - m.machine.Total; total > 0 {
		u.MachineBusy = float64(now.Busy-m.machine.Busy) / float64(total)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var tracked float64
	for _, g := range s.groups {
		cpu := float64(g.ticks-m.ticks[g.name]) / ticksPerSecond
		if cpu == 0 && g.peakKB == 0 {
			continue // not running in this phase
		}
		kind := "rss"
		if g.pss && g.pssOK {
			kind = "pss"
		}
		u.Procs = append(u.Procs, ProcUsage{Name: g.name, CPU: cpu, PeakMB: float64(g.peakKB) / 1024, Mem: kind})
		tracked += cpu
	}
	u.OtherCPU = u.MachineCPU - tracked
	return u, nil
}

// Usage is the CPU and memory used during one phase.
type Usage struct {
	// Wall is the phase's duration in seconds.
	Wall float64 `json:"wall_s"`
	// MachineCPU is the CPU time of the whole machine, in seconds: every
	// process, the benchmark's and anyone else's.
	MachineCPU float64 `json:"machine_cpu_s"`
	// MachineBusy is the share of the machine's CPU capacity that was busy.
	MachineBusy float64 `json:"machine_busy"`
	// OtherCPU is MachineCPU minus the processes measured here: other
	// work on the machine (and the kernel's own threads), the noise in
	// MachineCPU.
	OtherCPU float64     `json:"other_cpu_s"`
	Procs    []ProcUsage `json:"procs"`
	// WALBytes is the WAL the Postgres server wrote, and Checkpoints the
	// checkpoints it started (whole server, like MachineCPU).
	WALBytes    uint64 `json:"wal_bytes"`
	Checkpoints int64  `json:"checkpoints"`
}

// ProcUsage is one process (or server) in one phase.
type ProcUsage struct {
	Name string `json:"name"`
	// CPU is user + system time in seconds.
	CPU float64 `json:"cpu_s"`
	// PeakMB is the largest memory sample in MiB.
	PeakMB float64 `json:"peak_mb"`
	// Mem says what PeakMB measures: rss, or pss summed over the
	// server's processes.
	Mem string `json:"mem"`
}

// Proc returns the usage of the named group, and whether it ran.
func (u Usage) Proc(name string) (ProcUsage, bool) {
	for _, p := range u.Procs {
		if p.Name == name {
			return p, true
		}
	}
	return ProcUsage{}, false
}

// serverPIDs returns a pid func for a server: the process itself and its
// children (Postgres' postmaster and its backends, RabbitMQ's beam.smp and
// its port programs).
func serverPIDs(pid int) func() []int {
	return func() []int {
		kids, err := childPIDs(pid)
		if err != nil {
			return nil // the server is gone
		}
		return append([]int{pid}, kids...)
	}
}

// selfPIDs is the benchmark's own process: the load generator, the
// sampler and the orchestration.
func selfPIDs() []int { return []int{os.Getpid()} }

// checkProc fails early when /proc cannot be read (not Linux, or a
// sandbox without it): every CPU figure of the benchmark comes from there.
func checkProc() error {
	if _, err := readMachineCPU(); err != nil {
		return fmt.Errorf("the benchmark measures CPU from /proc (Linux only): %w", err)
	}
	if _, err := readPidStat(os.Getpid()); err != nil {
		return fmt.Errorf("the benchmark measures processes from /proc (Linux only): %w", err)
	}
	return nil
}
