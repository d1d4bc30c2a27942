package stripe_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
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
		SuccessMethod:    stripetest.TokenSuccess,
		DeclineMethod:    stripetest.TokenDecline,
		PendingMethod:    stripetest.TokenPending,
		DropNextResponse: fake.DropNextResponse,
		Charges:          fake.Charges,
		Currency:         "USD",
		MissingOutcome:   providers.OutcomePending,
	})
}

func TestCharge(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	p := newProvider(t, fake.URL, stripetest.SecretKey, 0)
	tests := []struct {
		name, method string
		outcome      providers.Outcome
		code         string
	}{
		{"SuccessIsSucceeded", stripetest.TokenSuccess, providers.OutcomeSucceeded, ""},
		{"DeclineIsFailedWithDeclineCode", stripetest.TokenDecline, providers.OutcomeFailed, "generic_decline"},
		{"InsufficientFundsIsMapped", stripetest.TokenInsufficientFunds, providers.OutcomeFailed, "insufficient_funds"},
		{"ProcessingIsPending", stripetest.TokenPending, providers.OutcomePending, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ref := providers.Reference("m1", tt.name)
			res, err := p.Charge(context.Background(), chargeReq(ref, tt.method))
			require.NoError(t, err)
			require.Equal(t, tt.outcome, res.Outcome)
			require.Equal(t, tt.code, res.FailureCode)
			require.NotEmpty(t, res.TransactionID)
			require.Equal(t, 1, fake.Charges(ref))
		})
	}
}

func TestChargeErrors(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	good := func() providers.Provider { return newProvider(t, fake.URL, stripetest.SecretKey, 0) }
	tests := []struct {
		name  string
		setup func() providers.Provider
		req   providers.ChargeRequest
		class error
	}{
		{"BadKeyIsNotCharged", func() providers.Provider { return newProvider(t, fake.URL, "sk_test_wrong", 0) },
			chargeReq("ref-badkey", stripetest.TokenSuccess), providers.ErrNotCharged},
		{"ServerErrorIsUnknown", func() providers.Provider { fake.FailNext(http.StatusInternalServerError); return good() },
			chargeReq("ref-500", stripetest.TokenSuccess), providers.ErrUnknown},
		{"UnknownPaymentMethodIsNotCharged", good, chargeReq("ref-pm", "pm_nope"), providers.ErrNotCharged},
		{"UnknownCurrencyIsNotCharged", good,
			providers.ChargeRequest{Reference: "ref-cur", Amount: 1, Currency: "ZZZ", PaymentMethod: stripetest.TokenSuccess}, providers.ErrNotCharged},
		{"ConnectionRefusedIsNotCharged", func() providers.Provider { return newProvider(t, refusedURL(t), stripetest.SecretKey, 0) },
			chargeReq("ref-refused", stripetest.TokenSuccess), providers.ErrNotCharged},
	}
	for _, tt := range tests {
		// Sequential: FailNext is a property of the shared fake.
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.setup().Charge(context.Background(), tt.req)
			providertest.RequireClass(t, err, tt.class)
			require.NotContains(t, err.Error(), stripetest.SecretKey)
			require.Equal(t, 0, fake.Charges(tt.req.Reference))
		})
	}
}

func TestTimeoutAfterStoreThenRetryReplays(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	ref := providers.Reference("m1", "timeout")
	fake.HangNextResponse()
	// A short timeout only so the test does not wait 20s; nothing asserts
	// on time.
	_, err := newProvider(t, fake.URL, stripetest.SecretKey, 100*time.Millisecond).Charge(context.Background(), chargeReq(ref, stripetest.TokenInsufficientFunds))
	providertest.RequireClass(t, err, providers.ErrUnknown)
	require.Equal(t, 1, fake.Charges(ref))

	res, err := newProvider(t, fake.URL, stripetest.SecretKey, 0).Charge(context.Background(), chargeReq(ref, stripetest.TokenInsufficientFunds))
	require.NoError(t, err)
	require.Equal(t, providers.OutcomeFailed, res.Outcome)
	require.Equal(t, "insufficient_funds", res.FailureCode)
	require.Equal(t, 1, fake.Charges(ref))
}

func TestIdempotencyKeyReusedWithOtherParamsIsUnknown(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	p := newProvider(t, fake.URL, stripetest.SecretKey, 0)
	ref := providers.Reference("m1", "other-params")
	_, err := p.Charge(context.Background(), chargeReq(ref, stripetest.TokenSuccess))
	require.NoError(t, err)
	other := chargeReq(ref, stripetest.TokenSuccess)
	other.Amount = 2001
	_, err = p.Charge(context.Background(), other)
	providertest.RequireClass(t, err, providers.ErrUnknown)
	require.Equal(t, 1, fake.Charges(ref))
}

