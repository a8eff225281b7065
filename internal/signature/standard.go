package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DecodeStandardSecret decodes a Standard Webhooks secret: "whsec_"
// (optional) followed by standard base64. The HMAC key is the decoded bytes.
func DecodeStandardSecret(s string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil {
		return nil, errors.New("secret is not whsec_ followed by standard base64")
	}
	if len(raw) == 0 {
		return nil, errors.New("secret is empty")
	}
	return raw, nil
}

// SignStandard returns the Standard Webhooks webhook-signature header value
// for a message: "v1,<base64 HMAC-SHA256 of id.timestamp.body>" for each
// key, space-separated, so a destination can rotate secrets.
func SignStandard(keys [][]byte, msgID string, ts time.Time, body []byte) string {
	content := make([]byte, 0, len(msgID)+len(body)+24)
	content = append(content, msgID...)
	content = append(content, '.')
	content = strconv.AppendInt(content, ts.Unix(), 10)
	content = append(content, '.')
	content = append(content, body...)
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(Sum(sha256.New, k, content))
	}
	return strings.Join(sigs, " ")
}

// StandardConfig configures a Standard Webhooks verifier.
type StandardConfig struct {
	// Secrets are whsec_ secrets (base64 after the prefix).
	Secrets []string
	// Tolerance is how far webhook-timestamp may be from now, either way.
	// Default 5m.
	Tolerance time.Duration
}

// Standard verifies Standard Webhooks (and Svix, which uses the same scheme
// under svix- header names): webhook-signature holds space-separated
// "v1,<base64>" signatures of "id.timestamp.body". It is an IDVerifier: the
// id it verified is the one to key on.
type Standard struct {
	keys      [][]byte
	tolerance time.Duration
}

// NewStandard decodes the secrets and returns the verifier.
func NewStandard(cfg StandardConfig) (*Standard, error) {
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("at least one secret is required")
	}
	tol, err := toleranceOrDefault(cfg.Tolerance)
	if err != nil {
		return nil, err
	}
	v := &Standard{tolerance: tol}
	for i, s := range cfg.Secrets {
		k, err := DecodeStandardSecret(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: %w", i, err)
		}
		v.keys = append(v.keys, k)
	}
	return v, nil
}

// standardFamilies are the header name prefixes of the scheme: webhook-* of
// the specification first, then svix-*, which Svix sends.
var standardFamilies = [2]string{"webhook", "svix"}

// standardHeaders returns the id, timestamp and signature headers from the
// webhook- names or, when none of those is present, the svix- names. A
// request carrying webhook-id and svix-id with different values is
// rejected: only one family is verified, and an id read from the other (by
// a key rule, or by a reader of the stored headers) would be one nobody
// signed, which is how a captured request gets relabelled as a new event.
// Each header may be sent once.
func standardHeaders(h http.Header) (id, ts, sig string, names [3]string, err error) {
	ids := [2]string{}
	for i, p := range standardFamilies {
		for _, n := range []string{p + "-id", p + "-timestamp", p + "-signature"} {
			if len(h.Values(n)) > 1 {
				return "", "", "", names, reject(ErrMalformed, "header %s is malformed: sent more than once", n)
			}
		}
		ids[i] = h.Get(p + "-id")
	}
	if ids[0] != "" && ids[1] != "" && ids[0] != ids[1] {
		return "", "", "", names, reject(ErrMalformed, "headers webhook-id and svix-id differ: send one header family, or the same id in both")
	}
	for _, p := range standardFamilies {
		names = [3]string{p + "-id", p + "-timestamp", p + "-signature"}
		id, ts, sig = h.Get(names[0]), h.Get(names[1]), h.Get(names[2])
		if id != "" || ts != "" || sig != "" {
			return id, ts, sig, names, nil
		}
	}
	return "", "", "", [3]string{"webhook-id", "webhook-timestamp", "webhook-signature"}, nil
}

// Verify checks the signature and the timestamp.
func (v *Standard) Verify(r *Request) error {
	_, err := v.VerifyID(r)
	return err
}

// VerifyID checks the signature and the timestamp, and returns the message
// id the signature covers (see IDVerifier).
func (v *Standard) VerifyID(r *Request) (string, error) {
	id, ts, sigs, names, err := standardHeaders(r.Header)
	if err != nil {
		return "", err
	}
	for i, val := range []string{id, ts, sigs} {
		if val == "" {
			return "", reject(ErrMissing, "missing header %s", names[i])
		}
	}
	if _, ok := parseUnix(ts); !ok {
		return "", reject(ErrMalformed, "header %s is not a Unix timestamp", names[1])
	}
	if !withinTolerance(r.Now, ts, v.tolerance) {
		return "", reject(ErrExpired, "timestamp outside tolerance (%s either way)", v.tolerance)
	}
	var got [][]byte
	for _, s := range strings.Fields(sigs) {
		version, b64, ok := strings.Cut(s, ",")
		if !ok || version != "v1" {
			continue // other versions are allowed in the list, just not ours
		}
		if b, err := base64.StdEncoding.DecodeString(b64); err == nil {
			got = append(got, b)
		}
	}
	if len(got) == 0 {
		return "", reject(ErrMalformed, "header %s has no v1 signature", names[2])
	}
	if anyMatch(sha256.New, v.keys, got, []byte(id), []byte{'.'}, []byte(ts), []byte{'.'}, r.Body) {
		return id, nil
	}
	return "", reject(ErrMismatch, "signature mismatch")
}
