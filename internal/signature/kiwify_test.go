package signature

import (
	"crypto/sha1" //nolint:gosec // Kiwify signs with HMAC-SHA1
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Kiwify publishes no test vector; this one was computed outside Go with
// `printf '%s' "$body" | openssl dgst -sha1 -hmac kiwify-token-example`.
const (
	kiwifyToken = "kiwify-token-example"
	kiwifyBody  = `{"order_id":"0b6c0b3c","order_status":"paid"}`
	kiwifySig   = "36485efe8d856458e66a3469aafe01c678d05ef1"
)

func TestKiwifyKnownVector(t *testing.T) {
	t.Parallel()
	require.Equal(t, kiwifySig, hexMAC(sha1.New, kiwifyToken, kiwifyBody))
}

func TestKiwifyVerify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		secrets []string
		query   url.Values
		body    string
		wantErr error
	}{
		{name: "vector", query: url.Values{"signature": {kiwifySig}}, body: kiwifyBody},
		{name: "upper-case hex", query: url.Values{"signature": {strings.ToUpper(kiwifySig)}}, body: kiwifyBody},
		{name: "other parameters ignored", query: url.Values{"signature": {kiwifySig}, "source": {"kiwify"}}, body: kiwifyBody},
		{name: "second configured token (rotation)", secrets: []string{"old-token", kiwifyToken}, query: url.Values{"signature": {kiwifySig}}, body: kiwifyBody},

		{name: "tampered body", query: url.Values{"signature": {kiwifySig}}, body: strings.Replace(kiwifyBody, "paid", "refunded", 1), wantErr: ErrMismatch},
		{name: "re-serialised JSON", query: url.Values{"signature": {kiwifySig}}, body: `{"order_id": "0b6c0b3c", "order_status": "paid"}`, wantErr: ErrMismatch},
		{name: "wrong token", secrets: []string{"other-token"}, query: url.Values{"signature": {kiwifySig}}, body: kiwifyBody, wantErr: ErrMismatch},
		{name: "no query", query: nil, body: kiwifyBody, wantErr: ErrMissing},
		{name: "empty parameter", query: url.Values{"signature": {""}}, body: kiwifyBody, wantErr: ErrMissing},
		{name: "parameter name in another case", query: url.Values{"Signature": {kiwifySig}}, body: kiwifyBody, wantErr: ErrMissing},
		{name: "sent twice", query: url.Values{"signature": {kiwifySig, kiwifySig}}, body: kiwifyBody, wantErr: ErrMalformed},
		{name: "not hex", query: url.Values{"signature": {strings.Repeat("z", 40)}}, body: kiwifyBody, wantErr: ErrMalformed},
		{name: "SHA-256 length", query: url.Values{"signature": {kiwifySig + strings.Repeat("0", 24)}}, body: kiwifyBody, wantErr: ErrMalformed},
		{name: "truncated", query: url.Values{"signature": {kiwifySig[:38]}}, body: kiwifyBody, wantErr: ErrMalformed},
		{name: "sha1= prefix", query: url.Values{"signature": {"sha1=" + kiwifySig}}, body: kiwifyBody, wantErr: ErrMalformed},
		{name: "inner space", query: url.Values{"signature": {kiwifySig[:20] + " " + kiwifySig[20:]}}, body: kiwifyBody, wantErr: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{kiwifyToken}
			}
			v, err := NewKiwify(KiwifyConfig{Secrets: secrets})
			require.NoError(t, err)
			err = v.Verify(&Request{Query: tt.query, Body: []byte(tt.body)})
			hidden := append([]string{kiwifySig, hexMAC(sha1.New, kiwifyToken, tt.body)}, secrets...)
			requireVerdict(t, err, tt.wantErr, hidden...)
		})
	}
}

func TestKiwifyReasons(t *testing.T) {
	t.Parallel()
	v, err := NewKiwify(KiwifyConfig{Secrets: []string{kiwifyToken}})
	require.NoError(t, err)
	for _, tt := range []struct {
		query url.Values
		want  string
	}{
		{url.Values{}, "missing query parameter signature"},
		{url.Values{"signature": {"abc"}}, "query parameter signature is malformed: want 40 hex digits"},
		{url.Values{"signature": {"a", "b"}}, "query parameter signature is malformed: sent more than once"},
		{url.Values{"signature": {strings.Repeat("0", 40)}}, "signature mismatch"},
	} {
		require.EqualError(t, v.Verify(&Request{Query: tt.query, Body: []byte(kiwifyBody)}), tt.want)
	}
}

func TestNewKiwifyRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]KiwifyConfig{
		"no tokens":   {},
		"empty token": {Secrets: []string{kiwifyToken, ""}},
	} {
		_, err := NewKiwify(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), kiwifyToken, name)
	}
}

// FuzzKiwify feeds arbitrary signature query parameters and bodies. It must
// never panic, must reject with a *VerifyError quoting neither the token nor
// the expected signature, and must accept only the hex HMAC-SHA1 of the body
// under the token.
func FuzzKiwify(f *testing.F) {
	// The vector.
	f.Add(kiwifySig, []byte(kiwifyBody))
	// Upper-case hex of the vector.
	f.Add(strings.ToUpper(kiwifySig), []byte(kiwifyBody))
	// Odd length and non-hex.
	f.Add(kiwifySig[:39], []byte(kiwifyBody))
	f.Add(strings.Repeat("g", 40), []byte{})
	// Surrounding blanks.
	f.Add(" "+kiwifySig+"\t", []byte(kiwifyBody))
	// Empty.
	f.Add("", []byte{})

	v, err := NewKiwify(KiwifyConfig{Secrets: []string{kiwifyToken}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, sig string, body []byte) {
		err := v.Verify(&Request{Query: url.Values{"signature": {sig}}, Body: body})
		want := hexMAC(sha1.New, kiwifyToken, string(body))
		if err != nil {
			requireFuzzRejection(t, err, kiwifyToken, want)
			return
		}
		if !strings.EqualFold(strings.Trim(sig, " \t"), want) {
			t.Fatalf("accepted %q for body %q", sig, body)
		}
	})
}
