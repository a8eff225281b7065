package app

import (
	"context"

	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// Issue 39: a receiver that follows a new route with a filter makes the
// pairs of the events it accepted before, as the route's filter judges
// them, and only of those: an event the filter refuses gets none, nor does
// one received after the receiver followed the route (it was judged when
// it came, and its answer stands). Judged by bindings alone, every event
// since the route was made got a pair, the filter's refusals included.
func TestBackfillJudgesByTheFilterAndStopsWhereTheReceiverFollowed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := storetest.Open(t)
	set := routeset.Of(config.Route{Name: "big", URL: "http://127.0.0.1:9/", Bindings: []string{"acme.invoice.*"},
		Filter: "body.amount > 1000"})
	big := set.Get("big")
	require.NotNil(t, big.FilterProgram)
	big.Declared, big.Version, big.ChangedAt = false, 1, time.Now().Add(-time.Second)

	insert := func(key string, amount int) uuid.UUID {
		ev := &webhook.Event{ID: uuid.Must(uuid.NewV7()), Source: "acme", IdempotencyKey: key, EventType: "invoice.paid",
			ContentType: "application/json", Body: []byte(`{"id":"` + key + `","amount":` + strconv.Itoa(amount) + `}`), ReceivedAt: time.Now()}
		id, _, err := db.EventInsert(ctx, ev, nil) // matched with the routes before: no pair
		require.NoError(t, err)
		return id
	}
	taken := insert("taken", 5000)
	refused := insert("refused", 50)

	b := newPairBackfill(db, func() *routeset.Set { return set }, 0, zerolog.Nop())
	b.watch(ctx, routeset.Of(), set) // the receiver follows the route now
	late := insert("late", 5000)     // judged when it came (the test gave it no pair)

	b.runDue(ctx, time.Now())
	b.runDue(ctx, time.Now()) // and once more, as a receiver does later
	require.Empty(t, b.jobs, "both passes done")

	var paired []uuid.UUID
	rows, err := db.Pool().Query(ctx, `SELECT event_id FROM deliveries WHERE route = 'big'`)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		require.NoError(t, rows.Scan(&id))
		paired = append(paired, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []uuid.UUID{taken}, paired, "refused %s, late %s", refused, late)
}
