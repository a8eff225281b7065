package signature

import (
	"crypto/sha1" //nolint:gosec // Kiwify signs with HMAC-SHA1; HMAC-SHA1 is not broken by SHA-1 collisions
)

// KiwifyConfig configures a Kiwify verifier.
type KiwifyConfig struct {
	// Secrets are the webhook tokens; any one matching passes.
	Secrets []string
}

// Kiwify verifies Kiwify's webhook signature: the hex HMAC-SHA1 of the body,
// keyed with the webhook token, in the "signature" query parameter.
type Kiwify struct {
	keys [][]byte
}

var _ Verifier = (*Kiwify)(nil)

const kiwifyParam = "signature"

// NewKiwify validates cfg and returns the verifier.
func NewKiwify(cfg KiwifyConfig) (*Kiwify, error) {
	keys, err := newKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	return &Kiwify{keys: keys}, nil
}

// Verify checks the body's HMAC against the signature query parameter.
func (v *Kiwify) Verify(r *Request) error {
	raw, err := oneValue(r.Query[kiwifyParam], "query parameter "+kiwifyParam)
	if err != nil {
		return err
	}
	if raw == "" {
		return reject(ErrMissing, "missing query parameter %s", kiwifyParam)
	}
	sig, ok := decodeHexMAC(raw, sha1.Size)
	if !ok {
		return reject(ErrMalformed, "query parameter %s is malformed: want 40 hex digits", kiwifyParam)
	}
	if !anyMatch(sha1.New, v.keys, [][]byte{sig}, r.Body) {
		return reject(ErrMismatch, "signature mismatch")
	}
	return nil
}
