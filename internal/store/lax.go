package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Writes that need no WAL flush.
//
// With synchronous_commit on (keep it: a 200 to a sender means the event is
// on disk), every commit waits for its WAL to reach the disk: on the
// development machine about 150µs of fsync that the commit's caller
// waits out. Some writes do not need it. A commit made with
// synchronous_commit off is visible to every other session at once, exactly
// as a flushed one; it only may be lost if Postgres itself crashes (not on
// a clean restart) before the WAL writer flushes it (at most three times
// wal_writer_delay: 600ms by default), and any later flushed commit
// flushes it too. That loss is harmless for:
//
//   - a delivery's claim (its lease, and the row created for a pair that had
//     none). A crash of Postgres within about 3 x wal_writer_delay after
//     the claim loses it, however long the POST then takes. The holder's
//     record after the POST finds no lease at all; nobody else holds the
//     pair, so the record goes on as if the lease were there (a success
//     delivers the pair) instead of taking the attempt for a lost lease
//     and POSTing again. A duplicate POST from a lost claim needs a second
//     copy of the message to claim the pair while the first POST is in
//     flight (a duplicate publish, a redelivery), which the lease would
//     otherwise have made wait. The record itself is flushed: a crash
//     between the destination's answer and the record is the other, and
//     usual, way to a duplicate POST (invariant 5: the destination drops
//     it by webhook-id). No outcome is ever taken from a lost claim.
//     A takeover of an expired lease is the exception: lost, it would
//     leave the dead holder's lease, not none, and the record would be
//     refused. It is flushed before the claim returns (flushTakeover), so
//     a crash or a failover keeps it (issue 40;
//     cmd/chaos TestLeaseTakenOverJustBeforeAFailoverIsKept).
//
//   - a lease's release without a record: lost, the lease stays until it
//     expires, and a redelivered message waits for it (a delay).
//
//   - the outbox's completion (deleting the rows the broker confirmed,
//     counting refused ones). Lost, the rows are published again: a
//     duplicate message, which a dispatcher acks without a POST once the
//     pair is delivered. Invariant 2 holds: a row is deleted only after its
//     confirm. That transaction sets synchronous_commit off itself
//     (OutboxBatch.Complete); it runs on the main pool. The receiver's
//     direct publish deletes its confirmed rows, and hands unconfirmed
//     ones to the publishers, on this pool (OutboxDeletePublished,
//     OutboxDueNow): a lost hand-over leaves the rows to wait out their
//     hold.
//
// Everything else (ingest, records, restarts, operator commands) commits
// as before.
//
// The pool is lazy (no connection until a claim needs one; a dispatcher
// opens the first at start, WarmClaims) and a quarter
// of the main pool's size, at least 2: grouped claims need one connection
// at a time.
func laxPoolConfig(pc *pgxpool.Config) *pgxpool.Config {
	lax := pc.Copy()
	lax.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	lax.MaxConns = max(2, pc.MaxConns/4)
	lax.MinConns = 0
	return lax
}

// WarmClaims opens the first connection of the claims' pool (the
// dispatcher calls it at start), within the connect timeout and the query
// timeout together: a dial, a start-up and a ping.
func (db *DB) WarmClaims(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, db.lax.Config().ConnConfig.ConnectTimeout+db.queryTimeout)
	defer cancel()
	if err := db.lax.Ping(ctx); err != nil {
		return fmt.Errorf("opening the claims' connection to postgres: %w", err)
	}
	return nil
}
