package metrics

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/oncepay/gateway/scheduler"
)

func TestMiddlewareLabelsByTemplateAndFinalStatus(t *testing.T) {
	t.Parallel()
	m := New(Options{Providers: []string{"simulator"}})
	f := fiber.New(fiber.Config{ErrorHandler: func(c *fiber.Ctx, err error) error {
		var fe *fiber.Error
		if errors.As(err, &fe) {
			return c.Status(fe.Code).SendString("e")
		}
		return c.Status(599).SendString("x")
	}})
	f.Use(m.Middleware())
	f.Get("/v1/payments/:id", func(c *fiber.Ctx) error { return c.SendStatus(200) })
	f.Get("/fail", func(*fiber.Ctx) error { return errors.New("boom") })

	for _, path := range []string{"/v1/payments/pay_1", "/v1/payments/pay_2", "/fail", "/nope/123"} {
		_, err := f.Test(httptest.NewRequest("GET", path, nil), -1)
		require.NoError(t, err)
	}
	require.Equal(t, 2.0, value(t, m.httpRequests.WithLabelValues("/v1/payments/:id", "GET", "200")))
	require.Equal(t, 1.0, value(t, m.httpRequests.WithLabelValues("/fail", "GET", "599")),
		"an error is counted with the status the error handler gives it")
	require.Equal(t, 1.0, value(t, m.httpRequests.WithLabelValues("/", "GET", "404")),
		"an unmatched path is labelled with the middleware's prefix, not the raw path")
	ch := make(chan prometheus.Metric, 10)
	m.httpRequests.Collect(ch)
	require.Len(t, ch, 3, "ids never become series")
}

func TestObserveJobCountsAndLastRun(t *testing.T) {
	t.Parallel()
	m := New(Options{})
	m.ObserveJob(scheduler.JobSweep, scheduler.Counts{Resolved: 2, Pending: 1})
	m.ObserveJob(scheduler.JobSweep, scheduler.Counts{Resolved: 1})
	m.ObserveBacklog(scheduler.Backlog{Open: 4, OldestOpen: 90 * time.Second})
	m.ObserveJobRun(scheduler.JobSweep, time.Second, nil)
	m.ObserveJobRun(scheduler.JobSweep, time.Second, errors.New("db down"))
	m.ObserveJob(scheduler.JobPurge, scheduler.Counts{Deleted: 7})
	require.Equal(t, 3.0, value(t, m.jobKeys.WithLabelValues("sweep", "resolved")))
	require.Equal(t, 1.0, value(t, m.jobLastKeys.WithLabelValues("sweep", "resolved")))
	require.Equal(t, 0.0, value(t, m.jobLastKeys.WithLabelValues("sweep", "pending")))
	require.Equal(t, 7.0, value(t, m.jobKeys.WithLabelValues("purge", "deleted")))
	require.Equal(t, 1.0, value(t, m.jobFailures.WithLabelValues("sweep")))
	require.Equal(t, 4.0, value(t, m.openKeys), "the backlog the last sweep left")
	require.Equal(t, 90.0, value(t, m.oldestOpenKey))
}

func TestRegistriesAreIndependent(t *testing.T) {
	t.Parallel()
	a, b := New(Options{}), New(Options{})
	a.ObserveIdempotency("claimed")
	require.Equal(t, 1.0, value(t, a.idempotency.WithLabelValues("claimed")))
	require.Equal(t, 0.0, value(t, b.idempotency.WithLabelValues("claimed")))
}

// value reads a counter or gauge.
func value(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	require.NoError(t, m.Write(&d))
	if d.Counter != nil {
		return d.GetCounter().GetValue()
	}
	return d.GetGauge().GetValue()
}
