package store_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/hookrelay/hookrelay/internal/store"
	"github.com/hookrelay/hookrelay/internal/store/storetest"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func audit(action string) *store.AuditEntry {
	return &store.AuditEntry{Actor: "test", Action: action, Target: "ledger"}
}

// hookrelay routes reseal: every run-time route's secrets, the previous
// one and its header values included, sealed again with the new key in one transaction; the old
// key can go after. A route of the config cannot take a run-time route's
// name; a run-time route's change announces itself (NOTIFY).
func TestRouteSecretsResealAndNames(t *testing.T) {
	t.Parallel()
	db, _ := storetest.Open(t)
	ctx := context.Background()
	k1 := base64.StdEncoding.EncodeToString([]byte("11111111111111111111111111111111"))
	k2 := base64.StdEncoding.EncodeToString([]byte("22222222222222222222222222222222"))
	old, err := routeset.NewKeyring(k1, nil)
	require.NoError(t, err)
	sealed, err := old.Seal("ledger", []byte("first-secret-0123456789"))
	require.NoError(t, err)

	wake := make(chan struct{}, 1)
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = db.Listen(lctx, store.RoutesChannel, wake, zerolog.Nop()) }()
	spec, err := routeset.Spec{URL: "http://x/", Bindings: []string{"acme.#"}, Headers: map[string]string{"X-Api-Key": "k-123"}}.Seal(old, "ledger")
	require.NoError(t, err)
	rawSpec, err := json.Marshal(spec)
	require.NoError(t, err)
	require.NoError(t, db.RouteCreate(ctx, store.RouteRow{Name: "ledger", Team: store.PlatformTeam, Spec: rawSpec,
		Secret: sealed, SecretFingerprint: "sha256:1"}, audit("route.create")))
	second, err := old.Seal("ledger", []byte("second-secret-012345678"))
	require.NoError(t, err)
	_, err = db.RouteRotateSecret(ctx, "ledger", second, "sha256:2", time.Hour, audit("route.rotate_secret"))
	require.NoError(t, err)
	select {
	case <-wake:
	case <-time.After(testenv.Scaled(10 * time.Second)):
		t.Fatal("no notification of the route's change")
	}

	rotated, err := routeset.NewKeyring(k2, []string{k1})
	require.NoError(t, err)
	n, err := db.RouteReseal(ctx, rotated.Reseal, func(route string, spec []byte) ([]byte, error) {
		return routeset.ResealSpec(rotated, route, spec)
	}, audit("route.reseal"))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	onlyNew, err := routeset.NewKeyring(k2, nil)
	require.NoError(t, err)
	row, err := db.RouteGet(ctx, "ledger")
	require.NoError(t, err)
	got, err := onlyNew.Open("ledger", row.Secret)
	require.NoError(t, err)
	require.Equal(t, "second-secret-012345678", string(got))
	got, err = onlyNew.Open("ledger", row.PreviousSecret)
	require.NoError(t, err)
	require.Equal(t, "first-secret-0123456789", string(got))
	// Issue 38, security 3: its header values too.
	stored, err := routeset.DecodeSpec(row.Spec)
	require.NoError(t, err)
	opened, err := stored.Open(onlyNew, "ledger")
	require.NoError(t, err, "the header values open with the new key alone")
	require.Equal(t, map[string]string{"X-Api-Key": "k-123"}, opened.Headers)
	require.Equal(t, []string{"acme.#"}, opened.Bindings, "the other settings as they were")

	err = db.Declare(ctx, []store.Owned{{Name: "ledger", Team: store.PlatformTeam}}, nil)
	require.ErrorContains(t, err, "routes ledger of the config are routes made at run time")
	row, err = db.RouteGet(ctx, "ledger")
	require.NoError(t, err)
	require.False(t, row.Declared, "still the run-time route")
}
