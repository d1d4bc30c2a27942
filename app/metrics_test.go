package app_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/app/apptest"
)

// scrape is the parsed exposition of a /metrics endpoint.
type scrape map[string]*dto.MetricFamily

func scrapeURL(t *testing.T, url string) scrape {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return parseScrape(t, resp.Body)
}

func parseScrape(t *testing.T, r io.Reader) scrape {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	require.NoError(t, err)
	return fams
}

// find returns the series of family name whose labels include want, and
// whether there is one.
func (s scrape) find(name string, want map[string]string) (*dto.Metric, bool) {
	f, ok := s[name]
	if !ok {
		return nil, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		return m, true
	}
	return nil, false
}

// value is a counter's or gauge's value, or a histogram's sample count.
func (s scrape) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	m, ok := s.find(name, want)
	require.True(t, ok, "no series %s%v", name, want)
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	t.Fatalf("%s%v: unexpected type", name, want)
	return 0
}

// TestMetricsCountTrafficByRouteOutcomeProviderAndJob drives a success, a
// replay, a 422, a decline, a provider outage and a lost answer that the
// sweeper settles, then scrapes /metrics on the main listener and checks
// every family the gateway promises.
func TestMetricsCountTrafficByRouteOutcomeProviderAndJob(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("SWEEP_INTERVAL", "1h"))
	m := g.Onboard(nil)
	pay := func(method string) map[string]any {
		return map[string]any{"amount": 5000, "currency": "NGN", "email": "ada@example.com", "payment_method": method}
	}

	ok := g.Pay(m, "m-success", pay("sim_success"))
	require.Equal(t, http.StatusCreated, ok.StatusCode, string(ok.Body))
	replay := g.Pay(m, "m-success", pay("sim_success"))
	require.Equal(t, "true", replay.Header.Get("Idempotent-Replayed"))
	other := pay("sim_success")
	other["amount"] = 9999
	require.Equal(t, http.StatusUnprocessableEntity, g.Pay(m, "m-success", other).StatusCode)
	require.Equal(t, http.StatusPaymentRequired, g.Pay(m, "m-decline", pay("sim_decline")).StatusCode)
	require.Equal(t, http.StatusServiceUnavailable, g.Pay(m, "m-down", pay("sim_unavailable")).StatusCode)
	require.Equal(t, http.StatusAccepted, g.Pay(m, "m-lost", pay("sim_timeout")).StatusCode)
	id, _ := ok.JSON(t)["id"].(string)
	require.NotEmpty(t, id)
	require.Equal(t, http.StatusOK, g.Get(m, "/v1/payments/"+id).StatusCode)
	require.Equal(t, http.StatusNotFound, g.Get(m, "/v1/payments/pay_doesnotexist").StatusCode)

	// Settle the lost answer with a sweep, then purge (nothing to delete).
	require.NoError(t, g.App.DB().Exec("UPDATE idempotency_keys SET attempted_at = ? WHERE merchant_id = ? AND key = ?",
		time.Now().UTC().Add(-time.Hour), m.ID, "m-lost").Error)
	c, err := g.App.Scheduler.Sweeper().RunOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, c.Resolved)
	_, err = g.App.Scheduler.Purger().RunOnce(context.Background())
	require.NoError(t, err)

	s := scrapeURL(t, g.URL+"/metrics")

	t.Run("HTTPByRouteTemplate", func(t *testing.T) {
		const reqs = "oncepay_http_requests_total"
		require.Equal(t, 2.0, s.value(t, reqs, "route", "/v1/payments", "method", "POST", "status", "201"),
			"the success and its replay")
		require.Equal(t, 1.0, s.value(t, reqs, "route", "/v1/payments", "method", "POST", "status", "422"))
		require.Equal(t, 1.0, s.value(t, reqs, "route", "/v1/payments", "method", "POST", "status", "402"))
		require.Equal(t, 1.0, s.value(t, reqs, "route", "/v1/payments/:id", "method", "GET", "status", "200"))
		require.Equal(t, 1.0, s.value(t, reqs, "route", "/v1/payments/:id", "method", "GET", "status", "404"))
		require.Equal(t, 1.0, s.value(t, reqs, "route", "/admin/v1/tenants", "method", "POST", "status", "201"))
		require.Equal(t, 1.0, s.value(t, reqs, "route", "/v1/auth/token", "method", "POST", "status", "200"))
		require.GreaterOrEqual(t, s.value(t, "oncepay_http_request_duration_seconds", "route", "/v1/payments", "method", "POST"), 6.0)
		for _, series := range s[reqs].GetMetric() {
			for _, l := range series.GetLabel() {
				require.NotContains(t, l.GetValue(), "pay_", "a raw path leaked into a label")
			}
		}
	})

	t.Run("IdempotencyOutcomes", func(t *testing.T) {
		const idem = "oncepay_idempotency_requests_total"
		want := map[string]float64{
			"claimed": 4, "replayed": 1, "mismatch_422": 1, "released": 1,
			"conflict_409": 0, "taken_over": 0, "invalid_400": 0,
		}
		for outcome, n := range want {
			require.Equal(t, n, s.value(t, idem, "outcome", outcome), outcome)
		}
	})

	t.Run("PaymentsByProviderAndStatus", func(t *testing.T) {
		const pays = "oncepay_payments_total"
		require.Equal(t, 2.0, s.value(t, pays, "provider", "simulator", "status", "succeeded"),
			"the success and the swept lost answer")
		require.GreaterOrEqual(t, s.value(t, pays, "provider", "simulator", "status", "failed"), 1.0, "the decline")
	})

	t.Run("ProviderLatencyAndErrors", func(t *testing.T) {
		const lat, errs = "oncepay_provider_request_duration_seconds", "oncepay_provider_errors_total"
		require.Equal(t, 2.0, s.value(t, lat, "provider", "simulator", "op", "charge", "class", "ok"),
			"a decline is an answer, not an error")
		require.Equal(t, 1.0, s.value(t, lat, "provider", "simulator", "op", "lookup", "class", "ok"))
		require.Equal(t, 1.0, s.value(t, errs, "provider", "simulator", "op", "charge", "class", "not_charged"))
		require.Equal(t, 1.0, s.value(t, errs, "provider", "simulator", "op", "charge", "class", "unknown"))
		require.Equal(t, 0.0, s.value(t, errs, "provider", "paystack", "op", "lookup", "class", "unknown"),
			"error series start at zero for every registered provider")
	})

	t.Run("SchedulerRuns", func(t *testing.T) {
		require.Equal(t, 1.0, s.value(t, "oncepay_scheduler_keys_total", "job", "sweep", "outcome", "resolved"))
		require.Equal(t, 1.0, s.value(t, "oncepay_scheduler_last_run_keys", "job", "sweep", "outcome", "resolved"))
		require.Equal(t, 0.0, s.value(t, "oncepay_scheduler_last_run_keys", "job", "sweep", "outcome", "review"))
		require.Equal(t, 0.0, s.value(t, "oncepay_scheduler_last_run_keys", "job", "purge", "outcome", "deleted"))
		require.Equal(t, 1.0, s.value(t, "oncepay_scheduler_run_duration_seconds", "job", "sweep"))
		require.Equal(t, 1.0, s.value(t, "oncepay_scheduler_run_duration_seconds", "job", "purge"))
		require.Equal(t, 0.0, s.value(t, "oncepay_scheduler_run_failures_total", "job", "sweep"))
		require.Greater(t, s.value(t, "oncepay_scheduler_last_run_timestamp_seconds", "job", "purge"), 0.0)
	})

	t.Run("DatabasePipeline", func(t *testing.T) {
		// Each new payment's claim and completion went through it; one
		// request at a time, every statement had a round trip to itself.
		statements := s.value(t, "oncepay_db_pipeline_statements_total")
		require.GreaterOrEqual(t, statements, 6.0, "claims and completions of the success, decline and lost answer")
		require.Equal(t, statements, s.value(t, "oncepay_db_pipeline_round_trips_total"))
		require.Equal(t, 0.0, s.value(t, "oncepay_db_pipeline_retried_batches_total"))
	})

	t.Run("PoolGoAndProcess", func(t *testing.T) {
		require.Greater(t, s.value(t, "oncepay_go_sql_max_open_connections", "db_name", "gateway"), 0.0)
		require.Contains(t, s, "oncepay_go_sql_in_use_connections")
		require.Greater(t, s.value(t, "go_goroutines"), 0.0)
		require.Contains(t, s, "process_start_time_seconds")
	})
}

