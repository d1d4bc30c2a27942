package stripe_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/providertest"
	"github.com/oncepay/gateway/providers/stripe"
	"github.com/oncepay/gateway/providers/stripe/stripetest"
)

// realClock is a provider on the fake with the real clock: Lookup lists
// intents created in its window and the fake stamps them with time.Now.
func realClock(t *testing.T, base string) providers.Provider {
	t.Helper()
	p, err := stripe.New(stripe.Config{BaseURL: base})(providers.Secrets{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret})
	require.NoError(t, err)
	return p
}

// impatient is realClock with a 100ms HTTP timeout: only so a held answer
// does not keep the test waiting; nothing asserts on time.
func impatient(t *testing.T, base string) providers.Provider {
	t.Helper()
	p, err := stripe.New(stripe.Config{BaseURL: base, Timeout: 100 * time.Millisecond})(providers.Secrets{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret})
	require.NoError(t, err)
	return p
}

func TestRefundConformance(t *testing.T) {
	t.Parallel()
	providertest.RunRefunds(t, providertest.RefundHarness{
		New: func(t *testing.T) providertest.RefundBackend {
			fake := stripetest.New(t)
			return providertest.RefundBackend{
				Provider:         realClock(t, fake.URL),
				Refunds:          fake.Refunds,
				LoseNextRefund:   func(*providers.RefundRequest) { fake.DropNextResponse() },
				PendNextRefund:   func(*providers.RefundRequest) { fake.PendNextRefund() },
				SettleRefund:     fake.SettleRefund,
				RejectNextRefund: func(*providers.RefundRequest) { fake.FailNext(http.StatusUnauthorized) },
				FailNext:         fake.FailNext,
				HangNextRefund:   fake.HangNextResponse,
				Impatient:        impatient(t, fake.URL),
			}
		},
		SuccessMethod: stripetest.TokenSuccess,
		DeclineMethod: stripetest.TokenDecline,
		Currency:      "USD",
	})
}

func TestRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) (*stripetest.Server, providers.Provider, providers.ChargeRequest, providers.Result) {
		fake := stripetest.New(t)
		p := realClock(t, fake.URL)
		c := chargeReq(providers.Reference("m1", t.Name()), stripetest.TokenSuccess)
		res, err := p.Charge(ctx, c)
		require.NoError(t, err)
		return fake, p, c, res
	}
	req := func(c providers.ChargeRequest, res providers.Result, key string, amount int64) providers.RefundRequest {
		return providers.RefundRequest{Reference: providers.RefundReference("m1", key), ChargeReference: c.Reference,
			TransactionID: res.TransactionID, Amount: amount, Currency: c.Currency, Reason: "requested_by_customer"}
	}

	t.Run("TheIdempotencyKeyAloneDedupesWhenTheListMisses", func(t *testing.T) {
		// A refund made, its answer lost, and the retry's look-up not
		// seeing it (say, a list that lagged): the Idempotency-Key still
		// makes the create replay the first refund.
		t.Parallel()
		fake, p, c, res := setup(t)
		r := req(c, res, "key", 1000)
		fake.DropNextResponse()
		_, err := p.Refund(ctx, r)
		providertest.RequireClass(t, err, providers.ErrUnknown)
		// The same form and key again, straight to the API.
		form, err := stripe.RefundForm(r, res.TransactionID)
		require.NoError(t, err)
		body := form.Encode()
		for range 2 {
			replay := post(t, fake.URL+"/v1/refunds", body, r.Reference)
			require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
		}
		require.Equal(t, 1, fake.Refunds(r.Reference))
	})
	t.Run("AfterTheKeyIsPrunedTheLookupDedupes", func(t *testing.T) {
		// Past Stripe's 24h the key no longer dedupes; the look-up by our
		// metadata still finds the first refund.
		t.Parallel()
		fake, p, c, res := setup(t)
		r := req(c, res, "pruned", 1000)
		first, err := p.Refund(ctx, r)
		require.NoError(t, err)
		fake.PruneIdempotencyKeys()
		again, err := p.Refund(ctx, r)
		require.NoError(t, err)
		require.Equal(t, first, again)
		require.Equal(t, 1, fake.Refunds(r.Reference))
	})
	t.Run("OtherParametersUnderTheKeyAreUnknown", func(t *testing.T) {
		t.Parallel()
		fake, p, c, res := setup(t)
		r := req(c, res, "params", 1000)
		// Made elsewhere under our key but with another amount, and not
		// carrying our metadata: only the key ties it to us.
		other, err := stripe.RefundForm(r, res.TransactionID)
		require.NoError(t, err)
		other.Set("amount", "999")
		other.Del("metadata[" + stripe.MetadataKey + "]")
		post(t, fake.URL+"/v1/refunds", other.Encode(), r.Reference)
		_, err = p.Refund(ctx, r)
		providertest.RequireClass(t, err, providers.ErrUnknown)
	})
	t.Run("ReasonOnlyWhenStripeHasIt", func(t *testing.T) {
		t.Parallel()
		form := func(r providers.RefundRequest) url.Values {
			f, err := stripe.RefundForm(r, "pi_1")
			require.NoError(t, err)
			return f
		}
		r := providers.RefundRequest{Reference: "or-1", ChargeReference: "op-1", Amount: 5, Currency: "USD", Reason: "customer changed their mind"}
		require.NotContains(t, form(r), "reason")
		r.Reason = "fraudulent"
		require.Equal(t, "fraudulent", form(r).Get("reason"))
		require.Equal(t, url.Values{
			"payment_intent": {"pi_1"}, "amount": {"5"}, "reason": {"fraudulent"},
			"metadata[oncepay_reference]": {"or-1"}, "metadata[oncepay_charge_reference]": {"op-1"},
		}, form(r))
	})
	t.Run("LookupByAnotherRefundsIDIsUnknown", func(t *testing.T) {
		t.Parallel()
		_, p, c, res := setup(t)
		a, b := req(c, res, "a", 1000), req(c, res, "b", 1000)
		ra, err := p.Refund(ctx, a)
		require.NoError(t, err)
		_, err = p.LookupRefund(ctx, providers.RefundLookup{Reference: b.Reference, ChargeReference: b.ChargeReference, RefundID: ra.RefundID})
		providertest.RequireClass(t, err, providers.ErrUnknown)
	})
	t.Run("UnknownRefundIDFallsBackToTheList", func(t *testing.T) {
		t.Parallel()
		_, p, c, res := setup(t)
		r := req(c, res, "fallback", 1000)
		first, err := p.Refund(ctx, r)
		require.NoError(t, err)
		got, err := p.LookupRefund(ctx, providers.RefundLookup{Reference: r.Reference, ChargeReference: r.ChargeReference,
			TransactionID: r.TransactionID, RefundID: "re_nope"})
		require.NoError(t, err)
		require.Equal(t, first, got)
	})
	t.Run("WithoutTransactionIDAnUnfoundIntentIsNotChargedOrUnknown", func(t *testing.T) {
		t.Parallel()
		fake, p, _, _ := setup(t)
		fake.SetSearchLag(true)
		r := providers.RefundRequest{Reference: "or-x", ChargeReference: "op-never", Amount: 100, Currency: "USD"}
		_, err := p.Refund(ctx, r)
		providertest.RequireClass(t, err, providers.ErrNotCharged)
		_, err = p.LookupRefund(ctx, providers.RefundLookup{Reference: r.Reference, ChargeReference: r.ChargeReference})
		providertest.RequireClass(t, err, providers.ErrUnknown)
		require.Zero(t, fake.TotalRefunds())
	})
}

func post(t *testing.T, u, body, key string) *http.Response {
	t.Helper()
	hreq, err := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	require.NoError(t, err)
	hreq.Header.Set("Authorization", "Bearer "+stripetest.SecretKey)
	hreq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	hreq.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(hreq)
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp
}

