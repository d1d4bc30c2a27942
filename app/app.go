// Package app assembles the gateway: configuration → database → services →
// middleware → routes → lifecycle. It holds no business logic; each domain
// package owns its handlers, service and store.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/swagger"
	"gorm.io/gorm"

	"github.com/oncepay/gateway/app/audit"
	"github.com/oncepay/gateway/app/database"
	"github.com/oncepay/gateway/app/database/dbclock"
	"github.com/oncepay/gateway/app/database/pipeline"
	"github.com/oncepay/gateway/app/logctx"
	"github.com/oncepay/gateway/app/metrics"
	"github.com/oncepay/gateway/app/problem"
	"github.com/oncepay/gateway/app/ratelimit"
	"github.com/oncepay/gateway/app/secretbox"
	"github.com/oncepay/gateway/config"
	"github.com/oncepay/gateway/docs" // the OpenAPI 3 document; also registers swag's 2.0 one at /swagger/doc.json
	"github.com/oncepay/gateway/events"
	"github.com/oncepay/gateway/idempotency"
	"github.com/oncepay/gateway/payments"
	"github.com/oncepay/gateway/providers"
	"github.com/oncepay/gateway/providers/flutterwave"
	"github.com/oncepay/gateway/providers/paystack"
	"github.com/oncepay/gateway/providers/simulator"
	"github.com/oncepay/gateway/providers/stripe"
	"github.com/oncepay/gateway/scheduler"
	"github.com/oncepay/gateway/tenants"
)

// BodyLimit is the largest request body accepted (413 body_too_large above).
const BodyLimit = 1 << 20

// Token settings shared by issuer and verifier.
const (
	tokenIssuer   = "oncepay"
	tokenAudience = "oncepay-merchant-api"
)

// App is a running gateway.
type App struct {
	cfg   config.Config
	log   *slog.Logger
	db    *gorm.DB
	fiber *fiber.App
	// draining fails /readyz from SIGTERM on (health.draining).
	draining atomic.Bool
	Tenants  *tenants.Service
	Payments *payments.Service
	Keys     *idempotency.Store
	// Events delivers webhooks and serves the events API; Serve starts
	// and stops its queue.
	Events *events.Service
	Sim    *simulator.Simulator
	// Scheduler runs the sweeper and the purge; Serve starts and stops it.
	// Tests trigger a sweep with Scheduler.Sweeper().RunOnce(ctx).
	Scheduler *scheduler.Scheduler
	// Metrics are the Prometheus collectors; nil when METRICS_ENABLED=false.
	Metrics *metrics.Metrics
	// RateLimiter limits /v1 merchant routes per merchant; nil when
	// RATE_LIMIT_PER_SECOND=0. Tests make time pass with SetClock. With
	// REDIS_URL it is SharedLimiter's fallback.
	RateLimiter *ratelimit.Limiter
	// SharedLimiter shares each merchant's limit across instances in
	// Redis; nil without REDIS_URL (or with the limit off).
	SharedLimiter *ratelimit.Shared
	// HookLookups shares the bound on the provider lookups webhooks cause
	// (payments.NewHookLookups) across instances in Redis, over the same
	// client as SharedLimiter; nil without REDIS_URL. Unlike the merchant
	// limit it is on whenever REDIS_URL is: a copy of a signed webhook
	// posted to every instance must not cost N times the lookups.
	HookLookups *ratelimit.Shared
	// Clock is this instance's clock kept in step with the database's
	// (tokens, updated_at); Serve re-measures it every clockSync.
	Clock *dbclock.Clock

	// eventsStopped makes stopEvents run once: Close after Serve must not
	// wait a second SHUTDOWN_TIMEOUT for deliveries already given theirs.
	eventsStopped sync.Once
	// metricsLn and metricsSrv serve /metrics on METRICS_ADDR, when set.
	metricsLn  net.Listener
	metricsSrv *http.Server
}

