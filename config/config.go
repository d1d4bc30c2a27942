// Package config is the only reader of the environment. Load returns a typed,
// validated configuration or one error listing every bad value by name.
package config

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Environments.
const (
	Development = "development"
	Production  = "production"
)

// Secret is a string that never prints itself.
type Secret string

// String redacts the value.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts the value from %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalText redacts the value from encoders (slog, JSON).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Reveal returns the value, for the one place that uses it.
func (s Secret) Reveal() string { return string(s) }

// Key is raw key material that never prints itself.
type Key []byte

// String redacts the value.
func (k Key) String() string { return "[redacted]" }

// GoString redacts the value from %#v.
func (k Key) GoString() string { return k.String() }

// Format redacts the value from every fmt verb.
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// MarshalText redacts the value from encoders (slog, JSON), which would
// otherwise print a []byte as base64.
func (k Key) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Config is everything the gateway reads from its environment.
type Config struct {
	Env     string // GATEWAY_ENV
	Addr    string // GATEWAY_ADDR
	DataDir string // DATA_DIR: development secrets and the SQLite file

	Database Database
	Secrets  Secrets
	Auth     Auth
	Provider Provider
	Payments Payments
	Schedule Schedule
	Log      Log
	Metrics  Metrics
	Limits   Limits
	Webhooks Webhooks

	GC GC

	ShutdownTimeout time.Duration // SHUTDOWN_TIMEOUT
	// ShutdownDelay is how long, after SIGTERM, the gateway goes on
	// serving with /readyz failing, before it stops accepting: a load
	// balancer takes the instance out on its own time (SHUTDOWN_DELAY).
	ShutdownDelay time.Duration
	// Instance names this gateway instance in metrics and logs
	// (INSTANCE_ID; the hostname when unset).
	Instance string
	// ClockSkew shifts this instance's own clock (CLOCK_SKEW, development
	// only), so tests can run instances whose clocks disagree.
	ClockSkew time.Duration
	// ClockSync keeps the instance's stamping clock in step with the
	// database's (CLOCK_SYNC, default true; development may turn it off,
	// so a test's skewed instance stamps with its skewed clock and shows
	// that no lease or age depends on it).
	ClockSync bool
}

// GC is what the garbage collector runs with (app/gctune sets it at start
// and follows a resized container).
type GC struct {
	// GOGC and GOMEMLIMIT are the operator's, as set ("": unset). The
	// runtime reads them itself before main (a malformed GOMEMLIMIT
	// aborts it there); they are here so the gateway knows not to choose
	// its own, and so a GOGC the runtime would silently ignore stops the
	// start instead.
	GOGC, GOMEMLIMIT string
	// MemoryRatio is the share of the container's (or machine's) memory
	// set as the memory limit when GOMEMLIMIT is unset (AUTOMEMLIMIT,
	// default DefaultMemoryRatio; "off", 0 here, sets none).
	MemoryRatio float64
}

// Database selects the store.
type Database struct {
	URL      Secret // DATABASE_URL: postgres://…; empty means SQLite under DataDir
	MaxConns int    // DATABASE_MAX_CONNS
	// AdmitClaims is how many requests at once may be before their
	// idempotency claim is durable (DATABASE_ADMIT_CLAIMS; 0 admits all):
	// the rest wait at the door, holding nothing, so the recording of
	// charges already made does not wait for a pooled connection behind a
	// crowd of new claims. Default: DefaultAdmitFactor × MaxConns.
	AdmitClaims int
	// PipelineConns are the PostgreSQL connections, besides the pool, on
	// which concurrent requests' claims and completions share round trips
	// and commits (DATABASE_PIPELINE_CONNS; 0 sends every statement on
	// its own pooled connection).
	PipelineConns int
	// MigrateOnStart applies the schema's and River's migrations at start
	// (MIGRATE_ON_START, default true). False starts only on a database
	// `gateway migrate` has brought to this build's schema, and sends no
	// DDL: so the gateway can serve as a role that owns no table, and
	// cannot drop or disable the audit log's append-only trigger
	// (README, "Two database roles").
	MigrateOnStart bool
}

// DefaultPipelineConns is DATABASE_PIPELINE_CONNS's default.
const DefaultPipelineConns = 2

