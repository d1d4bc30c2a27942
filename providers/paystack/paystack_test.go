package paystack_test

import (
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
	"github.com/oncepay/gateway/providers/providertest"
)

func newProvider(t *testing.T, base string, key string, timeout time.Duration) providers.Provider {
	t.Helper()
	p, err := paystack.New(paystack.Config{BaseURL: base, Timeout: timeout})(providers.Secrets{"secret_key": key})
	require.NoError(t, err)
	return p
}

func chargeReq(ref, method string) providers.ChargeRequest {
	return providers.ChargeRequest{Reference: ref, Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: method}
}

func TestConformance(t *testing.T) {
	fake := paystacktest.New(t)
	providertest.Run(t, providertest.Harness{
		New:              func(t *testing.T) providers.Provider { return newProvider(t, fake.URL, paystacktest.SecretKey, 0) },
		SuccessMethod:    paystacktest.TokenSuccess,
		DeclineMethod:    paystacktest.TokenDecline,
		PendingMethod:    paystacktest.TokenPending,
		DropNextResponse: fake.DropNextResponse,
		Charges:          fake.Charges,
	})
}

func TestCharge(t *testing.T) {
	t.Parallel()
	fake := paystacktest.New(t)
	p := newProvider(t, fake.URL, paystacktest.SecretKey, 0)
	tests := []struct {
		name, method string
		outcome      providers.Outcome
		code         string
	}{
		{"SuccessIsSucceeded", paystacktest.TokenSuccess, providers.OutcomeSucceeded, ""},
		{"DeclineIsFailedCardDeclined", paystacktest.TokenDecline, providers.OutcomeFailed, "card_declined"},
		{"InsufficientFundsIsMapped", paystacktest.TokenInsufficientFunds, providers.OutcomeFailed, "insufficient_funds"},
		{"PendingIsPending", paystacktest.TokenPending, providers.OutcomePending, ""},
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
	fake := paystacktest.New(t)
	tests := []struct {
		name  string
		setup func() providers.Provider
		req   providers.ChargeRequest
		class error
	}{
		{"BadKeyIsNotCharged", func() providers.Provider { return newProvider(t, fake.URL, "sk_test_wrong", 0) },
			chargeReq("ref-badkey", paystacktest.TokenSuccess), providers.ErrNotCharged},
		{"ServerErrorIsUnknown", func() providers.Provider {
			fake.FailNext(http.StatusInternalServerError)
			return newProvider(t, fake.URL, paystacktest.SecretKey, 0)
		}, chargeReq("ref-500", paystacktest.TokenSuccess), providers.ErrUnknown},
		{"SpecViolationIsNotCharged", func() providers.Provider { return newProvider(t, fake.URL, paystacktest.SecretKey, 0) },
			providers.ChargeRequest{Reference: "ref-eur", Amount: 5000, Currency: "EUR", Email: "a@example.com", PaymentMethod: paystacktest.TokenSuccess},
			providers.ErrNotCharged},
		{"ConnectionRefusedIsNotCharged", func() providers.Provider { return newProvider(t, refusedURL(t), paystacktest.SecretKey, 0) },
			chargeReq("ref-refused", paystacktest.TokenSuccess), providers.ErrNotCharged},
	}
	for _, tt := range tests {
		// Sequential: FailNext is a property of the shared fake.
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.setup().Charge(context.Background(), tt.req)
			providertest.RequireClass(t, err, tt.class)
			require.NotContains(t, err.Error(), paystacktest.SecretKey)
			require.Equal(t, 0, fake.Charges(tt.req.Reference))
		})
	}
}

func TestTimeoutAfterStoreThenRetryChargesOnce(t *testing.T) {
	t.Parallel()
	fake := paystacktest.New(t)
	ref := providers.Reference("m1", "timeout")
	fake.HangNextResponse()
	// A short timeout only so the test does not wait 20s; nothing asserts
	// on time.
	_, err := newProvider(t, fake.URL, paystacktest.SecretKey, 100*time.Millisecond).Charge(context.Background(), chargeReq(ref, paystacktest.TokenSuccess))
	providertest.RequireClass(t, err, providers.ErrUnknown)
	require.Equal(t, 1, fake.Charges(ref))

	res, err := newProvider(t, fake.URL, paystacktest.SecretKey, 0).Charge(context.Background(), chargeReq(ref, paystacktest.TokenSuccess))
	require.NoError(t, err)
	require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
	require.Equal(t, 1, fake.Charges(ref))
}

