package signature

import (
	"crypto/hmac"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"
)

// defaultTolerance is the replay window for timestamped schemes when the
// config leaves Tolerance at 0. Five minutes is what Stripe and Slack
// document: wide enough for clock drift between sender and receiver and for
// a sender's own retry delay, narrow enough that a captured request cannot be
// replayed for long.
const defaultTolerance = 5 * time.Minute

// maxTimestampDigits bounds a Unix time in seconds. Twelve digits reach the
// year 33658, so no real timestamp is refused, and anything longer is junk
// that must not get near int64 overflow.
const maxTimestampDigits = 12

// newKeys validates a verifier's secrets and returns them as HMAC keys. The
// error names the position of a bad secret, never its value.
func newKeys(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, errors.New("at least one secret is required")
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		if s == "" {
			return nil, fmt.Errorf("secret %d is empty", i)
		}
		keys[i] = []byte(s)
	}
	return keys, nil
}

// timedKeys are the secrets and replay window of a timestamped scheme.
type timedKeys struct {
	keys      [][]byte
	tolerance time.Duration
}

func newTimedKeys(secrets []string, tolerance time.Duration) (timedKeys, error) {
	keys, err := newKeys(secrets)
	if err != nil {
		return timedKeys{}, err
	}
	tol, err := toleranceOrDefault(tolerance)
	if err != nil {
		return timedKeys{}, err
	}
	return timedKeys{keys: keys, tolerance: tol}, nil
}

// toleranceOrDefault returns d, or defaultTolerance when d is 0.
func toleranceOrDefault(d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("tolerance %s is negative", d)
	case d == 0:
		return defaultTolerance, nil
	}
	return d, nil
}

// oneValue returns the only value in vals without surrounding blanks, or ""
// when there is none. A value sent more than once is rejected: the copies
// could disagree, and picking one would be a guess. where names the header
// or query parameter in the rejection reason.
func oneValue(vals []string, where string) (string, error) {
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
		return strings.Trim(vals[0], " \t"), nil
	}
	return "", reject(ErrMalformed, "%s is malformed: sent more than once", where)
}

// pair is one key=value element of a signature header.
type pair struct{ key, value string }

// splitPairs parses "k=v<sep>k=v..." strictly: printable ASCII without
// spaces, and every element a non-empty key, one '=' and a non-empty value.
func splitPairs(s string, sep byte) ([]pair, error) {
	if !printableASCII(s) {
		return nil, errors.New("contains spaces, control or non-ASCII characters")
	}
	elems := strings.Split(s, string(sep))
	pairs := make([]pair, 0, len(elems))
	for _, e := range elems {
		k, val, ok := strings.Cut(e, "=")
		if !ok || k == "" || val == "" || strings.Contains(val, "=") {
			return nil, fmt.Errorf("every %q-separated element must be key=value", sep)
		}
		pairs = append(pairs, pair{k, val})
	}
	return pairs, nil
}

// printableASCII reports whether s has only printable ASCII characters and no
// space. None of the signature formats uses anything else.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// parseUnix parses a Unix time in seconds written as plain decimal: digits
// only (no sign), no leading zero, at most maxTimestampDigits. Requiring the
// canonical form means the bytes that were signed are the bytes we read.
func parseUnix(s string) (int64, bool) {
	if s == "" || len(s) > maxTimestampDigits || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// withinTolerance reports whether the Unix time ts (validated by parseUnix)
// is at most tol before or after now.
func withinTolerance(now time.Time, ts string, tol time.Duration) bool {
	sec, ok := parseUnix(ts)
	if !ok {
		return false
	}
	d := now.Sub(time.Unix(sec, 0)) // saturates, never overflows
	return d <= tol && d >= -tol
}

// decodeHexMAC decodes a hex MAC of exactly size bytes (either letter case).
func decodeHexMAC(s string, size int) ([]byte, bool) {
	if len(s) != 2*size {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// anyMatch reports whether one of sigs equals the HMAC of the concatenated
// parts under one of keys. Comparison is constant-time.
func anyMatch(newHash func() hash.Hash, keys, sigs [][]byte, parts ...[]byte) bool {
	for _, key := range keys {
		m := hmac.New(newHash, key)
		for _, p := range parts {
			m.Write(p)
		}
		want := m.Sum(nil)
		for _, sig := range sigs {
			if hmac.Equal(sig, want) {
				return true
			}
		}
	}
	return false
}
