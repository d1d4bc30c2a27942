package flutterwave_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/flutterwave/flutterwavetest"
	"github.com/oncepay/gateway/providers/providertest"
)

func secrets(key string) providers.Secrets {
	return providers.Secrets{"secret_key": key, "secret_hash": flutterwavetest.SecretHash}
}

func newProvider(t *testing.T, base, key string, timeout time.Duration) providers.Provider {
	t.Helper()
	p, err := flutterwave.New(flutterwave.Config{BaseURL: base, Timeout: timeout})(secrets(key))
	require.NoError(t, err)
	return p
}

func chargeReq(ref, method string) providers.ChargeRequest {
	return providers.ChargeRequest{Reference: ref, Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: method, Description: "order 1"}
}

func TestConformance(t *testing.T) {
	fake := flutterwavetest.New(t)
	providertest.Run(t, providertest.Harness{
		New:              func(t *testing.T) providers.Provider { return newProvider(t, fake.URL, flutterwavetest.SecretKey, 0) },
		SuccessMethod:    flutterwavetest.TokenSuccess,
		DeclineMethod:    flutterwavetest.TokenDecline,
		PendingMethod:    flutterwavetest.TokenPending,
		DropNextResponse: fake.DropNextResponse,
		Charges:          fake.Charges,
	})
}

func TestCharge(t *testing.T) {
	t.Parallel()
	fake := flutterwavetest.New(t)
	p := newProvider(t, fake.URL, flutterwavetest.SecretKey, 0)
	tests := []struct {
		name, method string
		outcome      providers.Outcome
		code         string
	}{
		{"SuccessIsSucceeded", flutterwavetest.TokenSuccess, providers.OutcomeSucceeded, ""},
		{"DeclineIsFailedCardDeclined", flutterwavetest.TokenDecline, providers.OutcomeFailed, "card_declined"},
		{"InsufficientFundsIsMapped", flutterwavetest.TokenInsufficientFunds, providers.OutcomeFailed, "insufficient_funds"},
		{"PendingIsPending", flutterwavetest.TokenPending, providers.OutcomePending, ""},
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

// TestChargeSendsMajorUnitsAsJSONNumber pins the wire amount: 5000 kobo is
// the JSON number 50.00, and 1234 KWD fils is 1.234, never a float.
func TestChargeSendsMajorUnitsAsJSONNumber(t *testing.T) {
	t.Parallel()
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &m))
		got = append(got, string(m["amount"]))
		_, _ = w.Write([]byte(`{"status":"success","message":"Charge successful","data":{"id":1,"status":"successful"}}`))
	}))
	defer srv.Close()
	p := newProvider(t, srv.URL, "k", 0)
	for _, c := range []struct {
		amount   int64
		currency string
	}{{5000, "NGN"}, {1234, "KWD"}, {500, "JPY"}} {
		_, err := p.Charge(context.Background(), providers.ChargeRequest{Reference: "r", Amount: c.amount, Currency: c.currency, Email: "a@b.c", PaymentMethod: "t"})
		require.NoError(t, err)
	}
	require.Equal(t, []string{"50.00", "1.234", "500"}, got)
}

func TestChargeErrors(t *testing.T) {
	t.Parallel()
	fake := flutterwavetest.New(t)
	good := func() providers.Provider { return newProvider(t, fake.URL, flutterwavetest.SecretKey, 0) }
	tests := []struct {
		name  string
		setup func() providers.Provider
		req   providers.ChargeRequest
		class error
	}{
		{"BadKeyIsNotCharged", func() providers.Provider { return newProvider(t, fake.URL, "FLWSECK_TEST-wrong", 0) },
			chargeReq("ref-badkey", flutterwavetest.TokenSuccess), providers.ErrNotCharged},
		{"ServerErrorIsUnknown", func() providers.Provider { fake.FailNext(http.StatusInternalServerError); return good() },
			chargeReq("ref-500", flutterwavetest.TokenSuccess), providers.ErrUnknown},
		{"GatewayTimeout503IsUnknown", func() providers.Provider { fake.FailNext(http.StatusServiceUnavailable); return good() },
			chargeReq("ref-503", flutterwavetest.TokenSuccess), providers.ErrUnknown},
		{"ValidationErrorIsNotCharged", good,
			providers.ChargeRequest{Reference: "ref-noemail", Amount: 5000, Currency: "NGN", PaymentMethod: flutterwavetest.TokenSuccess},
			providers.ErrNotCharged},
		{"UnknownCurrencyIsNotCharged", good,
			providers.ChargeRequest{Reference: "ref-cur", Amount: 5000, Currency: "ZZZ", Email: "a@b.c", PaymentMethod: flutterwavetest.TokenSuccess},
			providers.ErrNotCharged},
		{"ConnectionRefusedIsNotCharged", func() providers.Provider { return newProvider(t, refusedURL(t), flutterwavetest.SecretKey, 0) },
			chargeReq("ref-refused", flutterwavetest.TokenSuccess), providers.ErrNotCharged},
	}
	for _, tt := range tests {
		// Sequential: FailNext is a property of the shared fake.
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.setup().Charge(context.Background(), tt.req)
			providertest.RequireClass(t, err, tt.class)
			require.NotContains(t, err.Error(), flutterwavetest.SecretKey)
			require.Equal(t, 0, fake.Charges(tt.req.Reference))
		})
	}
}

