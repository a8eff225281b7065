package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A third-party vector (SQLPage's Shopify webhook test), checked with
// `printf '%s' "$body" | openssl dgst -sha256 -hmac test-webhook-secret -binary | base64`.
const (
	shopifySecret = "test-webhook-secret"
	shopifyBody   = `{"id":1234567890,"email":"customer@example.com","total_price":"123.45"}`
	shopifySig    = "QNyObTlKbMx2qDlPF/ZOZcBqg5OgPg+2oky3zldc0Gw="
)

func TestShopifyKnownVector(t *testing.T) {
	t.Parallel()
	raw, err := hex.DecodeString(hexMAC(sha256.New, shopifySecret, shopifyBody))
	require.NoError(t, err)
	require.Equal(t, shopifySig, base64.StdEncoding.EncodeToString(raw))
}

func TestShopifyVerify(t *testing.T) {
	t.Parallel()
	const (
		hX   = "X-Shopify-Hmac-Sha256"
		hNew = "Shopify-Hmac-Sha256"
	)
	// Same bytes, last character changed only in the 2 unused bits.
	nonCanonical := shopifySig[:42] + "x="
	require.Equal(t, "w", shopifySig[42:43])
	tests := []struct {
		name    string
		secrets []string
		header  http.Header
		body    string
		wantErr error
	}{
		{name: "vector", header: http.Header{hX: {shopifySig}}, body: shopifyBody},
		{name: "vector, header in lower case on the wire", header: http.Header{http.CanonicalHeaderKey("x-shopify-hmac-sha256"): {shopifySig}}, body: shopifyBody},
		{name: "newer header name", header: http.Header{hNew: {shopifySig}}, body: shopifyBody},
		{name: "unpadded", header: http.Header{hX: {strings.TrimRight(shopifySig, "=")}}, body: shopifyBody},
		{name: "second configured secret (rotation)", secrets: []string{"old-secret", shopifySecret}, header: http.Header{hX: {shopifySig}}, body: shopifyBody},
		{name: "X- header wins over the newer one", header: http.Header{hX: {shopifySig}, hNew: {"AAAA"}}, body: shopifyBody},

		{name: "tampered body", header: http.Header{hX: {shopifySig}}, body: strings.Replace(shopifyBody, "123.45", "0.01", 1), wantErr: ErrMismatch},
		{name: "wrong secret", secrets: []string{"other"}, header: http.Header{hX: {shopifySig}}, body: shopifyBody, wantErr: ErrMismatch},
		{name: "X- header wrong, newer right", header: http.Header{hX: {base64.StdEncoding.EncodeToString(make([]byte, 32))}, hNew: {shopifySig}}, body: shopifyBody, wantErr: ErrMismatch},
		{name: "missing", header: http.Header{}, body: shopifyBody, wantErr: ErrMissing},
		{name: "blank", header: http.Header{hX: {" "}}, body: shopifyBody, wantErr: ErrMissing},
		{name: "hex instead of base64", header: http.Header{hX: {hexMAC(sha256.New, shopifySecret, shopifyBody)}}, body: shopifyBody, wantErr: ErrMalformed},
		{name: "URL-safe alphabet", header: http.Header{hX: {strings.NewReplacer("+", "-", "/", "_").Replace(shopifySig)}}, body: shopifyBody, wantErr: ErrMalformed},
		{name: "non-canonical last character", header: http.Header{hX: {nonCanonical}}, body: shopifyBody, wantErr: ErrMalformed},
		{name: "truncated", header: http.Header{hX: {shopifySig[:40]}}, body: shopifyBody, wantErr: ErrMalformed},
		{name: "inner space", header: http.Header{hX: {shopifySig[:20] + " " + shopifySig[20:]}}, body: shopifyBody, wantErr: ErrMalformed},
		{name: "inner newline", header: http.Header{hX: {shopifySig[:20] + "\n" + shopifySig[20:]}}, body: shopifyBody, wantErr: ErrMalformed},
		{name: "sent twice", header: http.Header{hX: {shopifySig, shopifySig}}, body: shopifyBody, wantErr: ErrMalformed},
		{name: "newer header sent twice", header: http.Header{hNew: {shopifySig, shopifySig}}, body: shopifyBody, wantErr: ErrMalformed},
		{name: "sha256= prefix", header: http.Header{hX: {"sha256=" + shopifySig}}, body: shopifyBody, wantErr: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{shopifySecret}
			}
			v, err := NewShopify(ShopifyConfig{Secrets: secrets})
			require.NoError(t, err)
			err = v.Verify(&Request{Header: tt.header, Body: []byte(tt.body)})
			hidden := append([]string{shopifySig, shopifyB64(tt.body)}, secrets...)
			requireVerdict(t, err, tt.wantErr, hidden...)
		})
	}
}

func TestShopifyReasons(t *testing.T) {
	t.Parallel()
	v, err := NewShopify(ShopifyConfig{Secrets: []string{shopifySecret}})
	require.NoError(t, err)
	for _, tt := range []struct {
		header http.Header
		want   string
	}{
		{http.Header{}, "missing header X-Shopify-Hmac-Sha256"},
		{http.Header{"Shopify-Hmac-Sha256": {"zz"}}, "header Shopify-Hmac-Sha256 is malformed: want the base64 of a 32-byte HMAC-SHA256"},
		{http.Header{"X-Shopify-Hmac-Sha256": {base64.StdEncoding.EncodeToString(make([]byte, 32))}}, "signature mismatch"},
	} {
		require.EqualError(t, v.Verify(&Request{Header: tt.header, Body: []byte(shopifyBody)}), tt.want)
	}
}

func TestNewShopifyRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]ShopifyConfig{
		"no secrets":   {},
		"empty secret": {Secrets: []string{"", shopifySecret}},
	} {
		_, err := NewShopify(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), shopifySecret, name)
	}
}

func shopifyB64(body string) string {
	raw, _ := hex.DecodeString(hexMAC(sha256.New, shopifySecret, body))
	return base64.StdEncoding.EncodeToString(raw)
}

// FuzzShopify feeds arbitrary X-Shopify-Hmac-Sha256 values and bodies. It
// must never panic, must reject with a *VerifyError quoting neither the
// secret nor the expected signature, and must accept only the canonical
// base64 (padded or not) of the body's HMAC under the secret.
func FuzzShopify(f *testing.F) {
	// The vector.
	f.Add(shopifySig, []byte(shopifyBody))
	// Unpadded.
	f.Add(strings.TrimRight(shopifySig, "="), []byte(shopifyBody))
	// Non-canonical trailing bits.
	f.Add(shopifySig[:42]+"x=", []byte(shopifyBody))
	// Embedded CR LF, which a lenient decoder would skip.
	f.Add(shopifySig[:20]+"\r\n"+shopifySig[20:], []byte(shopifyBody))
	// Padding only.
	f.Add("====", []byte{})
	// Empty.
	f.Add("", []byte{})

	v, err := NewShopify(ShopifyConfig{Secrets: []string{shopifySecret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		h := http.Header{}
		h.Set("X-Shopify-Hmac-Sha256", header)
		err := v.Verify(&Request{Header: h, Body: body})
		want := shopifyB64(string(body))
		if err != nil {
			requireFuzzRejection(t, err, shopifySecret, want, strings.TrimRight(want, "="))
			return
		}
		if s := strings.Trim(header, " \t"); s != want && s != strings.TrimRight(want, "=") {
			t.Fatalf("accepted %q for body %q", header, body)
		}
	})
}
