package client

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/events"
)

func signed(t *testing.T, secrets []string, id string, at time.Time, body []byte) http.Header {
	t.Helper()
	sig, err := events.Signatures(secrets, id, at.Unix(), body)
	require.NoError(t, err)
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(at.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	secret, other := events.NewSecret(), events.NewSecret()
	body := []byte(`{"id":"evt_1","object":"event","type":"payment.succeeded","created_at":"2026-12-04T10:00:00Z",` +
		`"data":{"object":{"id":"pay_1","object":"payment","status":"succeeded","amount":5000}}}`)
	now := time.Now()

	e, err := VerifyWebhook(secret, signed(t, []string{secret}, "evt_1", now, body), body)
	require.NoError(t, err)
	require.Equal(t, "payment.succeeded", e.Type)
	p, err := e.Payment()
	require.NoError(t, err)
	require.Equal(t, "pay_1", p.ID)
	require.Equal(t, int64(5000), p.Amount)

	// During a rotation the delivery carries both signatures; either secret verifies.
	rot := signed(t, []string{other, secret}, "evt_1", now, body)
	_, err = VerifyWebhook(secret, rot, body)
	require.NoError(t, err)

	cases := map[string]struct {
		secret string
		h      http.Header
		body   []byte
		want   error
	}{
		"OtherSecret": {other, signed(t, []string{secret}, "evt_1", now, body), body, ErrWebhookSignature},
		"AlteredBody": {secret, signed(t, []string{secret}, "evt_1", now, body), append([]byte(" "), body...), ErrWebhookSignature},
		"OtherID": {secret, func() http.Header {
			h := signed(t, []string{secret}, "evt_1", now, body)
			h.Set("webhook-id", "evt_2")
			return h
		}(), body, ErrWebhookSignature},
		"Replayed":  {secret, signed(t, []string{secret}, "evt_1", now.Add(-10*time.Minute), body), body, ErrWebhookTimestamp},
		"Future":    {secret, signed(t, []string{secret}, "evt_1", now.Add(10*time.Minute), body), body, ErrWebhookTimestamp},
		"NoHeaders": {secret, http.Header{}, body, ErrWebhookHeaders},
		"BadSecret": {"sk_live_nope", signed(t, []string{secret}, "evt_1", now, body), body, ErrWebhookSecret},
	}
	for name, c := range cases {
		_, err := VerifyWebhook(c.secret, c.h, c.body)
		require.ErrorIs(t, err, c.want, name)
	}
}

// TestVerifyWebhookSpecVector: the Standard Webhooks specification's own
// example verifies.
func TestVerifyWebhookSpecVector(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek")
	h.Set("webhook-timestamp", "1614265330")
	h.Set("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
	_, err := verifyWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", h, []byte(`{"test": 2432232314}`), time.Unix(1614265330, 0))
	require.NoError(t, err)
}

// FuzzVerifyWebhook: headers and bodies are untrusted; nothing panics and
// nothing unsigned is accepted.
func FuzzVerifyWebhook(f *testing.F) {
	f.Add("evt_1", "1614265330", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", []byte(`{}`))
	f.Add("", "x", "v1,", []byte{0})
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		if _, err := verifyWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", h, body, time.Unix(1614265330, 0)); err == nil &&
			!(id == "msg_p5jXN8AQM9LWM0D4loKWxJek" && ts == "1614265330") {
			t.Fatalf("accepted an unsigned delivery: %q %q %q", id, ts, sig)
		}
	})
}
