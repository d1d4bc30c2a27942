package stripe_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/providertest"
	"github.com/oncepay/gateway/providers/stripe"
	"github.com/oncepay/gateway/providers/stripe/stripetest"
)

var fixedNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newProvider(t *testing.T, base, key string, timeout time.Duration) providers.Provider {
	t.Helper()
	p, err := stripe.New(stripe.Config{BaseURL: base, Timeout: timeout, Now: func() time.Time { return fixedNow }})(
		providers.Secrets{"secret_key": key, "webhook_secret": stripetest.WebhookSecret})
	require.NoError(t, err)
	return p
}

func chargeReq(ref, method string) providers.ChargeRequest {
	return providers.ChargeRequest{Reference: ref, Amount: 2000, Currency: "USD", Email: "ada@example.com", PaymentMethod: method, Description: "order 1"}
}

func TestConformance(t *testing.T) {
	fake := stripetest.New(t)
	providertest.Run(t, providertest.Harness{
		New: func(t *testing.T) providers.Provider {
			// The real clock: the fake stamps intents with time.Now and
			// Lookup lists those created in its window.
			p, err := stripe.New(stripe.Config{BaseURL: fake.URL})(providers.Secrets{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret})
			require.NoError(t, err)
			return p
		},
		SuccessMethod:           stripetest.TokenSuccess,
		DeclineMethod:           stripetest.TokenDecline,
		PendingMethod:           stripetest.TokenPending,
		InsufficientFundsMethod: stripetest.TokenInsufficientFunds,
		DeclineCode:             "generic_decline",
		DropNextResponse:        fake.DropNextResponse,
		HangNextResponse:        fake.HangNextResponse,
		FailNext:                fake.FailNext,
		Charges:                 fake.Charges,
		Settle:                  fake.Settle,
		NewWith:                 newProvider,
		URL:                     fake.URL,
		SecretKey:               stripetest.SecretKey,
		Rejected: map[string]providers.ChargeRequest{
			"UnknownPaymentMethod": chargeReq("ref-pm", "pm_nope"),
			"UnknownCurrency":      {Reference: "ref-cur", Amount: 1, Currency: "ZZZ", PaymentMethod: stripetest.TokenSuccess},
		},
		Currency:       "USD",
		MissingOutcome: providers.OutcomePending,
	})
}

