package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"testing"

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
