package events

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
)

// Standard Webhooks (standardwebhooks.com): a delivery carries
// webhook-id (the event's id, the same on every attempt), webhook-timestamp
// (unix seconds) and webhook-signature, space-separated "v1,<base64>"
// signatures, each HMAC-SHA256 over "id.timestamp.body" under a secret
// "whsec_" + base64(key bytes).

// secretPrefix starts every endpoint secret.
const secretPrefix = "whsec_"

// NewSecret makes an endpoint secret: whsec_ and base64 of 24 random bytes.
func NewSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // never fails (crypto/rand, Go ≥ 1.24)
	return secretPrefix + base64.StdEncoding.EncodeToString(b)
}

// ErrSecret is a secret that is not whsec_ + base64.
var ErrSecret = errors.New("events: not a webhook secret")

func secretKey(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return nil, ErrSecret
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil || len(key) == 0 {
		return nil, ErrSecret
	}
	return key, nil
}

// Sign is the v1 signature of a delivery under secret.
func Sign(secret, id string, timestamp int64, body []byte) (string, error) {
	key, err := secretKey(secret)
	if err != nil {
		return "", err
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + strconv.FormatInt(timestamp, 10) + "."))
	mac.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil)), nil
}

// Signatures is the webhook-signature header for a delivery signed by
// every one of secrets (the current one and, during a rotation, the old).
func Signatures(secrets []string, id string, timestamp int64, body []byte) (string, error) {
	out := make([]string, 0, len(secrets))
	for _, s := range secrets {
		sig, err := Sign(s, id, timestamp, body)
		if err != nil {
			return "", err
		}
		out = append(out, sig)
	}
	return strings.Join(out, " "), nil
}
