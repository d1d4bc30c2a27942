package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave/flutterwavetest"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
	"github.com/oncepay/gateway/providers/stripe/stripetest"
)

// fake is what these tests need of each provider's fake server.
type fake struct {
	name     string
	env      string // base URL variable
	secrets  map[string]string
	currency string
	success  string
	decline  string
	pending  string
	start    func(t *testing.T) (url string, charges func(string) int, settle func(string, providers.Outcome) error, webhook func(string) (http.Header, []byte, error))
}

func fakes() []fake {
	return []fake{
		{
			name: "paystack", env: "PAYSTACK_BASE_URL", currency: "NGN",
			secrets: map[string]string{"secret_key": paystacktest.SecretKey},
			success: paystacktest.TokenSuccess, decline: paystacktest.TokenDecline, pending: paystacktest.TokenPending,
			start: func(t *testing.T) (string, func(string) int, func(string, providers.Outcome) error, func(string) (http.Header, []byte, error)) {
				s := paystacktest.New(t)
				return s.URL, s.Charges, s.Settle, s.Webhook
			},
		},
		{
			name: "flutterwave", env: "FLUTTERWAVE_BASE_URL", currency: "NGN",
			secrets: map[string]string{"secret_key": flutterwavetest.SecretKey, "secret_hash": flutterwavetest.SecretHash},
			success: flutterwavetest.TokenSuccess, decline: flutterwavetest.TokenDecline, pending: flutterwavetest.TokenPending,
			start: func(t *testing.T) (string, func(string) int, func(string, providers.Outcome) error, func(string) (http.Header, []byte, error)) {
				s := flutterwavetest.New(t)
				return s.URL, s.Charges, s.Settle, s.Webhook
			},
		},
		{
			name: "stripe", env: "STRIPE_BASE_URL", currency: "USD",
			secrets: map[string]string{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret},
			success: stripetest.TokenSuccess, decline: stripetest.TokenDecline, pending: stripetest.TokenPending,
			start: func(t *testing.T) (string, func(string) int, func(string, providers.Outcome) error, func(string) (http.Header, []byte, error)) {
				s := stripetest.New(t)
				return s.URL, s.Charges, s.Settle, func(ref string) (http.Header, []byte, error) { return s.Webhook(ref, time.Now()) }
			},
		},
	}
}

func providerBody(f fake, method string) map[string]any {
	b := body(method)
	b["currency"] = f.currency
	return b
}