func TestTimeoutAfterStoreThenRetryChargesOnce(t *testing.T) {
	t.Parallel()
	fake := flutterwavetest.New(t)
	ref := providers.Reference("m1", "timeout")
	fake.HangNextResponse()
	// A short timeout only so the test does not wait 20s; nothing asserts
	// on time.
	_, err := newProvider(t, fake.URL, flutterwavetest.SecretKey, 100*time.Millisecond).Charge(context.Background(), chargeReq(ref, flutterwavetest.TokenDecline))
	providertest.RequireClass(t, err, providers.ErrUnknown)
	require.Equal(t, 1, fake.Charges(ref))

	res, err := newProvider(t, fake.URL, flutterwavetest.SecretKey, 0).Charge(context.Background(), chargeReq(ref, flutterwavetest.TokenDecline))
	require.NoError(t, err)
	require.Equal(t, providers.OutcomeFailed, res.Outcome)
	require.Equal(t, 1, fake.Charges(ref))
}

func TestDuplicateReference(t *testing.T) {
	t.Parallel()
	fake := flutterwavetest.New(t)
	p := newProvider(t, fake.URL, flutterwavetest.SecretKey, 0)
	ctx := context.Background()

	t.Run("SameChargeReturnsFirstOutcome", func(t *testing.T) {
		ref := providers.Reference("m1", "dup-same")
		first, err := p.Charge(ctx, chargeReq(ref, flutterwavetest.TokenSuccess))
		require.NoError(t, err)
		again, err := p.Charge(ctx, chargeReq(ref, flutterwavetest.TokenDecline))
		require.NoError(t, err)
		require.Equal(t, first, again)
		require.Equal(t, 1, fake.Charges(ref))
	})
	t.Run("DifferentAmountIsConflictNotRelease", func(t *testing.T) {
		ref := providers.Reference("m1", "dup-other")
		_, err := p.Charge(ctx, chargeReq(ref, flutterwavetest.TokenSuccess))
		require.NoError(t, err)
		other := chargeReq(ref, flutterwavetest.TokenSuccess)
		other.Amount = 5001
		_, err = p.Charge(ctx, other)
		providertest.RequireClass(t, err, providers.ErrUnknown)
		require.ErrorIs(t, err, providers.ErrReferenceConflict)
	})
}

func TestLookup(t *testing.T) {
	t.Parallel()
	fake := flutterwavetest.New(t)
	p := newProvider(t, fake.URL, flutterwavetest.SecretKey, 0)
	ctx := context.Background()

	t.Run("UnknownReferenceIsNotFound", func(t *testing.T) {
		res, err := p.Lookup(ctx, providers.Reference("m1", "never"))
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeNotFound, res.Outcome)
	})
	t.Run("SettledPendingIsSeen", func(t *testing.T) {
		ref := providers.Reference("m1", "settle")
		res, err := p.Charge(ctx, chargeReq(ref, flutterwavetest.TokenPending))
		require.NoError(t, err)
		require.Equal(t, providers.OutcomePending, res.Outcome)
		require.NoError(t, fake.Settle(ref, providers.OutcomeFailed))
		res, err = p.Lookup(ctx, ref)
		require.NoError(t, err)
		require.Equal(t, providers.OutcomeFailed, res.Outcome)
	})
	t.Run("BadKeyIsNotCharged", func(t *testing.T) {
		_, err := newProvider(t, fake.URL, "wrong", 0).Lookup(ctx, "x")
		providertest.RequireClass(t, err, providers.ErrNotCharged)
	})
	t.Run("ConnectionRefusedIsNotCharged", func(t *testing.T) {
		_, err := newProvider(t, refusedURL(t), flutterwavetest.SecretKey, 0).Lookup(ctx, "x")
		providertest.RequireClass(t, err, providers.ErrNotCharged)
	})
}

