package console

import (
	"fmt"
	"time"

	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/webhook"
)

// step is one station of an event's path on a route.
type step struct {
	At    *time.Time
	Text  string
	Class string // ok, bad, wait: how the page marks it
}

// trace tells a pair's path from what Postgres recorded: its attempts,
// series by series (a later series began with a replay or a requeued dead
// letter), each failed attempt's wait in a retry tier or its dead letter,
// and where it stands now.
func trace(ev *ops.EventDetail, d ops.DeliveryDetail) []step {
	at := func(t time.Time) *time.Time { return &t }
	out := []step{{At: at(ev.ReceivedAt), Text: "received, verified and stored with its outbox row; published to the events exchange after commit", Class: "ok"}}
	series := 1
	for _, a := range d.AttemptRows {
		if a.Series != series {
			series = a.Series
			out = append(out, step{At: at(a.StartedAt), Text: fmt.Sprintf("series %d began: replayed or requeued from the dead letters (the audit log says by whom)", series), Class: "wait"})
		}
		what := fmt.Sprintf("attempt %d.%d", a.Series, a.Attempt)
		if a.Status != nil {
			what += fmt.Sprintf(": HTTP %d", *a.Status)
		} else if a.Error != nil {
			what += ": " + *a.Error
		}
		what += " in " + ops.DurationText(a.DurationMS)
		s := step{At: at(a.StartedAt)}
		switch webhook.DeliveryState(a.Outcome) {
		case webhook.StateDelivered:
			s.Text, s.Class = what+" → delivered", "ok"
		case webhook.StateRetrying:
			s.Text, s.Class = what+" → failed, sent to a retry tier to wait for the next attempt", "bad"
		case webhook.StateDead:
			s.Text, s.Class = what+" → failed for the last time: moved to the route's dead-letter queue", "bad"
		default:
			s.Text, s.Class = what+" → "+a.Outcome, "wait"
		}
		out = append(out, s)
	}
	if series < d.Series {
		out = append(out, step{Text: fmt.Sprintf("series %d began: replayed or requeued, no attempt yet", d.Series), Class: "wait"})
	}
	switch webhook.DeliveryState(d.State) {
	case webhook.StatePending:
		if len(d.AttemptRows) == 0 {
			out = append(out, step{Text: "in the route's queue (or still in the outbox): waiting for a dispatcher", Class: "wait"})
		} else {
			out = append(out, step{Text: "queued again: waiting for a dispatcher", Class: "wait"})
		}
	case webhook.StateRetrying:
		s := step{Text: "waiting in a retry tier", Class: "wait"}
		if d.NextAttemptAt != nil {
			s.Text = fmt.Sprintf("waiting in a retry tier: attempt %d due %s", d.NextAttempt, d.NextAttemptAt.UTC().Format("15:04:05Z"))
		}
		out = append(out, s)
	case webhook.StateDead:
		out = append(out, step{Text: "in the dead-letter queue until requeued or replayed", Class: "bad"})
	case webhook.StateStale:
		out = append(out, step{Text: "not sent: a newer version of its resource was delivered on this route (stale)", Class: "wait"})
	}
	return out
}