// TestRealProviders runs payments through the API against each provider's
// fake (which speaks that provider's wire format), as a merchant onboarded
// with that provider as default would.
func TestRealProviders(t *testing.T) {
	t.Parallel()
	for _, f := range fakes() {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			url, charges, settle, webhook := f.start(t)
			g := apptest.Start(t, apptest.Env(f.env, url))
			m := g.Onboard(map[string]any{"default_provider": f.name, "providers": map[string]any{f.name: f.secrets}})
			ref := func(key string) string { return providers.Reference(m.ID, key) }

			t.Run("SucceedsAndReplaysWithOneCharge", func(t *testing.T) {
				first := g.Pay(m, "ok-1", providerBody(f, f.success))
				require.Equal(t, http.StatusCreated, first.StatusCode, string(first.Body))
				require.Equal(t, f.name, first.JSON(t)["provider"])
				requireReplay(t, first, g.Pay(m, "ok-1", providerBody(f, f.success)))
				require.Equal(t, 1, charges(ref("ok-1")))
			})

			t.Run("DeclineIs402", func(t *testing.T) {
				r := g.Pay(m, "no-1", providerBody(f, f.decline))
				require.Equal(t, http.StatusPaymentRequired, r.StatusCode, string(r.Body))
				require.Equal(t, "card_declined", r.Code(t))
			})

			t.Run("WebhookSettlesAProcessingPayment", func(t *testing.T) {
				first := g.Pay(m, "wh-1", providerBody(f, f.pending))
				require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
				id := first.JSON(t)["id"].(string)
				require.NoError(t, settle(ref("wh-1"), providers.OutcomeSucceeded))
				h, b, err := webhook(ref("wh-1"))
				require.NoError(t, err)
				hook := "/v1/webhooks/" + f.name + "/" + m.ID

				// A tampered body does not verify and changes nothing.
				tampered := bytes.Replace(b, []byte(`"`), []byte(`'`), 1)
				bad := g.Do("POST", hook, tampered, headerPairs(h)...)
				require.Equal(t, http.StatusUnauthorized, bad.StatusCode, string(bad.Body))
				require.Equal(t, "invalid_signature", bad.Code(t))
				require.Equal(t, "processing", ledgerStatus(t, g, m.ID, id), "a GET would settle it by lookup: read the ledger")
				// Anyone can post to the route: a WARN, once a minute at most.
				require.Equal(t, http.StatusUnauthorized, g.Do("POST", hook, tampered, headerPairs(h)...).StatusCode)
				require.Equal(t, 1, strings.Count(g.Logs.String(), "webhook signature invalid"), g.Logs.String())

				ok := g.Do("POST", hook, b, headerPairs(h)...)
				require.Equal(t, http.StatusOK, ok.StatusCode, string(ok.Body))
				require.Equal(t, "resolved", ok.JSON(t)["status"])
				require.Equal(t, "succeeded", g.Get(m, "/v1/payments/"+id).JSON(t)["status"])

				// The same event again is harmless.
				again := g.Do("POST", hook, b, headerPairs(h)...)
				require.Equal(t, http.StatusOK, again.StatusCode)
				require.Equal(t, "final", again.JSON(t)["status"])

				// The app's retry replays the webhook's settlement.
				retry := g.Pay(m, "wh-1", providerBody(f, f.pending))
				require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
				require.Equal(t, "true", retry.Header.Get("Idempotent-Replayed"))
				require.Equal(t, 1, charges(ref("wh-1")))
			})

			t.Run("WrongSecretIs401", func(t *testing.T) {
				other := g.Onboard(map[string]any{"default_provider": f.name, "providers": map[string]any{f.name: wrongSecrets(f.secrets)}})
				first := g.Pay(m, "wh-2", providerBody(f, f.pending))
				require.Equal(t, http.StatusAccepted, first.StatusCode)
				h, b, err := webhook(ref("wh-2"))
				require.NoError(t, err)
				// Signed with m's secret, delivered to a tenant with other secrets.
				r := g.Do("POST", "/v1/webhooks/"+f.name+"/"+other.ID, b, headerPairs(h)...)
				require.Equal(t, http.StatusUnauthorized, r.StatusCode, string(r.Body))
			})

			t.Run("OtherTenantsReferenceIsIgnored", func(t *testing.T) {
				// Another merchant on the same provider account: its event
				// verifies at m's endpoint but names no payment of m's.
				other := g.Onboard(map[string]any{"default_provider": f.name, "providers": map[string]any{f.name: f.secrets}})
				r := g.Pay(other, "theirs", providerBody(f, f.pending))
				require.Equal(t, http.StatusAccepted, r.StatusCode)
				theirs := providers.Reference(other.ID, "theirs")
				require.NoError(t, settle(theirs, providers.OutcomeSucceeded))
				h, b, err := webhook(theirs)
				require.NoError(t, err)
				ack := g.Do("POST", "/v1/webhooks/"+f.name+"/"+m.ID, b, headerPairs(h)...)
				require.Equal(t, http.StatusOK, ack.StatusCode, string(ack.Body))
				require.Equal(t, "ignored", ack.JSON(t)["status"])
				id := r.JSON(t)["id"].(string)
				require.Equal(t, "processing", ledgerStatus(t, g, other.ID, id))
			})
		})
	}
}

// ledgerStatus reads a payment's status from the ledger, without the
// lookup a GET of a processing payment may make.
func ledgerStatus(t *testing.T, g *apptest.Gateway, merchantID, id string) string {
	t.Helper()
	p, err := g.App.Payments.Store().Get(context.Background(), merchantID, id)
	require.NoError(t, err)
	return string(p.Status)
}

func wrongSecrets(s map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range s {
		out[k] = v + "-wrong"
	}
	return out
}

func headerPairs(h http.Header) []string {
	var out []string
	for k := range h {
		out = append(out, k, h.Get(k))
	}
	return out
}

