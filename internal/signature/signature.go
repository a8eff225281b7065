// Package signature verifies that a webhook request comes from its sender.
// Every Verifier works on the raw request bytes, before any parsing, compares
// in constant time, and accepts several secrets at once so a sender can
// rotate. It is pure: no I/O, the clock is passed in.
package signature

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // some senders still sign with HMAC-SHA1; only used when configured
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Sentinel causes of a rejection; a VerifyError wraps one of them.
var (
	ErrMissing   = errors.New("missing signature")
	ErrMalformed = errors.New("malformed signature")
	ErrMismatch  = errors.New("signature mismatch")
	ErrExpired   = errors.New("timestamp outside tolerance")
)

// VerifyError is a rejection with a reason a sender's engineer can act on.
// It never contains a secret or the expected signature.
type VerifyError struct {
	// Reason is the message sent back in the 401 body.
	Reason string
	// Err is one of the sentinel errors.
	Err error
}

func (e *VerifyError) Error() string { return e.Reason }
func (e *VerifyError) Unwrap() error { return e.Err }

// Kind is a short, stable label for metrics: missing, malformed, mismatch or
// expired.
func (e *VerifyError) Kind() string {
	switch e.Err {
	case ErrMissing:
		return "missing"
	case ErrMalformed:
		return "malformed"
	case ErrExpired:
		return "expired"
	default:
		return "mismatch"
	}
}

func reject(err error, format string, args ...any) *VerifyError {
	return &VerifyError{Reason: fmt.Sprintf(format, args...), Err: err}
}

// Request is the part of an HTTP request that verification reads.
type Request struct {
	Header http.Header
	Query  url.Values
	Body   []byte
	// Now is the time the request arrived.
	Now time.Time
}

// Verifier authenticates a request. It returns nil or a *VerifyError.
type Verifier interface {
	Verify(r *Request) error
}

// None accepts every request. Use it only behind another layer of
// authentication.
type None struct{}

// Verify accepts r.
func (None) Verify(*Request) error { return nil }

// HMACConfig configures a generic HMAC verifier: a hex or base64 HMAC of the
// raw body in a header, optionally after a prefix such as "sha256=".
type HMACConfig struct {
	Secrets   []string
	Algorithm string // sha1, sha256 (default) or sha512
	Encoding  string // hex (default) or base64
	Header    string
	Prefix    string
}

// HMAC verifies a generic body HMAC.
type HMAC struct {
	secrets  [][]byte
	newHash  func() hash.Hash
	decode   func(string) ([]byte, error)
	header   string
	prefix   string
	hashSize int
}

// NewHMAC validates cfg and returns the verifier.
func NewHMAC(cfg HMACConfig) (*HMAC, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("at least one secret is required")
	}
	if cfg.Header == "" {
		return nil, errors.New("the signature header is required")
	}
	v := &HMAC{header: cfg.Header, prefix: cfg.Prefix}
	for i, s := range cfg.Secrets {
		if s == "" {
			return nil, fmt.Errorf("secret %d is empty", i)
		}
		v.secrets = append(v.secrets, []byte(s))
	}
	var err error
	if v.newHash, err = hashFunc(cfg.Algorithm); err != nil {
		return nil, err
	}
	v.hashSize = v.newHash().Size()
	switch cfg.Encoding {
	case "", "hex":
		v.decode = hex.DecodeString
	case "base64":
		v.decode = decodeBase64
	default:
		return nil, fmt.Errorf("unknown encoding %q", cfg.Encoding)
	}
	return v, nil
}

func hashFunc(name string) (func() hash.Hash, error) {
	switch name {
	case "", "sha256":
		return sha256.New, nil
	case "sha1":
		return sha1.New, nil
	case "sha512":
		return sha512.New, nil
	}
	return nil, fmt.Errorf("unknown algorithm %q", name)
}

// decodeBase64 accepts standard base64 with or without padding.
func decodeBase64(s string) ([]byte, error) {
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// Verify checks the header against an HMAC of the body under each secret.
func (v *HMAC) Verify(r *Request) error {
	raw := strings.TrimSpace(r.Header.Get(v.header))
	if raw == "" {
		return reject(ErrMissing, "missing header %s", v.header)
	}
	if v.prefix != "" {
		if !strings.HasPrefix(raw, v.prefix) {
			return reject(ErrMalformed, "header %s must start with %q", v.header, v.prefix)
		}
		raw = raw[len(v.prefix):]
	}
	got, err := v.decode(raw)
	if err != nil || len(got) != v.hashSize {
		return reject(ErrMalformed, "header %s is not a valid signature encoding", v.header)
	}
	for _, secret := range v.secrets {
		if hmac.Equal(got, Sum(v.newHash, secret, r.Body)) {
			return nil
		}
	}
	return reject(ErrMismatch, "signature mismatch")
}

// Sum returns the HMAC of msg under key.
func Sum(newHash func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(newHash, key)
	m.Write(msg)
	return m.Sum(nil)
}