func TestLookupServerErrorIsUnknown(t *testing.T) {
	t.Parallel()
	fake := flutterwavetest.New(t)
	fake.FailNext(http.StatusServiceUnavailable)
	_, err := newProvider(t, fake.URL, flutterwavetest.SecretKey, 0).Lookup(context.Background(), "x")
	providertest.RequireClass(t, err, providers.ErrUnknown)
}

func TestNewRequiresBothSecrets(t *testing.T) {
	t.Parallel()
	_, err := flutterwave.New(flutterwave.Config{})(providers.Secrets{"secret_key": "k"})
	require.ErrorIs(t, err, providers.ErrBadSecrets)
	require.ErrorContains(t, err, "secret_hash")
}

func TestVerifyWebhook(t *testing.T) {
	t.Parallel()
	fake := flutterwavetest.New(t)
	p := newProvider(t, fake.URL, flutterwavetest.SecretKey, 0)
	ref := providers.Reference("m1", "webhook")
	_, err := p.Charge(context.Background(), chargeReq(ref, flutterwavetest.TokenSuccess))
	require.NoError(t, err)
	header, body, err := fake.Webhook(ref)
	require.NoError(t, err)
	only := func(name string) http.Header { h := http.Header{}; h.Set(name, header.Get(name)); return h }
	otherHash := func() providers.Provider {
		q, err := flutterwave.New(flutterwave.Config{BaseURL: fake.URL})(providers.Secrets{"secret_key": "k", "secret_hash": "other"})
		require.NoError(t, err)
		return q
	}

	tests := []struct {
		name   string
		p      providers.Provider
		header http.Header
		body   []byte
		err    error
	}{
		{"BothHeadersValid", p, header, body, nil},
		{"VerifHashAloneValid", p, only("Verif-Hash"), body, nil},
		{"SignatureAloneValid", p, only("Flutterwave-Signature"), body, nil},
		{"TamperedBodyFailsSignature", p, header, append([]byte(" "), body...), providers.ErrBadSignature},
		{"WrongSecret", otherHash(), header, body, providers.ErrBadSignature},
		{"WrongVerifHash", p, http.Header{"Verif-Hash": {"nope"}}, body, providers.ErrBadSignature},
		{"NoHeaders", p, http.Header{}, body, providers.ErrBadSignature},
		{"SignedGarbageIsBadPayload", p, http.Header{"Verif-Hash": {flutterwavetest.SecretHash}}, []byte("{"), providers.ErrBadPayload},
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
			require.Equal(t, providers.Event{Type: "charge.completed", Reference: ref}, ev)
		})
	}
}

func TestParseEventLegacyFlatPayload(t *testing.T) {
	t.Parallel()
	ev, err := flutterwave.ParseEvent([]byte(`{"id":1,"txRef":"op-1","flwRef":"F","status":"successful","event.type":"CARD_TRANSACTION"}`))
	require.NoError(t, err)
	require.Equal(t, providers.Event{Type: "CARD_TRANSACTION", Reference: "op-1"}, ev)
}

// FuzzVerifyWebhook: arbitrary headers and bodies never panic, and anything
// accepted carried a valid credential.
func FuzzVerifyWebhook(f *testing.F) {
	f.Add([]byte(`{"event":"charge.completed","data":{"tx_ref":"op_1"}}`), "hash", "", true)
	f.Add([]byte(`{"txRef":"x"}`), "", "AAAA", false)
	f.Add([]byte(`null`), "hash", "!!", false)
	f.Fuzz(func(t *testing.T, body []byte, verif, sig string, sign bool) {
		h := http.Header{}
		if verif != "" {
			h.Set("Verif-Hash", verif)
		}
		if sign {
			sig = base64.StdEncoding.EncodeToString(flutterwave.Sign("hash", body))
		}
		if sig != "" {
			h.Set("Flutterwave-Signature", sig)
		}
		_, err := flutterwave.VerifyWebhook("hash", h, body)
		if err == nil {
			require.True(t, verif == "hash" || sign || strings.TrimSpace(sig) == base64.StdEncoding.EncodeToString(flutterwave.Sign("hash", body)))
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