func TestStripeStaleWebhookIs401(t *testing.T) {
	t.Parallel()
	s := stripetest.New(t)
	g, m := stripeMerchantAt(t, s.URL)
	b := body(stripetest.TokenPending)
	b["currency"] = "USD"
	first := g.Pay(m, "stale", b)
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	ref := providers.Reference(m.ID, "stale")
	require.NoError(t, s.Settle(ref, providers.OutcomeSucceeded))
	h, raw, err := s.Webhook(ref, time.Now().Add(-10*time.Minute))
	require.NoError(t, err)
	r := g.Do("POST", "/v1/webhooks/stripe/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusUnauthorized, r.StatusCode, string(r.Body))
	require.Equal(t, "processing", ledgerStatus(t, g, m.ID, first.JSON(t)["id"].(string)))
}

// TestRetryNeverReleasesAnUnknownCharge: the first attempt's answer is lost
// after the provider stored the charge; on the retry the provider cannot be
// reached at all. That refusal would be a certain non-charge on a first
// attempt, but here a charge may exist: the retry answers 202 and the key
// stays in progress for the sweeper, instead of a 503 that releases it.
func TestRetryNeverReleasesAnUnknownCharge(t *testing.T) {
	t.Parallel()
	fake := paystacktest.New(t)
	g := apptest.Start(t, apptest.Env("PAYSTACK_BASE_URL", fake.URL))
	m := g.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}})
	b := body(paystacktest.TokenSuccess)

	fake.DropNextResponse()
	first := g.Pay(m, "lost", b)
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	require.Equal(t, 1, fake.Charges(providers.Reference(m.ID, "lost")))

	fake.Close() // the provider is now unreachable: connection refused
	retry := g.Pay(m, "lost", b)
	require.Equal(t, http.StatusAccepted, retry.StatusCode, string(retry.Body))
	require.Equal(t, "processing", retry.JSON(t)["status"])
	rec, err := g.App.Keys.Get(context.Background(), m.ID, "lost")
	require.NoError(t, err, "the key is kept")
	require.Equal(t, idempotency.StatusInProgress, rec.Status)
}

// TestOldUnknownPaymentIsLookedUpNotRecharged: past the providers' dedupe
// window (Stripe keeps an Idempotency-Key 24h) a retry that takes over an
// unknown payment must not send the charge again; it asks the provider.
func TestOldUnknownPaymentIsLookedUpNotRecharged(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	g, m := stripeMerchantAt(t, fake.URL)
	b := body(stripetest.TokenPending)
	b["currency"] = "USD"
	first := g.Pay(m, "old", b)
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))

	// A day passes; meanwhile the charge succeeded at Stripe.
	ref := providers.Reference(m.ID, "old")
	require.NoError(t, fake.Settle(ref, providers.OutcomeSucceeded))
	require.NoError(t, g.App.DB().Exec("UPDATE payments SET created_at = ? WHERE merchant_id = ?",
		time.Now().UTC().Add(-25*time.Hour), m.ID).Error)

	retry := g.Pay(m, "old", b)
	require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
	require.Equal(t, "succeeded", retry.JSON(t)["status"])
	require.Equal(t, 1, fake.Charges(ref))
	requireReplay(t, retry, g.Pay(m, "old", b))
}

// stripeMerchant is a gateway on a Stripe fake and a merchant whose
// default provider is Stripe.
func stripeMerchant(t *testing.T) (*stripetest.Server, *apptest.Gateway, apptest.Merchant) {
	t.Helper()
	s := stripetest.New(t)
	g, m := stripeMerchantAt(t, s.URL)
	return s, g, m
}

// stripeMerchantAt is a gateway whose Stripe is at url (a fake, or a
// server answering what a test needs) and a merchant charging through it.
func stripeMerchantAt(t *testing.T, url string) (*apptest.Gateway, apptest.Merchant) {
	t.Helper()
	g := apptest.Start(t, apptest.Env("STRIPE_BASE_URL", url))
	m := g.Onboard(map[string]any{"default_provider": "stripe", "providers": map[string]any{
		"stripe": map[string]string{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret}}})
	return g, m
}

func requireAmountNotSupported(t *testing.T, r apptest.Response, rule string) {
	t.Helper()
	require.Equal(t, http.StatusUnprocessableEntity, r.StatusCode, string(r.Body))
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"))
	require.Equal(t, "amount_not_supported", r.Code(t))
	require.Contains(t, r.JSON(t)["detail"], rule)
	require.Empty(t, r.Header.Get("Retry-After"), "no retry of this amount will succeed")
}