func TestRefundAnswers(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		body   string
		code   string
		class  error
	}{
		{"AlreadyRefunded", 400, `{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"Charge ch_1 has already been refunded."}}`, "exceeds_charge", nil},
		{"AmountTooLarge", 400, `{"error":{"type":"invalid_request_error","code":"amount_too_large","message":"Refund amount ($25.00) is greater than unrefunded amount on charge ($21.45)"}}`, "exceeds_charge", nil},
		{"GreaterThanWithoutCode", 400, `{"error":{"type":"invalid_request_error","param":"amount","message":"Refund amount ($93.90) is greater than charge amount ($54.45)"}}`, "exceeds_charge", nil},
		{"NoSuccessfulCharge", 400, `{"error":{"type":"invalid_request_error","message":"This PaymentIntent does not have a successful charge to refund."}}`, "not_refundable", nil},
		{"Disputed", 400, `{"error":{"type":"invalid_request_error","code":"charge_disputed","message":"Charge ch_1 has been charged back; cannot issue a refund."}}`, "not_refundable", nil},
		{"BalanceInsufficient", 400, `{"error":{"type":"invalid_request_error","code":"balance_insufficient","message":"You have insufficient funds in your Stripe account."}}`, "insufficient_balance", nil},
		{"IdempotencyError", 400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`, "", providers.ErrUnknown},
		{"InFlight", 409, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"in use"}}`, "", providers.ErrUnknown},
		{"OtherBadRequest", 400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_integer","message":"Invalid integer: amount"}}`, "", providers.ErrNotCharged},
		{"BadKey", 401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`, "", providers.ErrNotCharged},
		{"Unreadable402", 402, `{}`, "", providers.ErrUnknown},
		{"ServerError", 500, `{"error":{"type":"api_error","message":"oops"}}`, "", providers.ErrUnknown},
		{"OKUnreadable", 200, `{"id":"re_1"}`, "", providers.ErrUnknown},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					_, _ = w.Write([]byte(`{"object":"list","data":[],"has_more":false}`))
					return
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			res, err := newProvider(t, srv.URL, "sk_test_x", 0).Refund(context.Background(), providers.RefundRequest{
				Reference: "or-1", ChargeReference: "op-1", TransactionID: "pi_1", Amount: 100, Currency: "USD"})
			if tt.class != nil {
				providertest.RequireClass(t, err, tt.class)
				return
			}
			require.NoError(t, err)
			require.Equal(t, providers.OutcomeFailed, res.Outcome)
			require.Equal(t, tt.code, res.FailureCode)
		})
	}
}

func TestVerifyRefundWebhook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := stripetest.New(t)
	p := realClock(t, fake.URL)
	c := chargeReq(providers.Reference("m1", "refund-webhook"), stripetest.TokenSuccess)
	res, err := p.Charge(ctx, c)
	require.NoError(t, err)
	r := providers.RefundRequest{Reference: providers.RefundReference("m1", "webhook"), ChargeReference: c.Reference,
		TransactionID: res.TransactionID, Amount: c.Amount, Currency: c.Currency}
	_, err = p.Refund(ctx, r)
	require.NoError(t, err)
	now := time.Now()

	header, body, err := fake.RefundWebhook(r.Reference, now)
	require.NoError(t, err)
	ev, err := p.VerifyWebhook(header, body)
	require.NoError(t, err)
	require.Equal(t, providers.Event{Type: "refund.updated", Reference: c.Reference, Refund: true,
		RefundReference: r.Reference, TransactionID: res.TransactionID}, ev)

	header, body, err = fake.ChargeRefundedWebhook(c.Reference, now)
	require.NoError(t, err)
	ev, err = p.VerifyWebhook(header, body)
	require.NoError(t, err)
	// The Charge does not carry the intent's metadata: the event names the
	// PaymentIntent only.
	require.Equal(t, providers.Event{Type: "charge.refunded", Refund: true, TransactionID: res.TransactionID}, ev)
}