func TestLookup(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	// Lookup lists by created[gte] from its clock, so this provider uses
	// the real one (the fake stamps intents with time.Now).
	p, err := stripe.New(stripe.Config{BaseURL: fake.URL})(providers.Secrets{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret})
	require.NoError(t, err)
	ctx := context.Background()

	t.Run("ListFindsItWhileSearchLags", func(t *testing.T) {
		fake.SetSearchLag(true)
		defer fake.SetSearchLag(false)
		ref := providers.Reference("m1", "lag")
		_, err := p.Charge(ctx, chargeReq(ref, stripetest.TokenDecline))
		require.NoError(t, err)
		res, err := p.Lookup(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeFailed, res.Outcome)
		require.Equal(t, "generic_decline", res.FailureCode)
	})
	t.Run("AnIntentNeverConfirmedIsPendingNotDeclined", func(t *testing.T) {
		ref := providers.Reference("m1", "unconfirmed")
		_, err := p.Charge(ctx, chargeReq(ref, stripetest.TokenPending))
		require.NoError(t, err)
		require.NoError(t, fake.Unconfirm(ref))
		res, err := p.Lookup(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome, "no attempt failed: nothing was declined")
		require.Empty(t, res.FailureCode)
	})
	t.Run("SearchFindsWhatTheListWindowMisses", func(t *testing.T) {
		ref := providers.Reference("m1", "old")
		_, err := p.Charge(ctx, chargeReq(ref, stripetest.TokenSuccess))
		require.NoError(t, err)
		// A clock three days ahead: the intent is outside the list window.
		later, err := stripe.New(stripe.Config{BaseURL: fake.URL, Now: func() time.Time { return time.Now().Add(72 * time.Hour) }})(
			providers.Secrets{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret})
		require.NoError(t, err)
		res, err := later.Lookup(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
	})
	t.Run("ListPagesThroughManyIntents", func(t *testing.T) {
		ref := providers.Reference("m1", "first-of-many")
		_, err := p.Charge(ctx, chargeReq(ref, stripetest.TokenSuccess))
		require.NoError(t, err)
		for i := range 150 {
			_, err := p.Charge(ctx, chargeReq(fmt.Sprintf("filler-%d", i), stripetest.TokenSuccess))
			require.NoError(t, err)
		}
		fake.SetSearchLag(true)
		defer fake.SetSearchLag(false)
		res, err := p.Lookup(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
	})
}

func TestNewRequiresSecrets(t *testing.T) {
	t.Parallel()
	_, err := stripe.New(stripe.Config{})(providers.Secrets{"secret_key": "sk"})
	require.ErrorIs(t, err, providers.ErrBadSecrets)
	require.ErrorContains(t, err, "webhook_secret")
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	p := newProvider(t, fake.URL, stripetest.SecretKey, 0)
	ref := providers.Reference("m1", "webhook")
	_, err := p.Charge(context.Background(), chargeReq(ref, stripetest.TokenSuccess))
	require.NoError(t, err)
	header, body, err := fake.Webhook(ref, fixedNow)
	require.NoError(t, err)
	sig := header.Get("Stripe-Signature")
	hdr := func(v string) http.Header { return http.Header{"Stripe-Signature": {v}} }
	otherSecret, err := stripe.New(stripe.Config{Now: func() time.Time { return fixedNow }})(providers.Secrets{"secret_key": "k", "webhook_secret": "whsec_other"})
	require.NoError(t, err)
	stale := stripe.SignatureHeader(stripetest.WebhookSecret, fixedNow.Add(-6*time.Minute), body)
	future := stripe.SignatureHeader(stripetest.WebhookSecret, fixedNow.Add(6*time.Minute), body)
	rolled := fmt.Sprintf("t=%d,v1=%s,%s,v0=abc", fixedNow.Unix(), hex.EncodeToString(make([]byte, 32)), sig[len(fmt.Sprintf("t=%d,", fixedNow.Unix())):])

	providertest.RunWebhookCases(t, providers.Event{Type: "payment_intent.succeeded", Reference: ref}, []providertest.WebhookCase{
		{Name: "ValidSignature", Provider: p, Header: header, Body: body},
		{Name: "AnyOfSeveralV1Matches", Provider: p, Header: hdr(rolled), Body: body},
		{Name: "TamperedBody", Provider: p, Header: header, Body: append([]byte(" "), body...), Err: providers.ErrBadSignature},
		{Name: "WrongSecret", Provider: otherSecret, Header: header, Body: body, Err: providers.ErrBadSignature},
		{Name: "StaleTimestamp", Provider: p, Header: hdr(stale), Body: body, Err: providers.ErrBadSignature},
		{Name: "FutureTimestamp", Provider: p, Header: hdr(future), Body: body, Err: providers.ErrBadSignature},
		{Name: "MissingHeader", Provider: p, Header: http.Header{}, Body: body, Err: providers.ErrBadSignature},
		{Name: "NoV1", Provider: p, Header: hdr(fmt.Sprintf("t=%d", fixedNow.Unix())), Body: body, Err: providers.ErrBadSignature},
	})
}

func TestParseEvent(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, body string
		want       providers.Event
	}{
		{"PaymentIntentNamesTheCharge", `{"type":"payment_intent.succeeded","data":{"object":{"object":"payment_intent","metadata":{"oncepay_reference":"op-1"}}}}`,
			providers.Event{Type: "payment_intent.succeeded", Reference: "op-1"}},
		{"OtherObjectsNameNothing", `{"type":"customer.created","data":{"object":{"object":"customer","metadata":{"oncepay_reference":"x"}}}}`,
			providers.Event{Type: "customer.created"}},
		{"ChargeRefundedIsARefundOfTheIntent", `{"type":"charge.refunded","data":{"object":{"object":"charge","payment_intent":"pi_1","metadata":{}}}}`,
			providers.Event{Type: "charge.refunded", Refund: true, TransactionID: "pi_1"}},
		{"ChargeRefundedWithOurMetadata", `{"type":"charge.refunded","data":{"object":{"object":"charge","payment_intent":{"id":"pi_1"},"metadata":{"oncepay_reference":"op-1"}}}}`,
			providers.Event{Type: "charge.refunded", Reference: "op-1", Refund: true, TransactionID: "pi_1"}},
		{"RefundNamesBoth", `{"type":"refund.failed","data":{"object":{"object":"refund","payment_intent":"pi_1","metadata":{"oncepay_reference":"or-1","oncepay_charge_reference":"op-1"}}}}`,
			providers.Event{Type: "refund.failed", Reference: "op-1", Refund: true, RefundReference: "or-1", TransactionID: "pi_1"}},
		{"LegacyChargeRefundUpdated", `{"type":"charge.refund.updated","data":{"object":{"object":"refund","payment_intent":null,"metadata":{"oncepay_reference":"or-1"}}}}`,
			providers.Event{Type: "charge.refund.updated", Refund: true, RefundReference: "or-1"}},
		{"RefundNotOurs", `{"type":"refund.created","data":{"object":{"object":"refund","payment_intent":7,"metadata":{}}}}`,
			providers.Event{Type: "refund.created", Refund: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := stripe.ParseEvent([]byte(tt.body))
			require.NoError(t, err)
			require.Equal(t, tt.want, ev)
		})
	}
	_, err := stripe.ParseEvent([]byte(`{"data":1}`))
	require.ErrorIs(t, err, providers.ErrBadPayload)
}

// FuzzVerifyWebhook: arbitrary headers and bodies never panic; a body signed
// now always verifies and parses or is a payload error.
func FuzzVerifyWebhook(f *testing.F) {
	f.Add([]byte(`{"type":"payment_intent.succeeded","data":{"object":{"metadata":{"oncepay_reference":"op_1"}}}}`), "", true)
	f.Add([]byte(`{}`), "t=1,v1=00", false)
	f.Add([]byte(``), "t=,v1=,,=", false)
	f.Add([]byte(`{"type":"refund.updated","data":{"object":{"object":"refund","payment_intent":"pi_1","metadata":{"oncepay_reference":"or-1","oncepay_charge_reference":"op-1"}}}}`), "", true)
	f.Add([]byte(`{"type":"charge.refunded","data":{"object":{"object":"charge","payment_intent":{"id":"pi_1"},"metadata":{}}}}`), "", true)
	f.Fuzz(func(t *testing.T, body []byte, header string, sign bool) {
		if sign {
			header = stripe.SignatureHeader("whsec_fuzz", fixedNow, body)
		}
		err := stripe.VerifySignature(header, body, "whsec_fuzz", fixedNow, stripe.DefaultTolerance)
		if sign {
			require.NoError(t, err)
		}
		if err == nil {
			ev, err := stripe.ParseEvent(body)
			if err == nil && !ev.Refund {
				require.Empty(t, ev.RefundReference)
				require.Empty(t, ev.TransactionID)
			}
			if err == nil && ev.Refund {
				require.True(t, ev.Type == "charge.refunded" || ev.Type == "charge.refund.updated" || strings.HasPrefix(ev.Type, "refund."), ev.Type)
			}
		}
	})
}