func TestDuplicateReference(t *testing.T) {
	t.Parallel()
	fake := paystacktest.New(t)
	p := newProvider(t, fake.URL, paystacktest.SecretKey, 0)
	ctx := context.Background()

	t.Run("SameChargeReturnsFirstOutcome", func(t *testing.T) {
		ref := providers.Reference("m1", "dup-same")
		first, err := p.Charge(ctx, chargeReq(ref, paystacktest.TokenDecline))
		require.NoError(t, err)
		// Even with another token the answer is the first charge's.
		again, err := p.Charge(ctx, chargeReq(ref, paystacktest.TokenSuccess))
		require.NoError(t, err)
		require.Equal(t, first, again)
		require.Equal(t, 1, fake.Charges(ref))
	})
	t.Run("DifferentAmountIsConflictNotRelease", func(t *testing.T) {
		ref := providers.Reference("m1", "dup-other")
		_, err := p.Charge(ctx, chargeReq(ref, paystacktest.TokenSuccess))
		require.NoError(t, err)
		other := chargeReq(ref, paystacktest.TokenSuccess)
		other.Amount = 9999
		_, err = p.Charge(ctx, other)
		providertest.RequireClass(t, err, providers.ErrUnknown)
		require.ErrorIs(t, err, providers.ErrReferenceConflict)
		require.Equal(t, 1, fake.Charges(ref))
	})
}

func TestLookup(t *testing.T) {
	t.Parallel()
	fake := paystacktest.New(t)
	p := newProvider(t, fake.URL, paystacktest.SecretKey, 0)
	ctx := context.Background()

	t.Run("UnknownReferenceIsNotFound", func(t *testing.T) {
		res, err := p.Lookup(ctx, providers.Reference("m1", "never"))
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeNotFound, res.Outcome)
	})
	t.Run("SettledPendingIsSeen", func(t *testing.T) {
		ref := providers.Reference("m1", "settle")
		res, err := p.Charge(ctx, chargeReq(ref, paystacktest.TokenPending))
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome)
		require.NoError(t, fake.Settle(ref, providers.OutcomeSucceeded))
		res, err = p.Lookup(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
	})
	t.Run("BadKeyIsNotCharged", func(t *testing.T) {
		_, err := newProvider(t, fake.URL, "sk_test_wrong", 0).Lookup(ctx, "x")
		providertest.RequireClass(t, err, providers.ErrNotCharged)
	})
	t.Run("ConnectionRefusedIsNotCharged", func(t *testing.T) {
		_, err := newProvider(t, refusedURL(t), paystacktest.SecretKey, 0).Lookup(ctx, "x")
		providertest.RequireClass(t, err, providers.ErrNotCharged)
	})
}

func TestLookupServerErrorIsUnknown(t *testing.T) {
	t.Parallel()
	fake := paystacktest.New(t)
	fake.FailNext(http.StatusBadGateway)
	_, err := newProvider(t, fake.URL, paystacktest.SecretKey, 0).Lookup(context.Background(), "x")
	providertest.RequireClass(t, err, providers.ErrUnknown)
}

