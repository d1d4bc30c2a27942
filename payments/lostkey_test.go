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
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/paystack/paystacktest"
)

// A retry of a payment older than the redrive window is answered by a
// lookup (lookUpInstead). When the retry's lease lapses during that lookup
// and another settler takes the key, the settle is Skipped with the key
// still in progress: the retry is told the key is in use (409, Retry-After),
// not given the key's empty answer (a 200 with no body).
func TestAnOldRetryThatLosesItsKeyIsToldItIsInUse(t *testing.T) {
	t.Parallel()
	for name, steal := range map[string]string{
		"taken":              `UPDATE idempotency_keys SET lock_token = 'another-settler'`,
		"taken and released": `DELETE FROM idempotency_keys`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			oldRetryLosesItsKey(t, steal)
		})
	}
}

func oldRetryLosesItsKey(t *testing.T, stealSQL string) {
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
			if err := g.App.DB().Exec(stealSQL).Error; err != nil {
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
	releasedLate(t, g, m, "away-a-day")
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

// The same for a refund released as never made more than a day after it
// was first sent: a retry waits (503, Retry-After) for the recheck, which
// it does not put off; once the recheck has confirmed Paystack has no such
// refund, a retry sends it again — where before every retry past the day
// only looked it up, for ever.
func TestAnOldReleasedRefundWaitsForItsRecheck(t *testing.T) {
	t.Parallel()
	for name, opts := range map[string][]apptest.Option{"postgres": nil, "sqlite": {apptest.SQLite()}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			oldReleasedRefundWaits(t, opts...)
		})
	}
}

func oldReleasedRefundWaits(t *testing.T, opts ...apptest.Option) {
	ps, g, m, paymentID := paidAtPaystack(t, opts...)
	ref := providers.RefundReference(m.ID, "r")
	ps.FailNextPost(http.StatusGatewayTimeout) // the refund never reaches Paystack; the gateway cannot tell
	lost := refundOf(g, m, paymentID, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, lost.StatusCode, "%s", lost.Body)
	refundID := lost.JSON(t)["id"].(string)
	ageKeys(t, g, 2*time.Hour) // past RECHECK_AFTER since it was sent: released
	sweep(t, g)
	require.Equal(t, "not_processed", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["failure_code"])
	db := g.App.DB()
	dbtest.Age(t, db, 25*time.Hour, "refunds", "created_at", "updated_at")
	var before []struct{ RecheckAt time.Time }
	require.NoError(t, db.Table("refund_rechecks").Select("recheck_at").Scan(&before).Error)
	require.Len(t, before, 1)

	for range 2 {
		retry := refundOf(g, m, paymentID, "r", map[string]any{"amount": 1500})
		require.Equal(t, http.StatusServiceUnavailable, retry.StatusCode, "%s", retry.Body)
		require.Equal(t, "provider_unavailable", retry.Code(t))
		wait, err := strconv.Atoi(retry.Header.Get("Retry-After"))
		require.NoError(t, err)
		require.InDelta(t, time.Hour.Seconds(), wait, 120, "until the recheck")
		var after []struct{ RecheckAt time.Time }
		require.NoError(t, db.Table("refund_rechecks").Select("recheck_at").Scan(&after).Error)
		require.Equal(t, before, after, "the recheck is not put off")
		require.Equal(t, "failed", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["status"])
	}
	require.Zero(t, ps.Refunds(ref))

	dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")
	require.EqualValues(t, 1, sweep(t, g).Confirmed)
	retry := refundOf(g, m, paymentID, "r", map[string]any{"amount": 1500})
	// Paystack answers a refund's creation "pending" (queued), and settles it later.
	require.Equal(t, http.StatusAccepted, retry.StatusCode, "%s", retry.Body)
	require.Equal(t, "pending", retry.JSON(t)["status"])
	require.Equal(t, 1, ps.Refunds(ref), "sent again once the recheck confirmed none")
	require.EqualValues(t, 1500, amountRefunded(t, g, m, paymentID))
}

// A released refund's recheck that gets no turn at the provider's pace
// (SWEEP_PROVIDER_RATE) asked nothing: it is looked at again later, and is
// not "given up" as a provider that could not be asked since REVIEW_AFTER.
func TestARecheckWithoutATurnIsNotGivenUp(t *testing.T) {
	t.Parallel()
	ps, g, m, paymentID := paidAtPaystack(t, apptest.Env("SWEEP_PROVIDER_RATE", "0.0003")) // one look an hour
	ps.FailNextPost(http.StatusGatewayTimeout)
	lost := refundOf(g, m, paymentID, "r", map[string]any{"amount": 1500})
	require.Equal(t, http.StatusAccepted, lost.StatusCode, "%s", lost.Body)
	refundID := lost.JSON(t)["id"].(string)
	ageKeys(t, g, 2*time.Hour)
	sweep(t, g) // the hour's one look: not at Paystack, released
	require.Equal(t, "not_processed", g.Get(m, "/v1/refunds/"+refundID).JSON(t)["failure_code"])
	db := g.App.DB()
	dbtest.Age(t, db, 25*time.Hour, "refunds", "created_at", "updated_at") // past REVIEW_AFTER
	dbtest.Age(t, db, 2*time.Hour, "refund_rechecks", "recheck_at")

	c := sweep(t, g)
	require.Zero(t, c.Errors, "%+v", c)
	require.NotContains(t, g.Logs.String(), "refund recheck given up")
	var due []struct{ RecheckAt time.Time }
	require.NoError(t, db.Table("refund_rechecks").Select("recheck_at").Scan(&due).Error)
	require.Len(t, due, 1, "still to be looked at")
	require.True(t, due[0].RecheckAt.After(time.Now()), "later")
}