// DefaultAdmitFactor is DATABASE_ADMIT_CLAIMS's default, per pooled
// connection.
const DefaultAdmitFactor = 4

// Postgres reports whether the store is PostgreSQL.
func (d Database) Postgres() bool {
	u := d.URL.Reveal()
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// Secrets are the gateway's own keys.
type Secrets struct {
	AdminAPIKey         Secret // ADMIN_API_KEY
	AdminAPIKeyPrevious Secret // ADMIN_API_KEY_PREVIOUS: still accepted during a rotation
	JWTSecret           Secret // JWT_SECRET, at least 32 bytes
	JWTSecretPrevious   Secret // JWT_SECRET_PREVIOUS: still verifies during a rotation
	MasterKey           Key    // MASTER_KEY: 32 bytes, hex or base64; encrypts provider secrets
	MasterKeyPrevious   Key    // MASTER_KEY_PREVIOUS: still opens and verifies during a rotation
	// Generated lists the secrets that development mode generated or reused
	// from the data directory, so start-up can say so.
	Generated []string
	// GeneratedFile is where they are kept.
	GeneratedFile string
	// GeneratedNow is whether this start made any of them (the file was
	// new or lacked one): on-call must not read "generated" on every
	// restart as "the keys changed".
	GeneratedNow bool
}

// Auth tunes merchant tokens.
type Auth struct {
	TokenTTL time.Duration // TOKEN_TTL
}

// Provider holds adapter settings shared by all tenants.
type Provider struct {
	PaystackBaseURL    string        // PAYSTACK_BASE_URL
	FlutterwaveBaseURL string        // FLUTTERWAVE_BASE_URL
	StripeBaseURL      string        // STRIPE_BASE_URL
	Timeout            time.Duration // PROVIDER_TIMEOUT
	SimulatorLatency   time.Duration // SIMULATOR_LATENCY
	// SimulatorSettleAfter is how long the simulator holds a sim_pending
	// charge or refund pending (SIMULATOR_SETTLE_AFTER).
	SimulatorSettleAfter time.Duration
	// Simulator offers the simulator provider to every tenant
	// (SIMULATOR_ENABLED; on in development, off in production: it
	// "charges" without moving money, and a merchant's credentials would
	// mint succeeded payments and signed events with nothing behind them).
	Simulator bool
}

// Payments tunes the idempotency lease.
type Payments struct {
	Lease time.Duration // IDEMPOTENCY_LEASE: must exceed PROVIDER_TIMEOUT
	// ReplayCache answers of done keys are kept in each instance's memory
	// (REPLAY_CACHE_SIZE, 0 = none), each for at most ReplayTTL
	// (REPLAY_CACHE_TTL), so a retry of a finished request is answered
	// without a database round trip (idempotency.Replays).
	ReplayCache int
	ReplayTTL   time.Duration
}

// Schedule tunes the background jobs.
type Schedule struct {
	SweepInterval   time.Duration // SWEEP_INTERVAL
	SweepStaleAfter time.Duration // SWEEP_STALE_AFTER
	SweepBatch      int           // SWEEP_BATCH
	// SweepConcurrency keys are settled at once by a run
	// (SWEEP_CONCURRENCY); SweepProviderRate bounds its lookups per
	// provider per second from this instance (SWEEP_PROVIDER_RATE, 0 =
	// unbounded), so a recovering provider is not hammered.
	SweepConcurrency  int
	SweepProviderRate float64
	ReviewAfter       time.Duration // REVIEW_AFTER
	// RecheckAfter is how long after a release as never charged the
	// payment is looked up once more (RECHECK_AFTER): a charge may land
	// after the provider said it had none.
	RecheckAfter  time.Duration // RECHECK_AFTER
	PurgeSchedule string        // PURGE_SCHEDULE, a 5-field cron line in UTC
	PurgeBatch    int           // PURGE_BATCH
	KeyTTL        time.Duration // KEY_TTL
}

// Log selects the log output.
type Log struct {
	Level  string // LOG_LEVEL: debug|info|warn|error
	Format string // LOG_FORMAT: json|text (json in production)
}

// Metrics exposes Prometheus metrics.
type Metrics struct {
	Enabled bool   // METRICS_ENABLED
	Addr    string // METRICS_ADDR: empty serves /metrics on GATEWAY_ADDR, in development only
}

// MetricsOnAPIPort reports whether /metrics is served on GATEWAY_ADDR:
// only in development without METRICS_ADDR. In production the API's port
// is the public edge, and the series name tenants and their volumes, so
// without METRICS_ADDR they are served nowhere (the start says so in a
// WARN) rather than to the internet.
func (c Config) MetricsOnAPIPort() bool {
	return c.Metrics.Enabled && c.Metrics.Addr == "" && !c.Production()
}

// Limits is per-merchant rate limiting on /v1, and the Redis that shares
// it and the webhook lookups' bound across instances.
type Limits struct {
	RatePerSecond float64 // RATE_LIMIT_PER_SECOND, 0 disables
	Burst         int     // RATE_LIMIT_BURST
	// RedisURL, when set, shares each merchant's limit (if on) and the
	// bound on the provider lookups webhooks cause across instances in
	// Redis (REDIS_URL: redis://[user:password@]host:port/db, or rediss://
	// for TLS); unset, each instance limits in its own memory.
	RedisURL Secret
	// RedisKeyPrefix starts every key the limiter writes (REDIS_KEY_PREFIX),
	// so gateways (or tests) sharing a Redis keep apart.
	RedisKeyPrefix string
}

// Webhooks tunes the delivery of events to merchants' endpoints.
type Webhooks struct {
	// RetrySchedule is the delay before each retry of a failed delivery
	// (WEBHOOK_RETRY_SCHEDULE: comma-separated durations, 1 to 20).
	RetrySchedule []time.Duration
}

// DefaultWebhookRetrySchedule is WEBHOOK_RETRY_SCHEDULE's default: eight
// attempts over about 28 hours.
const DefaultWebhookRetrySchedule = "5s,5m,30m,2h,5h,10h,10h"

// Now is this instance's clock: the wall clock, shifted by CLOCK_SKEW. It
// stamps what the instance writes for humans (updated_at, tokens' iat and
// exp); no lease, staleness or age is ever compared with it (those use the
// database's clock), and CLOCK_SKEW exists to test exactly that.
func (c Config) Now() time.Time { return time.Now().Add(c.ClockSkew) }

// Production reports whether the gateway runs in production mode.
func (c Config) Production() bool { return c.Env == Production }

// SQLitePath is the embedded database file used without DATABASE_URL.
func (c Config) SQLitePath() string { return filepath.Join(c.DataDir, "gateway.db") }

// DatabaseURL is what to open: the PostgreSQL URL or the SQLite path.
func (c Config) DatabaseURL() string {
	if c.Database.URL != "" {
		return c.Database.URL.Reveal()
	}
	return c.SQLitePath()
}

// DefaultMaxConns is the PostgreSQL pool size when DATABASE_MAX_CONNS is
// unset: four connections per CPU, at least 8. A request holds a connection
// only for single statements, so more connections than PostgreSQL has
// cores to run them only add context switches (on 2 cores, 8 connections
// served about a third more payments per second than 20).
func DefaultMaxConns() int { return max(8, 4*runtime.NumCPU()) }

// Load reads the process environment.
func Load() (Config, error) { return LoadFrom(os.LookupEnv) }

// LoadFrom reads configuration through lookup, so tests need not touch the
// process environment.
func LoadFrom(lookup func(string) (string, bool)) (Config, error) {
	r := reader{lookup: lookup}
	c := Config{
		Env:     r.str("GATEWAY_ENV", Development),
		Addr:    r.str("GATEWAY_ADDR", ":8080"),
		DataDir: r.str("DATA_DIR", "data"),
		Database: Database{
			URL:            Secret(r.str("DATABASE_URL", "")),
			MaxConns:       r.int("DATABASE_MAX_CONNS", DefaultMaxConns(), 1, 1000),
			PipelineConns:  r.int("DATABASE_PIPELINE_CONNS", DefaultPipelineConns, 0, 64),
			MigrateOnStart: r.bool("MIGRATE_ON_START", true),
		},
		Auth: Auth{TokenTTL: r.dur("TOKEN_TTL", 15*time.Minute)},
		Provider: Provider{
			PaystackBaseURL:      r.url("PAYSTACK_BASE_URL", "https://api.paystack.co"),
			FlutterwaveBaseURL:   r.url("FLUTTERWAVE_BASE_URL", "https://api.flutterwave.com"),
			StripeBaseURL:        r.url("STRIPE_BASE_URL", "https://api.stripe.com"),
			Timeout:              r.dur("PROVIDER_TIMEOUT", 20*time.Second),
			SimulatorLatency:     r.durZero("SIMULATOR_LATENCY", 0),
			SimulatorSettleAfter: r.dur("SIMULATOR_SETTLE_AFTER", 10*time.Second),
		},
		Payments: Payments{
			Lease:       r.dur("IDEMPOTENCY_LEASE", 30*time.Second),
			ReplayCache: r.int("REPLAY_CACHE_SIZE", 10000, 0, 10000000),
			ReplayTTL:   r.dur("REPLAY_CACHE_TTL", time.Minute),
		},
		Schedule: Schedule{
			SweepInterval:     r.dur("SWEEP_INTERVAL", 2*time.Minute),
			SweepStaleAfter:   r.dur("SWEEP_STALE_AFTER", 5*time.Minute),
			SweepBatch:        r.int("SWEEP_BATCH", 100, 1, 10000),
			SweepConcurrency:  r.int("SWEEP_CONCURRENCY", 32, 1, 1024),
			SweepProviderRate: r.float("SWEEP_PROVIDER_RATE", 200),
			ReviewAfter:       r.dur("REVIEW_AFTER", 24*time.Hour),
			RecheckAfter:      r.dur("RECHECK_AFTER", time.Hour),
			PurgeSchedule:     r.str("PURGE_SCHEDULE", "0 3 * * *"),
			PurgeBatch:        r.int("PURGE_BATCH", 1000, 1, 100000),
			KeyTTL:            r.dur("KEY_TTL", 72*time.Hour),
		},
		Log: Log{
			Level:  r.str("LOG_LEVEL", "info"),
			Format: r.str("LOG_FORMAT", ""),
		},
		Metrics: Metrics{
			Enabled: r.bool("METRICS_ENABLED", true),
			Addr:    r.str("METRICS_ADDR", ""),
		},
		Limits: Limits{
			RatePerSecond:  r.float("RATE_LIMIT_PER_SECOND", 100),
			Burst:          r.int("RATE_LIMIT_BURST", 200, 1, 1000000),
			RedisURL:       Secret(r.str("REDIS_URL", "")),
			RedisKeyPrefix: r.str("REDIS_KEY_PREFIX", "oncepay:"),
		},
		Webhooks: Webhooks{RetrySchedule: r.durations("WEBHOOK_RETRY_SCHEDULE", DefaultWebhookRetrySchedule)},
		GC: GC{
			GOGC:        r.gogc("GOGC"),
			GOMEMLIMIT:  r.raw("GOMEMLIMIT"),
			MemoryRatio: r.ratioOrOff("AUTOMEMLIMIT", DefaultMemoryRatio),
		},
		Instance:        r.str("INSTANCE_ID", hostname()),
		ShutdownTimeout: r.dur("SHUTDOWN_TIMEOUT", 25*time.Second),
		ShutdownDelay:   r.durZero("SHUTDOWN_DELAY", 0),
		ClockSkew:       r.signedDur("CLOCK_SKEW"),
		ClockSync:       r.bool("CLOCK_SYNC", true),
	}
	c.Secrets = Secrets{
		AdminAPIKey:         Secret(r.str("ADMIN_API_KEY", "")),
		AdminAPIKeyPrevious: Secret(r.str("ADMIN_API_KEY_PREVIOUS", "")),
		JWTSecret:           Secret(r.str("JWT_SECRET", "")),
		JWTSecretPrevious:   Secret(r.str("JWT_SECRET_PREVIOUS", "")),
	}
	c.Provider.Simulator = r.bool("SIMULATOR_ENABLED", !c.Production())
	masterRaw := r.str("MASTER_KEY", "")
	previousRaw := r.str("MASTER_KEY_PREVIOUS", "")

	switch c.Env {
	case Development, Production:
	default:
		r.fail("GATEWAY_ENV", "must be %q or %q, got %q", Development, Production, c.Env)
	}
	if c.Log.Format == "" {
		c.Log.Format = "text"
		if c.Production() {
			c.Log.Format = "json"
		}
	}
	// Checked here, with the others, rather than at bind time — after the
	// migrations ran and the admin key was printed, and without the name.
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || !validPort(port) {
		r.fail("GATEWAY_ADDR", "must be host:port or :port (like :8080)")
	}
	if a := c.Metrics.Addr; a != "" && c.Metrics.Enabled {
		if _, port, err := net.SplitHostPort(a); err != nil || !validPort(port) {
			r.fail("METRICS_ADDR", "must be host:port or :port (like 127.0.0.1:9090), or unset")
		} else if a == c.Addr {
			r.fail("METRICS_ADDR", "is GATEWAY_ADDR itself; give /metrics a private address of its own (like 127.0.0.1:9090)")
		}
	}
	if c.Production() {
		// A provider's secret key goes in every request's header: never
		// in the clear, but to this machine (a local proxy or fake).
		for name, v := range map[string]string{"PAYSTACK_BASE_URL": c.Provider.PaystackBaseURL,
			"FLUTTERWAVE_BASE_URL": c.Provider.FlutterwaveBaseURL, "STRIPE_BASE_URL": c.Provider.StripeBaseURL} {
			if u, err := url.Parse(v); err == nil && u.Scheme == "http" && !loopback(u.Hostname()) {
				r.fail(name, "must be https in production (http only to this machine), got %q", v)
			}
		}
	}
	if c.Log.Format != "json" && c.Log.Format != "text" {
		r.fail("LOG_FORMAT", "must be json or text")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		r.fail("LOG_LEVEL", "must be debug, info, warn or error")
	}
	if u := c.Database.URL.Reveal(); u != "" && !c.Database.Postgres() {
		r.fail("DATABASE_URL", "must be a postgres:// URL (leave it unset for the embedded SQLite store)")
	}
	// Bounds that keep a typo from starting a gateway that cannot work: a
	// 1ns SWEEP_INTERVAL spun a core, never swept and ignored SIGTERM; a
	// 1ns PROVIDER_TIMEOUT failed every charge; a TOKEN_TTL out of the
	// tenants' range failed the start after the migrations had run.
	r.within("TOKEN_TTL", c.Auth.TokenTTL, time.Minute, 24*time.Hour)
	r.within("PROVIDER_TIMEOUT", c.Provider.Timeout, 100*time.Millisecond, 5*time.Minute)
	r.within("SIMULATOR_LATENCY", c.Provider.SimulatorLatency, 0, time.Minute)
	r.within("SIMULATOR_SETTLE_AFTER", c.Provider.SimulatorSettleAfter, time.Second, 24*time.Hour)
	r.within("SWEEP_INTERVAL", c.Schedule.SweepInterval, 100*time.Millisecond, 24*time.Hour)
	r.within("KEY_TTL", c.Schedule.KeyTTL, time.Hour, 366*24*time.Hour)
	r.within("SHUTDOWN_TIMEOUT", c.ShutdownTimeout, 100*time.Millisecond, 10*time.Minute)
	r.within("SHUTDOWN_DELAY", c.ShutdownDelay, 0, time.Minute)
	if c.Payments.Lease <= c.Provider.Timeout {
		r.fail("IDEMPOTENCY_LEASE", "(%s) must exceed PROVIDER_TIMEOUT (%s), or a retry could take over a request still waiting on the provider", c.Payments.Lease, c.Provider.Timeout)
	}
	if c.Schedule.SweepStaleAfter < c.Payments.Lease {
		r.fail("SWEEP_STALE_AFTER", "(%s) must be at least IDEMPOTENCY_LEASE (%s)", c.Schedule.SweepStaleAfter, c.Payments.Lease)
	}
	if c.Schedule.ReviewAfter <= c.Schedule.SweepStaleAfter {
		r.fail("REVIEW_AFTER", "must exceed SWEEP_STALE_AFTER")
	}
	if c.Schedule.RecheckAfter < c.Schedule.SweepStaleAfter {
		r.fail("RECHECK_AFTER", "(%s) must be at least SWEEP_STALE_AFTER (%s)", c.Schedule.RecheckAfter, c.Schedule.SweepStaleAfter)
	}
	if c.ClockSkew != 0 && c.Production() {
		r.fail("CLOCK_SKEW", "is a test setting; production refuses it")
	}
	if c.Payments.ReplayCache > 0 && c.Payments.ReplayTTL < time.Second {
		r.fail("REPLAY_CACHE_TTL", "must be at least 1s (REPLAY_CACHE_SIZE=0 turns the cache off)")
	}
	if !c.ClockSync && c.Production() {
		r.fail("CLOCK_SYNC", "is a test setting; production refuses false")
	}
	// Five fields, read in UTC: the parser would also take "@every 1s"
	// (a purge a second) and a CRON_TZ= prefix, which the README does not
	// promise and an operator would not expect.
	if f := strings.Fields(c.Schedule.PurgeSchedule); len(f) != 5 || strings.ContainsAny(c.Schedule.PurgeSchedule, "@=") {
		r.fail("PURGE_SCHEDULE", "must be a 5-field cron line in UTC (like 0 3 * * *), got %q", c.Schedule.PurgeSchedule)
	} else if _, err := cron.ParseStandard(c.Schedule.PurgeSchedule); err != nil {
		r.fail("PURGE_SCHEDULE", "is not a 5-field cron expression: %v", err)
	}
	if c.Limits.RatePerSecond < 0 {
		r.fail("RATE_LIMIT_PER_SECOND", "must not be negative")
	}
	c.Database.AdmitClaims = r.int("DATABASE_ADMIT_CLAIMS", DefaultAdmitFactor*c.Database.MaxConns, 0, 100000)
	if u := c.Limits.RedisURL.Reveal(); u != "" {
		// The value is a secret (it may hold a password): never echoed.
		if p, err := url.Parse(u); err != nil || (p.Scheme != "redis" && p.Scheme != "rediss") || p.Host == "" {
			r.fail("REDIS_URL", "must be a redis:// or rediss:// URL with a host")
		}
	}
	if !printable(c.Limits.RedisKeyPrefix, 64) {
		r.fail("REDIS_KEY_PREFIX", "must be 1 to 64 printable ASCII characters")
	}
	if !printable(c.Instance, 64) {
		r.fail("INSTANCE_ID", "must be 1 to 64 printable ASCII characters")
	}

	// Secrets: production must be given them; development makes them once.
	if c.Production() {
		if c.Secrets.AdminAPIKey == "" {
			r.fail("ADMIN_API_KEY", "is required in production")
		}
		if c.Secrets.JWTSecret == "" {
			r.fail("JWT_SECRET", "is required in production")
		}
		if masterRaw == "" {
			r.fail("MASTER_KEY", "is required in production")
		}
		if c.Database.URL == "" {
			// The embedded store is one instance's file: replicas would
			// each keep their own keys, and a retry reaching another one
			// could charge again.
			r.fail("DATABASE_URL", "is required in production (the embedded SQLite store is for a single development instance)")
		}
	} else if r.ok() && (c.Secrets.AdminAPIKey == "" || c.Secrets.JWTSecret == "" || masterRaw == "") {
		if err := c.fillDevSecrets(&masterRaw); err != nil {
			r.fail("DATA_DIR", "%v", err)
		}
	}
	if n := len(c.Secrets.AdminAPIKey); n > 0 && n < 16 {
		r.fail("ADMIN_API_KEY", "must be at least 16 characters")
	}
	switch prev := c.Secrets.AdminAPIKeyPrevious; {
	case prev == "":
	case slices.Contains(c.Secrets.Generated, "ADMIN_API_KEY"):
		r.fail("ADMIN_API_KEY_PREVIOUS", "needs ADMIN_API_KEY set too: the new key")
	case len(prev) < 16:
		r.fail("ADMIN_API_KEY_PREVIOUS", "must be at least 16 characters")
	case prev == c.Secrets.AdminAPIKey:
		r.fail("ADMIN_API_KEY_PREVIOUS", "is ADMIN_API_KEY itself; set it to the key being rotated out")
	}
	if n := len(c.Secrets.JWTSecret); n > 0 && n < 32 {
		r.fail("JWT_SECRET", "must be at least 32 bytes, got %d", n)
	}
	switch prev := c.Secrets.JWTSecretPrevious; {
	case prev == "":
	case slices.Contains(c.Secrets.Generated, "JWT_SECRET"):
		r.fail("JWT_SECRET_PREVIOUS", "needs JWT_SECRET set too: the new secret")
	case len(prev) < 32:
		r.fail("JWT_SECRET_PREVIOUS", "must be at least 32 bytes, got %d", len(prev))
	case prev == c.Secrets.JWTSecret:
		r.fail("JWT_SECRET_PREVIOUS", "is JWT_SECRET itself; set it to the secret being rotated out")
	}
	if masterRaw != "" {
		key, err := decodeKey(masterRaw)
		if err != nil {
			r.fail("MASTER_KEY", "%v", err)
		}
		c.Secrets.MasterKey = key
	}
	if previousRaw != "" {
		key, err := decodeKey(previousRaw)
		switch {
		case err != nil:
			r.fail("MASTER_KEY_PREVIOUS", "%v", err)
		case bytes.Equal(key, c.Secrets.MasterKey):
			r.fail("MASTER_KEY_PREVIOUS", "is MASTER_KEY itself; set it to the key being rotated out")
		case len(c.Secrets.Generated) > 0 && slices.Contains(c.Secrets.Generated, "MASTER_KEY"):
			r.fail("MASTER_KEY_PREVIOUS", "needs MASTER_KEY set too: the new key, which seals from now on")
		}
		c.Secrets.MasterKeyPrevious = key
	}
	return c, r.err()
}

// hostname is the default INSTANCE_ID: the machine's name, or "gateway"
// when it has none.
func hostname() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "gateway"
}

