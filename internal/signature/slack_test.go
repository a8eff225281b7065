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

// Slack's documented example (api.slack.com, "Verifying requests from
// Slack").
const (
	slackSecret = "8f742231b10e8888abcd99yyyzzz85a5"
	slackTS     = "1531420618"
	slackBody   = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
	slackSig    = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
)

// slackNow is the injected arrival time: a second after the example was
// signed.
var slackNow = time.Unix(1531420619, 0)

func TestSlackKnownVector(t *testing.T) {
	t.Parallel()
	require.Equal(t, slackSig, "v0="+hexMAC(sha256.New, slackSecret, "v0:"+slackTS+":"+slackBody))
}

func slackSign(secret string, ts int64, body string) (string, string) {
	s := strconv.FormatInt(ts, 10)
	return s, "v0=" + hexMAC(sha256.New, secret, "v0:"+s+":"+body)
}

func TestSlackVerify(t *testing.T) {
	t.Parallel()
	signed := slackNow.Unix()
	tsOld, sigOld := slackSign(slackSecret, signed-600, slackBody)
	tsNew, sigNew := slackSign(slackSecret, signed+600, slackBody)
	tsEdge, sigEdge := slackSign(slackSecret, signed-300, slackBody)
	tsAhead, sigAhead := slackSign(slackSecret, signed+300, slackBody)
	tsPast, sigPast := slackSign(slackSecret, signed-301, slackBody)
	tests := []struct {
		name      string
		secrets   []string
		tolerance time.Duration
		ts, sig   string
		body      string
		wantErr   error
	}{
		{name: "documented vector", ts: slackTS, sig: slackSig, body: slackBody},
		{name: "second configured secret (rotation)", secrets: []string{"old", slackSecret}, ts: slackTS, sig: slackSig, body: slackBody},
		{name: "upper-case hex", ts: slackTS, sig: "v0=" + strings.ToUpper(slackSig[3:]), body: slackBody},
		{name: "5m old (edge)", ts: tsEdge, sig: sigEdge, body: slackBody},
		{name: "5m ahead (edge)", ts: tsAhead, sig: sigAhead, body: slackBody},
		{name: "wider tolerance accepts 10m old", tolerance: 15 * time.Minute, ts: tsOld, sig: sigOld, body: slackBody},

		{name: "tampered body", ts: slackTS, sig: slackSig, body: strings.Replace(slackBody, "foobar", "foobaz", 1), wantErr: ErrMismatch},
		{name: "fields reordered", ts: slackTS, sig: slackSig, body: slackBody[strings.Index(slackBody, "&")+1:] + "&" + slackBody[:strings.Index(slackBody, "&")], wantErr: ErrMismatch},
		{name: "wrong secret", secrets: []string{"nope"}, ts: slackTS, sig: slackSig, body: slackBody, wantErr: ErrMismatch},
		{name: "timestamp swapped", ts: "1531420619", sig: slackSig, body: slackBody, wantErr: ErrMismatch},
		{name: "stale (now-10m)", ts: tsOld, sig: sigOld, body: slackBody, wantErr: ErrExpired},
		{name: "future (now+10m)", ts: tsNew, sig: sigNew, body: slackBody, wantErr: ErrExpired},
		{name: "just past the edge", ts: tsPast, sig: sigPast, body: slackBody, wantErr: ErrExpired},
		{name: "missing signature", ts: slackTS, body: slackBody, wantErr: ErrMissing},
		{name: "missing timestamp", sig: slackSig, body: slackBody, wantErr: ErrMissing},
		{name: "timestamp not a number", ts: "15314206l8", sig: slackSig, body: slackBody, wantErr: ErrMalformed},
		{name: "timestamp in milliseconds", ts: slackTS + "000", sig: slackSig, body: slackBody, wantErr: ErrMalformed},
		{name: "timestamp overflows", ts: "99999999999999999999999", sig: slackSig, body: slackBody, wantErr: ErrMalformed},
		{name: "timestamp negative", ts: "-" + slackTS, sig: slackSig, body: slackBody, wantErr: ErrMalformed},
		{name: "timestamp with inner space", ts: "1531 420618", sig: slackSig, body: slackBody, wantErr: ErrMalformed},
		{name: "no version", ts: slackTS, sig: slackSig[3:], body: slackBody, wantErr: ErrMalformed},
		{name: "other version", ts: slackTS, sig: "v1=" + slackSig[3:], body: slackBody, wantErr: ErrMalformed},
		{name: "truncated", ts: slackTS, sig: slackSig[:60], body: slackBody, wantErr: ErrMalformed},
		{name: "space after =", ts: slackTS, sig: "v0= " + slackSig[3:], body: slackBody, wantErr: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []string{slackSecret}
			}
			v, err := NewSlack(SlackConfig{Secrets: secrets, Tolerance: tt.tolerance})
			require.NoError(t, err)
			h := http.Header{}
			if tt.ts != "" {
				h.Set("X-Slack-Request-Timestamp", tt.ts)
			}
			if tt.sig != "" {
				h.Set("X-Slack-Signature", tt.sig)
			}
			err = v.Verify(&Request{Header: h, Body: []byte(tt.body), Now: slackNow})
			_, want := slackSign(slackSecret, slackNow.Unix(), tt.body)
			hidden := append([]string{slackSig[3:], want[3:]}, secrets...)
			requireVerdict(t, err, tt.wantErr, hidden...)
		})
	}
}