func TestMetricsDisabledIs404(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("METRICS_ENABLED", "false"))
	r := g.Do("GET", "/metrics", nil)
	require.Equal(t, http.StatusNotFound, r.StatusCode)
	require.Equal(t, "not_found", r.Code(t))
	require.Nil(t, g.App.Metrics)
	require.Nil(t, g.App.MetricsAddr())
}

func TestMetricsOnTheirOwnListener(t *testing.T) {
	t.Parallel()
	g := apptest.Start(t, apptest.Env("METRICS_ADDR", "127.0.0.1:0"))
	addr := g.App.MetricsAddr()
	require.NotNil(t, addr)
	require.False(t, strings.HasSuffix(g.URL, addr.String()), "a port of its own")

	require.Equal(t, http.StatusOK, g.Do("GET", "/healthz", nil).StatusCode)
	require.Equal(t, http.StatusNotFound, g.Do("GET", "/metrics", nil).StatusCode,
		"not on the main listener")
	s := scrapeURL(t, "http://"+addr.String()+"/metrics")
	require.Equal(t, 1.0, s.value(t, "oncepay_http_requests_total", "route", "/healthz", "method", "GET", "status", "200"))
}

// In production the API's port is the public edge, and the series name
// tenants and their volumes: without METRICS_ADDR they are served nowhere,
// and the start says where to set them; with it, on that listener only.
func TestProductionServesMetricsOnlyOnMetricsAddr(t *testing.T) {
	t.Parallel()
	prod := []apptest.Option{apptest.Env("GATEWAY_ENV", "production")}
	t.Run("Unset", func(t *testing.T) {
		t.Parallel()
		g := apptest.Start(t, prod...)
		r := g.Do("GET", "/metrics", nil)
		require.Equal(t, http.StatusNotFound, r.StatusCode, string(r.Body))
		require.Equal(t, "not_found", r.Code(t))
		require.NotContains(t, string(r.Body), "oncepay_")
		require.Nil(t, g.App.MetricsAddr())
		var warned bool
		for _, line := range strings.Split(g.Logs.String(), "\n") {
			if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, "metrics are not served") {
				warned = true
				require.Contains(t, line, "METRICS_ADDR")
			}
		}
		require.True(t, warned, "the start says why /metrics is a 404:\n%s", g.Logs.String())
	})
	t.Run("Set", func(t *testing.T) {
		t.Parallel()
		g := apptest.Start(t, append(prod, apptest.Env("METRICS_ADDR", "127.0.0.1:0"))...)
		require.Equal(t, http.StatusNotFound, g.Do("GET", "/metrics", nil).StatusCode)
		addr := g.App.MetricsAddr()
		require.NotNil(t, addr)
		s := scrapeURL(t, "http://"+addr.String()+"/metrics")
		require.Contains(t, s, "go_goroutines")
		require.NotContains(t, g.Logs.String(), "metrics are not served")
	})
}