// printable reports whether s is 1 to n printable ASCII characters, no
// spaces.
func printable(s string, n int) bool {
	if s == "" || len(s) > n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// decodeKey accepts 32 bytes as 64 hex characters or standard/URL base64.
func decodeKey(s string) ([]byte, error) {
	if b, err := hex.DecodeString(s); err == nil && len(b) == 32 {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	return nil, errors.New("must be 32 bytes, as 64 hex characters or base64 (e.g. `openssl rand -hex 32`)")
}

// devSecrets is the file development mode keeps its generated secrets in.
type devSecrets struct {
	AdminAPIKey string `json:"admin_api_key"`
	JWTSecret   string `json:"jwt_secret"`
	MasterKey   string `json:"master_key"`
}

// fillDevSecrets generates the missing secrets once and keeps them in the
// data directory (0600) so tokens and encrypted provider secrets survive a
// restart.
func (c *Config) fillDevSecrets(masterRaw *string) error {
	path := filepath.Join(c.DataDir, "dev-secrets.json")
	var s devSecrets
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%s is not valid JSON: %v (delete it to generate new secrets)", path, err)
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return err
	}
	changed := false
	gen := func(v *string, prefix string) {
		if *v == "" {
			*v = prefix + randomHex(32)
			changed = true
		}
	}
	gen(&s.AdminAPIKey, "adm_")
	gen(&s.JWTSecret, "")
	gen(&s.MasterKey, "")
	if changed {
		if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
			return err
		}
		out, _ := json.MarshalIndent(s, "", "  ")
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, out, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, path); err != nil {
			return err
		}
	}
	if c.Secrets.AdminAPIKey == "" {
		c.Secrets.AdminAPIKey = Secret(s.AdminAPIKey)
		c.Secrets.Generated = append(c.Secrets.Generated, "ADMIN_API_KEY")
	}
	if c.Secrets.JWTSecret == "" {
		c.Secrets.JWTSecret = Secret(s.JWTSecret)
		c.Secrets.Generated = append(c.Secrets.Generated, "JWT_SECRET")
	}
	if *masterRaw == "" {
		*masterRaw = s.MasterKey
		c.Secrets.Generated = append(c.Secrets.Generated, "MASTER_KEY")
	}
	c.Secrets.GeneratedFile = path
	c.Secrets.GeneratedNow = changed
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b)
}

