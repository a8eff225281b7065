package bench

import (
	"fmt"
	"slices"
)

// label is the phase's title, with its round when there are several.
func (p *Phase) label(rounds int) string {
	if rounds > 1 {
		return fmt.Sprintf("%s #%d", p.Title, p.Round)
	}
	return p.Title
}

// ratioDefs are the comparisons of hookrelay with its references, by
// phase key.
var ratioDefs = []struct{ name, of, to string }{
	{"ingest, dispatcher stopped / bare ingest", "ingest-stopped", "bare-ingest"},
	{"ingest, dispatcher running / bare ingest", "ingest-running", "bare-ingest"},
	{"delivery / bare forwarder", "delivery", "bare-forwarder"},
	{"delivery in order (fifo) / unordered", phaseDeliveryFIFO, "delivery"},
	{"delivery into an exchange (amqp) / over HTTP", phaseDeliveryAMQP, "delivery"},
	{"delivery / recording forwarder", "delivery", phaseBareRecorder},
	{"recording forwarder / bare forwarder", phaseBareRecorder, "bare-forwarder"},
}

// e2eRefs are the end-to-end references the e2e phase is compared with.
var e2eRefs = []string{phaseBareE2E, phaseBareRecorderE2E}

// summarize computes, per round, the ratios of hookrelay to the
// references measured in that round (the pairs closest in time, so the
// least disturbed by a machine whose load drifts) and the CPU per event
// through the relay; with several rounds, their medians; and the checks
// of every phase.
func (r *runner) summarize() {
	rounds := map[int]map[string]*Phase{}
	var order []int
	for _, p := range r.res.Phases {
		if rounds[p.Round] == nil {
			rounds[p.Round] = map[string]*Phase{}
			order = append(order, p.Round)
		}
		rounds[p.Round][p.Key] = p
	}
	slices.Sort(order)
	values := map[string][]float64{}
	var cpus, owns []float64
	for _, round := range order {
		byKey := rounds[round]
		for _, d := range ratioDefs {
			a, b := byKey[d.of], byKey[d.to]
			if a == nil || b == nil || b.Rate == 0 {
				continue
			}
			v := a.Rate / b.Rate
			r.res.Ratios = append(r.res.Ratios, Ratio{Name: d.name, Of: d.of, To: d.to, Round: round, Value: v})
			values[d.name] = append(values[d.name], v)
		}
		for _, ref := range e2eRefs {
			if a, b := byKey["e2e"], byKey[ref]; a != nil && b != nil && a.Latency != nil && b.Latency != nil {
				r.res.EndToEnd = append(r.res.EndToEnd, E2ECompare{Round: round, Reference: ref,
					OwnCPU: compare(a.OwnCPUPerEventMS, b.OwnCPUPerEventMS),
					P50:    compare(a.Latency.P50, b.Latency.P50),
					P99:    compare(a.Latency.P99, b.Latency.P99),
				})
			}
		}
		if a, b := byKey["ingest-stopped"], byKey["delivery"]; a != nil && b != nil {
			cpus = append(cpus, a.CPUPerEventMS+b.CPUPerEventMS)
			owns = append(owns, a.OwnCPUPerEventMS+b.OwnCPUPerEventMS)
		}
	}
	if len(order) > 1 {
		for _, d := range ratioDefs {
			if vs := values[d.name]; len(vs) > 0 {
				r.res.Ratios = append(r.res.Ratios, Ratio{Name: d.name, Of: d.of, To: d.to, Value: median(vs)})
			}
		}
	}
	r.res.CPUPerEventRounds, r.res.OwnCPUPerEventRounds = cpus, owns
	if len(cpus) > 0 {
		r.res.CPUPerEventMS = median(cpus)
		r.res.OwnCPUPerEventMS = median(owns)
	}
	for _, p := range r.res.Phases {
		var bad []string
		if p.Lost > 0 {
			bad = append(bad, fmt.Sprintf("%d lost", p.Lost))
		}
		if p.Count == 0 {
			// A phase that moved nothing measured nothing: its ratios
			// would compare with a system that did not run.
			bad = append(bad, "no event moved")
		} else if p.System == "reference" && p.Failed > 0 {
			bad = append(bad, fmt.Sprintf("%d requests failed", p.Failed))
		}
		if p.System == "hookrelay" {
			if p.Duplicates > 0 {
				bad = append(bad, fmt.Sprintf("%d duplicate POSTs", p.Duplicates))
			}
			if p.BadSignatures > 0 {
				bad = append(bad, fmt.Sprintf("%d POSTs with a bad signature", p.BadSignatures))
			}
			if p.Unexpected > 0 {
				bad = append(bad, fmt.Sprintf("%d unexpected pairs", p.Unexpected))
			}
			if p.Unrecorded > 0 {
				bad = append(bad, fmt.Sprintf("%d not recorded as delivered", p.Unrecorded))
			}
		}
		if len(bad) > 0 {
			r.res.Failures = append(r.res.Failures, fmt.Sprintf("%s: %v", p.label(len(order)), bad))
		}
	}
}

// median of vs (the mean of the middle two for an even count).
func median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
