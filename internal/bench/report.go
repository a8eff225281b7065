package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// printHeader writes what the numbers depend on: the machine, the
// binaries, the Postgres settings, the broker and the sizes.
func (r *runner) printHeader(w io.Writer) {
	res := r.res
	fmt.Fprintf(w, "hookrelay bench  %s  run %s\n", res.Started.Format("2006-01-02 15:04:05 MST"), r.runID)
	host := fmt.Sprintf("%d CPUs, %s, load average %s at start", res.Host.CPUs, res.Host.Kernel, res.Host.LoadAvgStart)
	if res.Host.LoadAvgEnd != "" {
		host += ", " + res.Host.LoadAvgEnd + " at end"
	}
	fmt.Fprintf(w, "host       %s\n", host)
	for _, b := range res.Binaries {
		desc := b.Path
		var parts []string
		if b.GoVersion != "" {
			parts = append(parts, b.GoVersion)
		}
		if b.Revision != "" {
			rev := b.Revision
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if b.Modified {
				rev += " (modified)"
			}
			parts = append(parts, "rev "+rev)
		}
		if !b.Built.IsZero() {
			parts = append(parts, "built "+b.Built.UTC().Format(time.DateTime)+" UTC")
		}
		if len(parts) > 0 {
			desc += " (" + strings.Join(parts, ", ") + ")"
		}
		fmt.Fprintf(w, "%-11s%s\n", b.Name, desc)
	}
	var settings []string
	for _, s := range pgSettings {
		settings = append(settings, s+"="+res.Postgres.Settings[s])
	}
	fmt.Fprintf(w, "postgres   %s: %s\n", res.Postgres.Version, strings.Join(settings, " "))
	fmt.Fprintf(w, "rabbitmq   %s on %s\n", res.RabbitMQ.Version, res.RabbitMQ.Node)
	l := res.Load
	dest := "at once"
	if l.DestDelayMS > 0 {
		dest = fmt.Sprintf("after %.0f ms", l.DestDelayMS)
	}
	fmt.Fprintf(w, "load       ingest %d clients × %gs closed loop; delivery backlog %d, route concurrency %d; end to end %d/s × %gs\n"+
		"           receiver pool %d; %d-byte JSON bodies; the destination answers %s\n",
		l.Clients, l.DurationS, l.Backlog, l.Concurrency, l.Rate, l.E2EDurationS, l.DBConns, l.BodyBytes, dest)
}