// reader collects one message per bad variable.
type reader struct {
	lookup func(string) (string, bool)
	errs   []string
}

func (r *reader) fail(name, format string, args ...any) {
	r.errs = append(r.errs, name+" "+fmt.Sprintf(format, args...))
}

func (r *reader) ok() bool { return len(r.errs) == 0 }

func (r *reader) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	return fmt.Errorf("config: %d invalid setting(s):\n  %s", len(r.errs), strings.Join(r.errs, "\n  "))
}

func (r *reader) str(name, def string) string {
	if v, ok := r.lookup(name); ok && strings.TrimSpace(v) != "" {
		return strings.TrimSpace(v)
	}
	return def
}

func (r *reader) dur(name string, def time.Duration) time.Duration {
	d := r.durZero(name, def)
	if d <= 0 {
		r.fail(name, "must be a positive duration")
		return def
	}
	return d
}

// within refuses d, name's value, outside [min, max].
func (r *reader) within(name string, d, min, max time.Duration) {
	if d < min || d > max {
		r.fail(name, "must be between %s and %s, got %s", min, max, d)
	}
}

func (r *reader) durZero(name string, def time.Duration) time.Duration {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		r.fail(name, "must be a duration like 30s or 5m, got %q", v)
		return def
	}
	return d
}

