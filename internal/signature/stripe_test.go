package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v85/webhook"
)

const (
	stripeSecret  = "whsec_test_0123456789abcdef"
	stripePayload = `{"id":"evt_1","object":"event","type":"charge.succeeded","data":{"object":{"amount":2000}}}`
)

// stripeNow is the injected arrival time of every Stripe test request.
var stripeNow = time.Unix(1700000000, 0)

// stripeSigned returns a genuine Stripe-Signature header, made by stripe-go.
func stripeSigned(payload, secret string, ts time.Time) string {
	return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{
		Payload: []byte(payload), Secret: secret, Timestamp: ts,
	}).Header
}

// stripeV1 returns a hex v1 signature made by stripe-go.
func stripeV1(payload, secret string, ts time.Time) string {
	return hex.EncodeToString(webhook.ComputeSignature(ts, []byte(payload), secret))
}

func TestStripeVerify(t *testing.T) {
	t.Parallel()
	genuine := stripeSigned(stripePayload, stripeSecret, stripeNow)
	var indented bytes.Buffer
	require.NoError(t, json.Indent(&indented, []byte(stripePayload), "", "  "))
	// A "whsec_" secret whose rest is valid base64: Stripe keys the HMAC
	// with the whole string, so decoding it would break verification.
	const b64Secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	tsNow := strconv.FormatInt(stripeNow.Unix(), 10)
	v1 := stripeV1(stripePayload, stripeSecret, stripeNow)

	tests := []struct {
		name      string
		secrets   []string
		tolerance time.Duration
		header    string
		body      string
		wantErr   error
	}{
		{name: "genuine", header: genuine, body: stripePayload},
		{name: "genuine, whsec_ secret used as given", secrets: []string{b64Secret}, header: stripeSigned(stripePayload, b64Secret, stripeNow), body: stripePayload},
		{name: "second configured secret (rotation)", secrets: []string{"whsec_old", stripeSecret}, header: genuine, body: stripePayload},
		{name: "two v1, second matches (Stripe rolling a secret)", header: "t=" + tsNow + ",v1=" + stripeV1(stripePayload, "whsec_other", stripeNow) + ",v1=" + v1, body: stripePayload},
		{name: "v0 ignored", header: genuine + ",v0=" + strings.Repeat("ab", 32), body: stripePayload},
		{name: "upper-case hex", header: "t=" + tsNow + ",v1=" + strings.ToUpper(v1), body: stripePayload},
		{name: "signed 5m ago (edge)", header: stripeSigned(stripePayload, stripeSecret, stripeNow.Add(-5*time.Minute)), body: stripePayload},
		{name: "signed 5m ahead (edge)", header: stripeSigned(stripePayload, stripeSecret, stripeNow.Add(5*time.Minute)), body: stripePayload},
		{name: "wider tolerance accepts 10m old", tolerance: 15 * time.Minute, header: stripeSigned(stripePayload, stripeSecret, stripeNow.Add(-10*time.Minute)), body: stripePayload},
		{name: "empty body", header: stripeSigned("", stripeSecret, stripeNow), body: ""},

		{name: "tampered body", header: genuine, body: strings.Replace(stripePayload, "2000", "9000", 1), wantErr: ErrMismatch},
		{name: "re-serialised JSON", header: genuine, body: indented.String(), wantErr: ErrMismatch},
		{name: "wrong secret", secrets: []string{"whsec_wrong"}, header: genuine, body: stripePayload, wantErr: ErrMismatch},
		{name: "only v0", header: "t=" + tsNow + ",v0=" + v1, body: stripePayload, wantErr: ErrMalformed},
		{name: "timestamp changed", header: "t=" + strconv.FormatInt(stripeNow.Unix()-1, 10) + ",v1=" + v1, body: stripePayload, wantErr: ErrMismatch},
		{name: "stale (now-10m)", header: stripeSigned(stripePayload, stripeSecret, stripeNow.Add(-10*time.Minute)), body: stripePayload, wantErr: ErrExpired},
		{name: "future (now+10m)", header: stripeSigned(stripePayload, stripeSecret, stripeNow.Add(10*time.Minute)), body: stripePayload, wantErr: ErrExpired},
		{name: "just past the edge", header: stripeSigned(stripePayload, stripeSecret, stripeNow.Add(-5*time.Minute-time.Second)), body: stripePayload, wantErr: ErrExpired},
		{name: "missing header", header: "", body: stripePayload, wantErr: ErrMissing},
		{name: "blank header", header: "  ", body: stripePayload, wantErr: ErrMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{stripeSecret}
			}
			v, err := NewStripe(StripeConfig{Secrets: secrets, Tolerance: tt.tolerance})
			require.NoError(t, err)
			h := http.Header{}
			if tt.header != "" {
				h.Set("Stripe-Signature", tt.header)
			}
			err = v.Verify(&Request{Header: h, Body: []byte(tt.body), Now: stripeNow})
			hidden := append([]string{v1, stripeV1(tt.body, stripeSecret, stripeNow)}, secrets...)
			requireVerdict(t, err, tt.wantErr, hidden...)
		})
	}
}

