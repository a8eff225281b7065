package signature

import (
	"crypto/sha256"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The example from Paddle's Go SDK (example_webhook_verifier_test.go in
// PaddleHQ/paddle-go-sdk), checked with openssl.
const (
	paddleSecret  = "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_hKkRiCGyyRhbFwIUuqiTBgI7gnWoV0Gr"
	paddleTS      = "1710929255"
	paddleH1      = "6c05ef8fa83c44d751be6d259ec955ce5638e2c54095bf128e408e2fce1589c8"
	paddleExample = "ts=" + paddleTS + ";h1=" + paddleH1
	paddleBody    = `{"data":{"id":"pri_01hsdn96k2hxjzsq5yerecdj9j","name":null,"status":"active","quantity":{"maximum":999999,"minimum":1},"tax_mode":"account_setting","product_id":"pro_01hsdn8qp7yydry3x1yeg6a9rv","unit_price":{"amount":"1000","currency_code":"USD"},"custom_data":null,"description":"testing","import_meta":null,"trial_period":null,"billing_cycle":{"interval":"month","frequency":1},"unit_price_overrides":[]},"event_id":"evt_01hsdn97563968dy0szkmgjwh3","event_type":"price.created","occurred_at":"2024-03-20T10:07:35.590857Z","notification_id":"ntf_01hsdn977e920kbgzt6r6c9rqc"}`
)

// paddleNow is the injected arrival time: two seconds after signing.
var paddleNow = time.Unix(1710929257, 0)

func TestPaddleKnownVector(t *testing.T) {
	t.Parallel()
	require.Equal(t, paddleH1, hexMAC(sha256.New, paddleSecret, paddleTS+":"+paddleBody))
}

func paddleSign(secret string, ts int64, body string) string {
	s := strconv.FormatInt(ts, 10)
	return "ts=" + s + ";h1=" + hexMAC(sha256.New, secret, s+":"+body)
}

func TestPaddleVerify(t *testing.T) {
	t.Parallel()
	signed := paddleNow.Unix()
	otherH1 := hexMAC(sha256.New, "pdl_ntfset_other", paddleTS+":"+paddleBody)
	tests := []struct {
		name      string
		secrets   []string
		tolerance time.Duration
		header    string
		body      string
		wantErr   error
	}{
		{name: "SDK example", header: paddleExample, body: paddleBody},
		{name: "second configured secret (rotation)", secrets: []string{"pdl_ntfset_old", paddleSecret}, header: paddleExample, body: paddleBody},
		{name: "two h1, second matches", header: "ts=" + paddleTS + ";h1=" + otherH1 + ";h1=" + paddleH1, body: paddleBody},
		{name: "two h1, first matches", header: paddleExample + ";h1=" + otherH1, body: paddleBody},
		{name: "h1 before ts", header: "h1=" + paddleH1 + ";ts=" + paddleTS, body: paddleBody},
		{name: "unknown key ignored", header: paddleExample + ";h2=abc", body: paddleBody},
		{name: "5m old (edge)", header: paddleSign(paddleSecret, signed-300, paddleBody), body: paddleBody},
		{name: "5m ahead (edge)", header: paddleSign(paddleSecret, signed+300, paddleBody), body: paddleBody},
		{name: "wider tolerance", tolerance: time.Hour, header: paddleSign(paddleSecret, signed-1800, paddleBody), body: paddleBody},

		{name: "tampered body", header: paddleExample, body: strings.Replace(paddleBody, `"1000"`, `"1"`, 1), wantErr: ErrMismatch},
		{name: "re-serialised JSON", header: paddleExample, body: strings.ReplaceAll(paddleBody, `":`, `": `), wantErr: ErrMismatch},
		{name: "wrong secret", secrets: []string{"pdl_ntfset_other2"}, header: paddleExample, body: paddleBody, wantErr: ErrMismatch},
		{name: "only a wrong h1", header: "ts=" + paddleTS + ";h1=" + otherH1, body: paddleBody, wantErr: ErrMismatch},
		{name: "stale (now-10m)", header: paddleSign(paddleSecret, signed-600, paddleBody), body: paddleBody, wantErr: ErrExpired},
		{name: "future (now+10m)", header: paddleSign(paddleSecret, signed+600, paddleBody), body: paddleBody, wantErr: ErrExpired},
		{name: "just past the edge", header: paddleSign(paddleSecret, signed-301, paddleBody), body: paddleBody, wantErr: ErrExpired},
		{name: "missing", body: paddleBody, wantErr: ErrMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{paddleSecret}
			}
			v, err := NewPaddle(PaddleConfig{Secrets: secrets, Tolerance: tt.tolerance})
			require.NoError(t, err)
			h := http.Header{}
			if tt.header != "" {
				h.Set("Paddle-Signature", tt.header)
			}
			err = v.Verify(&Request{Header: h, Body: []byte(tt.body), Now: paddleNow})
			hidden := append([]string{paddleH1, hexMAC(sha256.New, paddleSecret, paddleTS+":"+tt.body)}, secrets...)
			requireVerdict(t, err, tt.wantErr, hidden...)
		})
	}
}

