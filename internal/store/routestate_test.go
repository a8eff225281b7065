package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/webhook"
	"github.com/stretchr/testify/require"
)

func routeRow(t *testing.T, db *store.DB, route string) webhook.RouteState {
	t.Helper()
	list, err := db.RouteStateList(context.Background())
	require.NoError(t, err)
	for _, s := range list {
		if s.Route == route {
			return s
		}
	}
	t.Fatalf("no row for %s", route)
	return webhook.RouteState{}
}

// Failures from many dispatchers at once add up: none is lost to a race,
// the circuit opens once the count reaches the threshold, and a success
// resets it all.
func TestRouteFailuresAddUpAcrossConcurrentCallers(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	require.NoError(t, db.RouteStateEnsure(ctx, []string{"billing", "other"}))

	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = db.RouteFailure(ctx, "billing", 10, 30*time.Second, 10*time.Minute)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	s := routeRow(t, db, "billing")
	require.Equal(t, 20, s.ConsecutiveFailures, "every failure counted")
	require.Equal(t, webhook.CircuitOpen, s.Circuit)
	require.Equal(t, 30*time.Second, s.Cooldown)
	require.NotNil(t, s.OpenedUntil)
	require.InDelta(t, 30, s.OpenedUntil.Sub(s.Now).Seconds(), 1)
	require.Equal(t, webhook.CircuitClosed, routeRow(t, db, "other").Circuit, "other routes untouched")

	require.NoError(t, db.RouteSuccess(ctx, "billing"))
	s = routeRow(t, db, "billing")
	require.Equal(t, webhook.CircuitClosed, s.Circuit)
	require.Zero(t, s.ConsecutiveFailures)
	require.Nil(t, s.OpenedUntil)

	// Below the threshold the circuit stays closed; a success in between
	// starts the count again.
	for range 9 {
		c, _, err := db.RouteFailure(ctx, "billing", 10, 30*time.Second, 10*time.Minute)
		require.NoError(t, err)
		require.Equal(t, webhook.CircuitClosed, c)
	}
	require.NoError(t, db.RouteSuccess(ctx, "billing"))
	c, n, err := db.RouteFailure(ctx, "billing", 10, 30*time.Second, 10*time.Minute)
	require.NoError(t, err)
	require.Equal(t, webhook.CircuitClosed, c)
	require.Equal(t, 1, n)
}

// When the cool-down is over exactly one of many claimants gets the
// probe; a failed probe opens the circuit again for twice the cool-down,
// at most the maximum; a stale claim can be taken over.
func TestRouteProbeClaimIsExclusiveAndCooldownDoubles(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	require.NoError(t, db.RouteStateEnsure(ctx, []string{"billing"}))
	_, _, err := db.RouteFailure(ctx, "billing", 1, 4*time.Minute, 10*time.Minute)
	require.NoError(t, err)

	claimed, err := db.RouteProbeClaim(ctx, "billing", "early", 5*time.Second)
	require.NoError(t, err)
	require.False(t, claimed, "not during the cool-down")

	endCooldown := func() {
		_, err := db.Pool().Exec(ctx, `UPDATE route_state SET opened_until = now() - interval '1 second'`)
		require.NoError(t, err)
	}
	for _, wantCooldown := range []time.Duration{8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		endCooldown()
		var wins atomic.Int32
		var winner atomic.Value
		var wg sync.WaitGroup
		errs := make([]error, 10)
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				owner := string(rune('a' + i))
				ok, err := db.RouteProbeClaim(ctx, "billing", owner, 5*time.Second)
				errs[i] = err
				if ok {
					wins.Add(1)
					winner.Store(owner)
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, wins.Load(), "exactly one probe")
		s := routeRow(t, db, "billing")
		require.Equal(t, webhook.CircuitHalfOpen, s.Circuit)
		require.Equal(t, winner.Load(), s.ProbeOwner)
		held, err := db.RouteProbeRefresh(ctx, "billing", s.ProbeOwner)
		require.NoError(t, err)
		require.True(t, held)
		held, err = db.RouteProbeRefresh(ctx, "billing", "not-the-owner")
		require.NoError(t, err)
		require.False(t, held)

		c, _, err := db.RouteFailure(ctx, "billing", 1, 4*time.Minute, 10*time.Minute)
		require.NoError(t, err)
		require.Equal(t, webhook.CircuitOpen, c, "a failed probe opens the circuit again")
		s = routeRow(t, db, "billing")
		require.Equal(t, wantCooldown, s.Cooldown)
		require.Empty(t, s.ProbeOwner)
		require.InDelta(t, wantCooldown.Seconds(), s.OpenedUntil.Sub(s.Now).Seconds(), 1)
	}

	// An owner that stopped refreshing loses the probe to another.
	endCooldown()
	claimed, err = db.RouteProbeClaim(ctx, "billing", "gone", 5*time.Second)
	require.NoError(t, err)
	require.True(t, claimed)
	claimed, err = db.RouteProbeClaim(ctx, "billing", "other", 5*time.Second)
	require.NoError(t, err)
	require.False(t, claimed, "the owner's claim is fresh")
	_, err = db.Pool().Exec(ctx, `UPDATE route_state SET probe_at = now() - interval '6 seconds'`)
	require.NoError(t, err)
	claimed, err = db.RouteProbeClaim(ctx, "billing", "other", 5*time.Second)
	require.NoError(t, err)
	require.True(t, claimed, "a stale claim is taken over")
	require.Equal(t, "other", routeRow(t, db, "billing").ProbeOwner)
}