// stripe-go agrees on the genuine header, and only checks that a timestamp
// is not too old; we refuse one from the future as well.
func TestStripeAgreesWithStripeGo(t *testing.T) {
	t.Parallel()
	now := time.Now()
	v, err := NewStripe(StripeConfig{Secrets: []string{stripeSecret}})
	require.NoError(t, err)

	genuine := stripeSigned(stripePayload, stripeSecret, now)
	require.NoError(t, webhook.ValidatePayload([]byte(stripePayload), genuine, stripeSecret))
	require.NoError(t, v.Verify(stripeRequest(genuine, stripePayload, now)))

	future := stripeSigned(stripePayload, stripeSecret, now.Add(10*time.Minute))
	require.NoError(t, webhook.ValidatePayload([]byte(stripePayload), future, stripeSecret))
	require.ErrorIs(t, v.Verify(stripeRequest(future, stripePayload, now)), ErrExpired)
}

func TestStripeMalformedHeader(t *testing.T) {
	t.Parallel()
	ts := strconv.FormatInt(stripeNow.Unix(), 10)
	v1 := stripeV1(stripePayload, stripeSecret, stripeNow)
	for name, header := range map[string]string{
		"no t":                 "v1=" + v1,
		"no v1":                "t=" + ts,
		"duplicate t":          "t=" + ts + ",t=" + ts + ",v1=" + v1,
		"space after comma":    "t=" + ts + ", v1=" + v1,
		"space around =":       "t = " + ts + ",v1=" + v1,
		"tab":                  "t=" + ts + ",\tv1=" + v1,
		"empty t":              "t=,v1=" + v1,
		"empty v1":             "t=" + ts + ",v1=",
		"empty unknown value":  "t=" + ts + ",v1=" + v1 + ",v0=",
		"empty key":            "t=" + ts + ",=x,v1=" + v1,
		"trailing comma":       "t=" + ts + ",v1=" + v1 + ",",
		"double comma":         "t=" + ts + ",,v1=" + v1,
		"no =":                 "t=" + ts + ",v1",
		"two =":                "t=" + ts + ",v1=" + v1 + "=",
		"non-numeric t":        "t=abc,v1=" + v1,
		"negative t":           "t=-" + ts + ",v1=" + v1,
		"signed t":             "t=+" + ts + ",v1=" + v1,
		"leading zero t":       "t=0" + ts + ",v1=" + v1,
		"fractional t":         "t=" + ts + ".5,v1=" + v1,
		"huge t":               "t=99999999999999999999999999,v1=" + v1,
		"13-digit t (millis)":  "t=" + ts + "000,v1=" + v1,
		"v1 not hex":           "t=" + ts + ",v1=" + strings.Repeat("zz", 32),
		"v1 truncated":         "t=" + ts + ",v1=" + v1[:62],
		"v1 too long":          "t=" + ts + ",v1=" + v1 + "00",
		"v1 odd length":        "t=" + ts + ",v1=" + v1[:63],
		"semicolons":           "t=" + ts + ";v1=" + v1,
		"garbage":              "garbage",
		"NUL":                  "t=" + ts + ",v1=" + v1 + "\x00",
		"non-ASCII":            "t=" + ts + ",v1=" + v1 + ",ü=1\u00a0",
		"only separators":      ",,,",
		"valid v1 then broken": "t=" + ts + ",v1=" + v1 + ",v1=xyz",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v, err := NewStripe(StripeConfig{Secrets: []string{stripeSecret}})
			require.NoError(t, err)
			err = v.Verify(stripeRequest(header, stripePayload, stripeNow))
			requireVerdict(t, err, ErrMalformed, stripeSecret, v1)
			require.True(t, strings.HasPrefix(err.Error(), "header Stripe-Signature is malformed"), err.Error())
		})
	}
}