// durations reads a comma-separated list of 1 to 20 positive durations.
func (r *reader) durations(name, def string) []time.Duration {
	v := r.str(name, def)
	var out []time.Duration
	for _, part := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			r.fail(name, "must be comma-separated positive durations like 5s,5m,30m, got %q", v)
			return nil
		}
		out = append(out, d)
	}
	if len(out) > 20 {
		r.fail(name, "must list at most 20 durations, got %d", len(out))
		return nil
	}
	return out
}

// signedDur reads a duration that may be negative; unset is zero.
func (r *reader) signedDur(name string) time.Duration {
	v := r.str(name, "")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.fail(name, "must be a duration like 90s or -1m, got %q", v)
	}
	return d
}

func (r *reader) int(name string, def, min, max int) int {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		r.fail(name, "must be an integer from %d to %d, got %q", min, max, v)
		return def
	}
	return n
}

func (r *reader) float(name string, def float64) float64 {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	// Every float setting is a rate: NaN, infinities and negatives are
	// typos, not limits.
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		r.fail(name, "must be a number, not negative, got %q", v)
		return def
	}
	return f
}

func (r *reader) bool(name string, def bool) bool {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, "must be true or false, got %q", v)
		return def
	}
	return b
}

// DefaultMemoryRatio is AUTOMEMLIMIT's default: 90% of the memory.
const DefaultMemoryRatio = 0.9

