package signature

import (
	"crypto/sha1" //nolint:gosec // GitHub's legacy X-Hub-Signature
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// githubSecret, githubBody and githubSig (signature_test.go) are GitHub's
// documented example. githubSHA1 is the legacy X-Hub-Signature for the same
// secret and body, computed with
// `printf 'Hello, World!' | openssl dgst -sha1 -hmac "It's a Secret to Everybody"`.
const githubSHA1 = "01dc10d0c83e72ed246219cdd91669667fe2ca59"

func TestGitHubKnownVectors(t *testing.T) {
	t.Parallel()
	require.Equal(t, githubSig, hexMAC(sha256.New, githubSecret, githubBody))
	require.Equal(t, githubSHA1, hexMAC(sha1.New, githubSecret, githubBody))
}

func TestGitHubVerify(t *testing.T) {
	t.Parallel()
	const (
		h256 = "X-Hub-Signature-256"
		h1   = "X-Hub-Signature"
	)
	tests := []struct {
		name      string
		secrets   []string
		allowSHA1 bool
		header    http.Header
		body      string
		wantErr   error
	}{
		{name: "documented vector", header: http.Header{h256: {"sha256=" + githubSig}}, body: githubBody},
		{name: "upper-case hex", header: http.Header{h256: {"sha256=" + strings.ToUpper(githubSig)}}, body: githubBody},
		{name: "second configured secret (rotation)", secrets: []string{"old", githubSecret}, header: http.Header{h256: {"sha256=" + githubSig}}, body: githubBody},
		{name: "both headers, SHA-256 used", header: http.Header{h256: {"sha256=" + githubSig}, h1: {"sha1=" + githubSHA1}}, body: githubBody},
		{name: "SHA-1 only, allowed", allowSHA1: true, header: http.Header{h1: {"sha1=" + githubSHA1}}, body: githubBody},
		{name: "empty SHA-256 header, SHA-1 allowed", allowSHA1: true, header: http.Header{h256: {""}, h1: {"sha1=" + githubSHA1}}, body: githubBody},

		{name: "tampered body", header: http.Header{h256: {"sha256=" + githubSig}}, body: githubBody + "\n", wantErr: ErrMismatch},
		{name: "wrong secret", secrets: []string{"It's a Secret to Nobody"}, header: http.Header{h256: {"sha256=" + githubSig}}, body: githubBody, wantErr: ErrMismatch},
		{name: "SHA-256 wrong, SHA-1 right: no downgrade", allowSHA1: true, header: http.Header{h256: {"sha256=" + strings.Repeat("0", 64)}, h1: {"sha1=" + githubSHA1}}, body: githubBody, wantErr: ErrMismatch},
		{name: "SHA-1 only, tampered", allowSHA1: true, header: http.Header{h1: {"sha1=" + githubSHA1}}, body: "Hello, World?", wantErr: ErrMismatch},
		{name: "SHA-1 only, not allowed", header: http.Header{h1: {"sha1=" + githubSHA1}}, body: githubBody, wantErr: ErrMissing},
		{name: "missing", header: http.Header{}, body: githubBody, wantErr: ErrMissing},
		{name: "missing, SHA-1 allowed", allowSHA1: true, header: http.Header{}, body: githubBody, wantErr: ErrMissing},
		{name: "no prefix", header: http.Header{h256: {githubSig}}, body: githubBody, wantErr: ErrMalformed},
		{name: "sha1= prefix in the SHA-256 header", header: http.Header{h256: {"sha1=" + githubSHA1}}, body: githubBody, wantErr: ErrMalformed},
		{name: "upper-case prefix", header: http.Header{h256: {"SHA256=" + githubSig}}, body: githubBody, wantErr: ErrMalformed},
		{name: "truncated", header: http.Header{h256: {"sha256=" + githubSig[:62]}}, body: githubBody, wantErr: ErrMalformed},
		{name: "too long", header: http.Header{h256: {"sha256=" + githubSig + "00"}}, body: githubBody, wantErr: ErrMalformed},
		{name: "not hex", header: http.Header{h256: {"sha256=" + strings.Repeat("g", 64)}}, body: githubBody, wantErr: ErrMalformed},
		{name: "space after =", header: http.Header{h256: {"sha256= " + githubSig}}, body: githubBody, wantErr: ErrMalformed},
		{name: "two values", header: http.Header{h256: {"sha256=" + githubSig, "sha256=" + githubSig}}, body: githubBody, wantErr: ErrMalformed},
		{name: "SHA-1 malformed", allowSHA1: true, header: http.Header{h1: {"sha1=" + githubSig}}, body: githubBody, wantErr: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{githubSecret}
			}
			v, err := NewGitHub(GitHubConfig{Secrets: secrets, AllowSHA1: tt.allowSHA1})
			require.NoError(t, err)
			err = v.Verify(&Request{Header: tt.header, Body: []byte(tt.body)})
			hidden := append([]string{githubSig, githubSHA1, hexMAC(sha256.New, githubSecret, tt.body)}, secrets...)
			requireVerdict(t, err, tt.wantErr, hidden...)
		})
	}
}

