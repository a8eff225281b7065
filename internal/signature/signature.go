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
	"crypto/subtle"
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

// IDVerifier is a Verifier whose scheme signs a message id along with the
// body (Standard Webhooks, and Svix under its own header names). An id read
// from a header the signature does not cover can be changed by anyone who
// replays a captured request; the one VerifyID returns cannot, so it is the
// idempotency key to use.
type IDVerifier interface {
	Verifier
	// VerifyID verifies r exactly as Verify does and, when r is authentic,
	// returns the message id the matching signature covers. On error the id
	// is "".
	VerifyID(r *Request) (id string, err error)
}

// None accepts every request. Use it only behind another layer of
// authentication.
type None struct{}

// Verify accepts r.
func (None) Verify(*Request) error { return nil }

// HMACConfig configures a generic HMAC verifier: a hex or base64 HMAC of the
// raw body (or of a template over a timestamp and the body) in a header or a
// query parameter, optionally after a prefix such as "sha256=".
type HMACConfig struct {
	Secrets   []string
	Algorithm string // sha1, sha256 (default) or sha512
	Encoding  string // hex (default) or base64
	// Header carries the signature; or Query names the query parameter that
	// does. Exactly one is set.
	Header string
	Query  string
	Prefix string
	// TimestampHeader, when set, carries a Unix timestamp that is signed
	// with the body and must be within Tolerance (default 5m) of now.
	TimestampHeader string
	// SignedContent is the signed text with {timestamp} and {body}, default
	// "{timestamp}.{body}". Only with TimestampHeader.
	SignedContent string
	Tolerance     time.Duration
}

// HMAC verifies a generic HMAC.
type HMAC struct {
	secrets   [][]byte
	newHash   func() hash.Hash
	decode    func(string) ([]byte, error)
	header    string
	query     string
	prefix    string
	hashSize  int
	tsHeader  string
	before    string // template text before {body}, with {timestamp}
	after     string // template text after {body}
	tolerance time.Duration
}

// NewHMAC validates cfg and returns the verifier.
func NewHMAC(cfg HMACConfig) (*HMAC, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("at least one secret is required")
	}
	if (cfg.Header == "") == (cfg.Query == "") {
		return nil, errors.New("set exactly one of the signature header or query parameter")
	}
	v := &HMAC{header: cfg.Header, query: cfg.Query, prefix: cfg.Prefix, tsHeader: cfg.TimestampHeader, tolerance: cfg.Tolerance}
	if v.tsHeader != "" {
		tpl := cfg.SignedContent
		if tpl == "" {
			tpl = "{timestamp}.{body}"
		}
		before, after, ok := strings.Cut(tpl, "{body}")
		if !ok || strings.Contains(after, "{body}") {
			return nil, errors.New("signed content must contain {body} once")
		}
		v.before, v.after = before, after
		tol, err := toleranceOrDefault(cfg.Tolerance)
		if err != nil {
			return nil, err
		}
		v.tolerance = tol
	} else if cfg.SignedContent != "" {
		return nil, errors.New("signed content needs a timestamp header")
	}
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

// Verify checks the signature against an HMAC under each secret.
func (v *HMAC) Verify(r *Request) error {
	where, raw := "header "+v.header, r.Header.Get(v.header)
	if v.query != "" {
		where, raw = "query parameter "+v.query, r.Query.Get(v.query)
	}
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return reject(ErrMissing, "missing %s", where)
	}
	if v.prefix != "" {
		if !strings.HasPrefix(raw, v.prefix) {
			return reject(ErrMalformed, "%s must start with %q", where, v.prefix)
		}
		raw = raw[len(v.prefix):]
	}
	got, err := v.decode(raw)
	if err != nil || len(got) != v.hashSize {
		return reject(ErrMalformed, "%s is not a valid signature encoding", where)
	}
	msg := r.Body
	if v.tsHeader != "" {
		ts := strings.TrimSpace(r.Header.Get(v.tsHeader))
		if ts == "" {
			return reject(ErrMissing, "missing header %s", v.tsHeader)
		}
		if _, ok := parseUnix(ts); !ok {
			return reject(ErrMalformed, "header %s is not a Unix timestamp", v.tsHeader)
		}
		if !withinTolerance(r.Now, ts, v.tolerance) {
			return reject(ErrExpired, "timestamp outside tolerance (%s either way)", v.tolerance)
		}
		before := strings.ReplaceAll(v.before, "{timestamp}", ts)
		after := strings.ReplaceAll(v.after, "{timestamp}", ts)
		msg = make([]byte, 0, len(before)+len(r.Body)+len(after))
		msg = append(append(append(msg, before...), r.Body...), after...)
	}
	for _, secret := range v.secrets {
		if hmac.Equal(got, Sum(v.newHash, secret, msg)) {
			return nil
		}
	}
	return reject(ErrMismatch, "signature mismatch")
}

