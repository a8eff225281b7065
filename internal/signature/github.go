package signature

import (
	"crypto/sha1" //nolint:gosec // only for X-Hub-Signature, and only when AllowSHA1 is set
	"crypto/sha256"
	"hash"
	"strings"
)

// GitHubConfig configures a GitHub verifier.
type GitHubConfig struct {
	// Secrets are the webhook secrets; any one matching passes.
	Secrets []string
	// AllowSHA1 accepts the legacy X-Hub-Signature (HMAC-SHA1) when
	// X-Hub-Signature-256 is absent. Off by default: GitHub sends both, so
	// only old GitHub Enterprise Server versions need it.
	AllowSHA1 bool
}

// GitHub verifies GitHub's webhook signature:
//
//	X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>
//
// and, only when AllowSHA1 is set and that header is absent,
//
//	X-Hub-Signature: sha1=<hex HMAC-SHA1 of the body>
type GitHub struct {
	keys      [][]byte
	allowSHA1 bool
}

var _ Verifier = (*GitHub)(nil)

const (
	githubHeader256 = "X-Hub-Signature-256"
	githubHeader1   = "X-Hub-Signature"
)

// NewGitHub validates cfg and returns the verifier.
func NewGitHub(cfg GitHubConfig) (*GitHub, error) {
	keys, err := newKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	return &GitHub{keys: keys, allowSHA1: cfg.AllowSHA1}, nil
}

// Verify checks the body's HMAC against X-Hub-Signature-256 or, when allowed
// and that header is absent, X-Hub-Signature.
func (v *GitHub) Verify(r *Request) error {
	raw, err := oneValue(r.Header.Values(githubHeader256), "header "+githubHeader256)
	if err != nil {
		return err
	}
	if raw != "" {
		return v.check(r.Body, githubHeader256, raw, "sha256=", sha256.New, sha256.Size)
	}
	if !v.allowSHA1 {
		if r.Header.Get(githubHeader1) != "" {
			return reject(ErrMissing, "missing header %s (%s, HMAC-SHA1, is not accepted)", githubHeader256, githubHeader1)
		}
		return reject(ErrMissing, "missing header %s", githubHeader256)
	}
	raw, err = oneValue(r.Header.Values(githubHeader1), "header "+githubHeader1)
	if err != nil {
		return err
	}
	if raw == "" {
		return reject(ErrMissing, "missing header %s", githubHeader256)
	}
	return v.check(r.Body, githubHeader1, raw, "sha1=", sha1.New, sha1.Size)
}

func (v *GitHub) check(body []byte, header, raw, prefix string, newHash func() hash.Hash, size int) error {
	hexSig, ok := strings.CutPrefix(raw, prefix)
	var sig []byte
	if ok {
		sig, ok = decodeHexMAC(hexSig, size)
	}
	if !ok {
		return reject(ErrMalformed, "header %s is malformed: want %s<%d hex digits>", header, prefix, 2*size)
	}
	if !anyMatch(newHash, v.keys, [][]byte{sig}, body) {
		return reject(ErrMismatch, "signature mismatch")
	}
	return nil
}
