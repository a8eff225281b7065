package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// GitHub's documented example: secret "It's a Secret to Everybody", payload
// "Hello, World!".
const (
	githubSecret = "It's a Secret to Everybody"
	githubBody   = "Hello, World!"
	githubSig    = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
)

func TestHMACKnownVector(t *testing.T) {
	t.Parallel()
	require.Equal(t, githubSig, hex.EncodeToString(Sum(sha256.New, []byte(githubSecret), []byte(githubBody))))
}

func TestHMACVerify(t *testing.T) {
	t.Parallel()
	b64 := base64.StdEncoding.EncodeToString(Sum(sha256.New, []byte(githubSecret), []byte(githubBody)))
	tests := []struct {
		name    string
		cfg     HMACConfig
		header  string
		body    string
		wantErr error
	}{
		{"hex with prefix", HMACConfig{Secrets: []string{githubSecret}, Header: "X-Sig", Prefix: "sha256="}, "sha256=" + githubSig, githubBody, nil},
		{"base64", HMACConfig{Secrets: []string{githubSecret}, Header: "X-Sig", Encoding: "base64"}, b64, githubBody, nil},
		{"second secret (rotation)", HMACConfig{Secrets: []string{"old", githubSecret}, Header: "X-Sig"}, githubSig, githubBody, nil},
		{"missing header", HMACConfig{Secrets: []string{githubSecret}, Header: "X-Sig"}, "", githubBody, ErrMissing},
		{"missing prefix", HMACConfig{Secrets: []string{githubSecret}, Header: "X-Sig", Prefix: "sha256="}, githubSig, githubBody, ErrMalformed},
		{"not hex", HMACConfig{Secrets: []string{githubSecret}, Header: "X-Sig"}, "zz", githubBody, ErrMalformed},
		{"truncated", HMACConfig{Secrets: []string{githubSecret}, Header: "X-Sig"}, githubSig[:62], githubBody, ErrMalformed},
		{"tampered body", HMACConfig{Secrets: []string{githubSecret}, Header: "X-Sig"}, githubSig, githubBody + " ", ErrMismatch},
		{"wrong secret", HMACConfig{Secrets: []string{"nope"}, Header: "X-Sig"}, githubSig, githubBody, ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v, err := NewHMAC(tt.cfg)
			require.NoError(t, err)
			h := http.Header{}
			if tt.header != "" {
				h.Set("X-Sig", tt.header)
			}
			err = v.Verify(&Request{Header: h, Body: []byte(tt.body)})
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			var ve *VerifyError
			require.True(t, errors.As(err, &ve))
			require.NotContains(t, ve.Reason, githubSecret)
			require.NotContains(t, ve.Reason, githubSig)
		})
	}
}

func TestNewHMACRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []HMACConfig{
		{Header: "X"},
		{Secrets: []string{""}, Header: "X"},
		{Secrets: []string{"s"}},
		{Secrets: []string{"s"}, Header: "X", Algorithm: "md5"},
		{Secrets: []string{"s"}, Header: "X", Encoding: "base32"},
	} {
		_, err := NewHMAC(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// FuzzHMACVerify checks that no header value panics the parser and that
// nothing but the true signature is accepted.
func FuzzHMACVerify(f *testing.F) {
	f.Add("sha256="+githubSig, []byte(githubBody)) // the valid one
	f.Add("sha256=", []byte(""))                   // empty after prefix
	f.Add("sha256=zz", []byte("x"))                // not hex
	f.Add("sha256="+githubSig+"00", []byte(githubBody))
	v, err := NewHMAC(HMACConfig{Secrets: []string{githubSecret}, Header: "X-Sig", Prefix: "sha256="})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		h := http.Header{}
		h.Set("X-Sig", header)
		err := v.Verify(&Request{Header: h, Body: body})
		want := "sha256=" + hex.EncodeToString(Sum(sha256.New, []byte(githubSecret), body))
		if err == nil && header != want {
			// Only the exact hex (any case, surrounding space) may pass.
			got, decErr := hex.DecodeString(trimPrefixSpace(header))
			if decErr != nil || hex.EncodeToString(got) != want[len("sha256="):] {
				t.Fatalf("accepted %q for body %q", header, body)
			}
		}
	})
}

func trimPrefixSpace(s string) string {
	return strings.TrimPrefix(strings.TrimSpace(s), "sha256=")
}