// printTable writes the results for people: the phases, the ratios, and
// CPU and memory per process.
func (r *runner) printTable(w io.Writer) error {
	res := r.res
	r.printHeader(w)
	fmt.Fprintf(w, "wall       %.0fs\n\n", res.WallS)

	// Right-aligned numbers; the first column is padded to one width so
	// that it reads left-aligned.
	rounds := max(res.Rounds, 1)
	width := len("phase")
	for _, p := range res.Phases {
		width = max(width, utf8.RuneCountInString(p.label(rounds)))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tevents\trate/s\tp50 ms\tp90 ms\tp99 ms\tmax ms\tCPU ms/ev\town CPU\tWAL KB/ev\tlost\tdup\tfailed\t\n", width, "phase")
	for _, p := range res.Phases {
		lat := []string{"-", "-", "-", "-"}
		if p.Latency != nil {
			lat = []string{f1(p.Latency.P50), f1(p.Latency.P90), f1(p.Latency.P99), f1(p.Latency.Max)}
		}
		lost, dup := "-", "-"
		if p.Checked {
			lost = fmt.Sprint(p.Lost)
			if p.Key != "bare-ingest" {
				dup = fmt.Sprint(p.Duplicates)
			}
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.1f\t%s\t%s\t%d\t\n",
			width, p.label(rounds), p.Count, p.Rate, lat[0], lat[1], lat[2], lat[3], p.CPUPerEventMS, p.OwnCPUPerEventMS, p.WALPerEvent/1024, lost, dup, p.Failed)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nlatency: the request (ingest phases); from the receiver's 200 to the destination (end to end: below 0 when the\n  delivery came before the sender read its 200, as both relays publish before they answer).")
	fmt.Fprintln(w, "CPU ms/ev: the whole machine's CPU time in the phase over its events (load generator, destination and other work on the")
	fmt.Fprintln(w, "  machine included; see \"other\" below). own CPU: only the system under test's processes, Postgres and RabbitMQ included.")
	fmt.Fprintln(w, "WAL KB/ev: what the Postgres server wrote to its WAL in the phase over its events (the whole server).")

	var notes []string
	for _, p := range res.Phases {
		var n []string
		if p.StartupMS > 0 {
			n = append(n, fmt.Sprintf("first delivery %.0f ms after the consumer process started (not in the rate)", p.StartupMS))
		}
		if p.IngestLatency != nil {
			n = append(n, fmt.Sprintf("request latency p50 %s / p99 %s ms", f1(p.IngestLatency.P50), f1(p.IngestLatency.P99)))
		}
		n = append(n, p.Notes...)
		if p.Unexpected > 0 {
			n = append(n, fmt.Sprintf("%d pairs arrived that this phase did not send", p.Unexpected))
		}
		if p.BadSignatures > 0 {
			n = append(n, fmt.Sprintf("%d POSTs with a signature that did not verify", p.BadSignatures))
		}
		if p.Unrecorded > 0 {
			n = append(n, fmt.Sprintf("%d events arrived but the relay does not record them as delivered", p.Unrecorded))
		}
		if p.FirstError != "" {
			n = append(n, "first failure: "+p.FirstError)
		}
		for _, s := range n {
			notes = append(notes, fmt.Sprintf("  %s: %s", p.label(rounds), s))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nnotes")
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}

	if err := printRatios(w, res, rounds); err != nil {
		return err
	}
	if err := printEndToEnd(w, res); err != nil {
		return err
	}
	if res.Soak != nil {
		if err := printSoak(w, res.Soak); err != nil {
			return err
		}
	}
	if res.History != nil {
		if err := printHistory(w, res.History); err != nil {
			return err
		}
	}
	if res.RLS != nil {
		if err := printRLS(w, res.RLS); err != nil {
			return err
		}
	}
	if res.Tracing != nil {
		if err := printTracing(w, res.Tracing); err != nil {
			return err
		}
	}
	if res.Filters != nil {
		if err := printFilters(w, res.Filters); err != nil {
			return err
		}
	}
	if res.Search != nil {
		if err := printSearch(w, res.Search); err != nil {
			return err
		}
	}
	first := 1
	if res.Search != nil {
		first = 0 // the ingest without the body index
	}
	for round := first; round <= rounds; round++ {
		if err := printProcs(w, res, round, rounds); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "bench is the load generator (and this program); postgres is every process of the server, rabbitmq beam.smp")
	fmt.Fprintln(w, "and its children (pss: memory shared between them counted once); other is the machine minus all of these")
	fmt.Fprintln(w, "(other work on this machine). It turns slightly negative when the machine is not saturated: the kernel counts")
	fmt.Fprintln(w, "the machine's time by sampling at each tick, and each process's time exactly.")

	if len(res.Failures) > 0 {
		fmt.Fprintln(w, "\nFAILED")
		for _, f := range res.Failures {
			fmt.Fprintln(w, "  "+f)
		}
	}
	return nil
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

// printEndToEnd writes hookrelay end to end against the bare reference at
// the same rate: the yardstick for everyday load.
func printEndToEnd(w io.Writer, res *Results) error {
	for _, ref := range e2eRefs {
		var cs []E2ECompare
		for _, c := range res.EndToEnd {
			if c.Reference == ref {
				cs = append(cs, c)
			}
		}
		if err := printEndToEndAgainst(w, res.Load.Rate, ref, cs); err != nil {
			return err
		}
	}
	return nil
}

// printEndToEndAgainst writes the comparisons cs with the reference ref.
func printEndToEndAgainst(w io.Writer, rate int, ref string, cs []E2ECompare) error {
	if len(cs) == 0 {
		return nil
	}
	what := "the bare relay + forwarder"
	if ref == phaseBareRecorderE2E {
		what = "the bare relay + recording forwarder"
	}
	fmt.Fprintf(w, "\nend to end at %d/s against %s at the same rate (ratio: hookrelay / bare)\n", rate, what)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\town CPU ms/ev\tbare\tratio\tp50 ms\tbare\tratio\tp99 ms\tbare\tratio\t")
	row := func(label string, c E2ECompare) {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%s\t%s\t%.2f\t%s\t%s\t%.2f\t\n", label,
			c.OwnCPU.Hookrelay, c.OwnCPU.Bare, c.OwnCPU.Ratio,
			f1(c.P50.Hookrelay), f1(c.P50.Bare), c.P50.Ratio,
			f1(c.P99.Hookrelay), f1(c.P99.Bare), c.P99.Ratio)
	}
	var cpu, p50, p99 []float64
	for _, c := range cs {
		row(fmt.Sprintf("#%d", c.Round), c)
		cpu, p50, p99 = append(cpu, c.OwnCPU.Ratio), append(p50, c.P50.Ratio), append(p99, c.P99.Ratio)
	}
	if len(cs) > 1 {
		fmt.Fprintf(tw, "median ratio\t\t\t%.2f\t\t\t%.2f\t\t\t%.2f\t\n", median(cpu), median(p50), median(p99))
	}
	return tw.Flush()
}

// printRatios writes the ratios and the CPU per event through the relay:
// one value, or one per round and their median.
func printRatios(w io.Writer, res *Results, rounds int) error {
	if len(res.Ratios) == 0 && len(res.CPUPerEventRounds) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nratios (rate of hookrelay / rate of the reference, measured in the same round)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	if rounds > 1 {
		head := []string{""}
		for round := 1; round <= rounds; round++ {
			head = append(head, fmt.Sprintf("#%d", round))
		}
		fmt.Fprintln(tw, strings.Join(append(head, "median"), "\t")+"\t")
	}
	const cpuName = "CPU ms per event through the relay (ingest, dispatcher stopped + delivery), machine"
	nameWidth := len(cpuName)
	for _, d := range ratioDefs {
		row := []string{fmt.Sprintf("%-*s", nameWidth, d.name)}
		found := false
		for _, rt := range res.Ratios {
			if rt.Name == d.name && (rt.Round > 0 || rounds > 1) {
				row = append(row, fmt.Sprintf("%.2f", rt.Value))
				found = true
			}
		}
		if found {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
	}
	for _, c := range []struct {
		name   string
		rounds []float64
		median float64
	}{
		{cpuName, res.CPUPerEventRounds, res.CPUPerEventMS},
		{"  the same, own processes only", res.OwnCPUPerEventRounds, res.OwnCPUPerEventMS},
	} {
		if len(c.rounds) == 0 {
			continue
		}
		row := []string{fmt.Sprintf("%-*s", nameWidth, c.name)}
		for _, v := range c.rounds {
			row = append(row, fmt.Sprintf("%.2f", v))
		}
		if rounds > 1 {
			row = append(row, fmt.Sprintf("%.2f", c.median))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	return tw.Flush()
}

// printProcs writes the CPU time and peak memory of each process in each
// phase of one round.
func printProcs(w io.Writer, res *Results, round, rounds int) error {
	var phases []*Phase
	for _, p := range res.Phases {
		if p.Round == round || (p.Round == 0 && round == 1 && res.Search == nil) {
			phases = append(phases, p)
		}
	}
	if len(phases) == 0 {
		return nil
	}
	title := "\nCPU seconds and peak memory (MiB) per process and phase"
	if rounds > 1 || round == 0 {
		title += fmt.Sprintf(", round %d", round)
	}
	fmt.Fprintln(w, title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	const nameWidth = len("bare-forwarder")
	head := []string{fmt.Sprintf("%-*s", nameWidth, "process")}
	for _, p := range phases {
		head = append(head, p.Key)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	names := []string{procBench, procReceiver, procDispatcher, procDestination, procBareIngest, procBareForwarder, procBareRelay, procPostgres, procRabbitMQ}
	for _, name := range names {
		row := []string{fmt.Sprintf("%-*s", nameWidth, name)}
		ran := false
		for _, p := range phases {
			u, ok := p.Usage.Proc(name)
			if !ok {
				row = append(row, "-")
				continue
			}
			ran = true
			mem := ""
			if u.Mem == "pss" {
				mem = " pss"
			}
			row = append(row, fmt.Sprintf("%.1fs %4.0fM%s", u.CPU, u.PeakMB, mem))
		}
		if ran {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
	}
	other := []string{fmt.Sprintf("%-*s", nameWidth, "other")}
	machine := []string{fmt.Sprintf("%-*s", nameWidth, "machine")}
	for _, p := range phases {
		other = append(other, fmt.Sprintf("%.1fs", p.Usage.OtherCPU))
		machine = append(machine, fmt.Sprintf("%.1fs, %.0f%% busy", p.Usage.MachineCPU, 100*p.Usage.MachineBusy))
	}
	fmt.Fprintln(tw, strings.Join(other, "\t")+"\t")
	fmt.Fprintln(tw, strings.Join(machine, "\t")+"\t")
	return tw.Flush()
}
