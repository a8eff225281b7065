// Package helpers holds test helpers of another package, to check that the
// analyzer follows a helper across packages.
package helpers

import "testing"

// MustGet ends the test when it cannot.
func MustGet(tb testing.TB) string {
	tb.Helper()
	tb.Fatalf("cannot")
	return ""
}

// Get returns an error instead.
func Get() (string, error) { return "", nil }

// Check reports through the T but does not end the goroutine.
func Check(t *testing.T, ok bool) {
	if !ok {
		t.Errorf("not ok")
	}
}