// New opens the database, applies migrations (with MIGRATE_ON_START=false,
// only checks that `gateway migrate` applied them) and builds the HTTP app.
func New(cfg config.Config, log *slog.Logger) (*App, error) {
	// Every line logged with a request's context names the request
	// (request_id, and idempotency_key behind the guard).
	log = slog.New(logctx.Handler(log.Handler()))
	pipelined := cfg.Database.PipelineConns
	if pipelined == 0 {
		pipelined = -1 // off
	}
	db, err := database.Open(cfg.DatabaseURL(), database.Options{MaxOpenConns: cfg.Database.MaxConns, PipelineConns: pipelined})
	if err != nil {
		return nil, err
	}
	if err := migrateOrCheck(cfg, log, db); err != nil {
		_ = database.Close(db)
		return nil, err
	}
	advice, err := database.Advise(context.Background(), db)
	if err != nil {
		log.Warn("could not read the database's settings", "err", err)
	}
	for _, a := range advice {
		log.Warn("database needs attention", "setting", a.Setting, "value", a.Value, "why", a.Why)
	}
	a, err := build(cfg, log, db)
	if err != nil {
		_ = database.Close(db)
		return nil, err
	}
	return a, nil
}

// migrateOrCheck applies the schema's migrations, or with
// MIGRATE_ON_START=false refuses a schema that is not this build's
// (River's are applied or checked by events.New, as the schema's here).
func migrateOrCheck(cfg config.Config, log *slog.Logger, db *gorm.DB) error {
	if cfg.Database.MigrateOnStart {
		_, err := database.Migrate(db)
		return err
	}
	newer, err := database.CheckMigrated(db)
	if err != nil {
		return err
	}
	if len(newer) > 0 {
		log.Warn("the schema is newer than this build: it runs on it (a rolling deploy or a rollback); the schema's newer versions are another release's",
			"schema_versions_unknown", newer, "build_schema_version", database.Version())
	}
	return nil
}

// InvalidationBound is how long a suspension, a credential rotation or a
// change of provider secrets made through one instance takes to reach
// every instance: instances share nothing but the database, and each keeps
// what it read of a tenant for less than this (the tenant service's
// caches, InvalidationBound - invalidationMargin), so the caches' TTL
// bounds it (invalidation_test.go checks it with two instances on one
// database).
const InvalidationBound = time.Second

// invalidationMargin is what the caches' TTL leaves of InvalidationBound
// for the request that first sees the change (its own reads and answer),
// so the change is in force, end to end, within the bound.
const invalidationMargin = 200 * time.Millisecond

// clockSync is how often an instance re-measures its clock against the
// database's.
const clockSync = 30 * time.Second

// The secretbox labels of the secrets the app seals itself (the tenants
// package derives its own).
const (
	labelAnswers         = "oncepay/idempotency/sealed-answer/v1"
	labelEndpointSecrets = "oncepay/events/endpoint-secret/v1"
)

// sealer is the box for label under MASTER_KEY, opening what
// MASTER_KEY_PREVIOUS sealed too.
func sealer(cfg config.Config, label string) (*secretbox.Box, error) {
	return secretbox.New(cfg.Secrets.MasterKey, label, cfg.Secrets.MasterKeyPrevious)
}

func tenantsConfig(cfg config.Config, log *slog.Logger, now func() time.Time) tenants.Config {
	return tenants.Config{
		MasterKey:      cfg.Secrets.MasterKey,
		MasterPrevious: cfg.Secrets.MasterKeyPrevious,
		AdminAPIKey:    cfg.Secrets.AdminAPIKey.Reveal(),
		AdminPrevious:  cfg.Secrets.AdminAPIKeyPrevious.Reveal(),
		JWTSecret:      []byte(cfg.Secrets.JWTSecret.Reveal()),
		JWTPrevious:    []byte(cfg.Secrets.JWTSecretPrevious.Reveal()),
		Issuer:         tokenIssuer,
		Audience:       tokenAudience,
		TokenTTL:       cfg.Auth.TokenTTL,
		StatusCacheTTL: InvalidationBound - invalidationMargin,
		Logger:         log,
		Now:            now,
	}
}

