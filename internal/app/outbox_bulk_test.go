package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp/amqptest"
	"github.com/hookrelay/hookrelay/internal/app"
	"github.com/stretchr/testify/require"
)

// Issue 11: the publisher drains a backlog bigger than a claim, batches
// pipelined, each message published once, and deletes each batch's
// confirmed rows with ONE statement. A statement trigger the test adds
// records how many rows every DELETE on outbox removed.
func TestGroupCommitOutboxPublishesAllAndDeletesInBulk(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.cfg.Outbox.BatchSize = 50
	const n = 300
	_, err := h.db.Pool().Exec(context.Background(), `
		CREATE TABLE test_outbox_deletes (id bigint GENERATED ALWAYS AS IDENTITY, rows bigint NOT NULL);
		CREATE FUNCTION test_count_deletes() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO test_outbox_deletes (rows) SELECT count(*) FROM gone; RETURN NULL; END $$;
		CREATE TRIGGER test_count_deletes AFTER DELETE ON outbox REFERENCING OLD TABLE AS gone
			FOR EACH STATEMENT EXECUTE FUNCTION test_count_deletes();`)
	require.NoError(t, err)
	want := h.insertEvents("evt_bulk", n, []string{"billing"})

	h.start(app.ReceiverOptions{})
	h.waitOutboxEmpty(30 * time.Second)
	amqptest.WaitCount(t, h.ch, h.names.RouteQueue("billing"), n, 10*time.Second)
	require.ElementsMatch(t, want, eventIDs(amqptest.Drain(t, h.ch, h.names.RouteQueue("billing"))),
		"every event published once")

	rows, err := h.db.Pool().Query(context.Background(), `SELECT rows FROM test_outbox_deletes WHERE rows > 0 ORDER BY id`)
	require.NoError(t, err)
	var deletes []int64
	for rows.Next() {
		var r int64
		require.NoError(t, rows.Scan(&r))
		deletes = append(deletes, r)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{50, 50, 50, 50, 50, 50}, deletes, "one DELETE per claimed batch of 50")
}
