package app_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// Item 9: rows the broker keeps refusing must not hold the head of the
// outbox. 150 rows addressed to a route queue that does not exist (every
// publish is returned) fill more than a claim; events accepted after them
// still reach their queue within seconds, and the refused rows wait out a
// backoff with their attempts and reason recorded.
func TestOutboxRefusedRowsDoNotBlockNewEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Outbox.BatchSize = 100
	const stuck = 150
	h.insertEvents("evt_ghost", stuck, nil)
	// As a replay to a route would: published straight to the route's
	// queue, which no one declared.
	_, err := h.db.Pool().Exec(context.Background(), `UPDATE outbox SET route = 'ghost'`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	h.start(app.ReceiverOptions{Registry: reg})
	waitReady(t, h.base) // connected, topology declared
	var want []string
	for i := range 5 {
		r := h.postSigned(fmt.Sprint("evt_new_", i), "invoice.paid")
		require.Equal(t, http.StatusOK, r.status, r.Error)
		want = append(want, r.ID)
	}
	amqptest.WaitCount(t, h.ch, h.names.RouteQueue("billing"), len(want), 10*time.Second)
	require.ElementsMatch(t, want, eventIDs(amqptest.Drain(t, h.ch, h.names.RouteQueue("billing"))))

	// Every refused row counts its failures and waits for its next try.
	type rowState struct{ rows, tried, waiting, returned int }
	read := func() rowState {
		var s rowState
		err := h.db.Pool().QueryRow(context.Background(), `
			SELECT count(*),
			       count(*) FILTER (WHERE attempts > 0),
			       count(*) FILTER (WHERE next_try_at > now()),
			       count(*) FILTER (WHERE last_error = 'returned')
			FROM outbox WHERE route = 'ghost'`).Scan(&s.rows, &s.tried, &s.waiting, &s.returned)
		if err != nil {
			return rowState{}
		}
		return s
	}
	all := rowState{stuck, stuck, stuck, stuck}
	require.Eventually(t, func() bool { return read() == all }, testenv.Scaled(20*time.Second), 50*time.Millisecond,
		"want every refused row tried, waiting and explained: %+v", read())

	m := scrape(t, h.metricsBase)
	require.GreaterOrEqual(t, m[`hookrelay_outbox_failures_total{reason="returned"}`], float64(stuck))
	require.Greater(t, m[`hookrelay_outbox_backoff`], 0.0)
	require.LessOrEqual(t, m[`hookrelay_outbox_backoff`], float64(stuck))
}
