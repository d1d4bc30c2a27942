// Package metrics is the gateway's Prometheus instrumentation: the series
// of every App live on the App's own prometheus.Registry (never the global
// one, so a test process can run several gateways), fed by an HTTP
// middleware and by the Observe hooks of the domain packages
// (idempotency.Config.Observe, payments.Config.Observe and ObserveProvider,
// scheduler.Config.Observe and ObserveRun).
//
// Label values come only from bounded sets: route templates (never raw
// paths, so ids cannot explode cardinality), a fixed list of HTTP methods,
// status codes, provider names from the registry, and the outcome
// constants of the hooks. Merchant ids are never a label.
package metrics

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/oncepay/gateway/events"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/scheduler"
)

// Namespace prefixes every gateway series.
const Namespace = "oncepay"

// Idempotency outcomes, pre-initialised at zero so rate() works from the
// first scrape.
var idempotencyOutcomes = []string{
	idempotency.OutcomeClaimed, idempotency.OutcomeReplayed, idempotency.OutcomeConflict,
	idempotency.OutcomeMismatch, idempotency.OutcomeTakenOver, idempotency.OutcomeReleased,
	idempotency.OutcomeInvalid,
}

// Provider call classes other than ok, as payments.Config.ObserveProvider
// reports them.
var providerErrorClasses = []string{"not_charged", "unknown"}

// Options configure New.
type Options struct {
	// DB is the pool whose sql.DBStats are exported; nil exports none.
	DB *sql.DB
	// DBName is the db_name label of the pool series ("gateway" if empty).
	DBName string
	// Providers are the provider names whose error series start at zero.
	Providers []string
	// Instance, when set, is the instance label of every series
	// (INSTANCE_ID, or the hostname), so the series of several gateways
	// behind one load balancer stay apart wherever they are collected.
	Instance string
	// SharedLimits adds the series of the limits shared in Redis
	// (REDIS_URL): the merchant limit, if on, and the webhook lookups'.
	SharedLimits bool
}

// Metrics holds one gateway's collectors.
type Metrics struct {
	reg *prometheus.Registry

	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec

	idempotency *prometheus.CounterVec

	payments         *prometheus.CounterVec
	providerDuration *prometheus.HistogramVec
	providerErrors   *prometheus.CounterVec

	jobKeys                 *prometheus.CounterVec
	jobLastKeys             *prometheus.GaugeVec
	jobDuration             *prometheus.HistogramVec
	jobFailures             *prometheus.CounterVec
	jobLastRun              *prometheus.GaugeVec
	openKeys, oldestOpenKey prometheus.Gauge

	limitDecisions *prometheus.CounterVec
	limitRedisUp   prometheus.Gauge

	webhookDeliveries *prometheus.CounterVec
	webhookDuration   prometheus.Histogram

	// r registers the collectors (with the instance label).
	r prometheus.Registerer
}