func TestNewRequiresSecretKey(t *testing.T) {
	t.Parallel()
	_, err := paystack.New(paystack.Config{})(providers.Secrets{})
	require.ErrorIs(t, err, providers.ErrBadSecrets)
	require.ErrorContains(t, err, "secret_key")
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	fake := paystacktest.New(t)
	p := newProvider(t, fake.URL, paystacktest.SecretKey, 0)
	ref := providers.Reference("m1", "webhook")
	_, err := p.Charge(context.Background(), chargeReq(ref, paystacktest.TokenSuccess))
	require.NoError(t, err)
	header, body, err := fake.Webhook(ref)
	require.NoError(t, err)

	t.Run("ValidSignature", func(t *testing.T) {
		ev, err := p.VerifyWebhook(header, body)
		require.NoError(t, err)
		require.Equal(t, providers.Event{Type: "charge.success", Reference: ref}, ev)
	})
	t.Run("TamperedBody", func(t *testing.T) {
		tampered := append([]byte(nil), body...)
		tampered[len(tampered)/2] ^= 1
		_, err := p.VerifyWebhook(header, tampered)
		require.ErrorIs(t, err, providers.ErrBadSignature)
	})
	t.Run("WrongSecret", func(t *testing.T) {
		_, err := newProvider(t, fake.URL, "sk_test_other", 0).VerifyWebhook(header, body)
		require.ErrorIs(t, err, providers.ErrBadSignature)
	})
	t.Run("MissingHeader", func(t *testing.T) {
		_, err := p.VerifyWebhook(http.Header{}, body)
		require.ErrorIs(t, err, providers.ErrBadSignature)
	})
	t.Run("SignedGarbageIsBadPayload", func(t *testing.T) {
		garbage := []byte("not json")
		h := http.Header{"X-Paystack-Signature": {hex.EncodeToString(paystack.Sign(paystacktest.SecretKey, garbage))}}
		_, err := p.VerifyWebhook(h, garbage)
		require.ErrorIs(t, err, providers.ErrBadPayload)
	})
	t.Run("OtherEventHasNoReference", func(t *testing.T) {
		b := []byte(`{"event":"transfer.success","data":{"reference":"trf_1"}}`)
		h := http.Header{"X-Paystack-Signature": {hex.EncodeToString(paystack.Sign(paystacktest.SecretKey, b))}}
		ev, err := p.VerifyWebhook(h, b)
		require.NoError(t, err)
		require.Equal(t, providers.Event{Type: "transfer.success"}, ev)
	})
}

// FuzzVerifyWebhook feeds arbitrary bodies and signatures: the verifier must
// never panic, must reject anything not signed with the key, and must parse
// whatever is signed without panicking.
func FuzzVerifyWebhook(f *testing.F) {
	f.Add([]byte(`{"event":"charge.success","data":{"reference":"op_1"}}`), "", true)
	f.Add([]byte(`{"event":"charge.success","data":{}}`), "00", true)
	f.Add([]byte(`[]`), "zz", false)
	f.Fuzz(func(t *testing.T, body []byte, sig string, sign bool) {
		h := http.Header{}
		if sign {
			sig = hex.EncodeToString(paystack.Sign("sk_fuzz", body))
		}
		h.Set("X-Paystack-Signature", sig)
		ev, err := paystack.VerifyWebhook("sk_fuzz", h, body)
		if !sign && err == nil {
			require.Equal(t, hex.EncodeToString(paystack.Sign("sk_fuzz", body)), sig)
		}
		if err == nil && ev.Reference == "" {
			require.NotEmpty(t, ev.Type)
		}
	})
}

// refusedURL is the address of a listener that has been closed: dialing it
// is refused, like a provider that is down before anything is sent.
func refusedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return "http://" + addr
}

func TestWireReference(t *testing.T) {
	t.Parallel()
	ours := providers.Reference("m1", "k")
	wire := paystack.WireReference(ours)
	require.Regexp(t, `^[A-Za-z0-9.=-]+$`, wire)
	require.Equal(t, ours, paystack.OurReference(wire))
	require.Equal(t, "ord-123.a", paystack.WireReference("ord-123.a"), "safe references are sent as they are")
	require.NotEqual(t, paystack.WireReference("a=5F"), paystack.WireReference("a_"), "the encoding is injective")

	// The fake applies Paystack's charset rule, so this is end to end.
	fake := paystacktest.New(t)
	p := newProvider(t, fake.URL, paystacktest.SecretKey, 0)
	for _, ref := range []string{ours, "ref/with/slash?&", "a=b"} {
		res, err := p.Charge(context.Background(), chargeReq(ref, paystacktest.TokenSuccess))
		require.NoError(t, err, ref)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
		res, err = p.Lookup(context.Background(), ref)
		require.NoError(t, err, ref)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
		require.Equal(t, 1, fake.Charges(ref))
	}
}

func FuzzWireReference(f *testing.F) {
	f.Add("op_0123")
	f.Add("a=5F")
	f.Fuzz(func(t *testing.T, ref string) {
		wire := paystack.WireReference(ref)
		require.Regexp(t, `^[A-Za-z0-9.=-]*$`, wire)
		require.Equal(t, ref, paystack.OurReference(wire))
	})
}
