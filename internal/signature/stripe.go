package signature

import (
	"crypto/sha256"
	"errors"
	"time"
)

// StripeConfig configures a Stripe verifier.
type StripeConfig struct {
	// Secrets are the endpoint signing secrets ("whsec_..."), used as given:
	// Stripe keys the HMAC with the whole string, it is not base64-decoded.
	// Any one matching passes, so a secret can be rolled.
	Secrets []string
	// Tolerance is how far the signed timestamp may be from the arrival
	// time, in either direction. 0 means 5 minutes.
	Tolerance time.Duration
}

// Stripe verifies the Stripe-Signature header:
//
//	Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]
//
// Each v1 is a hex HMAC-SHA256 of "<t>.<body>". Other schemes such as v0
// are ignored. Unlike stripe-go, which only rejects old timestamps, a
// timestamp too far in the future is rejected as well.
type Stripe struct{ timedKeys }

var _ Verifier = (*Stripe)(nil)

const stripeHeader = "Stripe-Signature"

// NewStripe validates cfg and returns the verifier.
func NewStripe(cfg StripeConfig) (*Stripe, error) {
	tk, err := newTimedKeys(cfg.Secrets, cfg.Tolerance)
	if err != nil {
		return nil, err
	}
	return &Stripe{tk}, nil
}

// Verify checks that the timestamp is within the tolerance of r.Now and that
// one v1 signature matches the body under one of the secrets.
func (v *Stripe) Verify(r *Request) error {
	raw, err := oneValue(r.Header.Values(stripeHeader), "header "+stripeHeader)
	if err != nil {
		return err
	}
	if raw == "" {
		return reject(ErrMissing, "missing header %s", stripeHeader)
	}
	ts, sigs, err := parseStripeHeader(raw)
	if err != nil {
		return reject(ErrMalformed, "header %s is malformed: %v", stripeHeader, err)
	}
	if !withinTolerance(r.Now, ts, v.tolerance) {
		return reject(ErrExpired, "timestamp outside tolerance (%s either way)", v.tolerance)
	}
	if !anyMatch(sha256.New, v.keys, sigs, []byte(ts), []byte{'.'}, r.Body) {
		return reject(ErrMismatch, "signature mismatch")
	}
	return nil
}

// parseStripeHeader returns the timestamp as sent (canonical decimal) and the
// decoded v1 signatures. The returned error describes the problem without
// quoting the header.
func parseStripeHeader(s string) (ts string, sigs [][]byte, err error) {
	pairs, err := splitPairs(s, ',')
	if err != nil {
		return "", nil, err
	}
	for _, p := range pairs {
		switch p.key {
		case "t":
			if ts != "" {
				return "", nil, errors.New("t= appears more than once")
			}
			if _, ok := parseUnix(p.value); !ok {
				return "", nil, errors.New("t= is not a Unix time in seconds")
			}
			ts = p.value
		case "v1":
			sig, ok := decodeHexMAC(p.value, sha256.Size)
			if !ok {
				return "", nil, errors.New("v1= is not 64 hex digits")
			}
			sigs = append(sigs, sig)
		}
		// Other schemes (v0, test-mode signatures) are ignored.
	}
	if ts == "" {
		return "", nil, errors.New("no t= timestamp")
	}
	if len(sigs) == 0 {
		return "", nil, errors.New("no v1= signature")
	}
	return ts, sigs, nil
}
