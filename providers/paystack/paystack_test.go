package paystack_test

import (
	"context"
	"encoding/hex"
	"net/http"
	"strings"
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
		New:                     func(t *testing.T) providers.Provider { return newProvider(t, fake.URL, paystacktest.SecretKey, 0) },
		SuccessMethod:           paystacktest.TokenSuccess,
		DeclineMethod:           paystacktest.TokenDecline,
		PendingMethod:           paystacktest.TokenPending,
		InsufficientFundsMethod: paystacktest.TokenInsufficientFunds,
		DeclineCode:             "card_declined",
		DropNextResponse:        fake.DropNextResponse,
		HangNextResponse:        fake.HangNextResponse,
		FailNext:                fake.FailNext,
		Charges:                 fake.Charges,
		Settle:                  fake.Settle,
		NewWith:                 newProvider,
		URL:                     fake.URL,
		SecretKey:               paystacktest.SecretKey,
		Rejected: map[string]providers.ChargeRequest{
			"SpecViolation": {Reference: "ref-eur", Amount: 5000, Currency: "EUR", Email: "a@example.com", PaymentMethod: paystacktest.TokenSuccess},
		},
		DuplicateIsLookedUp: true,
	})
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

	garbage := []byte("not json")
	signedGarbage := http.Header{"X-Paystack-Signature": {hex.EncodeToString(paystack.Sign(paystacktest.SecretKey, garbage))}}
	tampered := append([]byte(nil), body...)
	tampered[len(tampered)/2] ^= 1
	providertest.RunWebhookCases(t, providers.Event{Type: "charge.success", Reference: ref}, []providertest.WebhookCase{
		{Name: "ValidSignature", Provider: p, Header: header, Body: body},
		{Name: "TamperedBody", Provider: p, Header: header, Body: tampered, Err: providers.ErrBadSignature},
		{Name: "WrongSecret", Provider: newProvider(t, fake.URL, "sk_test_other", 0), Header: header, Body: body, Err: providers.ErrBadSignature},
		{Name: "MissingHeader", Provider: p, Header: http.Header{}, Body: body, Err: providers.ErrBadSignature},
		{Name: "SignedGarbageIsBadPayload", Provider: p, Header: signedGarbage, Body: garbage, Err: providers.ErrBadPayload},
	})
	t.Run("DisputesAreAcknowledged", func(t *testing.T) {
		// A dispute names its charge only inside data.transaction.
		for _, typ := range []string{"charge.dispute.create", "charge.dispute.remind", "charge.dispute.resolve"} {
			b := []byte(`{"event":"` + typ + `","data":{"id":358950,"currency":"NGN","status":"awaiting-merchant-feedback",` +
				`"transaction":{"id":4099260516,"reference":"op-abc"},"transaction_reference":null}}`)
			h := http.Header{"X-Paystack-Signature": {hex.EncodeToString(paystack.Sign(paystacktest.SecretKey, b))}}
			ev, err := p.VerifyWebhook(h, b)
			require.NoError(t, err, typ)
			require.Equal(t, providers.Event{Type: typ}, ev)
		}
		b := []byte(`{"event":"charge.success","data":{"id":1}}`)
		h := http.Header{"X-Paystack-Signature": {hex.EncodeToString(paystack.Sign(paystacktest.SecretKey, b))}}
		_, err := p.VerifyWebhook(h, b)
		require.ErrorIs(t, err, providers.ErrBadPayload, "a charge.success names its charge")
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
	f.Add([]byte(`{"event":"refund.processed","data":{"status":"processed","transaction_reference":"op-1","refund_reference":"1320","amount":"5000"}}`), "", true)
	f.Add([]byte(`{"event":"refund.failed","data":{"transaction":{"reference":"op=2F1"},"merchant_note":"or-1"}}`), "", true)
	f.Add([]byte(`{"event":"refund.pending","data":{"transaction":41,"refund_reference":null}}`), "", true)
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
		if err == nil && ev.Refund {
			// A refund event always names the refunded charge.
			require.True(t, strings.HasPrefix(ev.Type, "refund."), ev.Type)
			require.NotEmpty(t, ev.Reference)
		}
		if err == nil && !ev.Refund {
			require.Empty(t, ev.RefundReference)
			require.Empty(t, ev.TransactionID)
		}
	})
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
