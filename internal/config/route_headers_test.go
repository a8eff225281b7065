package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// routes[].headers go out on every delivery: a header the HTTP client
// cannot send, or one hookrelay sets itself, fails at load, naming the key,
// instead of dead-lettering (or silently losing) every event of the route.
func TestRouteHeadersAreValidated(t *testing.T) {
	t.Parallel()
	env := envMap(map[string]string{"ACME_SECRET": "x"})
	withHeaders := func(block string) string { return validYAML + "    headers:\n" + block }

	t.Run("valid headers load", func(t *testing.T) {
		t.Parallel()
		cfg, err := Load(writeConfig(t, withHeaders(
			"      Authorization: \"Bearer abc\"\n"+
				"      X-Team: \"billing\\tteam\"\n"+ // a tab is allowed in a field value
				"      X-Note: \"café\"\n")), env)
		require.NoError(t, err)
		require.Equal(t, "Bearer abc", cfg.Routes[0].Headers["authorization"])
	})

	tests := []struct {
		name    string
		block   string
		wantMsg string
	}{
		{"CR LF in a value", "      X-Foo: \"a\\r\\nX-Injected: 1\"\n", `routes[billing].headers.x-foo: value contains a control character`},
		{"LF in a value", "      X-Foo: \"a\\nb\"\n", `routes[billing].headers.x-foo: value contains a control character`},
		{"NUL in a value", "      X-Foo: \"a\\0b\"\n", `routes[billing].headers.x-foo: value contains a control character`},
		{"other control in a value", "      X-Foo: \"a\\x01b\"\n", `routes[billing].headers.x-foo: value contains a control character`},
		{"DEL in a value", "      X-Foo: \"a\\x7fb\"\n", `routes[billing].headers.x-foo: value contains a control character`},
		{"space in a name", "      \"X Foo\": a\n", `routes[billing].headers.x foo: not a valid HTTP header name`},
		{"colon in a name", "      \"X-Foo:\": a\n", `routes[billing].headers.x-foo:: not a valid HTTP header name`},
		{"non-ASCII name", "      \"X-Fé\": a\n", `not a valid HTTP header name`},
		{"content type", "      Content-Type: text/plain\n", `routes[billing].headers.content-type: hookrelay sets it on every delivery`},
		{"standard webhooks header", "      Webhook-Signature: x\n", `routes[billing].headers.webhook-signature: hookrelay sets it on every delivery`},
		{"hookrelay header", "      X-Hookrelay-Attempt: \"1\"\n", `routes[billing].headers.x-hookrelay-attempt: hookrelay sets it on every delivery`},
		{"user agent", "      User-Agent: me\n", `routes[billing].headers.user-agent: hookrelay sets it on every delivery`},
		{"content length", "      Content-Length: \"3\"\n", `routes[billing].headers.content-length: the HTTP client sets it`},
		{"host", "      Host: example.com\n", `routes[billing].headers.host: the HTTP client sets it`},
		{"transfer encoding", "      Transfer-Encoding: chunked\n", `routes[billing].headers.transfer-encoding: the HTTP client sets it`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeConfig(t, withHeaders(tt.block)), env)
			require.Error(t, err)
			require.True(t, IsInvalid(err), "want a content error, got %v", err)
			require.Contains(t, err.Error(), tt.wantMsg)
		})
	}

	t.Run("every problem is listed", func(t *testing.T) {
		t.Parallel()
		_, err := Load(writeConfig(t, withHeaders("      X-A: \"1\\n\"\n      X-B: \"2\\r\"\n")), env)
		require.Error(t, err)
		require.Contains(t, err.Error(), "routes[billing].headers.x-a:")
		require.Contains(t, err.Error(), "routes[billing].headers.x-b:")
	})
}

// The validation messages are stable and never echo a value (a header may
// carry a token).
func TestRouteHeaderValueIsNotEchoed(t *testing.T) {
	t.Parallel()
	yaml := validYAML + "    headers:\n      Authorization: \"Bearer hunter2\\n\"\n"
	_, err := Load(writeConfig(t, yaml), envMap(map[string]string{"ACME_SECRET": "x"}))
	require.Error(t, err)
	require.Contains(t, err.Error(), "routes[billing].headers.authorization: value contains a control character")
	require.False(t, strings.Contains(err.Error(), "hunter2"), "no header value in errors")
}
