package ops_test

import (
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/stretchr/testify/require"
)

// Issue 24: a route made at run time (the API, the CLI and the console all
// make it through ops) whose longest hold of a message does not stay a
// minute under amqp.consumer_timeout is refused as an invalid request,
// naming the hold and the timeout, before anything is stored.
func TestRouteCreateRefusesAHoldPastTheConsumerTimeout(t *testing.T) {
	t.Parallel()
	svc, st, _ := newService(t)
	svc.Config = &config.Config{
		AMQP:       config.AMQP{ConsumerTimeout: 15 * time.Minute},
		Database:   config.Database{QueryTimeout: 5 * time.Second},
		Outbox:     config.Outbox{PublishTimeout: 10 * time.Second},
		Dispatcher: config.Dispatcher{LeaseMargin: 10 * time.Second},
		Retry:      config.Retry{Backoff: []time.Duration{time.Second}},
	}
	url, timeout := "http://127.0.0.1:9/", "2m"
	_, err := svc.RouteCreate(actorCtx(), "late", ops.RouteInput{URL: &url, Bindings: []string{"acme.invoice.*"}, Timeout: &timeout})
	require.ErrorIs(t, err, ops.ErrInvalidRequest)
	require.ErrorContains(t, err, "timeout: a delivery can hold its message unacked for up to 15m30s")
	require.ErrorContains(t, err, "amqp.consumer_timeout is 15m")
	require.Empty(t, st.audits, "nothing stored (the route store is not faked: reaching it would panic)")
}