func build(cfg config.Config, log *slog.Logger, db *gorm.DB) (*App, error) {
	a := &App{cfg: cfg, log: log, db: db, Clock: dbclock.NewClock(cfg.Now)}
	if !cfg.ClockSync {
		log.Warn("CLOCK_SYNC=false: this instance stamps with its own clock", "skew", cfg.ClockSkew)
	} else if off, err := a.Clock.Sync(context.Background(), db); err != nil {
		log.Warn("could not read the database's clock; stamping with this instance's", "err", err)
	} else if off > 2*time.Second || off < -2*time.Second {
		log.Warn("this instance's clock differs from the database's; tokens and timestamps follow the database's",
			"offset", off.Round(time.Millisecond))
	}

	a.Sim = simulator.New(db, simulator.Config{Latency: cfg.Provider.SimulatorLatency, SettleAfter: cfg.Provider.SimulatorSettleAfter})
	reg := providers.NewRegistry()
	if cfg.Provider.Simulator {
		reg.Register(simulator.Name, nil, a.Sim.Constructor())
		if cfg.Production() {
			// Said at every start: a tenant on it gets succeeded payments
			// with no money behind them.
			log.Warn("the simulator provider is on in production (SIMULATOR_ENABLED=true): its payments move no money; turn it off outside a staging load test")
		}
	} else {
		log.Info("the simulator provider is off (SIMULATOR_ENABLED=false, the default in production): tenants use real providers only")
	}
	reg.Register(paystack.Name, paystack.RequiredSecrets, paystack.New(paystack.Config{
		BaseURL: cfg.Provider.PaystackBaseURL, Timeout: cfg.Provider.Timeout}))
	reg.Register(flutterwave.Name, flutterwave.RequiredSecrets, flutterwave.New(flutterwave.Config{
		BaseURL: cfg.Provider.FlutterwaveBaseURL, Timeout: cfg.Provider.Timeout}))
	reg.Register(stripe.Name, stripe.RequiredSecrets, stripe.New(stripe.Config{
		BaseURL: cfg.Provider.StripeBaseURL, Timeout: cfg.Provider.Timeout}))

	if cfg.Metrics.Enabled {
		sqlDB, err := db.DB()
		if err != nil {
			return nil, err
		}
		a.Metrics = metrics.New(metrics.Options{DB: sqlDB, Providers: reg.Names(), Instance: cfg.Instance,
			SharedLimits: cfg.Limits.RedisURL != ""})
		if p := pipeline.Of(db); p != nil {
			a.Metrics.WatchPipeline(func() (int64, int64, int64) {
				s := p.Stats()
				return s.Statements, s.Trips, s.Retried
			})
		}
	}
	var err error
	if cfg.Limits.RatePerSecond > 0 {
		a.RateLimiter = ratelimit.New(ratelimit.Config{Rate: cfg.Limits.RatePerSecond, Burst: cfg.Limits.Burst})
	}
	var hookLookups ratelimit.Taker // nil: the payments service's own, in memory
	if u := cfg.Limits.RedisURL.Reveal(); u != "" {
		sc := ratelimit.SharedConfig{URL: u, KeyPrefix: cfg.Limits.RedisKeyPrefix, Namespace: "hooklookup",
			Local: payments.NewHookLookups(), Log: log}
		if a.Metrics != nil {
			sc.Observe, sc.Up = a.Metrics.ObserveRateLimit, a.Metrics.SetRateLimitRedisUp
		}
		if a.HookLookups, err = ratelimit.NewShared(sc); err != nil {
			return nil, err
		}
		hookLookups = a.HookLookups
		if a.RateLimiter != nil {
			a.SharedLimiter = a.HookLookups.Sibling("ratelimit", a.RateLimiter)
		}
	}

	if a.Tenants, err = tenants.NewService(db, reg, tenantsConfig(cfg, log, a.Clock.Now)); err != nil {
		return nil, err
	}
	answers, err := sealer(cfg, labelAnswers)
	if err != nil {
		return nil, err
	}
	a.Keys = idempotency.NewStore(db).SealWith(answers)
	box, err := sealer(cfg, labelEndpointSecrets)
	if err != nil {
		return nil, err
	}
	eventsCfg := events.Config{DB: db, Box: box, Schedule: cfg.Webhooks.RetrySchedule, Production: cfg.Production(),
		Log: log, Now: a.Clock.Now, NoMigrate: !cfg.Database.MigrateOnStart}
	if a.Metrics != nil {
		eventsCfg.Observe = a.Metrics.ObserveDelivery
	}
	if a.Events, err = events.New(context.Background(), eventsCfg); err != nil {
		return nil, err
	}
	if a.Metrics != nil {
		a.Metrics.WatchBacklog(a.Events.Backlog)
	}
	paymentsCfg := payments.Config{
		ReviewAfter:       cfg.Schedule.ReviewAfter,
		Lease:             cfg.Payments.Lease,
		StaleAfter:        cfg.Schedule.SweepStaleAfter,
		RecheckAfter:      cfg.Schedule.RecheckAfter,
		SweepProviderRate: cfg.Schedule.SweepProviderRate,
		Now:               a.Clock.Now,
		Log:               log,
		Events:            events.NewEmitter(a.Clock.Now),
		HookLookups:       hookLookups,
	}
	if a.Metrics != nil {
		paymentsCfg.Observe = a.Metrics.ObservePayment
		paymentsCfg.ObserveProvider = a.Metrics.ObserveProvider
	}
	a.Payments = payments.NewService(db, a.Keys, accounts{a.Tenants}, paymentsCfg)
	schedulerCfg := scheduler.Config{
		DB:            db,
		Keys:          a.Keys,
		Settler:       a.Payments,
		Log:           log,
		SweepInterval: cfg.Schedule.SweepInterval,
		StaleAfter:    cfg.Schedule.SweepStaleAfter,
		SweepBatch:    cfg.Schedule.SweepBatch,
		Concurrency:   cfg.Schedule.SweepConcurrency,
		Lease:         cfg.Payments.Lease,
		PurgeSchedule: cfg.Schedule.PurgeSchedule,
		PurgeBatch:    cfg.Schedule.PurgeBatch,
		KeyTTL:        cfg.Schedule.KeyTTL,
		StopTimeout:   cfg.ShutdownTimeout,
	}
	if a.Metrics != nil {
		schedulerCfg.Observe = a.Metrics.ObserveJob
		schedulerCfg.ObserveRun = a.Metrics.ObserveJobRun
		schedulerCfg.ObserveBacklog = a.Metrics.ObserveBacklog
	}
	a.Scheduler, err = scheduler.New(schedulerCfg)
	if err != nil {
		return nil, err
	}

	a.fiber = fiber.New(fiber.Config{
		AppName:               "oncepay-gateway",
		BodyLimit:             BodyLimit,
		ErrorHandler:          errorHandler(log),
		DisableStartupMessage: true,
		// No route takes a form: a multipart body is read (and refused)
		// by the handler like any other, not parsed by the server first.
		DisablePreParseMultipartForm: true,
		ReadTimeout:                  30 * time.Second,
		WriteTimeout:                 30 * time.Second,
		IdleTimeout:                  120 * time.Second,
	})
	a.routes()
	a.fiber.Server().Handler = knownMethodsOnly(log, a.fiber.Server().Handler)
	if a.Metrics != nil && cfg.Metrics.Addr != "" {
		// Bound now, so a bad address fails at start and MetricsAddr is
		// known before Serve; connections queue until Serve accepts them.
		if a.metricsLn, err = net.Listen("tcp", cfg.Metrics.Addr); err != nil {
			return nil, fmt.Errorf("app: METRICS_ADDR: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", a.Metrics.Handler())
		a.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	if a.Metrics != nil && cfg.Metrics.Addr == "" && !cfg.MetricsOnAPIPort() {
		// Once, at start: a scraper's 404 then has its reason in the log.
		log.Warn("metrics are not served: in production /metrics is never on the API's port; set METRICS_ADDR to a private address (like 127.0.0.1:9090) to scrape them, or METRICS_ENABLED=false",
			"gateway_addr", cfg.Addr)
	}
	return a, nil
}

// accounts adapts the tenant service to what payments needs, translating
// its "no such account" into the providers' sentinel.
type accounts struct{ t *tenants.Service }

func (a accounts) Provider(ctx context.Context, merchantID, name string) (providers.Provider, error) {
	p, err := a.t.Provider(ctx, merchantID, name)
	if errors.Is(err, tenants.ErrProviderNotConfigured) || errors.Is(err, providers.ErrUnknownProvider) ||
		errors.Is(err, tenants.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", providers.ErrUnknownProvider, name)
	}
	return p, err
}

func (a *App) routes() {
	f := a.fiber
	if a.Metrics != nil {
		// Outside the recoverer and the access log, so it counts the status
		// the client gets, a recovered panic's 500 included.
		f.Use(requestID(), a.Metrics.Middleware(), recoverer(a.log), accessLog(a.log), refuseMalformed(), refuseEncodings(), refuseTwoCredentials(), refuseQueriesOnWrites())
	} else {
		f.Use(requestID(), recoverer(a.log), accessLog(a.log), refuseMalformed(), refuseEncodings(), refuseTwoCredentials(), refuseQueriesOnWrites())
	}

	// Draining (SHUTDOWN_DELAY), each answer ends its connection: a
	// balancer that keeps connections open (kube-proxy) would otherwise
	// go on sending on them until the listener closes.
	f.Use(func(c *fiber.Ctx) error {
		if a.draining.Load() {
			c.Context().SetConnectionClose()
		}
		return c.Next()
	})
	h := health{db: a.db, draining: &a.draining}
	if a.HookLookups != nil {
		h.redis = a.HookLookups
	}
	f.Get("/healthz", h.healthz)
	f.Get("/readyz", h.readyz)
	if a.Metrics != nil && a.cfg.MetricsOnAPIPort() {
		// Not behind merchant auth: scrapers hold no token. Development
		// only (config.MetricsOnAPIPort): in production this port is the
		// public edge.
		f.Get("/metrics", a.Metrics.FiberHandler())
	}

	// The published description, OpenAPI 3 (docs/openapi.json).
	f.Get("/openapi.json", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSONCharsetUTF8)
		return c.Send(docs.OpenAPI)
	})
	// Swagger UI at /swagger/ (index.html) shows /openapi.json; swag's
	// Swagger 2.0 source stays at /swagger/doc.json for 2.0-only tools. The
	// spec URL is fixed, and X-Forwarded-Prefix is dropped: the middleware
	// would otherwise take its prefix, once and for everyone, from whatever
	// the first request claimed.
	f.Get("/swagger/*", func(c *fiber.Ctx) error {
		c.Request().Header.Del("X-Forwarded-Prefix")
		return c.Next()
	}, swagger.New(swagger.Config{URL: "/openapi.json", Title: "OncePay Gateway API"}))

	th := tenants.NewHandler(a.Tenants)
	// Provider calls are bounded by PROVIDER_TIMEOUT; the request budget
	// leaves room for the database work around them.
	budget := deadline(a.cfg.Provider.Timeout + 10*time.Second)

	// Admin actions are audited; their events carry the request's id.
	admin := f.Group("/admin/v1", budget, func(c *fiber.Ctx) error {
		c.SetUserContext(audit.WithRequestID(c.UserContext(), problem.RequestID(c)))
		return c.Next()
	})
	th.AdminRoutes(admin) // first: it puts the admin key check on the group
	audit.NewHandler(audit.NewStore(a.db)).Routes(admin)
	ph := payments.NewHandler(a.Payments, func(c *fiber.Ctx) (payments.Merchant, bool) {
		t, ok := tenants.CurrentTenant(c)
		return payments.Merchant{ID: t.ID, DefaultProvider: t.DefaultProvider, Providers: t.Providers}, ok
	})
	ph.AdminRoutes(admin)

	v1 := f.Group("/v1", budget)
	// Routes without merchant auth come first: Fiber runs a group's
	// middleware for every later route under its prefix.
	th.TokenRoutes(v1)
	ph.WebhookRoutes(v1)
	merchantMW := []fiber.Handler{th.RequireMerchant()}
	// After auth (keyed by the verified merchant id) and before the
	// idempotency claim: a limited request stores nothing.
	switch {
	case a.SharedLimiter != nil:
		merchantMW = append(merchantMW, ratelimit.Middleware(a.SharedLimiter, tenants.MerchantID))
	case a.RateLimiter != nil:
		merchantMW = append(merchantMW, a.RateLimiter.Middleware(tenants.MerchantID))
	}
	merchant := v1.Group("", merchantMW...)
	th.MerchantRoutes(merchant)

	idemCfg := idempotency.Config{
		Store: a.Keys,
		Lease: a.cfg.Payments.Lease,
		Scope: tenants.MerchantID,
		// Four requests per pooled connection before their claim is
		// durable: the rest queue at the door, holding nothing, so the
		// recording of charges already made never waits behind a crowd of
		// new claims (issue 17; idempotency.Config.Admit).
		Admit: a.cfg.Database.AdmitClaims,
		// Every handler behind it (payments, refunds, webhook endpoints)
		// writes its first rows before any provider call, through Persist:
		// a new payment's claim and ledger row are one statement.
		Hold: true,
		// A retry of a finished request is answered from memory when this
		// instance has read its answer before (REPLAY_CACHE_SIZE/_TTL).
		Replays: idempotency.NewReplays(a.cfg.Payments.ReplayCache, a.cfg.Payments.ReplayTTL, a.cfg.Schedule.KeyTTL),
	}
	if a.cfg.Payments.ReplayCache > 0 && idemCfg.Replays == nil {
		a.log.Warn("replays are not kept in memory: KEY_TTL leaves no room for REPLAY_CACHE_TTL and a 10-minute margin",
			"key_ttl", a.cfg.Schedule.KeyTTL, "replay_cache_ttl", a.cfg.Payments.ReplayTTL)
	}
	if a.Metrics != nil {
		idemCfg.Observe = a.Metrics.ObserveIdempotency
	}
	idem := idempotency.Guard(idemCfg)
	ph.Routes(merchant, idem)
	eh := events.NewHandler(a.Events, a.Keys, tenants.MerchantID)
	eh.Routes(merchant, idem)
	eh.AdminRoutes(admin, th.KnownTenant("tenant_id"))
}

