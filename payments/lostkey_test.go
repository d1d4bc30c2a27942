package payments_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/payments"
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

// A payment released as never charged more than a day after its first
// attempt (the provider was away that long) may not be charged again
// before its recheck: a retry could only look it up. Each retry used to
// re-open it (a lookup, 202) and so put the recheck off by RECHECK_AFTER,
// and the sweeper released it again: an app retrying more often than that
// never got its payment made. The retry is now 503 with Retry-After until
// the recheck, which it leaves alone; after the recheck confirms the
// non-charge, a retry charges.
func TestAnOldReleasedPaymentWaitsForItsRecheck(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t)
	m := g.Onboard(nil)
	require.Equal(t, http.StatusAccepted, g.Pay(m, "away-a-day", body("sim_late")).StatusCode)
	ageKeys(t, g, time.Hour)
	require.Equal(t, 1, sweep(t, g).Released)
	dbtest.Age(t, g.App.DB(), 25*time.Hour, "payments", "created_at", "updated_at")
	released := ledgerByKey(t, g, m.ID, "away-a-day")
	require.NotNil(t, released.RecheckAt)

	for range 3 {
		retry := g.Pay(m, "away-a-day", body("sim_late"))
		require.Equal(t, http.StatusServiceUnavailable, retry.StatusCode, "%s", retry.Body)
		require.Equal(t, "provider_unavailable", retry.Code(t))
		wait, err := strconv.Atoi(retry.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.InDelta(t, time.Hour.Seconds(), wait, 120, "until the recheck")
		p := ledgerByKey(t, g, m.ID, "away-a-day")
		require.Equal(t, payments.StatusFailed, p.Status)
		require.Equal(t, released.RecheckAt.UnixMicro(), p.RecheckAt.UnixMicro(), "the recheck is not put off")
		require.Zero(t, sweep(t, g).Released, "nothing to release again")
	}

	dbtest.Age(t, g.App.DB(), 2*time.Hour, "payments", "recheck_at")
	require.Equal(t, 1, sweep(t, g).Confirmed)
	retry := g.Pay(m, "away-a-day", body("sim_late"))
	require.NotEqual(t, http.StatusServiceUnavailable, retry.StatusCode, "%s", retry.Body)
	require.Equal(t, 1, charges(t, g, m.ID, "away-a-day"), "sent again under its reference: one charge")
}
