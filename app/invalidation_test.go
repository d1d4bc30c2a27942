package app_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/apptest"
)

// TestChangesReachEveryInstanceWithinTheBound: two gateways on one
// database. A suspension, a reactivation and a credential rotation made
// through one take effect on the other, which had the tenant cached,
// within app.InvalidationBound (1 s) of the admin's answer.
func TestChangesReachEveryInstanceWithinTheBound(t *testing.T) {
	t.Parallel()
	a := apptest.Start(t)
	b := apptest.Start(t, apptest.Env("DATABASE_URL", a.DBURL))
	m := a.Onboard(nil)
	tenant := "/admin/v1/tenants/" + m.ID

	// until polls b with m's token every 10 ms until it answers want, and
	// returns how long after start the last request that still got the
	// old answer was sent: the change was served by then at the latest.
	// (Measured at the requests' starts, a stalled poll on a loaded
	// machine does not count against the bound.)
	until := func(start time.Time, want int, code string) time.Duration {
		t.Helper()
		var stale time.Duration
		for {
			sent := time.Now()
			r := b.Get(m, "/v1/me")
			if r.StatusCode == want && (code == "" || r.Code(t) == code) {
				return stale
			}
			stale = sent.Sub(start)
			require.Less(t, time.Since(start), 5*time.Second, "instance b never saw the change (last %d %s)", r.StatusCode, r.Body)
			time.Sleep(10 * time.Millisecond)
		}
	}
	warm := func() {
		t.Helper()
		require.Equal(t, http.StatusOK, b.Get(m, "/v1/me").StatusCode, "b has the tenant cached")
	}

	t.Run("Suspension", func(t *testing.T) {
		warm()
		r := a.Admin("PATCH", tenant, map[string]any{"status": "suspended"})
		require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
		took := until(time.Now(), http.StatusForbidden, "tenant_suspended")
		t.Logf("suspension reached the other instance in %s", took)
		require.LessOrEqual(t, took, app.InvalidationBound)
	})
	t.Run("Reactivation", func(t *testing.T) {
		r := a.Admin("PATCH", tenant, map[string]any{"status": "active"})
		require.Equal(t, http.StatusOK, r.StatusCode, string(r.Body))
		took := until(time.Now(), http.StatusOK, "")
		t.Logf("reactivation reached the other instance in %s", took)
		require.LessOrEqual(t, took, app.InvalidationBound)
	})
	t.Run("CredentialRotation", func(t *testing.T) {
		warm()
		r := a.Admin("POST", tenant+"/credentials", nil)
		require.Equal(t, http.StatusCreated, r.StatusCode, string(r.Body))
		took := until(time.Now(), http.StatusUnauthorized, "invalid_token")
		t.Logf("rotation reached the other instance in %s", took)
		require.LessOrEqual(t, took, app.InvalidationBound)
		// The new pair works on both.
		creds := r.JSON(t)
		m.Token = a.Token(creds["client_id"].(string), creds["client_secret"].(string))
		require.Equal(t, http.StatusOK, b.Get(m, "/v1/me").StatusCode)
	})
}
