package app_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestRateLimitPerMerchant: with 1 request a second and a burst of 2, a
// merchant's third request (the clock frozen) is a 429 problem with
// Retry-After that claims no key; another merchant, the token endpoint and
// the admin API are untouched; once a second passes the merchant may go on.
func TestRateLimitPerMerchant(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("RATE_LIMIT_PER_SECOND", "1"), apptest.Env("RATE_LIMIT_BURST", "2"))
	clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	require.NotNil(t, g.App.RateLimiter)
	g.App.RateLimiter.SetClock(clock.Now)
	a, b := g.Onboard(nil), g.Onboard(nil)
	pay := map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"}

	require.Equal(t, http.StatusOK, g.Get(a, "/v1/me").StatusCode)
	require.Equal(t, http.StatusCreated, g.Pay(a, "rl-1", pay).StatusCode)
	limited := g.Pay(a, "rl-2", pay)
	require.Equal(t, http.StatusTooManyRequests, limited.StatusCode, string(limited.Body))
	require.Equal(t, "rate_limited", limited.Code(t))
	require.Equal(t, "application/problem+json", limited.Header.Get("Content-Type"))
	require.Equal(t, "1", limited.Header.Get("Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, g.Get(a, "/v1/me").StatusCode, "GETs count too")

	var keys int64
	require.NoError(t, g.App.DB().Raw("SELECT count(*) FROM idempotency_keys WHERE merchant_id = ? AND key = ?",
		a.ID, "rl-2").Scan(&keys).Error)
	require.Zero(t, keys, "a limited request claims no key")

	t.Run("OtherMerchantUnaffected", func(t *testing.T) {
		require.Equal(t, http.StatusOK, g.Get(b, "/v1/me").StatusCode)
		require.Equal(t, http.StatusCreated, g.Pay(b, "rl-1", pay).StatusCode)
	})
	t.Run("AdminAndTokenNotLimited", func(t *testing.T) {
		for range 5 {
			require.Equal(t, http.StatusOK, g.Admin("GET", "/admin/v1/tenants", nil).StatusCode)
			require.NotEmpty(t, g.Token(a.ClientID, a.ClientSecret))
		}
	})
	t.Run("RefillsAsTimePasses", func(t *testing.T) {
		clock.Advance(time.Second)
		require.Equal(t, http.StatusCreated, g.Pay(a, "rl-2", pay).StatusCode)
		require.Equal(t, http.StatusTooManyRequests, g.Pay(a, "rl-3", pay).StatusCode)
	})
}

func TestRateLimitDisabledByZero(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t) // the test environment sets RATE_LIMIT_PER_SECOND=0
	require.Nil(t, g.App.RateLimiter)
	m := g.Onboard(nil)
	for range 20 {
		require.Equal(t, http.StatusOK, g.Get(m, "/v1/me").StatusCode)
	}
}
