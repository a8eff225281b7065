package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Events, deliveries and delivery_attempts are partitioned by event id, a
// partition per UTC day (migrations 0019–0021): UUIDv7 ids begin with their
// receiver's clock, so a day is a range of ids, and the day of an event, of
// its deliveries and of its attempts is the same. Retention drops a day's
// three partitions together instead of deleting their rows one by one.

// PartitionsAhead is how many days ahead of today EnsurePartitions makes
// partitions: every process makes them hourly, so two days leave a day of
// slack. Not more: every statement on a partitioned table costs Postgres
// a little per partition (planning, locks), empty ones included.
const PartitionsAhead = 2

// partitionLockTimeout bounds how long creating or dropping a partition
// waits for the tables' locks: both lock the parent table for a moment,
// and a statement queued behind a long query would hold every insert
// queued behind it for as long. Past it, the work is tried again later.
const partitionLockTimeout = "1s"

// EnsurePartitions makes the day partitions from yesterday to
// PartitionsAhead days after now's day (UTC) that do not exist yet. Every
// receiver and dispatcher runs it at start and hourly; an insert that finds
// no partition for its day runs it too. It is cheap when there is nothing
// to make.
func (db *DB) EnsurePartitions(ctx context.Context, now time.Time) error {
	day := now.UTC().Truncate(24 * time.Hour)
	_, err := db.ensurePartitions(ctx, day.AddDate(0, 0, -1), day.AddDate(0, 0, PartitionsAhead))
	return err
}

// EnsurePartitionsAt is EnsurePartitions through a connection of its own
// to the database at url: for Migrate, and for tests' copies of a template
// database made on another day.
func EnsurePartitionsAt(ctx context.Context, url string, now time.Time) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("creating day partitions: connecting: %w", err)
	}
	defer conn.Close(ctx)
	day := now.UTC().Truncate(24 * time.Hour)
	if _, err := conn.Exec(ctx, `SELECT hookrelay_ensure_partitions($1::date, $2::date)`,
		day.AddDate(0, 0, -1).Format(time.DateOnly), day.AddDate(0, 0, PartitionsAhead).Format(time.DateOnly)); err != nil {
		return fmt.Errorf("creating day partitions: %w", err)
	}
	return nil
}

// EnsurePartitionsFor makes the day partitions of every day from first to
// last (for tools that write events of past days: the benchmark's history).
func (db *DB) EnsurePartitionsFor(ctx context.Context, first, last time.Time) (int, error) {
	return db.ensurePartitions(ctx, first.UTC(), last.UTC())
}

