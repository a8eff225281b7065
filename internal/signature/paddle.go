package signature

import (
	"crypto/sha256"
	"errors"
	"time"
)

// PaddleConfig configures a Paddle verifier.
type PaddleConfig struct {
	// Secrets are the notification destinations' endpoint secret keys
	// ("pdl_ntfset_..."), used as given; any one matching passes.
	Secrets []string
	// Tolerance is how far ts may be from the arrival time, in either
	// direction. 0 means 5 minutes. (Paddle's SDKs default to 5 seconds,
	// which leaves no room for clock drift.)
	Tolerance time.Duration
}

// Paddle verifies Paddle Billing's webhook signature:
//
//	Paddle-Signature: ts=<unix seconds>;h1=<hex>[;h1=<hex>...]
//
// Each h1 is a hex HMAC-SHA256 of "<ts>:<body>"; Paddle sends several while
// a secret is being rotated, and any one matching passes. Unknown keys are
// ignored.
type Paddle struct{ timedKeys }

var _ Verifier = (*Paddle)(nil)

const paddleHeader = "Paddle-Signature"

// NewPaddle validates cfg and returns the verifier.
func NewPaddle(cfg PaddleConfig) (*Paddle, error) {
	tk, err := newTimedKeys(cfg.Secrets, cfg.Tolerance)
	if err != nil {
		return nil, err
	}
	return &Paddle{tk}, nil
}

// Verify checks that ts is within the tolerance of r.Now and that one h1
// signature matches the body under one of the secrets.
func (v *Paddle) Verify(r *Request) error {
	raw, err := oneValue(r.Header.Values(paddleHeader), "header "+paddleHeader)
	if err != nil {
		return err
	}
	if raw == "" {
		return reject(ErrMissing, "missing header %s", paddleHeader)
	}
	ts, sigs, err := parsePaddleHeader(raw)
	if err != nil {
		return reject(ErrMalformed, "header %s is malformed: %v", paddleHeader, err)
	}
	if !withinTolerance(r.Now, ts, v.tolerance) {
		return reject(ErrExpired, "timestamp outside tolerance (%s either way)", v.tolerance)
	}
	if !anyMatch(sha256.New, v.keys, sigs, []byte(ts), []byte{':'}, r.Body) {
		return reject(ErrMismatch, "signature mismatch")
	}
	return nil
}

// parsePaddleHeader returns the timestamp as sent (canonical decimal) and the
// decoded h1 signatures. The returned error describes the problem without
// quoting the header.
func parsePaddleHeader(s string) (ts string, sigs [][]byte, err error) {
	pairs, err := splitPairs(s, ';')
	if err != nil {
		return "", nil, err
	}
	for _, p := range pairs {
		switch p.key {
		case "ts":
			if ts != "" {
				return "", nil, errors.New("ts= appears more than once")
			}
			if _, ok := parseUnix(p.value); !ok {
				return "", nil, errors.New("ts= is not a Unix time in seconds")
			}
			ts = p.value
		case "h1":
			sig, ok := decodeHexMAC(p.value, sha256.Size)
			if !ok {
				return "", nil, errors.New("h1= is not 64 hex digits")
			}
			sigs = append(sigs, sig)
		}
	}
	if ts == "" {
		return "", nil, errors.New("no ts= timestamp")
	}
	if len(sigs) == 0 {
		return "", nil, errors.New("no h1= signature")
	}
	return ts, sigs, nil
}