func TestLookup(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	// Lookup lists by created[gte] from its clock, so this provider uses
	// the real one (the fake stamps intents with time.Now).
	p, err := stripe.New(stripe.Config{BaseURL: fake.URL})(providers.Secrets{"secret_key": stripetest.SecretKey, "webhook_secret": stripetest.WebhookSecret})
	require.NoError(t, err)
	ctx := context.Background()

	t.Run("NothingFoundIsPendingBecauseSearchLags", func(t *testing.T) {
		res, err := p.Lookup(ctx, providers.Reference("m1", "never"))
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome)
	})
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
	t.Run("SettledProcessingIsSeen", func(t *testing.T) {
		ref := providers.Reference("m1", "settle")
		_, err := p.Charge(ctx, chargeReq(ref, stripetest.TokenPending))
		require.NoError(t, err)
		require.NoError(t, fake.Settle(ref, providers.OutcomeSucceeded))
		res, err := p.Lookup(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
	})
	t.Run("BadKeyIsNotCharged", func(t *testing.T) {
		_, err := newProvider(t, fake.URL, "sk_test_wrong", 0).Lookup(ctx, "x")
		providertest.RequireClass(t, err, providers.ErrNotCharged)
	})
	t.Run("ConnectionRefusedIsNotCharged", func(t *testing.T) {
		_, err := newProvider(t, refusedURL(t), stripetest.SecretKey, 0).Lookup(ctx, "x")
		providertest.RequireClass(t, err, providers.ErrNotCharged)
	})
}

func TestLookupServerErrorIsUnknown(t *testing.T) {
	t.Parallel()
	fake := stripetest.New(t)
	fake.FailNext(http.StatusServiceUnavailable)
	_, err := newProvider(t, fake.URL, stripetest.SecretKey, 0).Lookup(context.Background(), "x")
	providertest.RequireClass(t, err, providers.ErrUnknown)
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

	tests := []struct {
		name   string
		p      providers.Provider
		header http.Header
		body   []byte
		err    error
	}{
		{"ValidSignature", p, header, body, nil},
		{"AnyOfSeveralV1Matches", p, hdr(rolled), body, nil},
		{"TamperedBody", p, header, append([]byte(" "), body...), providers.ErrBadSignature},
		{"WrongSecret", otherSecret, header, body, providers.ErrBadSignature},
		{"StaleTimestamp", p, hdr(stale), body, providers.ErrBadSignature},
		{"FutureTimestamp", p, hdr(future), body, providers.ErrBadSignature},
		{"MissingHeader", p, http.Header{}, body, providers.ErrBadSignature},
		{"NoV1", p, hdr(fmt.Sprintf("t=%d", fixedNow.Unix())), body, providers.ErrBadSignature},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev, err := tt.p.VerifyWebhook(tt.header, tt.body)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, providers.Event{Type: "payment_intent.succeeded", Reference: ref}, ev)
		})
	}
}

func TestParseEvent(t *testing.T) {
	t.Parallel()
	ev, err := stripe.ParseEvent([]byte(`{"type":"charge.refunded","data":{"object":{"metadata":{"oncepay_reference":"x"}}}}`))
	require.NoError(t, err)
	require.Equal(t, providers.Event{Type: "charge.refunded"}, ev, "only payment_intent events name a charge of ours")
	_, err = stripe.ParseEvent([]byte(`{"data":1}`))
	require.ErrorIs(t, err, providers.ErrBadPayload)
}

// FuzzVerifyWebhook: arbitrary headers and bodies never panic; a body signed
// now always verifies and parses or is a payload error.
func FuzzVerifyWebhook(f *testing.F) {
	f.Add([]byte(`{"type":"payment_intent.succeeded","data":{"object":{"metadata":{"oncepay_reference":"op_1"}}}}`), "", true)
	f.Add([]byte(`{}`), "t=1,v1=00", false)
	f.Add([]byte(``), "t=,v1=,,=", false)
	f.Fuzz(func(t *testing.T, body []byte, header string, sign bool) {
		if sign {
			header = stripe.SignatureHeader("whsec_fuzz", fixedNow, body)
		}
		err := stripe.VerifySignature(header, body, "whsec_fuzz", fixedNow, stripe.DefaultTolerance)
		if sign {
			require.NoError(t, err)
		}
		if err == nil {
			_, _ = stripe.ParseEvent(body)
		}
	})
}

func refusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}
