package signature

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"time"
)

// DecodeStandardSecret decodes a Standard Webhooks secret: "whsec_"
// (optional) followed by standard base64. The HMAC key is the decoded bytes.
func DecodeStandardSecret(s string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil {
		return nil, errors.New("secret is not whsec_ followed by standard base64")
	}
	if len(raw) == 0 {
		return nil, errors.New("secret is empty")
	}
	return raw, nil
}

// SignStandard returns the Standard Webhooks webhook-signature header value
// for a message: "v1,<base64 HMAC-SHA256 of id.timestamp.body>" for each
// key, space-separated, so a destination can rotate secrets.
func SignStandard(keys [][]byte, msgID string, ts time.Time, body []byte) string {
	content := make([]byte, 0, len(msgID)+len(body)+24)
	content = append(content, msgID...)
	content = append(content, '.')
	content = strconv.AppendInt(content, ts.Unix(), 10)
	content = append(content, '.')
	content = append(content, body...)
	sigs := make([]string, len(keys))
	for i, k := range keys {
		sigs[i] = "v1," + base64.StdEncoding.EncodeToString(Sum(sha256.New, k, content))
	}
	return strings.Join(sigs, " ")
}