func (db *DB) ensurePartitions(ctx context.Context, first, last time.Time) (int, error) {
	ctx, cancel := db.boundOps(ctx)
	defer cancel()
	var n int
	err := db.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+partitionLockTimeout+`'`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT hookrelay_ensure_partitions($1::date, $2::date)`,
			first.Format(time.DateOnly), last.Format(time.DateOnly)).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("creating day partitions: %w", err)
	}
	return n, nil
}

// dayPartition is one day's partition of events; its deliveries' and
// attempts' partitions share its suffix.
type dayPartition struct {
	day    time.Time // 00:00 UTC
	suffix string    // _pYYYYMMDD
}

var dayPartitionName = regexp.MustCompile(`^events(_p(\d{8}))$`)

// dayPartitions lists the day partitions of events, oldest first.
func (db *DB) dayPartitions(ctx context.Context) ([]dayPartition, error) {
	rows, err := db.pool.Query(ctx, `
		SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'events'::regclass`)
	if err != nil {
		return nil, fmt.Errorf("listing day partitions: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing day partitions: %w", err)
	}
	var days []dayPartition
	for _, n := range names {
		m := dayPartitionName.FindStringSubmatch(n)
		if m == nil {
			continue // the legacy default partition
		}
		day, err := time.Parse("20060102", m[2])
		if err != nil {
			return nil, fmt.Errorf("day partition %s: %w", n, err)
		}
		days = append(days, dayPartition{day: day, suffix: m[1]})
	}
	sort.Slice(days, func(i, j int) bool { return days[i].day.Before(days[j].day) })
	return days, nil
}

// uuid7Floor is the smallest UUIDv7 of t's millisecond (as the SQL
// function hookrelay_uuid7_floor).
func uuid7Floor(t time.Time) uuid.UUID {
	var u uuid.UUID
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		u[i] = byte(ms >> (40 - 8*i))
	}
	u[6], u[8] = 0x70, 0x80
	return u
}

// dayKeepSQL holds when something of the day of ids [$3, $4) must be
// kept (purgeableSQL, for every event of the day at once).
const dayKeepSQL = `
	SELECT EXISTS (SELECT 1 FROM outbox o WHERE o.event_id >= $3 AND o.event_id < $4)
	    OR EXISTS (SELECT 1 FROM deliveries d
	               WHERE d.event_id >= $3 AND d.event_id < $4
	                 AND ((d.state IN ('pending', 'retrying') AND ` + servedSQL + `)
	                  OR (d.state = 'dead' AND NOT $2::boolean)))`

// dayProtocol runs a statement about one day (its range of ids) with its
// arguments in its text (the simple protocol): planned for that day, it
// reaches that day's partitions only, where a plan for any day (the
// processes' generic plans) would lock every day's. Each statement is run
// once per day and purge, so nothing is lost by planning it each time.
const dayProtocol = pgx.QueryExecModeSimpleProtocol

// dropDay drops one day's three partitions when nothing of the day must be
// kept (dayKeepSQL), and adds what went to res. It answers false, dropping
// nothing, when something must be kept: the row-by-row purge then takes
// what it can of the day. A day seen to keep something is left at once;
// one that may go is locked and checked again, so no claim, replay or
// record is between the check and the drop; the lock waits
// partitionLockTimeout at most. A day that keeps something (a dead pair)
// costs every purge a check, never a lock.
func (db *DB) dropDay(ctx context.Context, p dayPartition, cfg PurgeConfig, res *PurgeResult) (bool, error) {
	// The partitions are reached through their parents, by the day's range
	// of ids (pruned to the day's partition): the processes' role is granted
	// the parents only, so their policies hold. Only the drop itself needs
	// the owner, in hookrelay_drop_day.
	lo, hi := uuid7Floor(p.day), uuid7Floor(p.day.AddDate(0, 0, 1))
	var keep bool
	cctx, cancel := db.boundOps(ctx)
	err := db.pool.QueryRow(cctx, dayKeepSQL, dayProtocol, cfg.ServedRoutes, cfg.IncludeDead, lo, hi).Scan(&keep)
	cancel()
	if err != nil {
		return false, fmt.Errorf("checking day %s: %w", p.day.Format(time.DateOnly), err)
	}
	if keep {
		return false, nil
	}
	// Counted before the lock, not under it: a day's count takes a while,
	// and only rows that cannot change are counted (a purgeable day has no
	// open pair; its events are not written again).
	var nEvents, nDeliveries, nAbandoned int64
	err = db.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM events WHERE id >= $1 AND id < $2),
		       (SELECT count(*) FROM deliveries WHERE event_id >= $1 AND event_id < $2),
		       (SELECT count(*) FROM deliveries WHERE event_id >= $1 AND event_id < $2 AND state IN ('pending', 'retrying'))`,
		dayProtocol, lo, hi).Scan(&nEvents, &nDeliveries, &nAbandoned)
	if err != nil {
		return false, fmt.Errorf("counting day %s: %w", p.day.Format(time.DateOnly), err)
	}
	dropped := false
	err = db.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '`+partitionLockTimeout+`'`); err != nil {
			return err
		}
		// The parents first, in the order ingest takes them: dropping a
		// partition locks its parent, and a lock taken in another order
		// than an insert's could deadlock with it.
		if _, err := tx.Exec(ctx, `LOCK TABLE events, deliveries, delivery_attempts IN ACCESS EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("locking: %w", err)
		}
		err := tx.QueryRow(ctx, dayKeepSQL, dayProtocol, cfg.ServedRoutes, cfg.IncludeDead, lo, hi).Scan(&keep)
		if err != nil || keep {
			return err
		}
		resSources, resIDs, err := resourcesOf(ctx, tx, `SELECT DISTINCT source, ordering_resource FROM events
			WHERE id >= $1 AND id < $2 AND ordering_resource IS NOT NULL AND purged_at IS NULL`, dayProtocol, lo, hi)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT hookrelay_drop_day($1::date)`, p.day.Format(time.DateOnly)); err != nil {
			return fmt.Errorf("dropping: %w", err)
		}
		versions, err := forgetVersions(ctx, tx, resSources, resIDs)
		if err != nil {
			return err
		}
		dropped = true
		res.Versions += versions
		return nil
	})
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return false, nil // busy: the rows are purged one by one instead
		}
		return false, fmt.Errorf("dropping day %s: %w", p.day.Format(time.DateOnly), err)
	}
	if dropped {
		res.Days++
		res.Events += nEvents
		res.Deliveries += nDeliveries
		res.Abandoned += nAbandoned
	}
	return dropped, nil
}

// resourcesOf reads the (source, resource) pairs query selects.
func resourcesOf(ctx context.Context, tx pgx.Tx, query string, args ...any) (sources, resources []string, err error) {
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the resources of events to purge: %w", err)
	}
	var src, resource string
	if _, err := pgx.ForEachRow(rows, []any{&src, &resource}, func() error {
		sources, resources = append(sources, src), append(resources, resource)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("reading the resources of events to purge: %w", err)
	}
	return sources, resources, nil
}

// forgetVersions deletes the stored versions of the given resources that
// have no event left whole, and answers how many.
func forgetVersions(ctx context.Context, tx pgx.Tx, sources, resources []string) (int64, error) {
	if len(resources) == 0 {
		return 0, nil
	}
	tag, err := tx.Exec(ctx, `
		DELETE FROM route_resource_versions v
		USING unnest($1::text[], $2::text[]) AS r(source, resource)
		WHERE v.source = r.source AND v.resource = r.resource
		  AND NOT EXISTS (SELECT 1 FROM events e
		                  WHERE e.source = r.source AND e.ordering_resource = r.resource AND e.purged_at IS NULL)`,
		sources, resources)
	if err != nil {
		return 0, fmt.Errorf("purging resource versions: %w", err)
	}
	return tag.RowsAffected(), nil
}

// expireKeys deletes, in batches, the dedupe keys of events older than
// before that are gone (purged): a key whose event is still stored (kept
// because undelivered) stays with it.
func (db *DB) expireKeys(ctx context.Context, before time.Time, batch int) (int64, error) {
	var total int64
	for {
		bctx, cancel := db.boundOps(ctx)
		tag, err := db.pool.Exec(bctx, `
			DELETE FROM event_keys WHERE ctid = ANY (ARRAY(
				SELECT k.ctid FROM event_keys k
				WHERE k.event_id < $1 AND NOT EXISTS (SELECT 1 FROM events e WHERE e.id = k.event_id)
				LIMIT $2))`, uuid7Floor(before), batch)
		cancel()
		if err != nil {
			return total, fmt.Errorf("expiring dedupe keys: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// Alone runs fn unless a process runs a function of the same name now, and
// answers whether it ran: a session advisory lock on a connection of the
// pool, taken without waiting and held while fn runs (a process that dies
// lets go of it with its connection). The relay's own purge runs so, one
// process at a time.
func (db *DB) Alone(ctx context.Context, name string, fn func(ctx context.Context) error) (bool, error) {
	actx, cancel := db.boundOps(ctx)
	conn, err := db.pool.Acquire(actx)
	if err != nil {
		cancel()
		return false, fmt.Errorf("taking the %s lock: %w", name, err)
	}
	var got bool
	err = conn.QueryRow(actx, `SELECT pg_try_advisory_lock(hashtext('hookrelay.' || $1))`, name).Scan(&got)
	cancel()
	if err != nil || !got {
		conn.Release()
		if err != nil {
			return false, fmt.Errorf("taking the %s lock: %w", name, err)
		}
		return false, nil
	}
	defer func() {
		uctx, cancel := db.bound(context.WithoutCancel(ctx))
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock(hashtext('hookrelay.' || $1))`, name); err != nil {
			// The lock must not outlive fn: the session goes with it.
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()
	return true, fn(ctx)
}