func TestSlackHeadersSentTwice(t *testing.T) {
	t.Parallel()
	v, err := NewSlack(SlackConfig{Secrets: []string{slackSecret}})
	require.NoError(t, err)
	for name, h := range map[string]http.Header{
		"timestamp": {"X-Slack-Request-Timestamp": {slackTS, "1"}, "X-Slack-Signature": {slackSig}},
		"signature": {"X-Slack-Request-Timestamp": {slackTS}, "X-Slack-Signature": {slackSig, slackSig}},
	} {
		err := v.Verify(&Request{Header: h, Body: []byte(slackBody), Now: slackNow})
		require.ErrorIs(t, err, ErrMalformed, name)
	}
}

func TestSlackReasons(t *testing.T) {
	t.Parallel()
	v, err := NewSlack(SlackConfig{Secrets: []string{slackSecret}})
	require.NoError(t, err)
	for _, tt := range []struct {
		ts, sig string
		now     time.Time
		want    string
	}{
		{"", "", slackNow, "missing header X-Slack-Signature"},
		{"", slackSig, slackNow, "missing header X-Slack-Request-Timestamp"},
		{"x", slackSig, slackNow, "header X-Slack-Request-Timestamp is malformed: want a Unix time in seconds"},
		{slackTS, "sha256=1", slackNow, "header X-Slack-Signature is malformed: want v0=<64 hex digits>"},
		{slackTS, slackSig, slackNow.Add(time.Hour), "timestamp outside tolerance (5m0s either way)"},
		{slackTS, "v0=" + strings.Repeat("0", 64), slackNow, "signature mismatch"},
	} {
		h := http.Header{}
		if tt.ts != "" {
			h.Set("X-Slack-Request-Timestamp", tt.ts)
		}
		if tt.sig != "" {
			h.Set("X-Slack-Signature", tt.sig)
		}
		require.EqualError(t, v.Verify(&Request{Header: h, Body: []byte(slackBody), Now: tt.now}), tt.want)
	}
}

func TestNewSlackRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]SlackConfig{
		"no secrets":         {Tolerance: time.Minute},
		"empty secret":       {Secrets: []string{""}},
		"negative tolerance": {Secrets: []string{slackSecret}, Tolerance: -time.Minute},
	} {
		_, err := NewSlack(cfg)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), slackSecret, name)
	}
	v, err := NewSlack(SlackConfig{Secrets: []string{slackSecret}})
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, v.tolerance)
}

// FuzzSlack feeds arbitrary X-Slack-Request-Timestamp and X-Slack-Signature
// values and bodies. It must never panic, must reject with a *VerifyError
// quoting neither the secret nor the expected signature, and must accept
// only a timestamp within tolerance together with the v0 HMAC of
// "v0:<timestamp>:<body>" under the secret.
func FuzzSlack(f *testing.F) {
	// The documented vector.
	f.Add(slackTS, slackSig, []byte(slackBody))
	// Timestamp with surrounding blanks (trimmed, as net/http would).
	f.Add(" "+slackTS+"\t", slackSig, []byte(slackBody))
	// Leading zero: another spelling of the same number.
	f.Add("0"+slackTS, slackSig, []byte(slackBody))
	// Overflowing and negative timestamps.
	f.Add("99999999999999999999", "v0=", []byte{})
	f.Add("-1", "v0=00", []byte("x"))
	// Signature without its version.
	f.Add(slackTS, slackSig[3:], []byte(slackBody))
	// Empty everything.
	f.Add("", "", []byte{})

	v, err := NewSlack(SlackConfig{Secrets: []string{slackSecret}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("X-Slack-Request-Timestamp", ts)
		h.Set("X-Slack-Signature", sig)
		err := v.Verify(&Request{Header: h, Body: body, Now: slackNow})
		ts = strings.Trim(ts, " \t")
		want := hexMAC(sha256.New, slackSecret, "v0:"+ts+":"+string(body))
		if err != nil {
			requireFuzzRejection(t, err, slackSecret, want)
			return
		}
		sec, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil || slackNow.Sub(time.Unix(sec, 0)).Abs() > 5*time.Minute {
			t.Fatalf("accepted timestamp %q", ts)
		}
		if !strings.EqualFold(strings.Trim(sig, " \t"), "v0="+want) {
			t.Fatalf("accepted %q for timestamp %q and body %q", sig, ts, body)
		}
	})
}