// The rate limit lets burst deliveries through at once, then one per
// interval, and says how long to wait.
func TestRouteRateTake(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	require.NoError(t, db.RouteStateEnsure(ctx, []string{"billing"}))
	for i := range 3 {
		wait, err := db.RouteRateTake(ctx, "billing", time.Second, 3)
		require.NoError(t, err)
		require.Zero(t, wait, "burst slot %d", i)
	}
	wait, err := db.RouteRateTake(ctx, "billing", time.Second, 3)
	require.NoError(t, err)
	require.Greater(t, wait, 800*time.Millisecond)
	require.LessOrEqual(t, wait, time.Second)
	_, err = db.RouteRateTake(ctx, "nosuch", time.Second, 1)
	require.ErrorIs(t, err, store.ErrNotFound)
}

// Pause and resume announce themselves on the route state channel and say
// whether they changed anything; a route without a row gets one.
func TestRoutePauseNotifies(t *testing.T) {
	t.Parallel()
	db, conn := openWithOwner(t)
	ctx := context.Background()
	_, err := conn.Exec(ctx, "LISTEN "+store.RouteStateChannel)
	require.NoError(t, err)

	changed, err := db.RoutePause(ctx, "billing", true, "me@here")
	require.NoError(t, err)
	require.True(t, changed)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := conn.WaitForNotification(wctx)
	require.NoError(t, err)
	require.Equal(t, "billing", n.Payload)
	s := routeRow(t, db, "billing")
	require.True(t, s.Paused)
	require.Equal(t, "me@here", s.PausedBy)

	changed, err = db.RoutePause(ctx, "billing", true, "me@here")
	require.NoError(t, err)
	require.False(t, changed)
	changed, err = db.RoutePause(ctx, "billing", false, "")
	require.NoError(t, err)
	require.True(t, changed)
	n, err = conn.WaitForNotification(wctx)
	require.NoError(t, err)
	require.Equal(t, "billing", n.Payload)
	s = routeRow(t, db, "billing")
	require.False(t, s.Paused)
	require.Empty(t, s.PausedBy)
}

// Dispatchers starting together each make sure every route has its row:
// however their route lists are ordered, none fails (a deadlock between
// two multi-row inserts stopped a dispatcher in the fault suite).
func TestRouteStateEnsureConcurrently(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	routes := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for round := range 5 {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := range 8 {
			list := make([]string, len(routes))
			for j, r := range routes {
				if i%2 == 0 {
					list[j] = r
				} else {
					list[len(routes)-1-j] = r
				}
			}
			for j := range list {
				list[j] = fmt.Sprintf("r%d-%s", round, list[j])
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- db.RouteStateEnsure(ctx, list)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	}
	list, err := db.RouteStateList(ctx)
	require.NoError(t, err)
	require.Len(t, list, 5*len(routes))
}
