package payments_test

import (
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
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

// The simulator sends no webhooks, so its webhook route is no endpoint: a
// 404 as for a provider the tenant has no account with, not a 401 and a
// WARN about a bad signature that nobody could ever have sent right.
func TestTheSimulatorHasNoWebhookRoute(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	r := g.Do("POST", "/v1/webhooks/simulator/"+m.ID, []byte(`{"event":"charge.success"}`), "Content-Type", "application/json")
	require.Equal(t, http.StatusNotFound, r.StatusCode, string(r.Body))
	require.Equal(t, "not_found", r.JSON(t)["code"])
	require.NotContains(t, g.Logs.String(), "signature")
}