// Fiber is the HTTP app, for tests (app.Test) and embedding.
func (a *App) Fiber() *fiber.App { return a.fiber }

// DB is the database pool.
func (a *App) DB() *gorm.DB { return a.db }

// Serve accepts connections on ln until ctx is cancelled, then stops
// accepting, drains in-flight requests (up to SHUTDOWN_TIMEOUT) and closes
// the database.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- a.fiber.Listener(ln) }()
	if a.metricsSrv != nil {
		go func() {
			if err := a.metricsSrv.Serve(a.metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.log.Error("metrics listener stopped", "addr", a.metricsLn.Addr().String(), "err", err)
			}
		}()
	}
	a.Scheduler.Start()
	// Not ctx: its end would cancel deliveries mid-flight; stopEvents
	// lets them finish.
	if err := a.Events.Start(context.WithoutCancel(ctx)); err != nil {
		_ = a.fiber.Shutdown()
		<-errc
		_ = a.Close()
		return err
	}
	clockCtx, stopClock := context.WithCancel(ctx)
	defer stopClock()
	if a.cfg.ClockSync {
		go a.Clock.Run(clockCtx, a.db, clockSync)
	}
	select {
	case err := <-errc:
		_ = a.Close()
		return err
	case <-ctx.Done():
	}
	// Out of the load balancer first, still serving: it takes an instance
	// out on its own schedule (probe period, endpoint propagation), and a
	// listener closed at once would refuse what it still sends here.
	a.draining.Store(true)
	if d := a.cfg.ShutdownDelay; d > 0 {
		a.log.Info("draining: /readyz fails, still serving for SHUTDOWN_DELAY", "delay", d)
		select {
		case <-time.After(d):
		case err := <-errc:
			_ = a.Close()
			return err
		}
	}
	// Stop the jobs first: a running sweep is cancelled and leaves its
	// unfinished keys in progress for the next instance to pick up.
	_ = a.Scheduler.Stop()
	a.log.Info("shutting down: draining in-flight requests and webhook deliveries", "timeout", a.cfg.ShutdownTimeout)
	// One SHUTDOWN_TIMEOUT for both, side by side, so an orchestrator's
	// grace period set a little above it is enough.
	start := time.Now()
	delivered := make(chan struct{})
	go func() { a.stopEvents(); close(delivered) }()
	cut := a.fiber.ShutdownWithTimeout(a.cfg.ShutdownTimeout)
	if cut != nil {
		// Requests still running were cut: their keys stay in progress,
		// settled by the sweeper (or a retry) on another instance or
		// after the restart. Said here, in the log, for the on-call —
		// and not an error of the stop: nothing is lost, so the process
		// exits 0 and an orchestrator does not read a crash.
		a.log.Warn("shutdown: requests still running at SHUTDOWN_TIMEOUT were cut; their keys are left for the sweeper",
			"timeout", a.cfg.ShutdownTimeout, "err", cut)
	}
	<-delivered
	err := a.Close()
	<-errc
	a.log.Info("shut down", "clean", cut == nil && err == nil, "took", time.Since(start).Round(time.Millisecond))
	return err
}

