package flutterwave_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
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
		New:                     func(t *testing.T) providers.Provider { return newProvider(t, fake.URL, flutterwavetest.SecretKey, 0) },
		SuccessMethod:           flutterwavetest.TokenSuccess,
		DeclineMethod:           flutterwavetest.TokenDecline,
		PendingMethod:           flutterwavetest.TokenPending,
		InsufficientFundsMethod: flutterwavetest.TokenInsufficientFunds,
		DeclineCode:             "card_declined",
		DropNextResponse:        fake.DropNextResponse,
		HangNextResponse:        fake.HangNextResponse,
		FailNext:                fake.FailNext,
		Charges:                 fake.Charges,
		Settle:                  fake.Settle,
		NewWith:                 newProvider,
		URL:                     fake.URL,
		SecretKey:               flutterwavetest.SecretKey,
		Rejected: map[string]providers.ChargeRequest{
			"ValidationError": {Reference: "ref-noemail", Amount: 5000, Currency: "NGN", PaymentMethod: flutterwavetest.TokenSuccess},
			"UnknownCurrency": {Reference: "ref-cur", Amount: 5000, Currency: "ZZZ", Email: "a@b.c", PaymentMethod: flutterwavetest.TokenSuccess},
		},
		DuplicateIsLookedUp: true,
	})
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

	providertest.RunWebhookCases(t, providers.Event{Type: "charge.completed", Reference: ref}, []providertest.WebhookCase{
		{Name: "BothHeadersValid", Provider: p, Header: header, Body: body},
		{Name: "VerifHashAloneValid", Provider: p, Header: only("Verif-Hash"), Body: body},
		{Name: "SignatureAloneValid", Provider: p, Header: only("Flutterwave-Signature"), Body: body},
		{Name: "TamperedBodyFailsSignature", Provider: p, Header: header, Body: append([]byte(" "), body...), Err: providers.ErrBadSignature},
		{Name: "WrongSecret", Provider: otherHash(), Header: header, Body: body, Err: providers.ErrBadSignature},
		{Name: "WrongVerifHash", Provider: p, Header: http.Header{"Verif-Hash": {"nope"}}, Body: body, Err: providers.ErrBadSignature},
		{Name: "NoHeaders", Provider: p, Header: http.Header{}, Body: body, Err: providers.ErrBadSignature},
		{Name: "SignedGarbageIsBadPayload", Provider: p, Header: http.Header{"Verif-Hash": {flutterwavetest.SecretHash}}, Body: []byte("{"), Err: providers.ErrBadPayload},
	})
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
	f.Add([]byte(`{"event":"refund.completed","data":{"id":8612,"tx_id":41,"tx_ref":"op_1","status":"completed","comments":"or-1"}}`), "hash", "", true)
	f.Add([]byte(`{"event.type":"REFUND","data":{"transaction_id":"41","comment":"or-1"}}`), "", "", true)
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
		ev, err := flutterwave.VerifyWebhook("hash", h, body)
		if err == nil {
			require.True(t, verif == "hash" || sign || strings.TrimSpace(sig) == base64.StdEncoding.EncodeToString(flutterwave.Sign("hash", body)))
		}
		if err == nil && ev.Refund {
			// A refund event names its charge or refund somehow.
			require.True(t, ev.Reference != "" || ev.TransactionID != "" || ev.RefundReference != "")
		}
		if err == nil && !ev.Refund {
			require.Empty(t, ev.TransactionID)
			require.Empty(t, ev.RefundReference)
		}
	})
}