// TestStripeAmountNotSupportedIs422: an amount Stripe cannot take in its
// currency (a fraction of an ariary; a three-decimal amount not ending in
// 0) is refused before anything is sent, as the merchant's to fix: 422
// amount_not_supported naming the rule, never a 503 "provider unavailable"
// a retry would never get past. The key is released, so the fixed amount
// goes through under it; a refund likewise, its amount given back.
func TestStripeAmountNotSupportedIs422(t *testing.T) {
	t.Parallel()
	s, g, m := stripeMerchant(t)
	b := body(stripetest.TokenSuccess)
	b["currency"], b["amount"] = "MGA", 10050 // 100.50 MGA: Stripe takes MGA only in whole ariary
	refused := g.Pay(m, "mga", b)
	requireAmountNotSupported(t, refused, "multiple of 100")
	require.NotEmpty(t, refused.JSON(t)["payment_id"])
	require.Zero(t, s.TotalCharges())
	again := g.Pay(m, "mga", b)
	requireAmountNotSupported(t, again, "multiple of 100")
	require.NotEqual(t, "true", again.Header.Get("Idempotent-Replayed"))

	b["amount"] = 10000 // 100.00 MGA, under the same key
	ok := g.Pay(m, "mga", b)
	require.Equal(t, http.StatusCreated, ok.StatusCode, string(ok.Body))
	require.Equal(t, refused.JSON(t)["payment_id"], ok.JSON(t)["id"], "the same payment, tried again")
	require.Equal(t, "succeeded", ok.JSON(t)["status"])
	ref := providers.Reference(m.ID, "mga")
	sent, _ := s.ChargedAmount(ref)
	require.EqualValues(t, 100, sent, "100.00 MGA is 100 at Stripe")
	id := ok.JSON(t)["id"].(string)

	r := refundOf(g, m, id, "r", map[string]any{"amount": 5050})
	requireAmountNotSupported(t, r, "multiple of 100")
	require.NotEmpty(t, r.JSON(t)["refund_id"])
	require.Zero(t, s.TotalRefunds())
	require.EqualValues(t, 0, g.Get(m, "/v1/payments/"+id).JSON(t)["amount_refunded"], "the refused amount is given back")
	r = refundOf(g, m, id, "r", map[string]any{"amount": 5000})
	require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	require.Equal(t, "succeeded", r.JSON(t)["status"])
	require.EqualValues(t, 50, s.RefundedAmount(providers.RefundReference(m.ID, "r")))

	k := body(stripetest.TokenSuccess)
	k["currency"], k["amount"] = "KWD", 5124 // 5.124 KWD: the last of three decimals must be 0
	requireAmountNotSupported(t, g.Pay(m, "kwd", k), "multiples of 10")
	require.Equal(t, 1, s.TotalCharges())
}

// TestStripeISKSettlesByLookup: 500 ISK goes to Stripe as 50000 and the
// lookup that settles it reads 500 back, so the gateway takes the charge
// for the payment's own rather than another charge under its reference.
func TestStripeISKSettlesByLookup(t *testing.T) {
	t.Parallel()
	s, g, m := stripeMerchant(t)
	b := body(stripetest.TokenPending)
	b["currency"], b["amount"] = "ISK", 500
	first := g.Pay(m, "isk", b)
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	ref := providers.Reference(m.ID, "isk")
	sent, _ := s.ChargedAmount(ref)
	require.EqualValues(t, 50000, sent, "500 ISK is 50000 at Stripe")
	require.NoError(t, s.Settle(ref, providers.OutcomeSucceeded))
	h, raw, err := s.Webhook(ref, time.Now())
	require.NoError(t, err)
	hook := g.Do("POST", "/v1/webhooks/stripe/"+m.ID, raw, headerPairs(h)...)
	require.Equal(t, http.StatusOK, hook.StatusCode, string(hook.Body))
	require.Equal(t, "resolved", hook.JSON(t)["status"])
	got := g.Get(m, "/v1/payments/"+first.JSON(t)["id"].(string)).JSON(t)
	require.Equal(t, "succeeded", got["status"])
	require.EqualValues(t, 500, got["amount"])
}