func TestHMACQueryAndTimestamp(t *testing.T) {
	t.Parallel()
	now := time.Unix(1700000000, 0)
	body := []byte(`{"a":1}`)
	sig := func(content string) string {
		return hex.EncodeToString(Sum(sha256.New, []byte("k"), []byte(content)))
	}
	v, err := NewHMAC(HMACConfig{Secrets: []string{"k"}, Header: "X-Sig", TimestampHeader: "X-Ts", SignedContent: "v0:{timestamp}:{body}"})
	require.NoError(t, err)
	q, err := NewHMAC(HMACConfig{Secrets: []string{"k"}, Query: "signature"})
	require.NoError(t, err)
	tests := []struct {
		name    string
		v       *HMAC
		header  http.Header
		query   url.Values
		now     time.Time
		wantErr error
	}{
		{"timestamp template", v, http.Header{"X-Sig": {sig("v0:1700000000:" + string(body))}, "X-Ts": {"1700000000"}}, nil, now, nil},
		{"timestamp stale", v, http.Header{"X-Sig": {sig("v0:1700000000:" + string(body))}, "X-Ts": {"1700000000"}}, nil, now.Add(10 * time.Minute), ErrExpired},
		{"timestamp swapped", v, http.Header{"X-Sig": {sig("v0:1700000000:" + string(body))}, "X-Ts": {"1700000001"}}, nil, now, ErrMismatch},
		{"timestamp missing", v, http.Header{"X-Sig": {sig("x")}}, nil, now, ErrMissing},
		{"query", q, http.Header{}, url.Values{"signature": {sig(string(body))}}, now, nil},
		{"query missing", q, http.Header{}, url.Values{}, now, ErrMissing},
		{"query wrong", q, http.Header{}, url.Values{"signature": {sig("other")}}, now, ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.v.Verify(&Request{Header: tt.header, Query: tt.query, Body: body, Now: tt.now})
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.wantErr)
			}
		})
	}
	_, err = NewHMAC(HMACConfig{Secrets: []string{"k"}, Header: "X", TimestampHeader: "T", SignedContent: "no body"})
	require.Error(t, err)
	_, err = NewHMAC(HMACConfig{Secrets: []string{"k"}, Header: "X", Query: "q"})
	require.Error(t, err, "header and query are exclusive")
}

func TestTokenAndBasic(t *testing.T) {
	t.Parallel()
	tok, err := NewToken(TokenConfig{Secrets: []string{"old-token", "new-token"}, Header: "X-Hotmart-Hottok"})
	require.NoError(t, err)
	require.NoError(t, tok.Verify(&Request{Header: http.Header{"X-Hotmart-Hottok": {"new-token"}}}))
	require.ErrorIs(t, tok.Verify(&Request{Header: http.Header{"X-Hotmart-Hottok": {"new-tokeN"}}}), ErrMismatch)
	require.ErrorIs(t, tok.Verify(&Request{Header: http.Header{"X-Hotmart-Hottok": {"new-token-and-more"}}}), ErrMismatch)
	require.ErrorIs(t, tok.Verify(&Request{Header: http.Header{}}), ErrMissing)
	require.Equal(t, []string{"X-Hotmart-Hottok"}, tok.SecretHeaders())

	basic, err := NewBasic(BasicConfig{Username: "relay", Secrets: []string{"pw"}})
	require.NoError(t, err)
	auth := func(s string) *Request {
		return &Request{Header: http.Header{"Authorization": {s}}}
	}
	require.NoError(t, basic.Verify(auth("Basic "+base64.StdEncoding.EncodeToString([]byte("relay:pw")))))
	require.ErrorIs(t, basic.Verify(auth("Basic "+base64.StdEncoding.EncodeToString([]byte("relay:px")))), ErrMismatch)
	require.ErrorIs(t, basic.Verify(auth("Basic "+base64.StdEncoding.EncodeToString([]byte("other:pw")))), ErrMismatch)
	require.ErrorIs(t, basic.Verify(auth("Bearer x")), ErrMalformed)
	require.ErrorIs(t, basic.Verify(auth("Basic !!")), ErrMalformed)
	require.ErrorIs(t, basic.Verify(&Request{Header: http.Header{}}), ErrMissing)
}

// FuzzTokenAndBasic: arbitrary header values never panic and never pass
// unless they are the configured credentials.
func FuzzTokenAndBasic(f *testing.F) {
	f.Add("new-token", "Basic cmVsYXk6cHc=") // both valid
	f.Add("", "Basic ")                      // empty
	f.Add("new-token\x00", "basic cmVsYXk6") // near misses
	tok, err := NewToken(TokenConfig{Secrets: []string{"new-token"}, Header: "X-Token"})
	if err != nil {
		f.Fatal(err)
	}
	basic, err := NewBasic(BasicConfig{Username: "relay", Secrets: []string{"pw"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, token, authorization string) {
		h := http.Header{}
		h.Set("X-Token", token)
		if tok.Verify(&Request{Header: h}) == nil && h.Get("X-Token") != "new-token" {
			t.Fatalf("token %q accepted", token)
		}
		h.Set("Authorization", authorization)
		if basic.Verify(&Request{Header: h}) == nil {
			_, enc, _ := strings.Cut(h.Get("Authorization"), " ")
			raw, _ := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
			if string(raw) != "relay:pw" {
				t.Fatalf("authorization %q accepted", authorization)
			}
		}
	})
}
