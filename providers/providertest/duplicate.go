package providertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/oncepay/gateway/providers"
)

// DuplicateVerify describes a provider that rejects a reused reference as a
// duplicate and is then asked to look it up.
type DuplicateVerify struct {
	// New builds the adapter against base.
	New func(t *testing.T, base string) providers.Provider
	// ChargePath is the path suffix of the charge request.
	ChargePath string
	// Duplicate is the provider's 400 body for a reused reference; Error is
	// its error body for the failed lookup.
	Duplicate, Error string
	// Method is a payment method token the adapter accepts.
	Method string
}

// RunDuplicateThenFailedVerify checks that a "duplicate reference" answer,
// which proves the charge exists, followed by a lookup that fails — even
// with an answer that on its own would mean "not charged", like 429 or 401
// — is an unknown outcome: releasing the key would record a charged
// payment as never charged.
func RunDuplicateThenFailedVerify(t *testing.T, d DuplicateVerify) {
	t.Helper()
	for _, status := range []int{http.StatusTooManyRequests, http.StatusUnauthorized, http.StatusBadRequest} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if strings.HasSuffix(r.URL.Path, d.ChargePath) {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(d.Duplicate))
				return
			}
			w.WriteHeader(status)
			_, _ = w.Write([]byte(d.Error))
		}))
		_, err := d.New(t, srv.URL).Charge(context.Background(), providers.ChargeRequest{
			Reference: "op-dup", Amount: 5000, Currency: "NGN", Email: "ada@example.com", PaymentMethod: d.Method})
		srv.Close()
		RequireClass(t, err, providers.ErrUnknown) // and never ErrNotCharged
	}
}