func TestStripeHeaderSentTwice(t *testing.T) {
	t.Parallel()
	v, err := NewStripe(StripeConfig{Secrets: []string{stripeSecret}})
	require.NoError(t, err)
	genuine := stripeSigned(stripePayload, stripeSecret, stripeNow)
	h := http.Header{"Stripe-Signature": {genuine, genuine}}
	err = v.Verify(&Request{Header: h, Body: []byte(stripePayload), Now: stripeNow})
	requireVerdict(t, err, ErrMalformed, stripeSecret)
}

func TestStripeReasons(t *testing.T) {
	t.Parallel()
	v, err := NewStripe(StripeConfig{Secrets: []string{stripeSecret}})
	require.NoError(t, err)
	for header, want := range map[string]string{
		"": "missing header Stripe-Signature",
		stripeSigned(stripePayload, "whsec_x", stripeNow):                    "signature mismatch",
		stripeSigned(stripePayload, stripeSecret, stripeNow.Add(-time.Hour)): "timestamp outside tolerance (5m0s either way)",
		"t=1": "header Stripe-Signature is malformed: no v1= signature",
	} {
		h := http.Header{}
		if header != "" {
			h.Set("Stripe-Signature", header)
		}
		err := v.Verify(&Request{Header: h, Body: []byte(stripePayload), Now: stripeNow})
		require.EqualError(t, err, want)
	}
}

func TestNewStripeRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]StripeConfig{
		"no secrets":         {},
		"empty secret":       {Secrets: []string{stripeSecret, ""}},
		"negative tolerance": {Secrets: []string{stripeSecret}, Tolerance: -time.Second},
	} {
		_, err := NewStripe(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), stripeSecret, name)
	}
}

func TestNewStripeDefaultTolerance(t *testing.T) {
	t.Parallel()
	v, err := NewStripe(StripeConfig{Secrets: []string{stripeSecret}})
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, v.tolerance)
}

