package payments_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

// A charge of another amount under a payment's reference — made before
// the payment with the merchant's public key at a checkout, say — is not
// the payment's: Charge finds it and answers 202 (ErrReferenceConflict),
// and no later settler may take it for the payment's own either. Neither
// the provider's webhook, nor the app's GET, nor the sweeper records the
// payment succeeded; it stays processing, and past REVIEW_AFTER a person
// reviews it.
func TestAnotherChargeUnderTheReferenceSettlesNothing(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	ref := providers.Reference(m.ID, "taken")
	adapter, err := paystack.New(paystack.Config{BaseURL: ps.URL})(providers.Secrets{"secret_key": paystacktest.SecretKey})
	require.NoError(t, err)
	_, err = adapter.Charge(context.Background(), providers.ChargeRequest{Reference: ref, Amount: 100, Currency: "NGN",
		Email: "ada@example.com", PaymentMethod: paystacktest.TokenSuccess})
	require.NoError(t, err)

	first := g.Pay(m, "taken", body(paystacktest.TokenSuccess)) // 5000 NGN
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	id := first.JSON(t)["id"].(string)

	h, raw, err := ps.Webhook(ref)
	require.NoError(t, err)
	// Answered, not 503: no retry of the event can change what is under
	// the reference, and Paystack would send it again for 72 hours.
	for range 2 {
		r := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
		require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
		require.Equal(t, "pending", r.JSON(t)["status"])
	}
	require.Equal(t, payments.StatusProcessing, ledgerByKey(t, g, m.ID, "taken").Status, "by the webhook")
	require.Equal(t, "processing", g.Get(m, "/v1/payments/"+id).JSON(t)["status"], "by the app's GET")
	ageKeys(t, g, time.Hour)
	sweep(t, g)
	require.Equal(t, payments.StatusProcessing, ledgerByKey(t, g, m.ID, "taken").Status, "by the sweeper")
	require.Contains(t, g.Logs.String(), "for another amount or currency", "someone is told")
	// Once an hour, not at every look: two webhooks, a GET and a sweep
	// found it.
	errors := 0
	for _, l := range strings.Split(g.Logs.String(), "\n") {
		if strings.Contains(l, `"level":"ERROR"`) && strings.Contains(l, "for another amount or currency") {
			errors++
		}
	}
	require.Equal(t, 1, errors, g.Logs.String())

	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at")
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Review)
	require.Equal(t, payments.StatusRequiresReview, ledgerByKey(t, g, m.ID, "taken").Status)
	require.Equal(t, 1, ps.Charges(ref), "and nothing was charged again")
}

// A payment released as never charged whose reference then holds another
// charge: its provider's event is answered (the payment stays failed
// not_processed), not 503 for the provider to send it again for days.
func TestAWebhookAboutAnotherChargeUnderAReleasedReferenceIsAnswered(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	ps.FailNext(http.StatusTooManyRequests) // refused before processing: never charged
	first := g.Pay(m, "released", body(paystacktest.TokenSuccess))
	require.Equal(t, http.StatusServiceUnavailable, first.StatusCode, string(first.Body))
	p := ledgerByKey(t, g, m.ID, "released")
	require.Equal(t, payments.StatusFailed, p.Status)
	adapter, err := paystack.New(paystack.Config{BaseURL: ps.URL})(providers.Secrets{"secret_key": paystacktest.SecretKey})
	require.NoError(t, err)
	_, err = adapter.Charge(context.Background(), providers.ChargeRequest{Reference: p.ProviderReference, Amount: 100, Currency: "NGN",
		Email: "ada@example.com", PaymentMethod: paystacktest.TokenSuccess})
	require.NoError(t, err)
	h, raw, err := ps.Webhook(p.ProviderReference)
	require.NoError(t, err)
	r := g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
	p = ledgerByKey(t, g, m.ID, "released")
	require.Equal(t, payments.StatusFailed, p.Status)
	require.Contains(t, g.Logs.String(), "for another amount or currency")
}

// The same for a payment released as never charged: a charge found under
// its reference at the recheck is re-opened only when it is the payment's
// own amount and currency. On both stores.
func TestRecheckIgnoresAnotherChargeUnderTheReference(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]apptest.Option{"postgres": nil, "sqlite": {apptest.SQLite()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := apptest.Start(t, opts...)
			m := g.Onboard(nil)
			for key, change := range map[string]string{"other-amount": "amount = amount - 1", "other-currency": "currency = 'GHS'"} {
				require.Equal(t, http.StatusAccepted, g.Pay(m, key, body("sim_late")).StatusCode)
				// What lands at the provider under the reference is not
				// this payment's charge.
				require.NoError(t, g.App.DB().Exec(`UPDATE simulator_charges SET `+change+` WHERE reference = ?`,
					ledgerByKey(t, g, m.ID, key).ProviderReference).Error)
			}
			ageKeys(t, g, time.Hour)
			require.Equal(t, 2, sweep(t, g).Released)
			dbtest.Age(t, g.App.DB(), time.Hour, "simulator_charges", "settle_at")
			dbtest.Age(t, g.App.DB(), 2*time.Hour, "payments", "recheck_at")
			c := sweep(t, g)
			require.Zero(t, c.Reopened, "%+v", c)
			for _, key := range []string{"other-amount", "other-currency"} {
				p := ledgerByKey(t, g, m.ID, key)
				require.Equal(t, payments.StatusFailed, p.Status, key)
				require.Equal(t, payments.FailureNotProcessed, p.FailureCode, key)
				require.NotNil(t, p.RecheckAt, "%s: looked at again later, not confirmed", key)
			}
			require.Equal(t, 2, strings.Count(g.Logs.String(), "for another amount or currency"))
		})
	}
}

