package payments_test

import (
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

// A signed webhook naming a reference no payment of ours can have — a
// NUL, bytes that are not UTF-8 (Paystack's wire encoding decodes "=FF"
// to one), a page of text — is acknowledged and ignored, at INFO: never a
// value the database refuses, so never a 4xx that has the provider
// redeliver it for days, nor a warning for on-call.
func TestWebhookWithAnImpossibleReferenceIsIgnored(t *testing.T) {
	t.Parallel()
	_, g, m := paystackMerchant(t)
	for name, ref := range map[string]string{
		"NUL": `a\u0000b`, "NotUTF8": "op-=FF", "EncodedNUL": "op-=00", "Long": strings.Repeat("r", 300), "Space": "op x",
	} {
		b := []byte(`{"event":"charge.success","data":{"reference":"` + ref + `"}}`)
		r := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, b,
			"Content-Type", "application/json", "X-Paystack-Signature", hex.EncodeToString(paystack.Sign(paystacktest.SecretKey, b)))
		require.Equal(t, http.StatusOK, r.StatusCode, "%s: %s", name, r.Body)
		require.Equal(t, "ignored", r.JSON(t)["status"], name)
	}
	for _, line := range strings.Split(g.Logs.String(), "\n") {
		if strings.Contains(line, "database needs attention") {
			continue // the test database's own settings, at start
		}
		require.NotContains(t, line, `"level":"WARN"`, line)
		require.NotContains(t, line, `"level":"ERROR"`, line)
	}
}

// The webhook route is unauthenticated, so whatever cannot be verified
// gets one answer: an unknown tenant, a tenant without an account with the
// provider, a provider that sends none (the simulator, every tenant's in
// development), an unknown provider, and a known tenant's bad signature
// are all 401 invalid_signature with the same body but its request id —
// a 404 for the first would tell anyone which tenant ids exist — and none
// sooner than the others. The log still says which it was, for on-call.
func TestWebhookRefusalsDoNotTellWhichTenantsExist(t *testing.T) {
	t.Parallel()
	_, g, m := paystackMerchant(t)
	simOnly := g.Onboard(nil)
	event := []byte(`{"event":"charge.success","data":{"reference":"r"}}`)
	cases := map[string]string{
		"UnknownTenant":    "/v1/webhooks/paystack/ten_000000000000000000000000",
		"NoAccount":        "/v1/webhooks/paystack/" + simOnly.ID,
		"SendsNoWebhooks":  "/v1/webhooks/simulator/" + m.ID,
		"UnknownProvider":  "/v1/webhooks/nosuch/" + m.ID,
		"BadSignature":     "/v1/webhooks/paystack/" + m.ID,
		"SendsNoWebhooks2": "/v1/webhooks/simulator/" + simOnly.ID,
		"UnknownTenantSim": "/v1/webhooks/simulator/ten_000000000000000000000000",
	}
	var first map[string]any
	for name, path := range cases {
		start := time.Now()
		r := g.Do("POST", path, event, "Content-Type", "application/json", "X-Paystack-Signature", strings.Repeat("0", 128))
		// Nor by their times: an unknown tenant costs reads a known one's
		// cached account does not (a floor, so this cannot flake).
		require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "%s is answered sooner than the others", name)
		require.Equal(t, http.StatusUnauthorized, r.StatusCode, "%s: %s", name, r.Body)
		require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), name)
		body := r.JSON(t)
		require.Equal(t, "invalid_signature", body["code"], name)
		require.NotEmpty(t, body["request_id"], name)
		delete(body, "request_id")
		if first == nil {
			first = body
		}
		require.Equal(t, first, body, "%s answers differently from the others", name)
	}
	logs := g.Logs.String()
	require.Contains(t, logs, "webhook signature invalid")
	require.Contains(t, logs, "webhook for no such endpoint refused")
	require.Contains(t, logs, "webhook for a provider that sends none refused")
}
