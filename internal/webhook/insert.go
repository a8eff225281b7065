package webhook

import (
	"errors"

	"github.com/google/uuid"
)

// Insert is one accepted event to store with the routes whose bindings
// match it (a pending delivery is recorded for each). Ingest builds it;
// the store writes it.
type Insert struct {
	Event  *Event
	Routes []string
	// Addressed are the routes of Routes whose filter took the event: they
	// are bound to no pattern, so the event reaches their queues only by a
	// copy addressed to them (a second outbox row, one publish to all of
	// them). A subset of Routes.
	Addressed []string
}

// Stored is what storing one Insert came to: the id of the event (the
// existing one when Duplicate), or Err when the item failed on its own
// after the batch committed (its duplicate could not be read; its own rows
// are not stored then, since a duplicate writes none).
type Stored struct {
	ID        uuid.UUID
	Duplicate bool
	Err       error
	// OutboxID is the outbox row written for the event; 0 for a duplicate.
	OutboxID int64
	// AddressedOutboxID is the row of the copy addressed to the item's
	// Addressed routes; 0 when it has none, and for a duplicate.
	AddressedOutboxID int64
}

// ErrRowRefused is wrapped (by a *RefusedError) when Postgres refused an
// insert because of the data of a row that passed ingest's checks: an
// invalid value (SQLSTATE class 22), a violated constraint (class 23) or a
// limit such as the size of an index entry (class 54). Storing the rows one
// by one finds which; that row would be refused on every retry, so it is
// the sender's error (answered 400).
var ErrRowRefused = errors.New("postgres refused a row")

// RefusedError is an insert Postgres refused for its data. Reason is
// Postgres' message, without its detail (which may quote the row): safe to
// show the sender.
type RefusedError struct {
	Reason string
	Err    error
}

func (e *RefusedError) Error() string { return "postgres refused the row: " + e.Reason }

// Unwrap returns ErrRowRefused and the driver's error.
func (e *RefusedError) Unwrap() []error { return []error{ErrRowRefused, e.Err} }