// TokenConfig configures a static shared token in a header (Hotmart's
// X-HOTMART-HOTTOK, Asaas's asaas-access-token).
type TokenConfig struct {
	Secrets []string
	Header  string
}

// Token compares a header with the configured tokens in constant time.
type Token struct {
	tokens [][]byte
	header string
}

// NewToken returns the verifier.
func NewToken(cfg TokenConfig) (*Token, error) {
	if cfg.Header == "" {
		return nil, errors.New("the token header is required")
	}
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("at least one token is required")
	}
	v := &Token{header: cfg.Header}
	for i, s := range cfg.Secrets {
		if s == "" {
			return nil, fmt.Errorf("token %d is empty", i)
		}
		v.tokens = append(v.tokens, []byte(s))
	}
	return v, nil
}

// Verify accepts the request when the header equals one of the tokens.
func (v *Token) Verify(r *Request) error {
	got := []byte(r.Header.Get(v.header))
	if len(got) == 0 {
		return reject(ErrMissing, "missing header %s", v.header)
	}
	if anyEqual(got, v.tokens) {
		return nil
	}
	return reject(ErrMismatch, "token mismatch")
}

// SecretHeaders names the header that carries the token, which must not be
// stored with the event.
func (v *Token) SecretHeaders() []string { return []string{v.header} }

// anyEqual compares got with every candidate in constant time (per
// candidate, and without stopping at a match).
func anyEqual(got []byte, candidates [][]byte) bool {
	ok := 0
	for _, c := range candidates {
		// ConstantTimeCompare returns at once on a length difference, which
		// reveals only the length; hashing first hides that too.
		a, b := sha256.Sum256(got), sha256.Sum256(c)
		ok |= subtle.ConstantTimeCompare(a[:], b[:])
	}
	return ok == 1
}

// BasicConfig configures HTTP Basic authentication.
type BasicConfig struct {
	Username string
	// Secrets are accepted passwords.
	Secrets []string
}

// Basic verifies HTTP Basic credentials.
type Basic struct {
	user      []byte
	passwords [][]byte
}

// NewBasic returns the verifier.
func NewBasic(cfg BasicConfig) (*Basic, error) {
	if cfg.Username == "" {
		return nil, errors.New("the username is required")
	}
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("at least one password is required")
	}
	v := &Basic{user: []byte(cfg.Username)}
	for i, s := range cfg.Secrets {
		if s == "" {
			return nil, fmt.Errorf("password %d is empty", i)
		}
		v.passwords = append(v.passwords, []byte(s))
	}
	return v, nil
}

// Verify checks the Authorization header.
func (v *Basic) Verify(r *Request) error {
	h := r.Header.Get("Authorization")
	if h == "" {
		return reject(ErrMissing, "missing header Authorization")
	}
	scheme, enc, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return reject(ErrMalformed, "header Authorization is not Basic credentials")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return reject(ErrMalformed, "header Authorization is not Basic credentials")
	}
	user, pass, ok := strings.Cut(string(raw), ":")
	if !ok {
		return reject(ErrMalformed, "header Authorization is not Basic credentials")
	}
	userOK := anyEqual([]byte(user), [][]byte{v.user})
	passOK := anyEqual([]byte(pass), v.passwords)
	if userOK && passOK {
		return nil
	}
	return reject(ErrMismatch, "credentials mismatch")
}

// Sum returns the HMAC of msg under key.
func Sum(newHash func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(newHash, key)
	m.Write(msg)
	return m.Sum(nil)
}
