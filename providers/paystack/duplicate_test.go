package paystack_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack"
)

// A "duplicate reference" answer proves the charge exists, so failing to
// verify it afterwards — even with an answer that would mean "not charged"
// on its own, like 429 or 401 — must leave the outcome unknown: releasing
// the key would let a charged payment be recorded as never charged.
func TestDuplicateThenFailedVerifyIsUnknown(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusBadRequest} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if strings.HasSuffix(r.URL.Path, "/transaction/charge_authorization") {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"status":false,"message":"Duplicate Transaction Reference"}`))
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"status":false,"message":"try again later"}`))
		}))
		p, err := paystack.New(paystack.Config{BaseURL: srv.URL, Timeout: 2 * time.Second})(providers.Secrets{"secret_key": "sk_test_x"})
		require.NoError(t, err)
		_, err = p.Charge(context.Background(), providers.ChargeRequest{
			Reference: "op-dup", Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: "AUTH_x"})
		srv.Close()
		require.ErrorIs(t, err, providers.ErrUnknown, "verify answered %d", status)
		require.NotErrorIs(t, err, providers.ErrNotCharged, "verify answered %d", status)
	}
}
