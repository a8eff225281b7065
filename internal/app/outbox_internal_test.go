package app

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/outbox"
	"github.com/stretchr/testify/require"
)

// Which broker answers count against an outbox row: a nack, a return and a
// confirm timeout do; after a lost connection or a block nothing does (a
// closing channel reads every pending confirm as a nack).
func TestOutboxResults(t *testing.T) {
	t.Parallel()
	all := []amqp.Outcome{amqp.Acked, amqp.Nacked, amqp.Returned, amqp.Unconfirmed}
	counted := []outbox.Result{{Acked: true}, {Failure: "nack"}, {Failure: "returned"}, {Failure: "unconfirmed"}}
	uncounted := []outbox.Result{{Acked: true}, {}, {}, {}}
	for _, tc := range []struct {
		name string
		err  error
		want []outbox.Result
	}{
		{"every answer", nil, counted},
		{"a confirm timeout", fmt.Errorf("waiting for publisher confirms: %w after 1s", amqp.ErrConfirmTimeout), counted},
		{"a lost connection", errors.New("rabbitmq connection lost"), uncounted},
		{"a block", fmt.Errorf("waiting: %w: memory alarm", amqp.ErrBlocked), uncounted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, outboxResults(all, tc.err))
		})
	}
}
