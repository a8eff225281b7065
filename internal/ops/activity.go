package ops

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
)

// ActivityWindow is what the overview's figures cover: the last hour.
const ActivityWindow = time.Hour

// RouteActivity is one route's delivery outcomes minute by minute over
// the window, oldest first (Minutes[len-1] is the current minute).
type RouteActivity struct {
	Route   string           `json:"route"`
	Minutes []MinuteOutcomes `json:"minutes"`
	// Delivered and Failed sum the minutes: attempts that succeeded, and
	// attempts that failed (a retry scheduled or a dead letter).
	Delivered int64 `json:"delivered"`
	Failed    int64 `json:"failed"`
	// Filtered sums the events the route's bindings matched that its
	// filter did not take; FilterErrors, those its filter could not judge
	// (an error of the expression on the event, or past its cost). Neither
	// made a pair.
	Filtered     int64 `json:"filtered"`
	FilterErrors int64 `json:"filter_errors"`
}

// MinuteOutcomes counts one minute's attempts of a route.
type MinuteOutcomes struct {
	Minute    time.Time `json:"minute"`
	Delivered int64     `json:"delivered"`
	Failed    int64     `json:"failed"`
	// Filtered counts the events the filter did not take, those it could
	// not judge included.
	Filtered int64 `json:"filtered"`
}

// SuccessRatio is the share of attempts that succeeded; -1 when none
// were made.
func (a RouteActivity) SuccessRatio() float64 {
	if a.Delivered+a.Failed == 0 {
		return -1
	}
	return float64(a.Delivered) / float64(a.Delivered+a.Failed)
}

// SourceActivity is one source's webhook requests over the window.
type SourceActivity struct {
	Source    string `json:"source"`
	Accepted  int64  `json:"accepted"`
	Duplicate int64  `json:"duplicate"`
	// Rejected counts refusals of the sender's request by reason
	// (signature, too_large, ...); Errors our own failures (storage).
	Rejected map[string]int64 `json:"rejected"`
	Errors   int64            `json:"errors"`
}

// RejectedTotal sums the rejections.
func (a SourceActivity) RejectedTotal() int64 {
	var n int64
	for _, c := range a.Rejected {
		n += c
	}
	return n
}

// Activity is the last hour of every process, as counted per minute
// (internal/activity): a process's last few seconds may be missing.
type Activity struct {
	Now     time.Time                 `json:"now"`
	Routes  map[string]*RouteActivity `json:"routes"`
	Sources []SourceActivity          `json:"sources"`
}

// Activity reads the last hour's counts: every configured route (and any
// other that has counts) with a minute for each of the window's minutes,
// and the sources that had requests.
func (s *Service) Activity(ctx context.Context) (*Activity, error) {
	counts, now, err := s.Store.ActivitySince(ctx, ActivityWindow)
	if err != nil {
		return nil, err
	}
	first := now.UTC().Truncate(time.Minute).Add(-ActivityWindow + time.Minute)
	n := int(ActivityWindow / time.Minute)
	out := &Activity{Now: now, Routes: map[string]*RouteActivity{}}
	route := func(name string) *RouteActivity {
		if r, ok := out.Routes[name]; ok {
			return r
		}
		r := &RouteActivity{Route: name, Minutes: make([]MinuteOutcomes, n)}
		for i := range r.Minutes {
			r.Minutes[i].Minute = first.Add(time.Duration(i) * time.Minute)
		}
		out.Routes[name] = r
		return r
	}
	visible, err := s.visibleRoutes(ctx, s.RoutesNow().Names())
	if err != nil {
		return nil, err
	}
	for _, name := range visible {
		route(name)
	}
	sources := map[string]*SourceActivity{}
	for _, c := range counts {
		i := int(c.Minute.Sub(first) / time.Minute)
		if i < 0 || i >= n {
			continue // the minute before the window's first
		}
		switch c.Kind {
		case store.ActivityDelivery:
			r := route(c.Name)
			switch c.Outcome {
			case "delivered":
				r.Minutes[i].Delivered += c.N
				r.Delivered += c.N
			case "retry_scheduled", "dead":
				r.Minutes[i].Failed += c.N
				r.Failed += c.N
			case "filtered":
				r.Minutes[i].Filtered += c.N
				if c.Reason == "error" {
					r.FilterErrors += c.N
				} else {
					r.Filtered += c.N
				}
			}
		case store.ActivityIngest:
			a := sources[c.Name]
			if a == nil {
				a = &SourceActivity{Source: c.Name, Rejected: map[string]int64{}}
				sources[c.Name] = a
			}
			switch c.Outcome {
			case "accepted":
				a.Accepted += c.N
			case "duplicate":
				a.Duplicate += c.N
			case "rejected":
				a.Rejected[c.Reason] += c.N
			default:
				a.Errors += c.N
			}
		}
	}
	for _, a := range sources {
		out.Sources = append(out.Sources, *a)
	}
	slices.SortFunc(out.Sources, func(a, b SourceActivity) int { return cmp.Compare(a.Source, b.Source) })
	return out, nil
}
