package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The standard-webhooks and svix presets key on the id their signature
// covers, not on a raw header a replayer could rewrite.
func TestStandardPresetsKeyOnTheSignedID(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(validYAML, "sources:\n", `sources:
  - name: sw
    preset: standard-webhooks
    verify: {secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}
  - name: sx
    preset: svix
    verify: {secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]}
`, 1)
	cfg, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.NoError(t, err)
	for _, s := range cfg.Sources[:2] {
		require.Equal(t, Idempotency{SignedID: true}, s.Idempotency, s.Name)
		require.Equal(t, "standard-webhooks", s.Verify.Scheme)
	}
}

func TestSignedIDNeedsASchemeThatSignsAnID(t *testing.T) {
	t.Parallel()
	yaml := strings.Replace(validYAML, "idempotency: {json_paths: [order_id, event]}", "idempotency: {signed_id: true}", 1)
	_, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.Error(t, err)
	require.Contains(t, err.Error(), "sources[acme].idempotency.signed_id: scheme hmac signs no message id (only standard-webhooks does)")
}
