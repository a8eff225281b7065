package signature

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// VerifyID returns the id the matching signature covers, from whichever
// header family carried it, so a key taken from it cannot be relabelled.
// Two families naming different ids are rejected: the id checked and an id
// read elsewhere would disagree.
func TestStandardVerifyIDNamesTheSignedID(t *testing.T) {
	t.Parallel()
	const (
		id  = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		ts  = "1614265330"
		sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	body := []byte(`{"test": 2432232314}`)
	now := time.Unix(1614265330, 0)
	v, err := NewStandard(StandardConfig{Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}})
	require.NoError(t, err)
	var _ IDVerifier = v

	both := func(webhookID, svixID string) *Request {
		r := standardRequest(id, ts, sig, body, "webhook", now)
		r.Header.Set("svix-id", svixID)
		r.Header.Set("svix-timestamp", ts)
		r.Header.Set("svix-signature", sig)
		r.Header.Set("webhook-id", webhookID)
		return r
	}
	twice := func(name string) *Request {
		r := standardRequest(id, ts, sig, body, "svix", now)
		r.Header.Add(name, r.Header.Get(name))
		return r
	}
	tests := []struct {
		name    string
		req     *Request
		wantID  string
		wantErr error
		reason  string
	}{
		{name: "webhook family", req: standardRequest(id, ts, sig, body, "webhook", now), wantID: id},
		{name: "svix family", req: standardRequest(id, ts, sig, body, "svix", now), wantID: id},
		{name: "both families, same id", req: both(id, id), wantID: id},
		{name: "svix signed, new webhook-id", req: both("msg_new", id), wantErr: ErrMalformed, reason: "headers webhook-id and svix-id differ"},
		{name: "webhook signed, new svix-id", req: both(id, "msg_new"), wantErr: ErrMalformed, reason: "headers webhook-id and svix-id differ"},
		{name: "id sent twice", req: twice("svix-id"), wantErr: ErrMalformed, reason: "header svix-id is malformed: sent more than once"},
		{name: "signature sent twice", req: twice("svix-signature"), wantErr: ErrMalformed, reason: "sent more than once"},
		{name: "mismatch", req: standardRequest("msg_other", ts, sig, body, "svix", now), wantErr: ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := v.VerifyID(tt.req)
			require.Equal(t, err, v.Verify(tt.req), "Verify and VerifyID agree")
			if tt.wantErr == nil {
				require.NoError(t, err)
				require.Equal(t, tt.wantID, got)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
			require.Empty(t, got, "no id without a verified signature")
			var ve *VerifyError
			require.True(t, errors.As(err, &ve))
			require.Contains(t, ve.Reason, tt.reason)
		})
	}
}

// Only the Standard Webhooks verifier signs an id; the body-only and
// body-and-timestamp schemes do not claim one.
func TestOnlyStandardVerifiesAnID(t *testing.T) {
	t.Parallel()
	stripe, err := NewStripe(StripeConfig{Secrets: []string{"whsec_x"}})
	require.NoError(t, err)
	github, err := NewGitHub(GitHubConfig{Secrets: []string{"x"}})
	require.NoError(t, err)
	for _, v := range []Verifier{stripe, github, None{}} {
		_, ok := v.(IDVerifier)
		require.False(t, ok, "%T", v)
	}
}
