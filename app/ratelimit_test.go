package app_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
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

// redisURL is the Redis the tests use for real (TEST_REDIS_URL; .ci/run
// starts one on this default when it is down).
func redisURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// TestRateLimitSharedAcrossInstances: two gateways on one database and
// one Redis, RATE_LIMIT_PER_SECOND=5 and RATE_LIMIT_BURST=5, a merchant's
// requests sent to them in turn: about one instance's worth is admitted in
// all (the burst, plus what refills while the requests run), not two —
// which is what the in-memory limiter admits, shown alongside.
func TestRateLimitSharedAcrossInstances(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, shared bool) (admitted int, elapsed time.Duration) {
		opts := []apptest.Option{apptest.Env("RATE_LIMIT_PER_SECOND", "5"), apptest.Env("RATE_LIMIT_BURST", "5")}
		if shared {
			opts = append(opts, apptest.Env("REDIS_URL", redisURL()),
				apptest.Env("REDIS_KEY_PREFIX", fmt.Sprintf("test-shared-%d:", time.Now().UnixNano())))
		}
		a := apptest.Start(t, opts...)
		b := apptest.Start(t, append(opts, apptest.Env("DATABASE_URL", a.DBURL))...)
		if shared {
			require.NotNil(t, a.App.SharedLimiter)
			require.NoError(t, a.App.SharedLimiter.Ping(context.Background()), "Redis must answer (bash .ci/run starts it)")
		}
		m := a.Onboard(nil)
		start := time.Now()
		for i := range 20 {
			g := a
			if i%2 == 1 {
				g = b
			}
			r := g.Get(m, "/v1/me")
			switch r.StatusCode {
			case http.StatusOK:
				admitted++
			case http.StatusTooManyRequests:
				require.Equal(t, "rate_limited", r.Code(t))
			default:
				t.Fatalf("unexpected %d: %s", r.StatusCode, r.Body)
			}
		}
		return admitted, time.Since(start)
	}
	t.Run("Redis", func(t *testing.T) {
		t.Parallel()
		admitted, elapsed := run(t, true)
		refill := int(5 * elapsed.Seconds())
		t.Logf("shared: %d of 20 admitted in %s", admitted, elapsed)
		require.GreaterOrEqual(t, admitted, 5)
		require.LessOrEqual(t, admitted, 5+refill+1, "one instance's worth: the burst and what refilled in %s", elapsed)
		require.Less(t, admitted, 10, "not two instances' worth")
	})
	t.Run("InMemoryForComparison", func(t *testing.T) {
		t.Parallel()
		admitted, elapsed := run(t, false)
		t.Logf("in memory: %d of 20 admitted in %s", admitted, elapsed)
		require.GreaterOrEqual(t, admitted, 10, "each instance its own burst")
	})
}

// TestRateLimitRedisUnreachableKeepsServing: with REDIS_URL pointing at a
// Redis that does not answer, payments are still made (limited in the
// instance's memory), /readyz says degraded with 200, the metrics say
// which backend decided, and the warning is logged once, not per request.
func TestRateLimitRedisUnreachableKeepsServing(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("RATE_LIMIT_PER_SECOND", "100"), apptest.Env("RATE_LIMIT_BURST", "100"),
		apptest.Env("REDIS_URL", "redis://:s3cret-pass@127.0.0.1:1/0"), apptest.Env("INSTANCE_ID", "gw-test-1"))
	m := g.Onboard(nil)
	pay := map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"}
	for i := range 5 {
		r := g.Pay(m, fmt.Sprintf("redis-down-%d", i), pay)
		require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
	}
	ready := g.Do("GET", "/readyz", nil)
	require.Equal(t, http.StatusOK, ready.StatusCode, "still ready: it serves")
	require.Equal(t, map[string]any{"status": "degraded", "database": "ok", "redis": "unreachable"}, ready.JSON(t))

	s := scrapeURL(t, g.URL+"/metrics")
	require.Equal(t, 5.0, s.value(t, "oncepay_ratelimit_decisions_total", "limit", "ratelimit", "backend", "memory", "instance", "gw-test-1"))
	require.Equal(t, 0.0, s.value(t, "oncepay_ratelimit_decisions_total", "limit", "ratelimit", "backend", "redis"))
	require.Equal(t, 0.0, s.value(t, "oncepay_ratelimit_redis_up"))
	require.Equal(t, 1, strings.Count(g.Logs.String(), "Redis unreachable"), "one warning, not one per request")
	require.NotContains(t, g.Logs.String(), "s3cret-pass", "the URL's password is never logged")
}

// TestReadyzReportsDatabaseAndRedis: with a Redis that answers, both are
// ok, with or without the merchant limit (the webhook lookups' bound uses
// Redis either way).
func TestReadyzReportsDatabaseAndRedis(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("RATE_LIMIT_PER_SECOND", "100"), apptest.Env("REDIS_URL", redisURL()))
	ready := g.Do("GET", "/readyz", nil)
	require.Equal(t, http.StatusOK, ready.StatusCode)
	require.Equal(t, map[string]any{"status": "ok", "database": "ok", "redis": "ok"}, ready.JSON(t))
	plain := apptest.Start(t)
	require.Equal(t, map[string]any{"status": "ok", "database": "ok"}, plain.Do("GET", "/readyz", nil).JSON(t),
		"no Redis configured, none reported")
	unlimited := apptest.Start(t, apptest.Env("REDIS_URL", redisURL()))
	require.Nil(t, unlimited.App.SharedLimiter, "RATE_LIMIT_PER_SECOND=0: no merchant limit")
	require.NotNil(t, unlimited.App.HookLookups, "the webhook lookups' bound is shared all the same")
	require.Equal(t, map[string]any{"status": "ok", "database": "ok", "redis": "ok"}, unlimited.Do("GET", "/readyz", nil).JSON(t),
		"Redis in use, so reported")
}