// Close stops the scheduler (if Serve did not already), closes the
// metrics listener and releases the database.
func (a *App) Close() error {
	if a.Scheduler != nil {
		_ = a.Scheduler.Stop()
	}
	a.stopEvents()
	if a.metricsSrv != nil {
		_ = a.metricsSrv.Close()
		_ = a.metricsLn.Close() // in case Serve never ran
	}
	if a.HookLookups != nil {
		_ = a.HookLookups.Close() // and SharedLimiter's: one client
	}
	return database.Close(a.db)
}

// stopEvents lets running deliveries finish (up to SHUTDOWN_TIMEOUT);
// one cut short is retried by the queue on another instance or restart.
func (a *App) stopEvents() {
	if a.Events == nil {
		return
	}
	a.eventsStopped.Do(a.stopDeliveries)
}

func (a *App) stopDeliveries() {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	if err := a.Events.Stop(ctx); err != nil {
		hard, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = a.Events.StopAndCancel(hard)
	}
}

// MetricsAddr is the address of the separate metrics listener
// (METRICS_ADDR), or nil when /metrics is on the main listener (in
// development), not served (in production) or off.
func (a *App) MetricsAddr() net.Addr {
	if a.metricsLn == nil {
		return nil
	}
	return a.metricsLn.Addr()
}

// NewWithDB builds the app on an already open and migrated database, for
// embedding and for tests that instrument the connection pool.
func NewWithDB(cfg config.Config, log *slog.Logger, db *gorm.DB) (*App, error) {
	return build(cfg, log, db)
}
