package webhook

import (
	"errors"
	"fmt"
	"time"
)

// The errors of claiming and recording a delivery, which the store returns
// and delivery branches on: declared here, where both import them, so
// neither has to translate the other's.
var (
	// ErrEventMissing is returned when the event is no longer in the
	// database (purged, or never stored): no delivery can be recorded for
	// it, ever.
	ErrEventMissing = errors.New("event not in the database")
	// ErrEventPurged is returned, with ErrEventMissing, when the event was
	// stored and has been purged since.
	ErrEventPurged = errors.New("event purged")
	// ErrLeaseLost is returned when a delivery lease expired and was taken
	// over by another claim before its holder wrote: nothing of the pair
	// was changed.
	ErrLeaseLost = errors.New("delivery lease lost")
	// ErrWaiting is returned by the claim of a pair on a route that
	// delivers in order (ordering: fifo) when an earlier pair of its
	// resource is still owed, or one is in flight: the pair waits, parked,
	// and the record that frees its resource sends it a new copy. The copy
	// that met it is done with (acked, nothing POSTed).
	ErrWaiting = errors.New("waiting for an earlier event of its resource")
)

// LeaseBusyError is returned by a delivery claim when the pair is in
// flight elsewhere: another claim holds a live lease on it.
type LeaseBusyError struct {
	// Remaining is how long that lease has left, by Postgres' clock.
	Remaining time.Duration
}

func (e *LeaseBusyError) Error() string {
	return fmt.Sprintf("delivery in flight elsewhere (lease expires in %s)", e.Remaining.Round(time.Millisecond))
}
