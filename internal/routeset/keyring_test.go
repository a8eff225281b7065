package routeset_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hookrelay/hookrelay/internal/routeset"
	"github.com/stretchr/testify/require"
)

func key(b byte) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune('a'+b)), 32)))
}

// A secret sealed for one route opens for it only, with the key that
// sealed it; a key rotation (new key, old one kept as previous) opens the
// old seals, reseals them with the new key, after which the old key can
// go.
func TestKeyringSealsPerRouteAndRotates(t *testing.T) {
	k1, err := routeset.NewKeyring(key(1), nil)
	require.NoError(t, err)
	secret := []byte("0123456789abcdef0123456789abcdef")
	sealed, err := k1.Seal("billing", secret)
	require.NoError(t, err)
	require.NotContains(t, string(sealed), string(secret))
	again, err := k1.Seal("billing", secret)
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce each time")

	got, err := k1.Open("billing", sealed)
	require.NoError(t, err)
	require.Equal(t, secret, got)
	_, err = k1.Open("crm", sealed)
	require.ErrorContains(t, err, "sealed for another route")
	tampered := append([]byte{}, sealed...)
	tampered[len(tampered)-1] ^= 1
	_, err = k1.Open("billing", tampered)
	require.Error(t, err)

	k2, err := routeset.NewKeyring(key(2), []string{key(1)})
	require.NoError(t, err)
	got, err = k2.Open("billing", sealed)
	require.NoError(t, err, "the previous key still opens")
	require.Equal(t, secret, got)
	resealed, err := k2.Reseal("billing", sealed)
	require.NoError(t, err)
	same, err := k2.Reseal("billing", resealed)
	require.NoError(t, err)
	require.Equal(t, resealed, same, "a secret sealed with the current key stays as it is")

	only2, err := routeset.NewKeyring(key(2), nil)
	require.NoError(t, err)
	got, err = only2.Open("billing", resealed)
	require.NoError(t, err)
	require.Equal(t, secret, got)
	_, err = only2.Open("billing", sealed)
	require.ErrorContains(t, err, "neither secrets.key nor one of secrets.previous_keys")
	require.ErrorIs(t, err, routeset.ErrUnknownKey)
	require.True(t, routeset.KeyMissing(err), "another key: this process's keys lack it")
	require.NotContains(t, err.Error(), key(1))

	none, err := routeset.NewKeyring("", nil)
	require.NoError(t, err)
	_, err = none.Seal("billing", secret)
	require.ErrorIs(t, err, routeset.ErrNoKey)
	_, err = none.Open("billing", sealed)
	require.True(t, routeset.KeyMissing(err), "no key")
	_, err = k1.Open("billing", tampered)
	require.False(t, routeset.KeyMissing(err), "altered data: no key opens it")
	_, err = routeset.NewKeyring("c2hvcnQ=", nil)
	require.ErrorContains(t, err, "secrets.key")
}

// A route's header values are stored sealed, each bound to its route and
// name; listings see the names only.
func TestSpecHeadersSealedAtRest(t *testing.T) {
	k, err := routeset.NewKeyring(key(1), nil)
	require.NoError(t, err)
	spec := routeset.Spec{URL: "http://x/", Headers: map[string]string{"X-Token": "t0ken"}}
	stored, err := spec.Seal(k, "billing")
	require.NoError(t, err)
	require.Empty(t, stored.Headers)
	require.NotContains(t, string(stored.SealedHeaders["X-Token"]), "t0ken")
	opened, err := stored.Open(k, "billing")
	require.NoError(t, err)
	require.Equal(t, spec.Headers, opened.Headers)
	_, err = stored.Open(k, "crm")
	require.Error(t, err, "sealed for another route")
	require.Equal(t, map[string]string{"X-Token": "(set)"}, stored.Shown().Headers)
}

// Issue 38, security 3: ResealSpec seals a stored spec's header values
// with the current key, keeping every other field as stored (one this
// version does not know included); a spec without headers is left as it
// is.
func TestResealSpecResealsHeaderValues(t *testing.T) {
	k1, err := routeset.NewKeyring(key(1), nil)
	require.NoError(t, err)
	stored, err := routeset.Spec{URL: "http://x/", Bindings: []string{"acme.#"}, Headers: map[string]string{"X-Token": "t0ken"}}.Seal(k1, "billing")
	require.NoError(t, err)
	raw, err := json.Marshal(stored)
	require.NoError(t, err)
	raw = append(raw[:len(raw)-1], []byte(`,"future_field":{"a":1}}`)...)

	k2, err := routeset.NewKeyring(key(2), []string{key(1)})
	require.NoError(t, err)
	again, err := routeset.ResealSpec(k2, "billing", raw)
	require.NoError(t, err)
	require.Contains(t, string(again), `"future_field":{"a":1}`)
	only2, err := routeset.NewKeyring(key(2), nil)
	require.NoError(t, err)
	spec, err := routeset.DecodeSpec(again)
	require.NoError(t, err)
	opened, err := spec.Open(only2, "billing")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"X-Token": "t0ken"}, opened.Headers)
	require.Equal(t, []string{"acme.#"}, opened.Bindings)

	_, err = routeset.ResealSpec(only2, "billing", raw)
	require.ErrorIs(t, err, routeset.ErrUnknownKey, "the key that sealed them is gone")
	plain := []byte(`{"url":"http://x/","bindings":["acme.#"]}`)
	same, err := routeset.ResealSpec(k2, "billing", plain)
	require.NoError(t, err)
	require.Equal(t, plain, same)
}

// Issue 43: a destination URL with credentials (an amqp route's broker
// login) is stored without them, and whole only sealed for its route;
// listings show it without them; a key rotation reseals it.
func TestSpecURLCredentialsSealedAtRest(t *testing.T) {
	k1, err := routeset.NewKeyring(key(1), nil)
	require.NoError(t, err)
	spec := routeset.Spec{Kind: "amqp", URL: "amqp://app:s3cret@broker.example.com:5672/billing", Exchange: "billing.events"}
	stored, err := spec.Seal(k1, "billing")
	require.NoError(t, err)
	raw, err := json.Marshal(stored)
	require.NoError(t, err)
	require.NotContains(t, string(raw), "s3cret")
	require.NotContains(t, string(raw), "app:")
	require.Equal(t, "amqp://broker.example.com:5672/billing", stored.URL)
	require.Equal(t, "amqp://broker.example.com:5672/billing", stored.Shown().URL)
	opened, err := stored.Open(k1, "billing")
	require.NoError(t, err)
	require.Equal(t, spec.URL, opened.URL)
	_, err = stored.Open(k1, "crm")
	require.Error(t, err, "sealed for another route")

	k2, err := routeset.NewKeyring(key(2), []string{key(1)})
	require.NoError(t, err)
	again, err := routeset.ResealSpec(k2, "billing", raw)
	require.NoError(t, err)
	only2, err := routeset.NewKeyring(key(2), nil)
	require.NoError(t, err)
	resealed, err := routeset.DecodeSpec(again)
	require.NoError(t, err)
	opened, err = resealed.Open(only2, "billing")
	require.NoError(t, err)
	require.Equal(t, spec.URL, opened.URL)

	plain, err := routeset.Spec{URL: "https://x.example.com/hooks"}.Seal(k1, "billing")
	require.NoError(t, err)
	require.Nil(t, plain.SealedURL, "a URL without credentials is stored as it is")
}
