package signature

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Standard Webhooks specification's test vector.
func TestSignStandardKnownVector(t *testing.T) {
	t.Parallel()
	key, err := DecodeStandardSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	got := SignStandard([][]byte{key}, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got)
}

func TestSignStandardSeveralKeys(t *testing.T) {
	t.Parallel()
	a, b := []byte("0123456789abcdef"), []byte("fedcba9876543210")
	got := SignStandard([][]byte{a, b}, "id", time.Unix(1, 0), []byte("x"))
	require.Equal(t, SignStandard([][]byte{a}, "id", time.Unix(1, 0), []byte("x"))+" "+
		SignStandard([][]byte{b}, "id", time.Unix(1, 0), []byte("x")), got)
}

func TestDecodeStandardSecretRejectsBadInput(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"whsec_", "whsec_!!!", "not base64"} {
		_, err := DecodeStandardSecret(s)
		require.Error(t, err, s)
		require.NotContains(t, err.Error(), s)
	}
}

func standardRequest(id, ts, sig string, body []byte, prefix string, now time.Time) *Request {
	h := http.Header{}
	if id != "" {
		h.Set(prefix+"-id", id)
	}
	if ts != "" {
		h.Set(prefix+"-timestamp", ts)
	}
	if sig != "" {
		h.Set(prefix+"-signature", sig)
	}
	return &Request{Header: h, Body: body, Now: now}
}

func TestStandardVerify(t *testing.T) {
	t.Parallel()
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		id     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts     = "1614265330"
		sig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	body := []byte(`{"test": 2432232314}`)
	signedAt := time.Unix(1614265330, 0)
	v, err := NewStandard(StandardConfig{Secrets: []string{"whsec_" + "b2xkLXNlY3JldC0xMjM0NTY3OA==", secret}})
	require.NoError(t, err)
	tests := []struct {
		name    string
		req     *Request
		wantErr error
	}{
		{"specification vector", standardRequest(id, ts, sig, body, "webhook", signedAt), nil},
		{"svix header names", standardRequest(id, ts, sig, body, "svix", signedAt), nil},
		{"one of several signatures", standardRequest(id, ts, "v1a,xyz v1,bm9wZQ== "+sig, body, "webhook", signedAt), nil},
		{"4m59s late", standardRequest(id, ts, sig, body, "webhook", signedAt.Add(4*time.Minute+59*time.Second)), nil},
		{"stale", standardRequest(id, ts, sig, body, "webhook", signedAt.Add(6*time.Minute)), ErrExpired},
		{"from the future", standardRequest(id, ts, sig, body, "webhook", signedAt.Add(-6*time.Minute)), ErrExpired},
		{"tampered body", standardRequest(id, ts, sig, []byte(`{"test": 2432232315}`), "webhook", signedAt), ErrMismatch},
		{"re-serialised JSON", standardRequest(id, ts, sig, []byte(`{"test":2432232314}`), "webhook", signedAt), ErrMismatch},
		{"other id", standardRequest("msg_other", ts, sig, body, "webhook", signedAt), ErrMismatch},
		{"missing signature", standardRequest(id, ts, "", body, "webhook", signedAt), ErrMissing},
		{"missing id", standardRequest("", ts, sig, body, "webhook", signedAt), ErrMissing},
		{"timestamp not a number", standardRequest(id, "16142653x0", sig, body, "webhook", signedAt), ErrMalformed},
		{"no v1 signature", standardRequest(id, ts, "v2,abc", body, "webhook", signedAt), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := v.Verify(tt.req)
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.NotContains(t, err.Error(), "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		})
	}
}

func TestNewStandardRejectsBadSecrets(t *testing.T) {
	t.Parallel()
	for _, cfg := range []StandardConfig{{}, {Secrets: []string{"whsec_%%%"}}, {Secrets: []string{"whsec_"}}, {Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, Tolerance: -time.Second}} {
		_, err := NewStandard(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// FuzzStandardVerify feeds arbitrary headers and bodies: no panic, and no
// acceptance unless the signature list holds the true signature.
func FuzzStandardVerify(f *testing.F) {
	f.Add("msg_p5jXN8AQM9LWM0D4loKWxJek", "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", []byte(`{"test": 2432232314}`)) // the valid vector
	f.Add("id", "-9223372036854775808", "v1,", []byte("x"))                                                                                // extreme timestamp
	f.Add("id", "1614265330", "v1,,v1 ,, v1", []byte(""))                                                                                  // empty parts
	f.Add("id", "99999999999999999999", "v1,AAAA", []byte("x"))                                                                            // overflow
	key, err := DecodeStandardSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		f.Fatal(err)
	}
	v, err := NewStandard(StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1614265330, 0)
	f.Fuzz(func(t *testing.T, id, ts, sigs string, body []byte) {
		err := v.Verify(standardRequest(id, ts, sigs, body, "webhook", now))
		if err != nil {
			return
		}
		sec, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil {
			t.Fatalf("accepted a non-numeric timestamp %q", ts)
		}
		want := SignStandard([][]byte{key}, id, time.Unix(sec, 0), body)
		if !strings.Contains(" "+sigs+" ", " "+want+" ") && !strings.Contains(sigs, strings.TrimPrefix(want, "v1,")) {
			t.Fatalf("accepted %q for id %q ts %q body %q", sigs, id, ts, body)
		}
	})
}