// New builds the collectors on a fresh registry, with the Go runtime,
// process and (if opt.DB is set) database pool collectors.
func New(opt Options) *Metrics {
	reg := prometheus.NewRegistry()
	var r prometheus.Registerer = reg
	if opt.Instance != "" {
		r = prometheus.WrapRegistererWith(prometheus.Labels{"instance": opt.Instance}, reg)
	}
	f := func(c prometheus.Collector) prometheus.Collector { r.MustRegister(c); return c }
	m := &Metrics{reg: reg, r: r}

	m.httpRequests = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "http", Name: "requests_total",
		Help: "HTTP requests answered, by route template, method and status code.",
	}, []string{"route", "method", "status"})).(*prometheus.CounterVec)
	m.httpDuration = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "http", Name: "request_duration_seconds",
		Help:    "Time to answer an HTTP request, by route template and method.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route", "method"})).(*prometheus.HistogramVec)

	m.idempotency = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "idempotency", Name: "requests_total",
		Help: "Outcomes of the idempotency middleware (a claim that is then released counts under both).",
	}, []string{"outcome"})).(*prometheus.CounterVec)
	for _, o := range idempotencyOutcomes {
		m.idempotency.WithLabelValues(o)
	}

	m.payments = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "payments", Name: "total",
		Help: "Payments reaching a state, by provider and status.",
	}, []string{"provider", "status"})).(*prometheus.CounterVec)
	m.providerDuration = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "provider", Name: "request_duration_seconds",
		Help:    "Latency of provider calls, by provider, op (charge, lookup) and class (ok, not_charged, unknown).",
		Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30},
	}, []string{"provider", "op", "class"})).(*prometheus.HistogramVec)
	m.providerErrors = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "provider", Name: "errors_total",
		Help: "Provider calls that failed, by provider, op and class: not_charged (safe to release) or unknown (outcome unknown).",
	}, []string{"provider", "op", "class"})).(*prometheus.CounterVec)
	for _, p := range opt.Providers {
		for _, op := range []string{"charge", "lookup", "refund", "refund_lookup"} {
			for _, class := range providerErrorClasses {
				m.providerErrors.WithLabelValues(p, op, class)
			}
		}
	}

	m.jobKeys = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "scheduler", Name: "keys_total",
		Help: "Keys handled by scheduler runs, by job and outcome (a key left pending is counted by every run that sees it).",
	}, []string{"job", "outcome"})).(*prometheus.CounterVec)
	m.jobLastKeys = f(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "scheduler", Name: "last_run_keys",
		Help: "Keys handled by the last run of a job, by outcome.",
	}, []string{"job", "outcome"})).(*prometheus.GaugeVec)
	m.jobDuration = f(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "scheduler", Name: "run_duration_seconds",
		Help:    "Duration of scheduler runs, by job.",
		Buckets: []float64{.01, .05, .1, .5, 1, 5, 10, 30, 60, 120, 300},
	}, []string{"job"})).(*prometheus.HistogramVec)
	m.jobFailures = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "scheduler", Name: "run_failures_total",
		Help: "Scheduler runs that ended with an error (not counting shutdown), by job.",
	}, []string{"job"})).(*prometheus.CounterVec)
	m.jobLastRun = f(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "scheduler", Name: "last_run_timestamp_seconds",
		Help: "Unix time at which the last run of a job ended.",
	}, []string{"job"})).(*prometheus.GaugeVec)
	m.openKeys = f(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "idempotency", Name: "open_keys",
		Help: "Keys with no stored answer yet (requests in flight, outcomes being settled, payments and refunds in review), as the last sweep left them.",
	})).(prometheus.Gauge)
	m.oldestOpenKey = f(prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: "idempotency", Name: "oldest_open_key_seconds",
		Help: "Age of the last attempt of the oldest key with no stored answer, by the database's clock, as the last sweep left it.",
	})).(prometheus.Gauge)
	for _, job := range []string{scheduler.JobSweep, scheduler.JobPurge} {
		m.jobFailures.WithLabelValues(job)
		for _, o := range jobOutcomes(job, scheduler.Counts{}) {
			m.jobKeys.WithLabelValues(job, o.name)
		}
	}

	if opt.SharedLimits {
		m.limitDecisions = f(prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Subsystem: "ratelimit", Name: "decisions_total",
			Help: "Rate-limit decisions, by limit (ratelimit: a merchant's requests; hooklookup: the provider lookups webhooks cause) and backend: redis (shared by every instance) or memory (this instance's, while Redis does not answer).",
		}, []string{"limit", "backend"})).(*prometheus.CounterVec)
		for _, limit := range []string{"ratelimit", "hooklookup"} {
			m.limitDecisions.WithLabelValues(limit, "redis")
			m.limitDecisions.WithLabelValues(limit, "memory")
		}
		m.limitRedisUp = f(prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Subsystem: "ratelimit", Name: "redis_up",
			Help: "1 when the last call to the rate limiter's Redis was answered, 0 while limits fall back to this instance's memory.",
		})).(prometheus.Gauge)
	}

	m.webhookDeliveries = f(prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: "webhooks", Name: "deliveries_total",
		Help: "Webhook delivery attempts, by outcome: delivered (2xx), retrying, failed (the last attempt, or the endpoint was disabled), skipped (the endpoint was disabled or deleted).",
	}, []string{"outcome"})).(*prometheus.CounterVec)
	for _, o := range []string{"delivered", "retrying", "failed", "skipped"} {
		m.webhookDeliveries.WithLabelValues(o)
	}
	m.webhookDuration = f(prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Subsystem: "webhooks", Name: "attempt_duration_seconds",
		Help:    "Time from sending a webhook to the receiver's answer (or the 10 s timeout).",
		Buckets: []float64{.025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})).(prometheus.Histogram)

	r.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if opt.DB != nil {
		name := opt.DBName
		if name == "" {
			name = "gateway"
		}
		// oncepay_go_sql_open_connections{db_name="gateway"}, …
		prometheus.WrapRegistererWithPrefix(Namespace+"_", r).
			MustRegister(collectors.NewDBStatsCollector(opt.DB, name))
	}
	return m
}

