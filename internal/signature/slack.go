package signature

import (
	"crypto/sha256"
	"strings"
	"time"
)

// SlackConfig configures a Slack verifier.
type SlackConfig struct {
	// Secrets are the app's signing secrets; any one matching passes.
	Secrets []string
	// Tolerance is how far X-Slack-Request-Timestamp may be from the
	// arrival time, in either direction. 0 means 5 minutes, as Slack
	// recommends.
	Tolerance time.Duration
}

// Slack verifies Slack's request signature:
//
//	X-Slack-Request-Timestamp: <unix seconds>
//	X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">
type Slack struct{ timedKeys }

var _ Verifier = (*Slack)(nil)

const (
	slackTimestampHeader = "X-Slack-Request-Timestamp"
	slackSignatureHeader = "X-Slack-Signature"
	slackVersion         = "v0"
)

// NewSlack validates cfg and returns the verifier.
func NewSlack(cfg SlackConfig) (*Slack, error) {
	tk, err := newTimedKeys(cfg.Secrets, cfg.Tolerance)
	if err != nil {
		return nil, err
	}
	return &Slack{tk}, nil
}

// Verify checks that the timestamp is within the tolerance of r.Now and that
// the signature matches under one of the secrets.
func (v *Slack) Verify(r *Request) error {
	ts, err := oneValue(r.Header.Values(slackTimestampHeader), "header "+slackTimestampHeader)
	if err != nil {
		return err
	}
	raw, err := oneValue(r.Header.Values(slackSignatureHeader), "header "+slackSignatureHeader)
	if err != nil {
		return err
	}
	if raw == "" {
		return reject(ErrMissing, "missing header %s", slackSignatureHeader)
	}
	if ts == "" {
		return reject(ErrMissing, "missing header %s", slackTimestampHeader)
	}
	if _, ok := parseUnix(ts); !ok {
		return reject(ErrMalformed, "header %s is malformed: want a Unix time in seconds", slackTimestampHeader)
	}
	hexSig, ok := strings.CutPrefix(raw, slackVersion+"=")
	var sig []byte
	if ok {
		sig, ok = decodeHexMAC(hexSig, sha256.Size)
	}
	if !ok {
		return reject(ErrMalformed, "header %s is malformed: want %s=<64 hex digits>", slackSignatureHeader, slackVersion)
	}
	if !withinTolerance(r.Now, ts, v.tolerance) {
		return reject(ErrExpired, "timestamp outside tolerance (%s either way)", v.tolerance)
	}
	if !anyMatch(sha256.New, v.keys, [][]byte{sig}, []byte(slackVersion+":"+ts+":"), r.Body) {
		return reject(ErrMismatch, "signature mismatch")
	}
	return nil
}