// TestFlutterwaveRetryAsksBeforeChargingAgain: Flutterwave's v3 documents
// no dedupe of a reused tx_ref (shared/providers.md 2.4; here the fake
// charges it again). A retry that takes over a payment whose answer was
// lost asks first: it finds the charge and answers it, one charge; while
// the provider shows nothing yet it answers 202, sending nothing; and only
// once a lookup has said "not found" SWEEP_STALE_AFTER after the attempt
// (the payment released) does a retry charge again.
func TestFlutterwaveRetryAsksBeforeChargingAgain(t *testing.T) {
	t.Parallel()
	fake := flutterwavetest.New(t)
	fake.ChargeReusedReferences()
	g := apptest.Start(t, apptest.Env("FLUTTERWAVE_BASE_URL", fake.URL))
	m := g.Onboard(map[string]any{"default_provider": "flutterwave", "providers": map[string]any{
		"flutterwave": map[string]string{"secret_key": flutterwavetest.SecretKey, "secret_hash": flutterwavetest.SecretHash}}})
	b := body(flutterwavetest.TokenSuccess)

	t.Run("ChargedAnswerLost", func(t *testing.T) {
		fake.DropNextResponse()
		first := g.Pay(m, "lost", b)
		require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
		retry := g.Pay(m, "lost", b)
		require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
		require.Equal(t, "succeeded", retry.JSON(t)["status"])
		require.Equal(t, 1, fake.Charges(providers.Reference(m.ID, "lost")), "one charge")
		requireReplay(t, retry, g.Pay(m, "lost", b))
	})
	t.Run("NotVisibleYet", func(t *testing.T) {
		ref := providers.Reference(m.ID, "late")
		fake.LandLateNext()
		first := g.Pay(m, "late", b)
		require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
		for range 3 {
			retry := g.Pay(m, "late", b)
			require.Equal(t, http.StatusAccepted, retry.StatusCode, string(retry.Body))
			require.Equal(t, "processing", retry.JSON(t)["status"])
		}
		require.Equal(t, 1, fake.Charges(ref), "nothing sent again while the provider may have it")
		fake.Land(ref)
		retry := g.Pay(m, "late", b)
		require.Equal(t, http.StatusCreated, retry.StatusCode, string(retry.Body))
		require.Equal(t, 1, fake.Charges(ref))
	})
}

// TestAChargeAnsweredForAnotherAmountIsNotRecorded: the provider answers
// the charge "success" but for another amount or currency than asked (a
// partial capture, an FX conversion, a confused proxy). The payment is not
// recorded as succeeded for the amount asked: it stays processing (202),
// with an ERROR, for the sweeper and, past REVIEW_AFTER, a person — as a
// lookup's answer would. Fees passed on to the customer are no other
// amount: Paystack's requested_amount says what was asked.
func TestAChargeAnsweredForAnotherAmountIsNotRecorded(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]map[string]any{
		"LessThanAsked":   {"amount": 100, "currency": "NGN"},
		"MoreThanAsked":   {"amount": 9000, "currency": "NGN"},
		"AnotherCurrency": {"amount": 5000, "currency": "GHS"},
		"FeesPassedOn":    {"amount": 5075, "requested_amount": 5000, "currency": "NGN"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				data := map[string]any{"id": 42, "status": "success", "reference": "x", "gateway_response": "Approved"}
				for k, v := range answer {
					data[k] = v
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]any{"status": true, "message": "Charge attempted", "data": data})
			}))
			t.Cleanup(srv.Close)
			g := apptest.Start(t, apptest.Env("PAYSTACK_BASE_URL", srv.URL))
			m := g.Onboard(map[string]any{"default_provider": "paystack",
				"providers": map[string]any{"paystack": map[string]string{"secret_key": paystacktest.SecretKey}}})
			r := g.Pay(m, "other-amount", body(paystacktest.TokenSuccess)) // 5000 NGN asked
			if name == "FeesPassedOn" {
				require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
				require.EqualValues(t, 5000, r.JSON(t)["amount"], "the payment's amount, what the merchant asked")
				require.NotContains(t, g.Logs.String(), "for another amount or currency")
				return
			}
			require.Equal(t, http.StatusAccepted, r.StatusCode, string(r.Body))
			require.Equal(t, "processing", r.JSON(t)["status"])
			require.Contains(t, g.Logs.String(), "for another amount or currency")
		})
	}
}

