package config

import (
	"reflect"
	"testing"

	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/stretchr/testify/require"
)

// The scheme registry names verify keys by their config spelling: each one
// must be a key of the verify block, each key of the block (but scheme)
// must be read by some scheme, and SchemeConfig must carry every key over.
func TestSchemeKeysAreVerifyKeys(t *testing.T) {
	t.Parallel()
	rt := reflect.TypeFor[Verify]()
	keys := map[string]bool{}
	for i := range rt.NumField() {
		if name := rt.Field(i).Tag.Get("mapstructure"); name != "scheme" {
			keys[name] = false
		}
	}
	for _, s := range signature.Schemes() {
		for _, k := range s.Keys {
			_, ok := keys[k]
			require.True(t, ok, "scheme %s reads %q, which is not a verify key", s.Name, k)
			keys[k] = true
		}
	}
	for k, read := range keys {
		require.True(t, read, "verify.%s is read by no scheme", k)
	}
	// Every field set: SchemeConfig must leave none behind.
	sc := reflect.ValueOf(Verify{
		Scheme: "hmac", Secrets: []string{"s"}, Algorithm: "a", Encoding: "e", Header: "h", Query: "q", Prefix: "p",
		TimestampHeader: "t", SignedContent: "c", Tolerance: 1, AllowSHA1: true, Username: "u",
	}.SchemeConfig())
	for i := range sc.NumField() {
		require.False(t, sc.Field(i).IsZero(), "SchemeConfig drops %s", sc.Type().Field(i).Name)
	}
}
