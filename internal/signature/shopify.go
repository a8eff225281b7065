package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// ShopifyConfig configures a Shopify verifier.
type ShopifyConfig struct {
	// Secrets are the app's client secrets; any one matching passes.
	Secrets []string
}

// Shopify verifies Shopify's webhook signature: the standard base64 of the
// HMAC-SHA256 of the body, in X-Shopify-Hmac-Sha256 or, when that is absent,
// in Shopify-Hmac-Sha256 (sent by newer event deliveries).
type Shopify struct {
	keys [][]byte
}

var _ Verifier = (*Shopify)(nil)

const (
	shopifyHeader    = "X-Shopify-Hmac-Sha256"
	shopifyHeaderNew = "Shopify-Hmac-Sha256"
)

// NewShopify validates cfg and returns the verifier.
func NewShopify(cfg ShopifyConfig) (*Shopify, error) {
	keys, err := newKeys(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	return &Shopify{keys: keys}, nil
}

// Verify checks the body's HMAC against the signature header.
func (v *Shopify) Verify(r *Request) error {
	header := shopifyHeader
	raw, err := oneValue(r.Header.Values(header), "header "+header)
	if err != nil {
		return err
	}
	if raw == "" {
		header = shopifyHeaderNew
		if raw, err = oneValue(r.Header.Values(header), "header "+header); err != nil {
			return err
		}
		if raw == "" {
			return reject(ErrMissing, "missing header %s", shopifyHeader)
		}
	}
	sig, ok := decodeShopifySig(raw)
	if !ok {
		return reject(ErrMalformed, "header %s is malformed: want the base64 of a 32-byte HMAC-SHA256", header)
	}
	if !anyMatch(sha256.New, v.keys, [][]byte{sig}, r.Body) {
		return reject(ErrMismatch, "signature mismatch")
	}
	return nil
}

// decodeShopifySig decodes the canonical standard base64 of a 32-byte MAC,
// with or without padding. Strict decoding refuses stray bits in the last
// character, so only one spelling of a signature is accepted; CR and LF,
// which the decoder would skip, are refused first.
func decodeShopifySig(s string) ([]byte, bool) {
	if !printableASCII(s) {
		return nil, false
	}
	enc := base64.StdEncoding.Strict()
	if !strings.HasSuffix(s, "=") {
		enc = base64.RawStdEncoding.Strict()
	}
	b, err := enc.DecodeString(s)
	return b, err == nil && len(b) == sha256.Size
}