// TestAReversedChargeIsNeverADecline: the charge's answer is lost, and by
// the time the gateway asks, Paystack says "reversed" — charged, then
// refunded at its dashboard or charged back. Money moved, so the payment is
// never recorded as declined (nor as a success the merchant would ship
// for): it stays processing, a retry is told 202, and past REVIEW_AFTER
// it goes to review for a person.
func TestAReversedChargeIsNeverADecline(t *testing.T) {
	t.Parallel()
	ps, g, m := paystackMerchant(t)
	b := body(paystacktest.TokenSuccess)
	ps.DropNextResponse()
	first := g.Pay(m, "reversed", b)
	require.Equal(t, http.StatusAccepted, first.StatusCode, string(first.Body))
	ref := ledgerByKey(t, g, m.ID, "reversed").ProviderReference
	require.NoError(t, ps.Reverse(ref))

	id := first.JSON(t)["id"].(string)
	got := g.Get(m, "/v1/payments/"+id) // a poll: looked up
	require.Equal(t, "processing", got.JSON(t)["status"], string(got.Body))
	retry := g.Pay(m, "reversed", b)
	require.Equal(t, http.StatusAccepted, retry.StatusCode, string(retry.Body))
	require.Equal(t, "processing", retry.JSON(t)["status"])
	require.Equal(t, 1, ps.Charges(ref))

	ageKeys(t, g, time.Hour)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at")
	require.Equal(t, 1, sweep(t, g).Review)
	require.Equal(t, "requires_review", g.Get(m, "/v1/payments/"+id).JSON(t)["status"])
}

// A provider's answer is untrusted input. An id or a decline code the
// gateway cannot store (a NUL, which PostgreSQL refuses in text; invalid
// UTF-8; 100 KB) failed the recording of a charge already made: the
// payment stayed processing, and every retry charged again into the same
// failure. The outcome stands, the id is dropped (the charge is found by
// its reference) and an unkeepable code is the generic decline's.
func TestAProviderAnswerThatCannotBeStoredStillSettles(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		status int
		answer map[string]any
		want   int
		code   string
	}{
		"NULInTheID": {http.StatusOK, map[string]any{"id": "pi_\x00bad", "object": "payment_intent",
			"status": "succeeded", "amount": 5000, "currency": "usd"}, http.StatusCreated, ""},
		"InvalidUTF8InTheID": {http.StatusOK, map[string]any{"id": "pi_\xff\xfe", "object": "payment_intent",
			"status": "succeeded", "amount": 5000, "currency": "usd"}, http.StatusCreated, ""},
		"NULInTheDeclineCode": {http.StatusPaymentRequired, map[string]any{"error": map[string]any{"type": "card_error",
			"code": "card_declined", "decline_code": "generic\x00decline", "message": "Your card was declined.",
			"payment_intent": map[string]any{"id": "pi_ok", "status": "requires_payment_method"}}},
			http.StatusPaymentRequired, "card_declined"},
		"AHugeDeclineCode": {http.StatusPaymentRequired, map[string]any{"error": map[string]any{"type": "card_error",
			"code": "card_declined", "decline_code": strings.Repeat("x", 100_000), "message": "Your card was declined.",
			"payment_intent": map[string]any{"id": "pi_ok", "status": "requires_payment_method"}}},
			http.StatusPaymentRequired, "card_declined"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_ = json.NewEncoder(w).Encode(tc.answer)
			}))
			t.Cleanup(srv.Close)
			g, m := stripeMerchantAt(t, srv.URL)
			b := body(stripetest.TokenSuccess)
			b["currency"] = "USD"
			r := g.Pay(m, "garbled", b)
			require.Equal(t, tc.want, r.StatusCode, string(r.Body))
			p := r.JSON(t)
			if declined, ok := p["payment"].(map[string]any); ok {
				p = declined // a decline's problem carries the payment
			}
			require.NotContains(t, string(r.Body), `\u0000`)
			require.Less(t, len(r.Body), 4096)
			if tc.code != "" {
				require.Equal(t, tc.code, p["failure_code"])
			} else {
				require.Equal(t, "succeeded", p["status"])
			}
			require.Equal(t, p["status"], ledgerStatus(t, g, m.ID, p["id"].(string)))
			again := g.Pay(m, "garbled", b)
			require.Equal(t, r.StatusCode, again.StatusCode)
			require.Equal(t, r.Body, again.Body, "replayed, not charged again")
			require.Contains(t, g.Logs.String(), "cannot keep")
			require.NotContains(t, g.Logs.String(), "level=ERROR")
		})
	}
}
