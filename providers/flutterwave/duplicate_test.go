package flutterwave_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
)

// See the Paystack test of the same name: a duplicate tx_ref proves the
// charge exists, so a failed verify afterwards is unknown, not "not charged".
func TestDuplicateThenFailedVerifyIsUnknown(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusBadRequest} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if strings.HasSuffix(r.URL.Path, "/tokenized-charges") {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"status":"error","message":"Duplicate tx_ref","data":null}`))
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(`{"status":"error","message":"try again later","data":null}`))
		}))
		p, err := flutterwave.New(flutterwave.Config{BaseURL: srv.URL, Timeout: 2 * time.Second})(providers.Secrets{
			"secret_key": "FLWSECK_TEST-x", "secret_hash": "h"})
		require.NoError(t, err)
		_, err = p.Charge(context.Background(), providers.ChargeRequest{
			Reference: "op-dup", Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: "flw-t1nf-x"})
		srv.Close()
		require.ErrorIs(t, err, providers.ErrUnknown, "verify answered %d", status)
		require.NotErrorIs(t, err, providers.ErrNotCharged, "verify answered %d", status)
	}
}
