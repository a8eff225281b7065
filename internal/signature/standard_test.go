package signature

import (
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
