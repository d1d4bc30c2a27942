package paystack_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/providertest"
)

func TestDuplicateThenFailedVerifyIsUnknown(t *testing.T) {
	t.Parallel()
	providertest.RunDuplicateThenFailedVerify(t, providertest.DuplicateVerify{
		New: func(t *testing.T, base string) providers.Provider {
			p, err := paystack.New(paystack.Config{BaseURL: base, Timeout: 2 * time.Second})(providers.Secrets{"secret_key": "sk_test_x"})
			require.NoError(t, err)
			return p
		},
		ChargePath: "/transaction/charge_authorization",
		Duplicate:  `{"status":false,"message":"Duplicate Transaction Reference"}`,
		Error:      `{"status":false,"message":"try again later"}`,
		Method:     "AUTH_x",
	})
}

// The status Paystack answers a reused reference with on
// charge_authorization is not documented: a "duplicate" on any 4xx is
// looked up, never read as "not charged".
func TestDuplicateOnAny4xxIsLookedUp(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusBadRequest, http.StatusConflict, http.StatusUnprocessableEntity} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if strings.HasSuffix(r.URL.Path, "/transaction/charge_authorization") {
				w.WriteHeader(status)
				_, _ = w.Write([]byte(`{"status":false,"message":"Duplicate charge request for reference"}`))
				return
			}
			_, _ = w.Write([]byte(`{"status":true,"message":"Verification successful","data":{"id":4099260516,` +
				`"status":"success","reference":"op-dup","amount":5000,"currency":"NGN","customer":{"email":"ada@example.com"}}}`))
		}))
		p, err := paystack.New(paystack.Config{BaseURL: srv.URL, Timeout: 2 * time.Second})(providers.Secrets{"secret_key": "sk_test_x"})
		require.NoError(t, err)
		res, err := p.Charge(context.Background(), providers.ChargeRequest{
			Reference: "op-dup", Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: "AUTH_x"})
		srv.Close()
		require.NoError(t, err, "HTTP %d", status)
		require.Equal(t, providers.OutcomeSucceeded, res.Outcome, "HTTP %d", status)
	}
}

// A merchant that passes Paystack's fees on to its customers sees them in
// amount, and what it asked for in requested_amount: the charge is the
// payment's, found by a duplicate reference or a lookup alike. Another
// amount asked for is another charge.
func TestFeesPassedOnAreNotAnotherAmount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		amount    int
		requested string
		conflict  bool
	}{
		{"FeesPassedOn", 5075, `"requested_amount":5000,`, false},
		{"FeesPassedOnAsAString", 5075, `"requested_amount":"5000",`, false},
		{"NoRequestedAmount", 5075, ``, true},
		{"AnotherAmountAsked", 5075, `"requested_amount":4925,`, true},
		{"MoreAskedThanCollected", 4000, `"requested_amount":5000,`, true},
		{"NoFees", 5000, `"requested_amount":5000,`, false},
		{"Null", 5000, `"requested_amount":null,`, false},
		{"Zero", 5000, `"requested_amount":0,`, false},
		{"NotANumber", 5000, `"requested_amount":"abc",`, false},
		{"Empty", 5000, `"requested_amount":"",`, false},
		{"Fraction", 5000, `"requested_amount":4999.5,`, false},
		{"AnObject", 5000, `"requested_amount":{"x":1},`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if strings.HasSuffix(r.URL.Path, "/transaction/charge_authorization") {
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write([]byte(`{"status":false,"message":"Duplicate Transaction Reference"}`))
					return
				}
				_, _ = w.Write([]byte(`{"status":true,"message":"Verification successful","data":{"id":4099260516,` +
					`"status":"success","reference":"op-fees","amount":` + strconv.Itoa(tt.amount) + `,` + tt.requested + `"fees":75,"currency":"NGN"}}`))
			}))
			defer srv.Close()
			p, err := paystack.New(paystack.Config{BaseURL: srv.URL, Timeout: 2 * time.Second})(providers.Secrets{"secret_key": "sk_test_x"})
			require.NoError(t, err)
			res, err := p.Charge(context.Background(), providers.ChargeRequest{
				Reference: "op-fees", Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: "AUTH_x"})
			if tt.conflict {
				require.ErrorIs(t, err, providers.ErrReferenceConflict)
				return
			}
			require.NoError(t, err)
			require.Equal(t, providers.OutcomeSucceeded, res.Outcome)
			require.EqualValues(t, 5000, res.Amount)
			found, err := p.Lookup(context.Background(), "op-fees")
			require.NoError(t, err)
			require.EqualValues(t, 5000, found.Amount, "the payment's amount, for the lookup's check")
		})
	}
}

// Verify's "not found" is "never charged" only when it is about the
// reference: any other 4xx "Not found" (a proxy's, a wrong base URL's)
// says nothing about the charge and is an error, never OutcomeNotFound.
func TestLookupNotFoundOnlyForAnUnknownReference(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, body string
		status     int
		notFound   bool
	}{
		{"InPractice", `{"status":false,"message":"Transaction reference not found"}`, 400, true},
		{"InPracticeAs404", `{"status":false,"message":"Transaction reference not found."}`, 404, true},
		{"TheSpecsExample", `{"status":false,"message":"Entity not found"}`, 404, true},
		{"ARoutesNotFound", `{"status":false,"message":"Not found"}`, 404, false},
		{"AProxysNotFound", `{"message":"Resource not found"}`, 404, false},
		{"AServerError", `{"status":false,"message":"Transaction reference not found"}`, 500, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			p, err := paystack.New(paystack.Config{BaseURL: srv.URL, Timeout: 2 * time.Second})(providers.Secrets{"secret_key": "sk_test_x"})
			require.NoError(t, err)
			res, err := p.Lookup(context.Background(), "op-x")
			if tt.notFound {
				require.NoError(t, err)
				require.Equal(t, providers.OutcomeNotFound, res.Outcome)
				return
			}
			require.Error(t, err, "an error, which leaves the payment in progress: never OutcomeNotFound")
			require.NotEqual(t, providers.OutcomeNotFound, res.Outcome)
		})
	}
}

// A verify answer about another reference (a proxy or cache that mixed up
// paths) settles nothing: the payment stays unknown until an answer about
// its own charge comes. Flutterwave's adapter checks tx_ref the same way.
func TestVerifyOfAnotherReferenceSettlesNothing(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, answered string
		want           providers.Outcome
	}{
		{"Ours", paystack.WireReference("op-x"), providers.OutcomeSucceeded},
		{"NoReferenceInTheAnswer", "", providers.OutcomeSucceeded},
		{"Another", "someone-else", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"status":true,"message":"Verification successful","data":{"id":4099260517,` +
					`"status":"success","reference":"` + tt.answered + `","amount":5000,"currency":"NGN","customer":{"email":"ada@example.com"}}}`))
			}))
			defer srv.Close()
			p, err := paystack.New(paystack.Config{BaseURL: srv.URL, Timeout: 2 * time.Second})(providers.Secrets{"secret_key": "sk_test_x"})
			require.NoError(t, err)
			res, err := p.Lookup(context.Background(), "op-x")
			if tt.want == "" {
				require.ErrorIs(t, err, providers.ErrUnknown)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, res.Outcome)
		})
	}
}