// ObserveDelivery counts a webhook delivery attempt and its latency
// (events.Config.Observe).
func (m *Metrics) ObserveDelivery(outcome string, d time.Duration) {
	m.webhookDeliveries.WithLabelValues(outcome).Inc()
	if outcome != "skipped" {
		m.webhookDuration.Observe(d.Seconds())
	}
}

// WatchBacklog exports the delivery backlog, measured at each scrape
// (bounded to 2 s; a failed measure drops the two series from that scrape).
func (m *Metrics) WatchBacklog(measure func(context.Context) (events.Backlog, error)) {
	m.r.MustRegister(backlogCollector{measure: measure,
		depth: prometheus.NewDesc(Namespace+"_webhooks_queue_depth",
			"Events and webhook deliveries not yet delivered (not yet queued, waiting, retrying or running).", nil, nil),
		oldest: prometheus.NewDesc(Namespace+"_webhooks_oldest_pending_seconds",
			"How long the longest-waiting delivery that could go now has waited: an event not yet queued since it was made, a job due to run since it fell due (0 when there is none; a retry waiting for its time does not count).", nil, nil)})
}

type backlogCollector struct {
	measure       func(context.Context) (events.Backlog, error)
	depth, oldest *prometheus.Desc
}

func (c backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.depth; ch <- c.oldest }

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b, err := c.measure(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(b.Depth))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.OldestAge.Seconds())
}

// WatchPipeline exports what the database pipeline sent
// (app/database/pipeline): statements over round trips is how many
// requests share one, and retried batches are those the server refused a
// statement of (each then ran alone).
func (m *Metrics) WatchPipeline(stats func() (statements, trips, retried int64)) {
	counter := func(name, help string, pick func(s, t, r int64) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "db_pipeline", Name: name, Help: help},
			func() float64 { return float64(pick(stats())) })
	}
	m.r.MustRegister(
		counter("statements_total", "Statements sent through the database pipeline (new payments' claims and completions).",
			func(s, _, _ int64) int64 { return s }),
		counter("round_trips_total", "Round trips (and commits) those statements took: statements_total / round_trips_total is how many shared one.",
			func(_, t, _ int64) int64 { return t }),
		counter("retried_batches_total", "Batches the server refused a statement of; each of their statements then ran alone.",
			func(_, _, r int64) int64 { return r }),
	)
}

// Registry is where the collectors live, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:            m.reg, // promhttp_metric_handler_errors_total
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
	})
}

// FiberHandler is Handler as a Fiber route handler.
//
// @Summary      Prometheus metrics
// @Description  HTTP requests by route template, idempotency outcomes, payments by provider and status, provider
// @Description  call latency and errors, sweeper and purge counts, database pool stats. Not behind merchant auth;
// @Description  METRICS_ENABLED=false turns it off and METRICS_ADDR moves it to its own listener. On this port in
// @Description  development only: in production it is served on METRICS_ADDR alone (a private address), never here.
// @Tags         health
// @Produce      plain
// @Success      200 {string} string "Prometheus text exposition format"
// @ID           getMetrics
// @Router       /metrics [get]
func (m *Metrics) FiberHandler() fiber.Handler { return adaptor.HTTPHandler(m.Handler()) }

// Middleware counts and times every request by route template, method and
// status. Mount it outside the access log and the recoverer: an error a
// handler returns (or a recovered panic) is turned into its response here,
// through the app's error handler, so the status counted is the one the
// client gets.
//
// The route is the template Fiber matched (c.Route().Path, e.g.
// /v1/payments/:id). A request answered by middleware before it reached an
// endpoint — a 401 from auth, a 429 from the rate limiter, a 404 — is
// labelled with that middleware's mount prefix (e.g. /v1 or /).
func (m *Metrics) Middleware() fiber.Handler {
	return func(c *fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		if err != nil {
			if herr := c.App().ErrorHandler(c, err); herr != nil {
				_ = c.SendStatus(fiber.StatusInternalServerError)
			}
			err = nil
		}
		route := c.Route().Path
		method := methodLabel(c.Method())
		m.httpRequests.WithLabelValues(route, method, strconv.Itoa(c.Response().StatusCode())).Inc()
		m.httpDuration.WithLabelValues(route, method).Observe(time.Since(start).Seconds())
		return err
	}
}