// A payment released as never charged whose charge then shows up pending
// goes back to processing: a transition of its own, in the same attempt as
// the 202's processing event, and the merchant hears it — the newest event
// is the ledger's state, not the release's failure. So is its review
// later: once per stay in processing, however often it is reported.
func TestReinstatedPaymentEmitsProcessingAgain(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	ps.LandLateNext()
	require.Equal(t, http.StatusAccepted, g.Pay(m, "back", body(paystacktest.TokenPending)).StatusCode)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
	ref := providers.Reference(m.ID, "back")
	ps.Land(ref) // landed, still pending
	h, raw, err := ps.Webhook(ref)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...).StatusCode)
	require.Equal(t, payments.StatusProcessing, ledgerByKey(t, g, m.ID, "back").Status)
	// The same event again changes nothing and writes nothing.
	g.Do("POST", "/v1/webhooks/paystack/"+m.ID, raw, headerPairs(h)...)

	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at")
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Review)
	ageKeys(t, g, time.Hour)
	sweep(t, g)

	var types []string
	for _, e := range g.Get(m, "/v1/events?limit=100").JSON(t)["data"].([]any) {
		types = append([]string{e.(map[string]any)["type"].(string)}, types...) // oldest first
	}
	require.Equal(t, []string{"payment.processing", "payment.failed", "payment.processing", "payment.requires_review"}, types)
}

// A refund of a payment whose provider account an operator has removed
// cannot be sent, and no retry helps until the account is back: a 409
// saying so, not a 503 asking the app to retry. Nothing was refunded, the
// key is free, and the same request succeeds once the account is back.
func TestRefundWithoutTheProviderAccountIsAConflict(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	paid := g.Pay(m, "gone-1", body(paystacktest.TokenSuccess))
	require.Equal(t, http.StatusCreated, paid.StatusCode, string(paid.Body))
	id := paid.JSON(t)["id"].(string)
	path := "/admin/v1/tenants/" + m.ID
	require.Equal(t, http.StatusOK, g.Admin("PATCH", path, map[string]any{"default_provider": "simulator"}).StatusCode)
	require.Equal(t, http.StatusOK, g.Admin("PATCH", path, map[string]any{"providers": map[string]any{"paystack": nil}}).StatusCode)

	r := refundOf(g, m, id, "gone-refund", map[string]any{"amount": 100})
	require.Equal(t, http.StatusConflict, r.StatusCode, string(r.Body))
	require.Equal(t, "provider_account_missing", r.JSON(t)["code"])
	require.Zero(t, ps.TotalRefunds())

	require.Equal(t, http.StatusOK, g.Admin("PATCH", path, map[string]any{"providers": map[string]any{
		"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}}).StatusCode)
	r = refundOf(g, m, id, "gone-refund", map[string]any{"amount": 100})
	require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body)) // Paystack queues refunds
	require.Equal(t, "pending", r.JSON(t)["status"])
	require.Equal(t, 1, ps.TotalRefunds())
}

// An operator cannot fail a refund whose provider account was removed:
// the provider cannot be asked, and failing gives the amount back to be
// refunded again. A 409 saying why, not a 503 asking to retry.
func TestResolvingARefundWithoutTheProviderAccountIsAConflict(t *testing.T) {
	t.Parallel()
	_, g, m, id, refundID := pendingAtPaystack(t)
	path := "/admin/v1/tenants/" + m.ID
	require.Equal(t, http.StatusOK, g.Admin("PATCH", path, map[string]any{"default_provider": "simulator"}).StatusCode)
	require.Equal(t, http.StatusOK, g.Admin("PATCH", path, map[string]any{"providers": map[string]any{"paystack": nil}}).StatusCode)
	r := adminDo(g, "POST", "/admin/v1/refunds/"+refundID+"/resolve", map[string]any{"status": "failed", "note": "account gone"})
	require.Equal(t, http.StatusConflict, r.StatusCode, string(r.Body))
	require.Equal(t, "provider_account_missing", r.Code(t))
	require.Equal(t, float64(1500), amountRefunded(t, g, m, id), "still reserved")
	require.NotContains(t, g.Logs.String(), `"level":"ERROR"`)
}
