package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// WebhookTolerance is how far a delivery's webhook-timestamp may be from
// the receiver's clock (either way) before VerifyWebhook refuses it: a
// replayed old delivery is refused, a receiver with a slightly wrong clock
// is not.
const WebhookTolerance = 5 * time.Minute

// Webhook verification errors; answer a delivery that fails with 400 (it
// is not from the gateway, or it was altered or replayed).
var (
	ErrWebhookHeaders   = errors.New("oncepay: webhook without webhook-id, webhook-timestamp or webhook-signature")
	ErrWebhookSecret    = errors.New("oncepay: the webhook secret is not whsec_ + base64")
	ErrWebhookTimestamp = errors.New("oncepay: webhook timestamp too far from now (a replay, or a wrong clock)")
	ErrWebhookSignature = errors.New("oncepay: no webhook signature matches the secret")
)

// Event is an event as the gateway delivers it (and GET /v1/events/{id}
// returns it). Data.Object is the payment or refund at the transition, as
// GET returns it.
type Event struct {
	ID        string    `json:"id"`
	Object    string    `json:"object"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	Data      struct {
		Object json.RawMessage `json:"object"`
	} `json:"data"`
}

// Payment decodes the event's object as a payment (payment.* events).
func (e *Event) Payment() (*Payment, error) {
	if !strings.HasPrefix(e.Type, "payment.") {
		return nil, errors.New("oncepay: a " + e.Type + " event carries no payment")
	}
	var p Payment
	if err := json.Unmarshal(e.Data.Object, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// VerifyWebhook checks a delivery's Standard Webhooks signature against
// the endpoint's secret (whsec_…, shown when the endpoint was created or
// its secret rotated) and returns the event. Pass the raw body, exactly
// as received. Deliveries are at least once: dedupe by Event.ID (the
// webhook-id, the same on every attempt), and answer 2xx within 10 s.
func VerifyWebhook(secret string, header http.Header, body []byte) (*Event, error) {
	return verifyWebhook(secret, header, body, time.Now())
}

func verifyWebhook(secret string, header http.Header, body []byte, now time.Time) (*Event, error) {
	raw, ok := strings.CutPrefix(secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(raw)
	if !ok || err != nil || len(key) == 0 {
		return nil, ErrWebhookSecret
	}
	id, ts, sigs := header.Get("webhook-id"), header.Get("webhook-timestamp"), header.Get("webhook-signature")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if id == "" || sigs == "" || err != nil {
		return nil, ErrWebhookHeaders
	}
	if d := now.Sub(time.Unix(sec, 0)); d > WebhookTolerance || d < -WebhookTolerance {
		return nil, ErrWebhookTimestamp
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(sigs) {
		b64, ok := strings.CutPrefix(sig, "v1,")
		if !ok {
			continue // another scheme (v1a, …): not ours to check
		}
		if got, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(got, want) {
			var e Event
			if err := json.Unmarshal(body, &e); err != nil {
				return nil, err
			}
			return &e, nil
		}
	}
	return nil, ErrWebhookSignature
}