// methodLabel maps a method to a constant string: Fiber's method string may
// alias a request buffer that is reused after the handler returns, and a
// label value must outlive it.
func methodLabel(m string) string {
	for _, known := range []string{
		fiber.MethodGet, fiber.MethodHead, fiber.MethodPost, fiber.MethodPut,
		fiber.MethodPatch, fiber.MethodDelete, fiber.MethodOptions,
	} {
		if m == known {
			return known
		}
	}
	return "OTHER"
}

// ObserveRateLimit counts one rate-limit decision by limit and backend
// (ratelimit.SharedConfig.Observe); a no-op without SharedLimits.
func (m *Metrics) ObserveRateLimit(limit, backend string) {
	if m.limitDecisions != nil {
		m.limitDecisions.WithLabelValues(limit, backend).Inc()
	}
}

// SetRateLimitRedisUp records whether the limiter's Redis answered
// (ratelimit.SharedConfig.Up); a no-op without SharedLimits.
func (m *Metrics) SetRateLimitRedisUp(up bool) {
	if m.limitRedisUp != nil {
		v := 0.0
		if up {
			v = 1
		}
		m.limitRedisUp.Set(v)
	}
}

// ObserveIdempotency counts one idempotency outcome (idempotency.Config.Observe).
func (m *Metrics) ObserveIdempotency(outcome string) {
	m.idempotency.WithLabelValues(outcome).Inc()
}

// ObservePayment counts a payment reaching status (payments.Config.Observe).
func (m *Metrics) ObservePayment(provider string, status payments.Status) {
	m.payments.WithLabelValues(provider, string(status)).Inc()
}

// ObserveProvider times one provider call and counts it as an error unless
// its class is ok (payments.Config.ObserveProvider).
func (m *Metrics) ObserveProvider(provider, op, class string, d time.Duration) {
	m.providerDuration.WithLabelValues(provider, op, class).Observe(d.Seconds())
	if class != "ok" {
		m.providerErrors.WithLabelValues(provider, op, class).Inc()
	}
}

// ObserveJob records the counts of one scheduler run (scheduler.Config.Observe):
// added to the per-outcome counters and set as the last run's gauges.
func (m *Metrics) ObserveJob(job string, c scheduler.Counts) {
	for _, o := range jobOutcomes(job, c) {
		m.jobKeys.WithLabelValues(job, o.name).Add(o.n)
		m.jobLastKeys.WithLabelValues(job, o.name).Set(o.n)
	}
}

// ObserveBacklog sets the backlog gauges (scheduler.Config.ObserveBacklog).
func (m *Metrics) ObserveBacklog(b scheduler.Backlog) {
	m.openKeys.Set(float64(b.Open))
	m.oldestOpenKey.Set(b.OldestOpen.Seconds())
}

type outcomeCount struct {
	name string
	n    float64
}

// jobOutcomes names the counts a job reports: the purge deletes, the sweep
// sorts every candidate key into one outcome (errors may overlap one).
func jobOutcomes(job string, c scheduler.Counts) []outcomeCount {
	if job == scheduler.JobPurge {
		return []outcomeCount{{"deleted", float64(c.Deleted)}}
	}
	return []outcomeCount{
		{"resolved", float64(c.Resolved)},
		{"released", float64(c.Released)},
		{"pending", float64(c.Pending)},
		{"review", float64(c.Review)},
		{"skipped", float64(c.Skipped)},
		{"lost", float64(c.Lost)},
		{"errors", float64(c.Errors)},
		{"reopened", float64(c.Reopened)},
		{"confirmed", float64(c.Confirmed)},
	}
}

// ObserveJobRun times one scheduler run and counts it as failed if it
// ended with an error other than cancellation (scheduler.Config.ObserveRun).
func (m *Metrics) ObserveJobRun(job string, d time.Duration, err error) {
	m.jobDuration.WithLabelValues(job).Observe(d.Seconds())
	m.jobLastRun.WithLabelValues(job).SetToCurrentTime()
	if err != nil && !errors.Is(err, context.Canceled) {
		m.jobFailures.WithLabelValues(job).Inc()
	}
}