// FuzzStripe feeds arbitrary Stripe-Signature headers and bodies to the
// verifier. It must never panic, must reject with a *VerifyError that quotes
// neither the secret nor the expected signature, and must accept only when
// the header carries, for a timestamp within tolerance, the v1 HMAC of the
// body under the secret. Whatever it accepts, stripe-go must accept too.
func FuzzStripe(f *testing.F) {
	now := stripeNow
	ts := strconv.FormatInt(now.Unix(), 10)
	body := []byte(stripePayload)
	v1 := stripeV1(stripePayload, stripeSecret, now)
	// Genuine header, as stripe-go makes it.
	f.Add(stripeSigned(stripePayload, stripeSecret, now), body)
	// Genuine, with a v0 test-mode signature after it.
	f.Add("t="+ts+",v1="+v1+",v0="+v1, body)
	// Two v1, only the second valid.
	f.Add("t="+ts+",v1="+strings.Repeat("0", 64)+",v1="+v1, body)
	// Duplicate t.
	f.Add("t="+ts+",t=1,v1="+v1, body)
	// Spaces after the separator.
	f.Add("t="+ts+", v1="+v1, body)
	// Timestamp that overflows int64.
	f.Add("t=99999999999999999999,v1="+v1, body)
	// Negative timestamp and empty value.
	f.Add("t=-1,v1=", body)
	// Separators and equals signs only.
	f.Add(",=,==,", []byte{})
	// Empty header, empty body.
	f.Add("", []byte{})
	// Stale but correctly signed.
	f.Add(stripeSigned(stripePayload, stripeSecret, now.Add(-time.Hour)), body)

	v, err := NewStripe(StripeConfig{Secrets: []string{stripeSecret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, header string, body []byte) {
		h := http.Header{}
		h.Set("Stripe-Signature", header)
		err := v.Verify(&Request{Header: h, Body: body, Now: now})

		// Independent reading of the header: the last t= and every v1=.
		var t0 string
		var v1s []string
		for _, e := range strings.Split(strings.Trim(header, " \t"), ",") {
			if s, ok := strings.CutPrefix(e, "t="); ok {
				t0 = s
			}
			if s, ok := strings.CutPrefix(e, "v1="); ok {
				v1s = append(v1s, s)
			}
		}
		want := hexMAC(sha256.New, stripeSecret, t0, ".", string(body))
		if err != nil {
			requireFuzzRejection(t, err, stripeSecret, want)
			return
		}
		sec, perr := strconv.ParseInt(t0, 10, 64)
		if perr != nil || now.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
			t.Fatalf("accepted timestamp %q outside tolerance; header %q", t0, header)
		}
		found := false
		for _, s := range v1s {
			found = found || strings.EqualFold(s, want)
		}
		if !found {
			t.Fatalf("accepted %q for body %q without a matching v1", header, body)
		}
		if err := webhook.ValidatePayloadIgnoringTolerance(body, strings.Trim(header, " \t"), stripeSecret); err != nil {
			t.Fatalf("accepted %q for body %q, stripe-go says %v", header, body, err)
		}
	})
}

func stripeRequest(header, body string, now time.Time) *Request {
	h := http.Header{}
	h.Set("Stripe-Signature", header)
	return &Request{Header: h, Body: []byte(body), Now: now}
}

// Helpers shared by the tests of every verifier in this package.

// hexMAC returns the hex HMAC of the concatenated parts, computed here with
// crypto/hmac rather than the package's helpers.
func hexMAC(newHash func() hash.Hash, key string, parts ...string) string {
	m := hmac.New(newHash, []byte(key))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// requireVerdict requires err to be nil when want is nil, and otherwise a
// *VerifyError wrapping want whose reason repeats none of hidden (the
// secrets and the expected signatures).
func requireVerdict(t *testing.T, err, want error, hidden ...string) {
	t.Helper()
	if want == nil {
		require.NoError(t, err)
		return
	}
	require.ErrorIs(t, err, want)
	var ve *VerifyError
	require.ErrorAs(t, err, &ve)
	require.NotEmpty(t, ve.Reason)
	for _, s := range hidden {
		if s != "" {
			require.NotContains(t, ve.Reason, s)
			require.NotContains(t, strings.ToLower(ve.Reason), strings.ToLower(s))
		}
	}
}

// requireFuzzRejection fails unless err is a *VerifyError wrapping one of the
// sentinels whose reason repeats none of hidden.
func requireFuzzRejection(t *testing.T, err error, hidden ...string) {
	t.Helper()
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("error %T %v is not a *VerifyError", err, err)
	}
	switch ve.Err {
	case ErrMissing, ErrMalformed, ErrMismatch, ErrExpired:
	default:
		t.Fatalf("error %q wraps %v, not a sentinel", ve.Reason, ve.Err)
	}
	if ve.Reason == "" {
		t.Fatal("empty reason")
	}
	for _, s := range hidden {
		if s != "" && strings.Contains(strings.ToLower(ve.Reason), strings.ToLower(s)) {
			t.Fatalf("reason %q repeats a secret or the expected signature", ve.Reason)
		}
	}
}