func TestPaddleMalformedHeader(t *testing.T) {
	t.Parallel()
	v, err := NewPaddle(PaddleConfig{Secrets: []string{paddleSecret}})
	require.NoError(t, err)
	for name, header := range map[string]string{
		"no ts":             "h1=" + paddleH1,
		"no h1":             "ts=" + paddleTS,
		"duplicate ts":      "ts=" + paddleTS + ";ts=" + paddleTS + ";h1=" + paddleH1,
		"comma separated":   "ts=" + paddleTS + ",h1=" + paddleH1,
		"space after ;":     "ts=" + paddleTS + "; h1=" + paddleH1,
		"empty ts":          "ts=;h1=" + paddleH1,
		"empty h1":          "ts=" + paddleTS + ";h1=",
		"empty unknown":     paddleExample + ";h2=",
		"trailing ;":        paddleExample + ";",
		"no =":              "ts=" + paddleTS + ";h1",
		"two =":             "ts=" + paddleTS + ";h1=" + paddleH1 + "=",
		"non-numeric ts":    "ts=now;h1=" + paddleH1,
		"huge ts":           "ts=184467440737095516160;h1=" + paddleH1,
		"negative ts":       "ts=-1;h1=" + paddleH1,
		"leading zero ts":   "ts=0" + paddleTS + ";h1=" + paddleH1,
		"h1 not hex":        "ts=" + paddleTS + ";h1=" + strings.Repeat("x", 64),
		"h1 truncated":      "ts=" + paddleTS + ";h1=" + paddleH1[:60],
		"one h1 broken":     paddleExample + ";h1=00",
		"control character": paddleExample + "\x7f",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			h.Set("Paddle-Signature", header)
			err := v.Verify(&Request{Header: h, Body: []byte(paddleBody), Now: paddleNow})
			requireVerdict(t, err, ErrMalformed, paddleSecret, paddleH1)
			require.True(t, strings.HasPrefix(err.Error(), "header Paddle-Signature is malformed: "), err.Error())
		})
	}
	h := http.Header{"Paddle-Signature": {paddleExample, paddleExample}}
	require.ErrorIs(t, v.Verify(&Request{Header: h, Body: []byte(paddleBody), Now: paddleNow}), ErrMalformed, "sent twice")
}

func TestNewPaddleRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]PaddleConfig{
		"no secrets":         {},
		"empty secret":       {Secrets: []string{paddleSecret, ""}},
		"negative tolerance": {Secrets: []string{paddleSecret}, Tolerance: -1},
	} {
		_, err := NewPaddle(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), paddleSecret, name)
	}
	v, err := NewPaddle(PaddleConfig{Secrets: []string{paddleSecret}})
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, v.tolerance)
}

// FuzzPaddle feeds arbitrary Paddle-Signature headers and bodies. It must
// never panic, must reject with a *VerifyError quoting neither the secret nor
// the expected signature, and must accept only when the header carries, for
// a ts within tolerance, an h1 equal to the HMAC of "<ts>:<body>".
func FuzzPaddle(f *testing.F) {
	body := []byte(paddleBody)
	// The SDK example.
	f.Add(paddleExample, body)
	// Two h1 during a secret rotation.
	f.Add("ts="+paddleTS+";h1="+strings.Repeat("ab", 32)+";h1="+paddleH1, body)
	// Duplicate ts, the second one different.
	f.Add(paddleExample+";ts=1", body)
	// Stripe's separator by mistake.
	f.Add("ts="+paddleTS+",h1="+paddleH1, body)
	// Overflowing timestamp and empty signature.
	f.Add("ts=99999999999999999999;h1=", []byte{})
	// Separators only.
	f.Add(";;=;", []byte{})
	// Empty.
	f.Add("", []byte{})

	v, err := NewPaddle(PaddleConfig{Secrets: []string{paddleSecret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		h := http.Header{}
		h.Set("Paddle-Signature", header)
		err := v.Verify(&Request{Header: h, Body: body, Now: paddleNow})

		// Independent reading of the header: the last ts= and every h1=.
		var ts string
		var h1s []string
		for _, e := range strings.Split(strings.Trim(header, " \t"), ";") {
			if s, ok := strings.CutPrefix(e, "ts="); ok {
				ts = s
			}
			if s, ok := strings.CutPrefix(e, "h1="); ok {
				h1s = append(h1s, s)
			}
		}
		want := hexMAC(sha256.New, paddleSecret, ts+":"+string(body))
		if err != nil {
			requireFuzzRejection(t, err, paddleSecret, want)
			return
		}
		sec, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil || paddleNow.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
			t.Fatalf("accepted ts %q outside tolerance; header %q", ts, header)
		}
		for _, s := range h1s {
			if strings.EqualFold(s, want) {
				return
			}
		}
		t.Fatalf("accepted %q for body %q without a matching h1", header, body)
	})
}
