package app_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app"
	"github.com/oncepay/gateway/app/apptest"
	"github.com/oncepay/gateway/app/database/dbtest"
	"github.com/oncepay/gateway/config"
)

// A shutdown that cuts a request still waiting on its provider says so in
// the log (a warning naming SHUTDOWN_TIMEOUT) and ends with a "shut down"
// line that is not clean; the cut payment's key stays in progress for the
// sweeper, so the stop itself succeeds. One that cuts nothing ends clean.
func TestShutdownSaysWhatItCut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cut  bool
	}{{"Clean", false}, {"Cut", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbURL := dbtest.PostgresURL(t)
			env := apptest.BaseEnv(dbURL, t.TempDir())
			env["SIMULATOR_LATENCY"] = "5s"
			env["SHUTDOWN_TIMEOUT"] = "300ms"
			cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			require.NoError(t, err)
			logs := &apptest.SyncBuffer{}
			a, err := app.New(cfg, slog.New(slog.NewJSONHandler(io.MultiWriter(logs), nil)))
			require.NoError(t, err)
			g, stop := apptest.Serve(t, a, logs)
			m := g.Onboard(nil)
			if tc.cut {
				go func() {
					_, _ = g.TryPay(m, "cut-1", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
				}()
				// In flight once its ledger row is written (before the
				// provider is called).
				require.Eventually(t, func() bool {
					var n int64
					return a.DB().Table("payments").Where("merchant_id = ?", m.ID).Count(&n).Error == nil && n == 1
				}, 10*time.Second, 10*time.Millisecond)
			}
			err = stop()
			var shut map[string]any
			var warned bool
			for _, line := range strings.Split(logs.String(), "\n") {
				var l map[string]any
				if json.Unmarshal([]byte(line), &l) != nil {
					continue
				}
				switch {
				case l["msg"] == "shut down":
					shut = l
				case strings.HasPrefix(l["msg"].(string), "shutdown: requests still running"):
					warned = true
					require.Equal(t, "WARN", l["level"])
				}
			}
			require.NotNil(t, shut, "a last line says the gateway stopped:\n%s", logs.String())
			require.Equal(t, !tc.cut, shut["clean"])
			require.Equal(t, tc.cut, warned)
			require.NoError(t, err, "a cut drain is handled (the sweeper settles what it cut): the process exits 0, not as a crash")
		})
	}
}

// From SIGTERM, /readyz fails ("draining") while the instance goes on
// serving for SHUTDOWN_DELAY, so a load balancer takes it out on its own
// schedule instead of meeting a closed listener; then it drains and stops.
func TestShutdownDelayKeepsServingWithReadinessFailing(t *testing.T) {
	t.Parallel()
	env := apptest.BaseEnv(dbtest.PostgresURL(t), t.TempDir())
	env["SHUTDOWN_DELAY"] = "3s"
	cfg, err := config.LoadFrom(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	logs := &apptest.SyncBuffer{}
	a, err := app.New(cfg, slog.New(slog.NewJSONHandler(logs, nil)))
	require.NoError(t, err)
	g, stop := apptest.Serve(t, a, logs)
	m := g.Onboard(nil)
	require.Equal(t, 200, g.Do("GET", "/readyz", nil).StatusCode)
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	require.Eventually(t, func() bool {
		r, err := g.Try("GET", "/readyz", nil)
		return err == nil && r.StatusCode == 503 && r.Code(t) == "draining"
	}, 2*time.Second, 20*time.Millisecond, "readiness fails at once")
	require.Equal(t, 200, g.Do("GET", "/healthz", nil).StatusCode, "alive")
	p := g.Pay(m, "while-draining", map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": "sim_success"})
	require.Equal(t, 201, p.StatusCode, "still served while the load balancer catches up")
	require.True(t, p.Close, "each answer ends its kept-alive connection")
	require.NoError(t, <-stopped)
}