// ratioOrOff reads a ratio in (0, 1], or "off" as 0.
func (r *reader) ratioOrOff(name string, def float64) float64 {
	v := r.str(name, "")
	switch v {
	case "":
		return def
	case "off":
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= 1) {
		r.fail(name, "want off or a ratio in (0, 1], got %q", v)
		return def
	}
	return f
}

// gogc reads GOGC exactly as the runtime does ("off", or a 32-bit integer,
// negative meaning off; nothing trimmed): anything else the runtime would
// ignore for its 100.
func (r *reader) gogc(name string) string {
	v := r.raw(name)
	if v == "" || v == "off" {
		return v
	}
	if _, err := strconv.ParseInt(v, 10, 32); err != nil {
		r.fail(name, "want off or a percentage (an integer), got %q", v)
	}
	return v
}

// raw is name's value as set, untrimmed ("": unset), for the settings the
// Go runtime reads itself.
func (r *reader) raw(name string) string {
	v, _ := r.lookup(name)
	return v
}

func (r *reader) url(name, def string) string {
	v := strings.TrimRight(r.str(name, def), "/")
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(name, "must be an http(s) URL, got %q", v)
		return def
	}
	return v
}

// validPort reports whether s is a port a listener can take: a number
// from 0 (any free port) to 65535, or a service name the system knows
// (http).
func validPort(s string) bool {
	if s == "" {
		return false
	}
	_, err := net.LookupPort("tcp", s)
	return err == nil
}

// loopback reports whether host names this machine.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