func TestGitHubReasons(t *testing.T) {
	t.Parallel()
	v, err := NewGitHub(GitHubConfig{Secrets: []string{githubSecret}})
	require.NoError(t, err)
	for _, tt := range []struct {
		header http.Header
		want   string
	}{
		{http.Header{}, "missing header X-Hub-Signature-256"},
		{http.Header{"X-Hub-Signature": {"sha1=" + githubSHA1}}, "missing header X-Hub-Signature-256 (X-Hub-Signature, HMAC-SHA1, is not accepted)"},
		{http.Header{"X-Hub-Signature-256": {githubSig}}, "header X-Hub-Signature-256 is malformed: want sha256=<64 hex digits>"},
		{http.Header{"X-Hub-Signature-256": {"sha256=" + strings.Repeat("0", 64)}}, "signature mismatch"},
	} {
		require.EqualError(t, v.Verify(&Request{Header: tt.header, Body: []byte(githubBody)}), tt.want)
	}
}

func TestNewGitHubRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]GitHubConfig{
		"no secrets":   {AllowSHA1: true},
		"empty secret": {Secrets: []string{githubSecret, ""}},
	} {
		_, err := NewGitHub(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), githubSecret, name)
	}
}

// FuzzGitHub feeds arbitrary X-Hub-Signature-256 and X-Hub-Signature values
// and bodies to a verifier that allows SHA-1. It must never panic, must
// reject with a *VerifyError quoting neither the secret nor an expected
// signature, and must accept only the true HMAC of the body: SHA-256 when
// that header is present, otherwise SHA-1.
func FuzzGitHub(f *testing.F) {
	// The documented vector, SHA-256 only.
	f.Add("sha256="+githubSig, "", []byte(githubBody))
	// SHA-1 only.
	f.Add("", "sha1="+githubSHA1, []byte(githubBody))
	// Both, SHA-256 wrong.
	f.Add("sha256="+strings.Repeat("0", 64), "sha1="+githubSHA1, []byte(githubBody))
	// Prefix with nothing after it.
	f.Add("sha256=", "sha1=", []byte{})
	// Whitespace and odd-length hex.
	f.Add(" sha256=\t"+githubSig[:63], "", []byte(githubBody))
	// Wrong algorithm in each header.
	f.Add("sha1="+githubSHA1, "sha256="+githubSig, []byte(githubBody))

	v, err := NewGitHub(GitHubConfig{Secrets: []string{githubSecret}, AllowSHA1: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig256, sig1 string, body []byte) {
		h := http.Header{}
		h.Set("X-Hub-Signature-256", sig256)
		h.Set("X-Hub-Signature", sig1)
		err := v.Verify(&Request{Header: h, Body: body})
		want256 := hexMAC(sha256.New, githubSecret, string(body))
		want1 := hexMAC(sha1.New, githubSecret, string(body))
		if err != nil {
			requireFuzzRejection(t, err, githubSecret, want256, want1)
			return
		}
		if s := strings.Trim(sig256, " \t"); s != "" {
			if !strings.EqualFold(s, "sha256="+want256) {
				t.Fatalf("accepted X-Hub-Signature-256 %q for body %q", sig256, body)
			}
			return
		}
		if !strings.EqualFold(strings.Trim(sig1, " \t"), "sha1="+want1) {
			t.Fatalf("accepted X-Hub-Signature %q for body %q", sig1, body)
		}
	})
}
