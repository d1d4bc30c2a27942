package payments_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

// A retry of a payment older than the redrive window is answered by a
// lookup (lookUpInstead). When the retry's lease lapses during that lookup
// and another settler takes the key, the settle is Skipped with the key
// still in progress: the retry is told the key is in use (409, Retry-After),
// not given the key's empty answer (a 200 with no body).
func TestAnOldRetryThatLosesItsKeyIsToldItIsInUse(t *testing.T) {
	t.Parallel()
	ps := paystacktest.New(t)
	target, err := url.Parse(ps.URL)
	require.NoError(t, err)
	forward := httputil.NewSingleHostReverseProxy(target)
	var g *apptest.Gateway
	var steal atomic.Bool
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if steal.Load() && strings.HasPrefix(r.URL.Path, "/transaction/verify/") {
			// Another settler takes the key over while the provider is
			// asked; the provider then cannot answer.
			if err := g.App.DB().Exec(`UPDATE idempotency_keys SET lock_token = 'another-settler'`).Error; err != nil {
				t.Error(err)
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		forward.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	g = apptest.Start(t, apptest.Env("PAYSTACK_BASE_URL", front.URL))
	m := g.Onboard(map[string]any{"default_provider": "paystack",
		"providers": map[string]any{"paystack": map[string]any{"secret_key": paystacktest.SecretKey}}})
	b := body(paystacktest.TokenPending)
	first := g.Pay(m, "old-retry", b)
	require.Equal(t, http.StatusAccepted, first.StatusCode, "%s", first.Body)

	ageKeys(t, g, 25*time.Hour)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at", "updated_at")
	steal.Store(true)
	retry := g.Pay(m, "old-retry", b)
	require.Equal(t, http.StatusConflict, retry.StatusCode, "%s", retry.Body)
	require.Equal(t, "idempotency_key_in_use", retry.Code(t))
	require.NotEmpty(t, retry.Header.Get("Retry-After"))
}
